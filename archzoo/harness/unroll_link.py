"""The learner's end of IMPALA's wire (Espeholt et al. 2018, Section 3): actors send
unrolls with their behaviour policy's logits, the learner sends parameters back over the
chosen topology.

:class:`LearnerLink` serves any learner loop over unrolls: IMPALA's own
(:func:`archzoo.architectures.impala.run_learner`) or a new architecture's
(docs/tutorial.md). The actor's end is :func:`archzoo.architectures.impala.run_actor`::

    with LearnerLink(ctx, spec, learner) as link:   # handshake, run directory, checkpoints
        link.send_params()                          # where every actor starts
        while not link.run.stopped:
            batch = link.next_batch()
            link.account(batch)
            link.run.mon.add_learner_stats(learner.update(batch))
            link.run.tick(learner.version)          # row, checkpoint, video, stop: when due
            link.send_params()                      # the new parameters, or STOP
            link.release()
    # STOP, every BYE (unrolls in flight dropped), FINAL, the final barrier
    return link.finish()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from types import TracebackType

import numpy as np
from torch import nn

from archzoo import builders
from archzoo.actors.action_log import ActionLog
from archzoo.comm import Inbox, Message, PeerTimeout, Schema
from archzoo.comm.base import Backoff
from archzoo.config import ImpalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness.finish import Stateful
from archzoo.harness.protocol import RankContext
from archzoo.harness.roles import RootRun, open_root
from archzoo.harness.stats import account_unroll
from archzoo.harness.survivors import Survivors
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.nets import get_flat, num_params
from archzoo.records import Summary
from archzoo.runlog import Timers
from archzoo.tags import TAG_ACTIONS, TAG_PARAMS, TAG_TOPOLOGY, TAG_UNROLL
from archzoo.topology.broadcast import ParamsBroadcast, describe_broadcast
from archzoo.topology.star import params_schema

STREAMS = "unrolls actor->learner point-to-point"


def topology_applied(cfg: ImpalaConfig) -> str:
    """Where the chosen topology is used (summary.json says so)."""
    how = describe_broadcast(cfg.topology_name, cfg.fanout, cfg.mode)
    return f"parameter broadcast learner->actors over {how}; {STREAMS}"


def schemas(cfg: ImpalaConfig, spec: EnvSpec, model: nn.Module,
            world_size: int) -> tuple[Schema, Schema, dict[str, str]]:
    """The unroll and parameter messages, and their digests for the start-up check. The
    parameters carry each rank's credit: how many of its unrolls the learner has used."""
    u_schema = builders.unrolls(cfg, spec)  # with --core lstm, its initial states too
    p_schema = params_schema(num_params(model), world_size)
    return u_schema, p_schema, {"unroll": u_schema.digest(), "params": p_schema.digest()}


