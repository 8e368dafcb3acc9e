"""The replay roles of the DQN family: a replay rank (Ape-X's shards, Gorila's replay
memory) and a learner's replay, on other ranks or in its own process.

A replay rank inserts its actors' n-step transitions and answers its learners' sample
requests and priority updates (:class:`archzoo.replay.server.ReplayServer`) until the stop; its BYE
carries its counters under ``replay`` (summary.json's ``replay``). It reports nothing else, but
sends rank 0 an empty report now and then, so that the progress line does not list it as silent
where nothing else it sends reaches rank 0 (Gorila's replay memory).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from archzoo import builders
from archzoo.comm import Inbox
from archzoo.config import ApexConfig
from archzoo.envs import EnvSpec
from archzoo.harness.finish import actor_seed
from archzoo.harness.protocol import RankContext
from archzoo.harness.roles import leaf
from archzoo.records import LeafStats
from archzoo.replay.keeper import ReplayKeeper
from archzoo.replay.server import (
    LocalReplayClient,
    RateLimiter,
    ReplayServer,
    ShardedReplayClient,
    insert,
)
from archzoo.tags import REPLAY_TAGS, SAMPLE_TAGS, TAG_TRANSITIONS


def serve_replay(ctx: RankContext[ApexConfig], spec: EnvSpec, digests: dict[str, str], *,
                 actors: list[int], learners: int | list[int], capacity: int,
                 learning_starts: int) -> None:
    """A replay rank for ``actors`` and ``learners``: a memory of ``capacity`` items that
    serves samples once it holds ``learning_starts`` (``--checkpoint-replay`` keeps it)."""
    cfg, t = ctx.cfg, ctx.net
    memory = builders.replay_memory(cfg, spec, capacity, actor_seed(cfg.seed, ctx.rank))
    limiter = RateLimiter(learning_starts, cfg.samples_per_insert, min_sample=cfg.batch_size)
    server = ReplayServer(t, memory, builders.replay_items(cfg, spec), actors, learners,
                          cfg.insert_capacity(), cfg.batch_size, limiter, REPLAY_TAGS,
                          insert_name=builders.insert_name(cfg))
    keeper = ReplayKeeper(cfg, ctx.rank, memory, limiter)  # --checkpoint-replay
    busy_s = 0.0

    def drain() -> None:
        server.drain_inserts(force=True)

    def stats() -> LeafStats:
        return {"timing": {"serve": busy_s},
                "replay": {"inserted": limiter.inserted, "sampled": limiter.sampled,
                           "size": len(memory), "priority_updates": server.priority_updates,
                           "priorities_applied": server.priorities_applied}}

    with leaf(ctx, digests) as link:
        link.on_stop(lambda: server.flush(on_poll=drain), keeper.save, stats=stats,
                     drain=drain)
        while not link.stopped:
            t0 = time.perf_counter()
            if server.serve():
                busy_s += time.perf_counter() - t0
            else:
                t.idle(2e-4)
            keeper.maybe_save()
            link.reporter.maybe_report(0, None, None)  # an empty report: rank 0 hears it live


class LearnerReplay:
    """Ape-X's learner's replay: a client of the replay ranks ``shards``, or with none a
    memory in this process that takes the ``actors``' transitions itself (``client``:
    request, receive, update_priorities, drain, size, inserted)."""

    def __init__(self, ctx: RankContext[ApexConfig], spec: EnvSpec, shards: list[int],
                 actors: list[int]) -> None:
        cfg, t = ctx.cfg, ctx.net
        self.memory = self.inserts = None
        self.limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert,
                                   min_sample=cfg.batch_size)
        if shards:
            self.client: Any = ShardedReplayClient(
                t, shards, builders.replay_items(cfg, spec), cfg.batch_size, cfg.beta, True,
                SAMPLE_TAGS, cfg.seed)
        else:
            self.memory = builders.replay_memory(cfg, spec, cfg.replay_capacity, cfg.seed)
            self.inserts = Inbox(t, builders.replay_inserts(cfg, spec), actors,
                                 TAG_TRANSITIONS, depth=2, what=builders.insert_name(cfg))
            self.client = LocalReplayClient(self.memory, cfg.batch_size, self.limiter)
        self.keeper = ReplayKeeper(cfg, ctx.rank, self.memory, self.limiter)

    def take_inserts(self, force: bool = False) -> None:
        """The arrived transitions into the memory, as the rate limiter allows (or all)."""
        inserts, memory = self.inserts, self.memory
        if inserts is not None:
            assert memory is not None  # the learner's own memory takes the inserts
            for p in inserts.ready():
                if not (force or self.limiter.can_insert()):
                    break
                msg = inserts.poll(p)
                assert msg is not None, "a ready peer has a message"
                self.limiter.inserted += insert(memory, msg)
                inserts.release(p)

    def drop(self, actor: int) -> None:
        if self.inserts is not None:
            self.inserts.drop(actor)

    def drain(self) -> None:
        self.client.drain()
        self.take_inserts(force=True)


def replay_summary(byes: Mapping[int, LeafStats], ranks: list[int]) -> dict[str, dict[str, int]]:
    """summary.json's ``replay``: each replay rank's counters, from its BYE."""
    return {str(r): byes.get(r, {}).get("replay", {}) for r in ranks}
