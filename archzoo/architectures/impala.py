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

from actors.action_log import ActionLog, catch_up
from actors.unroll import TIMING, UnrollActor, unroll_schema
from archzoo import builders, harness
from archzoo.comm import ControlChannel, Inbox, Message
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import ImpalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.nets import ActorCritic, get_flat, num_params, set_flat
from archzoo.runlog import Monitor, RunDir, Timers
from archzoo.topology.broadcast import (
    STOP_VERSION,
    ParamsBroadcast,
    ParamsSubscriber,
    describe_broadcast,
)
from archzoo.topology.star import params_schema
from learners.vtrace_learner import VTraceLearner

STREAMS = "unrolls actor->learner point-to-point"


def topology_applied(cfg: ImpalaConfig) -> str:
    """Where the chosen topology is used (summary.json says so)."""
    how = describe_broadcast(cfg.topology, cfg.fanout, cfg.mode)
    return f"parameter broadcast learner->actors over {how}; {STREAMS}"


def run(ctx: RankContext) -> dict[str, Any] | None:
    """Entry point on every rank; returns the summary on rank 0."""
    return harness.play_star_roles(ctx, run_single, run_learner, run_actor)


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """``--actors 0``: actor and learner code in one process, no transport (the baseline)."""
    cfg = ctx.cfg
    learner = builders.vtrace_learner(cfg, spec)
    meta = builders.policy_meta(cfg, spec)
    log = ActionLog(spec.num_actions)  # a resumed run takes the logged steps again
    run_dir, mon = harness.open_run(ctx, parts={"learner": learner, "actions": log},
                                    policy=(learner.model, meta))
    cpu = learner.device.type == "cpu"
    policy = learner.model if cpu else builders.actor_critic(cfg, spec)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, policy,
                        harness.actor_seed(cfg.seed, 0))
    actor.fast_forward(log.actions(0), spec.num_actions)
    msg = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor).new()
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

    stop = harness.train_on_unrolls(mon, collect, msg, learner, after_update)
    actor.close()
    return harness.finish_single(ctx, run_dir, mon, stop, learner,
                                 dict(zip(TIMING, (actor.env_s, actor.inference_s), strict=True)),
                                 meta)


def schemas(cfg: ImpalaConfig, spec: EnvSpec, model: ActorCritic):
    """The unroll and parameter messages, and their digests for the start-up check."""
    u_schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
    p_schema = params_schema(num_params(model))
    return u_schema, p_schema, {"unroll": u_schema.digest(), "params": p_schema.digest()}