def unroll_window(cfg: ImpalaConfig, actors: int) -> int:
    """Unrolls an async actor may have sent that the learner has not yet taken into a batch:
    ``--max-inflight``, or what an update of ``--batch-unrolls`` needs from each actor."""
    return max(cfg.max_inflight, -(-cfg.batch_unrolls // max(1, actors)))


class LearnerLink:
    """The learner's end of IMPALA's wire, for any learner loop over unrolls: a context.

    It holds an :class:`Inbox` of the actors' unrolls and the parameter broadcast. Entered,
    it is the root of the run (:func:`archzoo.harness.root`, its :class:`RootRun` is
    ``run``): the start-up handshake, the run directory and Monitor checkpointing
    ``learner`` (and ``parts``; with ``--resume`` they go on from the latest checkpoint),
    the actors whose death an async run survives (dropped from the control channel, the
    inbox and the broadcast; sync cannot). Left, it runs the stop-and-drain protocol
    (unrolls in flight are received and dropped); :meth:`finish` then writes summary.json.
    :meth:`next_batch` receives the unrolls of the next update, :meth:`release` hands their
    buffers back to the inbox and :meth:`send_params` sends the learner's parameters (or
    STOP, once the run stopped).
    """

    def __init__(self, ctx: RankContext[ImpalaConfig], spec: EnvSpec, learner: VTraceLearner,
                 parts: dict[str, Stateful] | None = None) -> None:
        cfg, t = ctx.cfg, ctx.net
        self.ctx, self.cfg, self.spec, self.learner = ctx, cfg, spec, learner
        self.parts = parts or {}
        self.actors = list(range(1, ctx.world_size))
        self.timers = Timers()
        self.unroll_schema, p_schema, self.digests = schemas(cfg, spec, learner.model,
                                                             ctx.world_size)
        # async: an update takes --batch-unrolls unrolls, so each actor may have that many
        # over the actors waiting (sync: one each, in rank order)
        depth = 1 if cfg.mode == "sync" or not cfg.batch_unrolls else \
            -(-cfg.batch_unrolls // len(self.actors))
        self.inbox = Inbox(t, self.unroll_schema, self.actors, TAG_UNROLL, depth=depth,
                           what="unroll")
        self.published_at: dict[int, float] = {}  # version -> when it was published
        self.publisher = ParamsBroadcast(t, cfg.topology_name, cfg.fanout, p_schema, self.actors,
                                         TAG_PARAMS, TAG_TOPOLOGY, cfg.mode)
        self.peers: list[int] = []  # whose unrolls the last batch holds
        self.used = np.zeros(ctx.world_size, np.int64)  # per actor: its unrolls in batches
        self.lag: dict[int, list[int]] = {}  # actor -> [sum of policy lags, unrolls]
        # sync: every actor's actions, so that a resumed run goes on bit for bit
        self.actions = ActionLog(spec.num_actions) if cfg.mode == "sync" else None
        self.run: RootRun  # the root's run, from __enter__ on

    def __enter__(self) -> LearnerLink:
        log = {"actions": self.actions} if self.actions is not None else {}
        learner = self.learner
        run = self.run = open_root(
            self.ctx, self.actors, self.digests,
            actors=self.actors if self.cfg.mode == "async" else [],
            parts={"learner": learner, **log, **self.parts},
            policy=(learner.model, builders.policy_meta(self.cfg, self.spec)))
        run.survive(self.inbox, self.publisher)
        inbox, publisher = self.inbox, self.publisher

        def drain() -> None:  # unrolls in flight are received and dropped
            for p in inbox.ready():
                inbox.release(p)
            publisher.pump()

        run.on_stop(drain, outstanding=lambda: publisher.wait_all(on_poll=drain))
        if self.actions is not None:  # empty unless resumed: the actors catch up first
            self.actions.send_all(self.ctx.net, self.actors, TAG_ACTIONS,
                                  self.cfg.startup_timeout)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        """The root's end: after the loop, the stop protocol (STOP, every BYE, FINAL, the
        final barrier); after an error, none (it propagates)."""
        if kind is None:
            self.run.stop_and_drain()

    @property
    def survivors(self) -> Survivors:
        """The live and dead actors of the run (sync: none may die)."""
        survivors = self.run.survivors
        if survivors is None:  # root() was given actors: never None
            raise RuntimeError("LearnerLink: the run counts no survivors")
        return survivors

    def batch_size(self) -> int:
        """Unrolls per asynchronous update: ``--batch-unrolls`` (0 = one per live actor), at
        most what the live actors can have waiting (the inbox's depth each)."""
        live = len(self.survivors.live)
        return max(1, min(self.cfg.batch_unrolls or live, live * self.inbox.depth()))

    def next_batch(self, stopping: Callable[[], bool] | None = None) -> list[Message]:
        """The unrolls of the next update: one from every actor in rank order (sync,
        reproducible with ``--seed``), or exactly :meth:`batch_size` unrolls, oldest first
        and round robin over the actors, waiting for them under ``--comm-timeout`` (async:
        the policy moves by one update per batch, as in the paper). While it waits,
        ``stopping()`` true (the run's time is up) ends the wait with what has arrived,
        maybe nothing: a silent actor delays the stop by no more than a poll. The unrolls
        are views into the inbox's buffers, valid until :meth:`release`."""
        inbox, pump = self.inbox, self.publisher.pump
        if self.cfg.mode == "sync":
            batch = [(a, inbox.recv_from(a, on_poll=pump)) for a in self.actors]
        else:
            batch = self._gather(stopping)
        self.peers = [p for p, _ in batch]
        np.add.at(self.used, self.peers, 1)
        return [m for _, m in batch]

    def _gather(self, stopping: Callable[[], bool] | None) -> list[tuple[int, Message]]:
        t, inbox = self.ctx.net, self.inbox
        batch: list[tuple[int, Message]] = []
        taken: dict[int, int] = {}  # actor -> its unrolls in this batch

        def take_arrived() -> bool:
            got = False
            for i in range(inbox.depth()):  # oldest first: every actor's 1st, then 2nd, ...
                for p in inbox.ready():  # round robin: the next batch starts after p
                    if len(batch) < self.batch_size() and taken.get(p, 0) == i and \
                            (msg := inbox.poll_at(p, i)) is not None:
                        batch.append((p, msg))
                        taken[p] = i + 1
                        inbox.advance(p)
                        got = True
            return got

        t0 = time.perf_counter()
        backoff = Backoff(t.idle, t.spin_s)
        try:
            while len(batch) < self.batch_size():
                if self.survivors.guard(take_arrived, "receiving unrolls"):
                    backoff.reset()
                    continue
                self.survivors.guard(self.publisher.pump, "sending parameters")
                if stopping is not None and stopping():
                    break
                if time.perf_counter() - t0 > t.timeout_s:
                    quiet = [str(p) for p in self.survivors.live if not taken.get(p)]
                    raise PeerTimeout(t.rank, ",".join(quiet) or "any actor",
                                      f"unrolls (a batch of {self.batch_size()}, "
                                      f"{len(batch)} arrived)", t.timeout_s)
                backoff.pause()
        finally:
            t.wait_s += time.perf_counter() - t0
        return batch

    def account(self, batch: list[Message]) -> None:
        """The batch's episodes, steps and policy lag into the run's Monitor, and each
        actor's lag (the learner's version minus the unroll's behaviour-policy version)
        apart. The lag in seconds is the age of the behaviour policy: now minus when it was
        published."""
        mon, version, now = self.run.mon, self.learner.version, time.time()
        for peer, msg in zip(self.peers, batch, strict=True):
            behaviour = int(msg["version"])
            published = self.published_at.get(behaviour)
            account_unroll(mon, msg, version,
                           None if published is None else now - published)
            if self.actions is not None:
                self.actions.record(peer, msg["actions"])
            lag = self.lag.setdefault(peer, [0, 0])
            lag[0] += version - behaviour
            lag[1] += 1

    def release(self) -> None:
        """Repost the buffers of the last batch: its messages are overwritten from now on."""
        with self.timers("comm"):
            for p in self.peers:
                if p in self.inbox.peers:  # not an actor that died since; one that is
                    # gone fails its reposted receive at the next poll: dropped there
                    self.survivors.guard(partial(self.inbox.release, p), "receiving unrolls")

    def send_params(self) -> None:
        """The learner's parameters to every actor as version ``learner.version`` (sync: and
        wait until each has them); once the run stopped, STOP instead.

        The message also carries every actor's credit, the unrolls of it that
        :meth:`next_batch` has taken so far: an async actor starts its next unroll once
        the learner took its last (``--max-inflight`` 1). Sent right after
        :meth:`next_batch`, before the update, the actor collects while the learner trains,
        and its unroll is trained one update per actor later (the policy lag)."""
        learner = self.learner
        if self.run.stopped:
            self.publisher.publish_stop()  # sync actors blocked in a collective stop
            return
        self.published_at[learner.version] = time.time()
        self.published_at.pop(learner.version - 10_000, None)
        with self.timers("comm"):
            get_flat(learner.model, self.publisher.latest["params"])
            self.publisher.latest["used"][:] = self.used
            self.survivors.guard(lambda: self.publisher.publish(version=learner.version),
                                 "sending parameters")
            if self.cfg.mode == "sync":
                self.publisher.wait_all()  # every actor waits for exactly this version

    def finish(self, extra: Mapping[str, object] | None = None) -> Summary:
        """After the ``with``: the last metrics row, summary.json (the link's counters, plus
        ``extra``) and policy.pt (the learner's); returns the summary."""
        run, t, learner = self.run, self.ctx.net, self.learner
        timers = {"learner": {"update": learner.update_s,
                              "comm": self.timers.s.get("comm", 0.0), "wait": t.wait_s}}
        extra = {"topology_rounds": self.publisher.rounds(),
                 "params_messages_root": self.publisher.messages(),
                 "policy_lag_by_actor": {str(p): round(s / n, 3)
                                         for p, (s, n) in sorted(self.lag.items())},
                 **(extra or {})}
        return run.finish(learner.model, learner.version, device=learner.device,
                          applied=topology_applied(self.cfg), timers=timers, extra=extra)
