"""A replay shard served over the Transport, and the learner's client for K shards.

Ape-X (Horgan et al., ICLR 2018, §3): actors insert batches of n-step
transitions with the priorities they computed, without waiting for an answer; the
learner asks for sample batches, prefetching the next while it trains, and sends the
new priorities back with its next request. With K shards the learner draws from each
in proportion to its priority total and computes importance weights from the global
total, minimum and size, so K shards sample as one memory would.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from archzoo.comm import Inbox, Message, PeerFailure, Request, Schema, Transport
from archzoo.replay.memory import FieldSpec, PrioritizedReplay, UniformReplay, importance_weights

TRANSITION_FIELDS = ("obs", "action", "ret", "next_obs", "discount", "version")


def memory_fields(obs_shape: tuple[int, ...], obs_dtype: DTypeLike = np.float32) -> FieldSpec:
    """An n-step transition's fields; observations are stored in their own dtype (uint8
    frames stay uint8). ``version`` is the parameters' version the actor acted with: the
    learner's version when it samples the item, minus it, is the item's replay lag."""
    od = np.dtype(obs_dtype)
    return {"obs": (obs_shape, od), "action": ((), np.dtype(np.int64)),
            "ret": ((), np.dtype(np.float32)), "next_obs": (obs_shape, od),
            "discount": ((), np.dtype(np.float32)), "version": ((), np.dtype(np.int64))}


def item_fields(items: tuple[int, ...] | FieldSpec, obs_dtype: DTypeLike = np.float32) -> FieldSpec:
    """What a replay stores per item: ``items`` itself when it is a :data:`FieldSpec`
    (R2D2's sequences), else n-step transitions of observations of shape ``items``."""
    return dict(items) if isinstance(items, dict) else memory_fields(tuple(items), obs_dtype)


def _arrays(fields: FieldSpec, cap: int) -> list:
    return [(k, dtype, (cap, *shape)) for k, (shape, dtype) in fields.items()]


def insert_schema(fields: FieldSpec, cap: int, name: str = "transitions") -> Schema:
    """Actor -> replay: up to ``cap`` items with their initial priorities."""
    return Schema(name, [*_arrays(fields, cap), ("priority", np.float32, (cap,)),
                         ("count", np.int64, ())])


def request_schema(batch_size: int) -> Schema:
    """Learner -> shard: how many samples, plus priority updates for an earlier batch."""
    return Schema("sample_request", [
        ("count", np.int64, ()), ("upd_count", np.int64, ()),
        ("upd_idx", np.int64, (batch_size,)), ("upd_item_ids", np.int64, (batch_size,)),
        ("upd_priority", np.float32, (batch_size,)),
    ])


def reply_schema(items: tuple[int, ...] | FieldSpec, batch_size: int,
                 obs_dtype: DTypeLike = np.float32) -> Schema:
    """Shard -> learner: the samples (:func:`item_fields`), their slots and p^α, and the
    shard's totals."""
    return Schema("sample_reply", [
        *_arrays(item_fields(items, obs_dtype), batch_size), ("idx", np.int64, (batch_size,)),
        ("item_ids", np.int64, (batch_size,)), ("p_alpha", np.float64, (batch_size,)),
        ("count", np.int64, ()), ("total", np.float64, ()), ("min_p_alpha", np.float64, ()),
        ("size", np.int64, ()), ("inserted", np.int64, ()),
    ])


def insert(memory: UniformReplay, msg: Message) -> int:
    """Add the items of one actor message to ``memory``; returns how many."""
    n = int(msg["count"])
    if n == 0:
        return 0
    data = {k: msg[k][:n] for k in memory.field_names}
    if isinstance(memory, PrioritizedReplay):
        memory.add(data, msg["priority"][:n])
    else:
        memory.add(data)
    return n


class RateLimiter:
    """Keeps samples served near ``samples_per_insert`` × items inserted (Reverb's
    SampleToInsertRatio): sampling waits for ``learning_starts`` items and for inserts to
    catch up; inserting waits (the shard stops taking actor messages, so actors block on
    their sends) while it is more than ``slack`` items ahead. ``samples_per_insert`` 0
    turns both limits off.

    Sampling may run ahead of the ratio by ``slack`` items' worth, but never by more items
    than were inserted: at the start, with ``learning_starts`` below ``slack``, a sampler
    that ran the whole slack ahead replayed each first item far more than
    ``samples_per_insert`` times before the next arrived (R2D2 on CartPoleNoVel, from 200
    sequences at a ratio of 8: 514 updates of 32 in its first 53 s, on the 8,301 agent
    steps collected by then; its return fell to 13, below a random policy's 22)."""

    def __init__(self, learning_starts: int, samples_per_insert: float,
                 slack: int = 2048, min_sample: int = 1) -> None:
        self.learning_starts, self.spi, self.slack = learning_starts, samples_per_insert, slack
        # inserting may always run far enough ahead for one batch of ``min_sample`` to be
        # sampled, else a small ratio with a large batch would block both sides forever
        self._insert_room = max(samples_per_insert * slack, float(min_sample))
        self.inserted = 0
        self.sampled = 0

    def _deficit(self) -> float:
        """How many items sampling is behind the target ratio (negative: ahead)."""
        return self.spi * max(0, self.inserted - self.learning_starts) - self.sampled

    def can_sample(self, size: int, count: int) -> bool:
        if size < max(1, self.learning_starts):
            return False
        ahead = self.spi * min(self.slack, self.inserted)  # how far sampling may lead
        return self.spi <= 0 or self._deficit() + ahead >= count

    def can_insert(self) -> bool:
        return self.spi <= 0 or self.inserted < self.learning_starts \
            or self._deficit() <= self._insert_room


class ReplayServer:
    """One shard: consumes actor inserts and answers its learners' requests, never blocking.

    ``learners`` is one rank (Ape-X) or several (Gorila's learners share one replay); each
    learner has one request in flight and its own reply buffer.
    """

    def __init__(self, transport: Transport, memory: UniformReplay,
                 items: tuple[int, ...] | FieldSpec, actors: Sequence[int],
                 learners: int | Sequence[int], insert_cap: int, batch_size: int,
                 limiter: RateLimiter, tags: tuple[int, int, int],
                 obs_dtype: DTypeLike = np.float32,
                 insert_name: str = "transitions") -> None:
        """``items``: the items' fields, or the observation shape of n-step transitions
        (:func:`item_fields`); ``insert_name`` names the actors' message."""
        tag_insert, tag_request, tag_reply = tags
        fields = item_fields(items, obs_dtype)
        self.learners = [learners] if isinstance(learners, int) else list(learners)
        self.t, self.memory, self.limiter = transport, memory, limiter
        self.tag_reply = tag_reply
        self.inserts = Inbox(transport, insert_schema(fields, insert_cap, insert_name),
                             actors, tag_insert, depth=2, what=insert_name)
        self.requests = Inbox(transport, request_schema(batch_size), self.learners, tag_request,
                              depth=1, what="sample request")
        schema = reply_schema(fields, batch_size)
        self._reply = {r: schema.new() for r in self.learners}
        self._sending: dict[int, Request | None] = dict.fromkeys(self.learners)
        self._updated = dict.fromkeys(self.learners, False)  # pending request's updates applied
        self.priority_updates = 0  # items whose new priority arrived with a request
        self.priorities_applied = 0  # of those, the ones still in their slot (not stale)
        self.dead: list[int] = []  # actors whose process died

    def drain_inserts(self, force: bool = False) -> int:
        """Take arrived actor messages (while the rate limiter allows, unless ``force``).

        An actor whose process died is dropped (listed in ``dead``); the others go on."""
        n = 0
        try:
            for p in self.inserts.ready():
                if not (force or self.limiter.can_insert()):
                    break
                n += insert(self.memory, self.inserts.take(p))
                self.inserts.release(p)
        except PeerFailure as e:
            if e.peer not in self.inserts.peers:
                raise
            self.inserts.drop(e.peer)
            self.dead.append(e.peer)
            print(f"archzoo: rank {self.t.rank}: replay drops actor {e.peer}: {e}",
                  file=sys.stderr, flush=True)
        self.limiter.inserted += n
        return n

    def serve(self) -> bool:
        """One non-blocking round: inserts, then at most one answered request per learner."""
        did = self.drain_inserts() > 0
        for learner in self.learners:
            did = self._answer(learner) or did
        return did

    def _answer(self, learner: int) -> bool:
        req = self.requests.poll(learner)
        if req is None:
            return False
        if not self._updated[learner] and isinstance(self.memory, PrioritizedReplay):
            k = int(req["upd_count"])
            if k:
                self.priority_updates += k
                self.priorities_applied += self.memory.update_priorities(
                    req["upd_idx"][:k], req["upd_item_ids"][:k], req["upd_priority"][:k])
        self._updated[learner] = True
        count = int(req["count"])
        sending = self._sending[learner]
        if sending is not None and not sending.test():
            return False
        if count > 0 and not self.limiter.can_sample(len(self.memory), count):
            return False
        self._fill(self._reply[learner], count)
        self._sending[learner] = self.t.isend(self._reply[learner].buffer, learner,
                                              self.tag_reply, "sample reply")
        self.requests.release(learner)
        self._updated[learner] = False
        return True

    def _fill(self, r: Message, count: int) -> None:
        m = self.memory
        r["count"][...] = count
        if count > 0:
            s = m.sample(count)
            for k in m.field_names:
                r[k][:count] = s.data[k]
            r["idx"][:count] = s.idx
            r["item_ids"][:count] = s.item_ids
            r["p_alpha"][:count] = s.p_alpha if s.p_alpha is not None else 1.0
            self.limiter.sampled += count
        if isinstance(m, PrioritizedReplay):
            r["total"][...], r["min_p_alpha"][...] = m.total(), m.min_p_alpha()
        else:
            r["total"][...], r["min_p_alpha"][...] = len(m), 1.0
        r["size"][...] = len(m)
        r["inserted"][...] = self.limiter.inserted

    def flush(self, on_poll: Callable[[], object] | None = None) -> None:
        for sending in self._sending.values():
            if sending is not None:
                self.t.wait(sending, on_poll=on_poll)


@dataclass
class Batch:
    """A learner batch drawn from one or more shards."""

    data: dict[str, np.ndarray]
    weights: np.ndarray | None
    shard: np.ndarray      # which shard (position in the client's list) each item came from
    idx: np.ndarray
    item_ids: np.ndarray


class ShardedReplayClient:
    """The learner's side of K replay shards, with one request in flight per shard."""

    def __init__(self, transport: Transport, shards: Sequence[int],
                 items: tuple[int, ...] | FieldSpec, batch_size: int,
                 beta: float | Callable[[], float], prioritized: bool,
                 tags: tuple[int, int], seed: int = 0, obs_dtype: DTypeLike = np.float32) -> None:
        tag_request, tag_reply = tags
        self.t, self.shards, self.batch_size = transport, list(shards), batch_size
        self.beta = beta if callable(beta) else (lambda b=beta: b)
        self.prioritized = prioritized
        self.tag_request = tag_request
        self.fields = tuple(item_fields(items, obs_dtype))  # :func:`item_fields`
        self.replies = Inbox(transport, reply_schema(items, batch_size, obs_dtype),
                             self.shards, tag_reply, depth=1, what="sample reply")
        self._req = {s: request_schema(batch_size).new() for s in self.shards}
        self._req_send = dict.fromkeys(self.shards)
        self._asked = dict.fromkeys(self.shards, 0)  # count requested, reply not yet taken
        # per shard: the (idx, item_ids, priorities) queued for its next request
        self._updates: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {
            s: [] for s in self.shards}
        self._totals = dict.fromkeys(self.shards, 1.0)  # last known Σp^α per shard
        self.rng = np.random.default_rng(seed)
        self.size = 0
        self.inserted = 0

    def request(self, on_poll: Callable[[], object] | None = None) -> None:
        """Ask every shard for its share of the next batch (∝ its priority total)."""
        totals = np.array([self._totals[s] for s in self.shards], dtype=np.float64)
        probs = totals / totals.sum() if totals.sum() > 0 else None
        counts = self.rng.multinomial(self.batch_size, probs if probs is not None
                                      else np.full(len(self.shards), 1 / len(self.shards)))
        for s, c in zip(self.shards, counts, strict=True):
            pending = self._req_send[s]
            if pending is not None:
                self.t.wait(pending, on_poll=on_poll)
            msg = self._req[s]
            msg["count"][...] = c
            ups = self._updates[s]
            k = 0
            if ups:
                idx, ids, prio = (np.concatenate(x) for x in zip(*ups, strict=True))
                k = min(len(idx), self.batch_size)
                msg["upd_idx"][:k], msg["upd_item_ids"][:k] = idx[-k:], ids[-k:]
                msg["upd_priority"][:k] = prio[-k:]
                self._updates[s] = []
            msg["upd_count"][...] = k
            self._req_send[s] = self.t.isend(msg.buffer, s, self.tag_request, "sample request")
            self._asked[s] = int(c)

    def receive(self, on_poll: Callable[[], object] | None = None,
                timeout_s: float | None = None) -> Batch:
        """Wait for every shard's reply to the last request; weights use global totals."""
        parts = []
        for s in self.shards:
            msg = self.replies.recv_from(s, timeout_s, on_poll)
            n = int(msg["count"])
            self._totals[s] = float(msg["total"])
            parts.append((s, n, {k: np.array(msg[k][:n]) for k in
                                 (*self.fields, "idx", "item_ids", "p_alpha")},
                          float(msg["total"]), float(msg["min_p_alpha"]), int(msg["size"]),
                          int(msg["inserted"])))
            self.replies.release(s)
        data = {k: np.concatenate([p[2][k] for p in parts]) for k in self.fields}
        shard = np.concatenate([np.full(p[1], i) for i, p in enumerate(parts)])
        idx = np.concatenate([p[2]["idx"] for p in parts])
        item_ids = np.concatenate([p[2]["item_ids"] for p in parts])
        self.size = sum(p[5] for p in parts)
        self.inserted = sum(p[6] for p in parts)
        weights = None
        if self.prioritized:
            total = sum(p[3] for p in parts)
            mins = [p[4] for p in parts if p[5] > 0]
            weights = importance_weights(np.concatenate([p[2]["p_alpha"] for p in parts]),
                                         total, min(mins), self.size, self.beta())
        return Batch(data, weights, shard, idx, item_ids)

    def update_priorities(self, batch: Batch, priorities: np.ndarray) -> None:
        """Queue new priorities; they travel with each shard's next request."""
        for i, s in enumerate(self.shards):
            sel = batch.shard == i
            if sel.any():
                self._updates[s].append((batch.idx[sel], batch.item_ids[sel], priorities[sel]))

    def drain(self) -> None:
        """At stop: take any reply in flight so the shard's send completes."""
        for s in self.replies.ready():
            self.replies.release(s)


class LocalReplayClient:
    """``--replay-shards 0``: the replay lives in the learner process; same interface."""

    def __init__(self, memory: UniformReplay, batch_size: int, limiter: RateLimiter) -> None:
        self.memory, self.batch_size, self.limiter = memory, batch_size, limiter
        self.prioritized = isinstance(memory, PrioritizedReplay)

    @property
    def size(self) -> int:
        return len(self.memory)

    @property
    def inserted(self) -> int:
        return self.limiter.inserted

    def request(self, on_poll: Callable[[], object] | None = None) -> None:
        """Nothing to send: sampling happens in :meth:`receive`."""

    def receive(self, on_poll: Callable[[], object] | None = None,
                timeout_s: float | None = None) -> Batch:
        """Sample once the rate limiter allows, calling ``on_poll`` (which inserts) meanwhile."""
        import time

        from archzoo.comm.base import Backoff

        backoff = Backoff()
        timeout_s = 60.0 if timeout_s is None else timeout_s
        deadline = time.perf_counter() + timeout_s
        while not self.limiter.can_sample(len(self.memory), self.batch_size):
            if on_poll is not None:
                on_poll()
            if time.perf_counter() > deadline:
                raise TimeoutError(f"replay: {len(self.memory)} items after {timeout_s}s; "
                                   f"learning starts at {self.limiter.learning_starts}")
            backoff.pause()
        s = self.memory.sample(self.batch_size)
        self.limiter.sampled += self.batch_size
        return Batch(s.data, s.weights, np.zeros(len(s.idx), dtype=np.int64), s.idx,
                     s.item_ids)

    def update_priorities(self, batch: Batch, priorities: np.ndarray) -> None:
        if isinstance(self.memory, PrioritizedReplay):  # self.prioritized
            self.memory.update_priorities(batch.idx, batch.item_ids, priorities)

    def drain(self) -> None:
        """Nothing in flight."""