class LearnerLink:
    """The learner's end of IMPALA's wire, for any learner loop over unrolls (IMPALA's
    :func:`run_learner`, or a new architecture's; docs/tutorial.md).

    It holds the control channel to the actors, an :class:`Inbox` of their unrolls and the
    parameter broadcast. Construction does the start-up handshake; :meth:`next_batch`
    receives the unrolls of the next update, :meth:`release` hands their buffers back to
    the inbox, :meth:`send_params` sends the learner's parameters (or STOP), and
    :meth:`finish` runs the stop-and-drain protocol and writes the run's summary.
    """

    def __init__(self, ctx: RankContext, spec: EnvSpec, model: ActorCritic) -> None:
        cfg, t = ctx.cfg, ctx.transport
        self.ctx, self.cfg, self.spec = ctx, cfg, spec
        self.actors = list(range(1, ctx.world_size))
        self.timers = Timers()
        self.unroll_schema, p_schema, digests = schemas(cfg, spec, model)
        self.control = ControlChannel(t, self.actors, harness.TAG_CONTROL)
        self.inbox = Inbox(t, self.unroll_schema, self.actors, harness.TAG_UNROLL, depth=1,
                           what="unroll")
        self.publisher = ParamsBroadcast(t, cfg.topology, cfg.fanout, p_schema, self.actors,
                                         harness.TAG_PARAMS, harness.TAG_TOPOLOGY, cfg.mode)
        harness.handshake_root(self.control, self.actors, digests, cfg.startup_timeout)
        self.peers: list[int] = []  # whose unrolls the last batch holds
        self.lag: dict[int, list[int]] = {}  # actor -> [sum of policy lags, unrolls]
        # async: an actor that dies is dropped from all three; sync cannot go on without it
        self.survivors = harness.Survivors(ctx.rank, self.actors if cfg.mode == "async"
                                           else [], cfg.min_actors)
        for component in (self.control, self.inbox, self.publisher):
            self.survivors.on_drop(component.drop)
        # sync: every actor's actions, so that a resumed run goes on bit for bit
        self.actions = ActionLog(spec.num_actions) if cfg.mode == "sync" else None

    def open_run(self, learner: VTraceLearner, parts: dict[str, Any] | None = None
                 ) -> tuple[RunDir, Monitor]:
        """The run directory and Monitor, checkpointing the learner (and ``parts``); with
        ``--resume`` the learner goes on from the latest checkpoint."""
        meta = builders.policy_meta(self.cfg, self.spec)
        log = {"actions": self.actions} if self.actions is not None else {}
        run_dir, mon = harness.open_run(self.ctx, parts={"learner": learner, **log,
                                                         **(parts or {})},
                                        policy=(learner.model, meta))
        self.survivors.elapsed = mon.elapsed
        if self.actions is not None:  # empty unless resumed: the actors catch up first
            self.actions.send_all(self.ctx.transport, self.actors, harness.TAG_ACTIONS,
                                  self.cfg.startup_timeout)
        return run_dir, mon

    def next_batch(self) -> list[Message]:
        """The unrolls of the next update: one from every actor in rank order (sync,
        reproducible with ``--seed``), or what has arrived, at most ``--batch-unrolls``
        (async). They are views into the inbox's buffers, valid until :meth:`release`."""
        inbox, pump = self.inbox, self.publisher.pump
        if self.cfg.mode == "sync":
            batch = [(a, inbox.recv_from(a, on_poll=pump)) for a in self.actors]
        else:
            got = None
            while got is None:  # until an unroll arrives from an actor that is alive
                got = self.survivors.guard(lambda: inbox.recv_any(on_poll=pump),
                                           "receiving unrolls")
            peer, msg = got
            batch = [(peer, msg)]
            for p in self.survivors.guard(inbox.ready, "receiving unrolls") or []:
                if len(batch) >= (self.cfg.batch_unrolls or len(self.actors)):
                    break
                if p != peer:
                    batch.append((p, inbox.poll(p)))
        self.peers = [p for p, _ in batch]
        return [m for _, m in batch]

    def account(self, mon: Monitor, batch: list[Message], version: int) -> None:
        """The batch's episodes, steps and policy lag into ``mon``, and each actor's lag
        (learner version minus the unroll's behaviour-policy version) apart."""
        for peer, msg in zip(self.peers, batch, strict=True):
            harness.account_unroll(mon, msg, version)
            if self.actions is not None:
                self.actions.record(peer, msg["actions"])
            lag = self.lag.setdefault(peer, [0, 0])
            lag[0] += version - int(msg["version"])
            lag[1] += 1

    def release(self) -> None:
        """Repost the buffers of the last batch: its messages are overwritten from now on."""
        with self.timers("comm"):
            for p in self.peers:
                self.inbox.release(p)

    def send_params(self, learner: VTraceLearner, stop: str | None = None) -> None:
        """The learner's parameters to every actor as version ``learner.version`` (sync: and
        wait until each has them); once ``stop`` is set, STOP instead."""
        if stop is not None:
            self.publisher.publish_stop()  # sync actors blocked in a collective stop
            return
        with self.timers("comm"):
            get_flat(learner.model, self.publisher.latest["params"])
            self.survivors.guard(lambda: self.publisher.publish(version=learner.version),
                                 "sending parameters")
            if self.cfg.mode == "sync":
                self.publisher.wait_all()  # every actor waits for exactly this version

    def finish(self, run_dir: RunDir, mon: Monitor, stop: str, learner: VTraceLearner,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Stop and drain (unrolls in flight are received and dropped), then the last
        metrics row, summary.json (plus ``extra``) and policy.pt; returns the summary."""
        inbox, publisher, t = self.inbox, self.publisher, self.ctx.transport

        def drain() -> None:
            for p in inbox.ready():
                inbox.release(p)
            publisher.pump()

        byes = harness.finish_root(self.ctx, self.control, self.actors, drain,
                                   outstanding=lambda: publisher.wait_all(on_poll=drain),
                                   survivors=self.survivors)
        timers = {"learner": {"update": learner.update_s,
                              "comm": self.timers.s.get("comm", 0.0), "wait": t.wait_s}}
        extra = {"topology_rounds": publisher.rounds(),
                 "params_messages_root": publisher.messages(), **self.survivors.summary(),
                 "policy_lag_by_actor": {str(p): round(s / n, 3)
                                         for p, (s, n) in sorted(self.lag.items())},
                 **(extra or {})}
        return harness.finish_run(self.ctx, run_dir, mon, stop, policy=learner.model,
                                  meta=builders.policy_meta(self.cfg, self.spec),
                                  updates=learner.version, device=learner.device,
                                  applied=topology_applied(self.cfg), timers=timers,
                                  byes=byes, extra=extra)


def run_learner(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """Rank 0: take the actors' unrolls, one V-trace update on them, send the parameters."""
    learner = builders.vtrace_learner(ctx.cfg, spec)
    link = LearnerLink(ctx, spec, learner.model)
    run_dir, mon = link.open_run(learner)
    link.send_params(learner)  # version 0 (or the resumed one): where every actor starts
    stop = None
    while stop is None:
        batch = link.next_batch()
        link.account(mon, batch, learner.version)
        learner.update(batch)
        link.release()
        mon.updates = learner.version
        stop = mon.check_stop()
        link.send_params(learner, stop)
        mon.maybe_log(*harness.byte_totals(ctx.transport))
    return link.finish(run_dir, mon, stop, learner)


def run_actor(ctx: RankContext, spec: EnvSpec) -> None:
    cfg, t = ctx.cfg, ctx.transport
    root = 0
    model = builders.actor_critic(cfg, spec)  # its weights come from rank 0
    u_schema, p_schema, digests = schemas(cfg, spec, model)
    control = ControlChannel(t, [root], harness.TAG_CONTROL)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, model,
                        harness.actor_seed(cfg.seed, ctx.rank))

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])

    params = ParamsSubscriber(t, cfg.topology, cfg.fanout, p_schema, root, load, harness.TAG_PARAMS,
                              harness.TAG_TOPOLOGY, cfg.mode)
    harness.handshake_leaf(control, root, digests, cfg.startup_timeout)
    if cfg.mode == "sync":  # a resumed run's actor takes its logged steps again
        catch_up(t, actor, root, harness.TAG_ACTIONS, spec.num_actions, cfg.startup_timeout)
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
                               env_steps=actor.env_steps, episodes=actor.episodes,
                               params=params.stats())
    harness.finish_leaf(ctx, control, lc, root, stats, drain=params.take_newest,
                        settle=params.settle)
    actor.close()
