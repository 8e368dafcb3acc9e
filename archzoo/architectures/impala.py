"""IMPALA (Espeholt et al. 2018): actors send unrolls, one learner trains with V-trace.

Role map: rank 0 is the learner, ranks 1..N are actors.

- Actors step E envs with a local copy of the policy (the behaviour policy μ) and send
  unrolls of T steps with μ's logits. ``--mode async`` (IMPALA's default): between unrolls
  an actor takes the newest parameters that have arrived, without blocking. ``--mode
  sync``: after each unroll it waits for the parameters that unroll produced.
- The learner trains with the V-trace loss (eq. 1 of the paper) on what has arrived
  (async) or on one unroll from every actor in rank order (sync, bit-for-bit reproducible
  with ``--seed``), then broadcasts the new parameters over the chosen topology. Policy
  lag = learner version − the version an unroll was acted with.
- ``--actors 0``: the same actor and learner code in one process, no transport.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.unroll import TIMING, UnrollActor, unroll_schema
from archzoo import builders, harness
from archzoo.comm import ControlChannel, Inbox, Message
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import ImpalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.nets import ActorCritic, get_flat, num_params, set_flat
from archzoo.runlog import Timers
from archzoo.topology.broadcast import STOP_VERSION, ParamsBroadcast, ParamsSubscriber
from archzoo.topology.star import params_schema

STREAMS = "unrolls actor->learner point-to-point"


def topology_applied(cfg: ImpalaConfig) -> str:
    """Where the chosen topology is used (summary.json says so)."""
    name = cfg.topology + (f"(m={cfg.fanout})" if cfg.topology in ("tree", "butterfly") else "")
    how = "non-blocking, latest-wins" if cfg.topology == "star" else "synchronous collective"
    return f"parameter broadcast learner->actors over {name} ({how}); {STREAMS}"


def run(ctx: RankContext) -> dict[str, Any] | None:
    """Entry point on every rank; returns the summary on rank 0."""
    return harness.play_star_roles(ctx, run_single, run_learner, run_actor)


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """``--actors 0``: actor and learner code in one process, no transport (the baseline)."""
    cfg = ctx.cfg
    learner = builders.vtrace_learner(cfg, spec)
    meta = builders.policy_meta(cfg, spec)
    run_dir, mon = harness.open_run(ctx, parts={"learner": learner}, policy=(learner.model, meta))
    cpu = learner.device.type == "cpu"
    policy = learner.model if cpu else builders.actor_critic(cfg, spec)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, policy,
                        harness.actor_seed(cfg.seed, 0))
    msg = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor).new()
    flat = np.zeros(num_params(policy), np.float32)

    def after_update() -> None:
        actor.version = learner.version
        if not cpu:  # the actor's copy on the CPU follows the learner's on the device
            get_flat(learner.model, flat)
            set_flat(policy, flat)

    after_update()  # a resumed run's actor starts from the checkpoint's parameters
    stop = harness.train_on_unrolls(mon, actor.collect, msg, learner, after_update)
    actor.close()
    return harness.finish_single(ctx, run_dir, mon, stop, learner,
                                 dict(zip(TIMING, (actor.env_s, actor.inference_s), strict=True)),
                                 meta)


def _schemas(cfg: ImpalaConfig, spec: EnvSpec, model: ActorCritic):
    """The unroll and parameter messages, and their digests for the start-up check."""
    u_schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
    p_schema = params_schema(num_params(model))
    return u_schema, p_schema, {"unroll": u_schema.digest(), "params": p_schema.digest()}


def run_learner(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    actors = list(range(1, ctx.world_size))
    timers = Timers()
    learner = builders.vtrace_learner(cfg, spec)
    u_schema, p_schema, digests = _schemas(cfg, spec, learner.model)
    control = ControlChannel(t, actors, harness.TAG_CONTROL)
    inbox = Inbox(t, u_schema, actors, harness.TAG_UNROLL, depth=1, what="unroll")
    publisher = ParamsBroadcast(t, cfg.topology, cfg.fanout, p_schema, actors, harness.TAG_PARAMS,
                                harness.TAG_TOPOLOGY)
    harness.handshake_root(control, actors, digests,
                           cfg.startup_timeout)
    meta = builders.policy_meta(cfg, spec)
    run_dir, mon = harness.open_run(ctx, parts={"learner": learner}, policy=(learner.model, meta))
    get_flat(learner.model, publisher.latest["params"])
    publisher.publish(version=learner.version)  # the initial (or resumed) parameters
    max_batch = cfg.batch_unrolls or len(actors)
    stop = None
    while stop is None:
        if cfg.mode == "sync":  # one unroll from every actor, in rank order: reproducible
            batch = [(a, inbox.recv_from(a, on_poll=publisher.pump)) for a in actors]
        else:
            peer, msg = inbox.recv_any(on_poll=publisher.pump)
            batch = [(peer, msg)]
            for p in inbox.ready():
                if len(batch) >= max_batch:
                    break
                if p != peer:
                    batch.append((p, inbox.poll(p)))
        for _, msg in batch:
            harness.account_unroll(mon, msg, learner.version)
        learner.update([m for _, m in batch])
        with timers("comm"):
            for p, _ in batch:
                inbox.release(p)
        mon.updates = learner.version
        stop = mon.check_stop()
        if stop is None:
            with timers("comm"):
                get_flat(learner.model, publisher.latest["params"])
                publisher.publish(version=learner.version)
                if cfg.mode == "sync":
                    publisher.wait_all()  # every actor waits for exactly this version
        else:
            publisher.publish_stop()  # sync actors blocked in a collective stop
        c = t.counters.totals()
        mon.maybe_log(c["bytes_sent"], c["bytes_recv"])

    def drain() -> None:
        for p in inbox.ready():
            inbox.release(p)  # unrolls in flight after STOP are received and dropped
        publisher.pump()

    byes = harness.finish_root(ctx, control, actors, drain,
                               outstanding=lambda: publisher.wait_all(on_poll=drain))
    timers_0 = {"learner": {"update": learner.update_s, "comm": timers.s.get("comm", 0.0),
                            "wait": t.wait_s}}
    extra = {"topology_rounds": publisher.rounds(),
             "params_messages_root": publisher.messages()}
    return harness.finish_run(ctx, run_dir, mon, stop, policy=learner.model,
                              meta=meta, updates=learner.version,
                              device=learner.device, applied=topology_applied(cfg), timers=timers_0,
                              byes=byes, extra=extra)


def run_actor(ctx: RankContext, spec: EnvSpec) -> None:
    cfg, t = ctx.cfg, ctx.transport
    root = 0
    model = builders.actor_critic(cfg, spec)  # its weights come from rank 0
    u_schema, p_schema, digests = _schemas(cfg, spec, model)
    control = ControlChannel(t, [root], harness.TAG_CONTROL)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, model,
                        harness.actor_seed(cfg.seed, ctx.rank))

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])

    params = ParamsSubscriber(t, cfg.topology, cfg.fanout, p_schema, root, load, harness.TAG_PARAMS,
                              harness.TAG_TOPOLOGY)
    harness.handshake_leaf(control, root, digests,
                           cfg.startup_timeout)
    lc = harness.LeafControl(control, root)
    out = DoubleBuffer(t, u_schema, root, harness.TAG_UNROLL, "unroll")  # collect one, send one
    comm = Timers()
    params.next(cfg.startup_timeout)
    try:
        while True:
            lc.raise_if_stopped()
            buf = out.next(on_poll=lc.raise_if_stopped)
            actor.collect(buf)
            with comm("comm"):
                out.send()
            if cfg.mode == "sync":  # the parameters this unroll produced (or STOP)
                expected = actor.version + 1
                if params.next(on_poll=lc.raise_if_stopped) == STOP_VERSION:
                    raise harness.StopRequested
                if actor.version != expected:
                    raise RuntimeError(f"rank {ctx.rank}: expected parameters version "
                                       f"{expected}, got {actor.version}")
            else:
                with comm("comm"):
                    params.take_newest()
    except harness.StopRequested:
        pass
    lc.stopped = True
    out.flush(on_poll=params.take_newest)
    stats = harness.leaf_stats(t, {"env": actor.env_s, "inference": actor.inference_s,
                                   "comm": comm.s.get("comm", 0.0)},
                               env_steps=actor.env_steps, episodes=actor.episodes)
    harness.finish_leaf(ctx, control, lc, root, stats, drain=params.take_newest)
    actor.close()
