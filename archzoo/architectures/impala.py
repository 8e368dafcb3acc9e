"""IMPALA (Espeholt et al. 2018): actors send unrolls, one learner trains with V-trace.

Role map: rank 0 is the learner, ranks 1..N are actors.

- Actors step E envs with a local copy of the policy (the behaviour policy μ) and send
  unrolls of T steps with μ's logits. ``--mode async`` (IMPALA's default): parameters are
  taken as they arrive into a latest-wins slot, and every unroll starts with the newest;
  at most ``--max-inflight`` unrolls are sent and not yet taken into a batch by the
  learner (the parameters carry its credit). ``--mode sync``: after each unroll an actor
  waits for the parameters that unroll produced.
- The learner trains with the V-trace loss (eq. 1 of the paper) on exactly
  ``--batch-unrolls`` unrolls (async; 0 = one per live actor) or on one unroll from every
  actor in rank order (sync, bit-for-bit reproducible with ``--seed``). It broadcasts its
  parameters over the chosen topology as soon as it took a batch (async: the actors whose
  unrolls it took collect their next while it trains) or after the update (sync). Policy
  lag = learner version − the version an unroll was acted with (reported as a
  distribution, in versions and seconds): about one version per actor, async.
- ``--actors 0``: the same actor and learner code in one process, no transport.

The learner's end of the wire is :class:`archzoo.harness.unroll_link.LearnerLink`.
"""

from __future__ import annotations

import numpy as np

from archzoo import builders, harness
from archzoo.actors.action_log import ActionLog, catch_up
from archzoo.actors.unroll import TIMING, UnrollActor
from archzoo.architectures.rolemap import play
from archzoo.comm import Message
from archzoo.comm.sender import SendWindow
from archzoo.config import ImpalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.unroll_link import LearnerLink, schemas, unroll_window
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.records import Summary
from archzoo.runlog import Timers
from archzoo.topology.broadcast import (
    STOP_VERSION,
    ParamsSubscriber,
)


def run(ctx: RankContext[ImpalaConfig]) -> Summary | None:
    """Entry point on every rank; returns the summary on rank 0."""
    return play(ctx, run_single, learner=run_learner, actor=run_actor)


def run_single(ctx: RankContext[ImpalaConfig], spec: EnvSpec) -> Summary:
    """``--actors 0``: actor and learner code in one process, no transport (the baseline)."""
    cfg = ctx.cfg
    learner = builders.vtrace_learner(cfg, spec)
    log = ActionLog(spec.num_actions)  # a resumed run takes the logged steps again
    with harness.single(ctx, parts={"learner": learner, "actions": log},
                        policy=(learner.model, builders.policy_meta(cfg, spec))) as run:
        cpu = learner.device.type == "cpu"
        policy = learner.model if cpu else builders.actor_critic(cfg, spec)
        actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, policy,
                            harness.actor_seed(cfg.seed, 0))
        actor.fast_forward(log.actions(0), spec.num_actions)
        msg = builders.unrolls(cfg, spec).new()
        flat = np.zeros(num_params(policy), np.float32)

        def after_update() -> None:
            actor.version = learner.version
            if not cpu:  # the actor's copy on the CPU follows the learner's on the device
                get_flat(learner.model, flat)
                set_flat(policy, flat)

        after_update()  # a resumed run's actor starts from the checkpoint's parameters
        def collect(m: Message) -> None:
            actor.collect(m)
            log.record(0, m["actions"])

        harness.train_on_unrolls(run, collect, msg, learner, after_update)
        actor.close()
    timing = dict(zip(TIMING, (actor.env_s, actor.inference_s), strict=True))
    return run.finish(learner.model, learner.version, device=learner.device,
                      timers={"actor0": timing, "learner": {"update": learner.update_s}})


def run_learner(ctx: RankContext[ImpalaConfig], spec: EnvSpec) -> Summary:
    """Rank 0: take the actors' unrolls, one V-trace update on them, send the parameters."""
    learner = builders.vtrace_learner(ctx.cfg, spec)
    asynchronous = ctx.cfg.mode == "async"
    with LearnerLink(ctx, spec, learner) as link:  # the handshake; checkpoints; --resume
        run = link.run
        link.send_params()  # version 0 (or the resumed one): where every actor starts
        while not run.stopped:
            batch = link.next_batch(stopping=run.stop_due)  # a due stop ends the wait
            if asynchronous and batch:  # the newest version, and the credit for the unrolls
                link.send_params()  # just taken: their actors collect while we train
            link.account(batch)
            if batch:
                run.mon.add_learner_stats(learner.update(batch))
            if run.tick(learner.version) or not asynchronous:  # sync: this batch's version
                link.send_params()  # or STOP, once the run stopped
            link.release()
    return link.finish()  # after STOP and the drain: summary.json, policy.pt


def run_actor(ctx: RankContext[ImpalaConfig], spec: EnvSpec) -> None:
    """An actor: collect an unroll with the newest parameters, send it, repeat (sync: wait
    for the parameters the unroll produced)."""
    cfg, t = ctx.cfg, ctx.net
    model = builders.actor_critic(cfg, spec)  # its weights come from rank 0
    u_schema, p_schema, digests = schemas(cfg, spec, model, ctx.world_size)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, model,
                        harness.actor_seed(cfg.seed, ctx.rank))

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])

    params = ParamsSubscriber(t, cfg.topology_name, cfg.fanout, p_schema, 0, load,
                              harness.TAG_PARAMS, harness.TAG_TOPOLOGY, cfg.mode)
    asynchronous, comm = cfg.mode == "async", Timers()
    with harness.leaf(ctx, digests) as link:
        if not asynchronous:  # a resumed run's actor takes its logged steps again
            catch_up(t, actor, 0, harness.TAG_ACTIONS, spec.num_actions, cfg.startup_timeout)
        # async: --max-inflight unrolls sent and not yet taken into a batch, as the credit in
        # the newest parameters says (sync: two, collect one while the other is on the wire;
        # the round's parameters pace the actor anyway)
        def used() -> int:
            newest = params.newest()
            return 0 if newest is None else int(newest["used"][ctx.rank])

        out = SendWindow(t, u_schema, 0, harness.TAG_UNROLL, "unroll",
                         cfg.max_inflight if asynchronous else 2,
                         used=used if asynchronous else None,
                         window=unroll_window(cfg, ctx.world_size - 1))
        link.on_stop(lambda: out.flush(on_poll=params.take_newest),
                     stats=lambda: {"timing": {"env": actor.env_s, "inference": actor.inference_s,
                                               "comm": comm.s.get("comm", 0.0)},
                                    "env_steps": actor.env_steps, "episodes": actor.episodes,
                                    "params": params.stats()},
                     drain=params.take_newest, settle=params.settle)
        params.next(cfg.startup_timeout)

        def poll() -> None:
            link.raise_if_stopped()
            params.drain()

        while True:
            link.raise_if_stopped()
            with comm("comm"):
                buf = out.next(on_poll=poll if asynchronous else link.raise_if_stopped)
                if asynchronous:  # every unroll starts with the newest published version
                    params.take_newest()
            actor.collect(buf, on_step=params.drain if asynchronous else None)
            with comm("comm"):
                out.send()
            if not asynchronous:  # the parameters this unroll produced (or STOP)
                expected = actor.version + 1
                if params.next(on_poll=link.raise_if_stopped) == STOP_VERSION:
                    raise harness.StopRequested
                if actor.version != expected:
                    raise RuntimeError(f"rank {ctx.rank}: expected parameters version "
                                       f"{expected}, got {actor.version}")
    actor.close()
