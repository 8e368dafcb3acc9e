"""The batched inference server: GA3C's predictor and SEED RL's central inference.

GA3C (Babaeizadeh et al., ICLR 2017, §4 "predictors") and SEED RL (Espeholt et al., ICLR 2020,
§3 "central inference"): actors do not hold the policy. Each sends the
observations of all its E envs in one request; the server gathers the requests that have
arrived into one batch — at most ``max_batch`` requests, waiting at most ``max_wait`` after
the first one for more — runs ONE forward pass of π and V on its device, samples the
actions, and answers every actor with its own rows: actions, behaviour logits μ(·|x) and
values. A forward pass on B·E rows costs far less than B passes on E rows (the GEMMs of a
small MLP are dominated by per-call overhead), so batching multiplies requests/s.

The forward pass and the messages live in ``actors/batched_policy.py``; this module moves
them over the Transport. Parameters change only between batches: new ones are staged with
:meth:`~archzoo.actors.batched_policy.BatchedPolicy.load`
(or, in-process, applied under :attr:`BatchedPolicy.lock`), so every row of a batch is
answered by one parameter version, which each reply names.

The server never waits on one particular actor: a batch is formed from whatever is ready,
so a silent actor only shrinks batches, and an actor whose process died (gloo reports it
on its posted receive) is dropped with a warning.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from archzoo.actors.batched_policy import BatchedPolicy, InferenceStats
from archzoo.actors.core_states import CoreStates
from archzoo.comm import Inbox, Message, PeerFailure, Request, Schema, Transport
from archzoo.comm.base import Backoff

__all__ = ["InferenceServer", "inference_summary"]


# Called for every answered request, before its buffer is reused: (actor, request, reply).
OnAnswer = Callable[[int, Message, Message], None]


class InferenceServer:
    """Batches requests from ``actors`` over the Transport and answers each one.

    ``mode="async"``: a batch is whatever is ready, up to ``max_batch``, waiting at most
    ``max_wait_s`` after the first request for more (never longer than it takes for every
    live actor to be in the batch). ``mode="sync"``: every batch holds one request from
    every actor, in rank order (lockstep; reproducible with a seeded policy).
    """

    def __init__(self, transport: Transport, req_schema: Schema, rep_schema: Schema,
                 actors: list[int], policy: BatchedPolicy, max_batch: int, max_wait_s: float,
                 tag_request: int, tag_reply: int, mode: str = "async",
                 on_answer: OnAnswer | None = None,
                 on_drop: Callable[[int, PeerFailure], None] | None = None,
                 states: CoreStates | None = None) -> None:
        """``states``: a recurrent model's core state per env of every actor
        (actors/core_states.py), carried from batch to batch."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.t, self.policy = transport, policy
        self.max_batch, self.max_wait_s, self.mode = max_batch, max_wait_s, mode
        self.tag_reply = tag_reply
        self.on_answer = on_answer
        self.on_drop = on_drop  # told of every actor dropped (it may end the run)
        self.states = states
        self.inbox = Inbox(transport, req_schema, actors, tag_request, depth=1,
                           what="inference request")
        self.live = list(actors)
        self.dead: list[int] = []
        self._replies = {a: rep_schema.new() for a in actors}
        self._sending: dict[int, Request | None] = dict.fromkeys(actors)
        self._seen: dict[int, float] = {}  # when the server first saw each pending request
        self._next = 0
        self.stats = InferenceStats()

    # -- gathering -----------------------------------------------------------------
    def _drop(self, peer: int, error: PeerFailure) -> None:
        """Stop serving an actor whose process died; the others go on."""
        if peer in self.live:
            self.live.remove(peer)
            self.dead.append(peer)
        self._seen.pop(peer, None)
        self._sending[peer] = None
        if self.on_drop is not None:
            self.on_drop(peer, error)
        else:
            print(f"archzoo: rank {self.t.rank}: inference server drops actor {peer}: "
                  f"{error}", file=sys.stderr, flush=True)

    def _poll(self, peer: int) -> Message | None:
        try:
            msg = self.inbox.poll(peer)
        except PeerFailure as e:
            self._drop(peer, e)
            return None
        if msg is not None and peer not in self._seen:
            self._seen[peer] = time.perf_counter()
        return msg

    def ready(self) -> list[int]:
        """Live actors with a request waiting, round robin from where the last batch ended."""
        n = len(self.live)
        order = [self.live[(self._next + i) % n] for i in range(n)] if n else []
        return [p for p in order if self._poll(p) is not None]

    def gather(self, on_poll: Callable[[], object] | None = None) -> list[int]:
        """The actors of the next batch ([] if no request is ready in async mode)."""
        if self.mode == "sync":
            for p in list(self.live):
                self.inbox.recv_from(p, on_poll=on_poll)
                self._seen.setdefault(p, time.perf_counter())
            return list(self.live)
        batch = self.ready()[: self.max_batch]
        if not batch:
            return []
        deadline = self._seen[batch[0]] + self.max_wait_s
        backoff = Backoff(self.t.idle, self.t.spin_s)
        while len(batch) < min(self.max_batch, len(self.live)):
            now = time.perf_counter()
            if now >= deadline:
                break
            for p in self.ready():
                if p not in batch and len(batch) < self.max_batch:
                    batch.append(p)
            if on_poll is not None:
                on_poll()
            backoff.pause()
        if batch[-1] in self.live:  # fairness: the next batch starts after this one's last
            self._next = (self.live.index(batch[-1]) + 1) % len(self.live)
        return batch

    # -- answering -----------------------------------------------------------------
    def serve(self, on_poll: Callable[[], object] | None = None) -> int:
        """Form one batch, run one forward pass, answer it; returns its number of requests."""
        batch = self.gather(on_poll)
        if not batch:
            return 0
        reqs = [self.inbox.take(p) for p in batch]  # gather's peers are ready
        t0 = time.perf_counter()
        if self.states is not None:  # every env from its own core state
            actions, logits, values, version = self.states.answer(self.policy, batch, reqs)
        else:
            obs = reqs[0]["obs"] if len(reqs) == 1 else \
                np.concatenate([r["obs"] for r in reqs])
            actions, logits, values, version = self.policy.forward(obs)
        t1 = time.perf_counter()
        batch_id = self.stats.batches  # batches answered before this one
        latency = 0.0
        row = 0
        for p, req in zip(batch, reqs, strict=True):
            n = req["obs"].shape[0]
            rep = self._replies[p]
            try:  # the previous reply to p has arrived (p asked again), so its buffer is free
                pending = self._sending[p]
                if pending is not None:
                    self.t.wait(pending)
            except PeerFailure as e:
                self._drop(p, e)
                row += n
                continue
            rep["actions"][:] = actions[row:row + n]
            rep["logits"][:] = logits[row:row + n]
            rep["values"][:] = values[row:row + n]
            rep["seq"][...] = req["seq"]
            rep["version"][...] = version
            rep["batch"][...] = batch_id
            rep["batch_size"][...] = len(batch)
            row += n
            if self.on_answer is not None:
                self.on_answer(p, req, rep)
            latency += time.perf_counter() - self._seen.pop(p)
            try:  # an actor may die between its request and our reply: drop it, go on
                self._sending[p] = self.t.isend(rep.buffer, p, self.tag_reply,
                                                "inference reply")
                self.inbox.release(p)
            except PeerFailure as e:
                self._drop(p, e)
        self.stats.record(len(batch), t1 - t0, latency)
        return len(batch)

    def drop_pending(self) -> int:
        """Release requests that arrived after STOP without answering them."""
        n = 0
        for p in self.ready():
            self._seen.pop(p, None)
            self.inbox.release(p)
            n += 1
        return n

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every reply sent has been taken by its actor (dead ones excepted)."""
        for p, req in list(self._sending.items()):
            if req is not None and p not in self.dead:
                try:
                    self.t.wait(req, timeout_s)
                except PeerFailure as e:
                    self._drop(p, e)


def inference_summary(server: InferenceServer | None, client: Any = None) -> dict[str, Any]:
    """summary.json's "inference" entry: batches, mean batch size and latency, dead actors
    (from the server, or from a :class:`~archzoo.actors.remote.LocalPolicyClient` in one
    process)."""
    if server is not None:
        return {**server.stats.summary(), "max_batch": server.max_batch,
                "max_wait_us": server.max_wait_s * 1e6, "dead_actors": server.dead}
    return {"batches": client.seq, "requests": client.seq, "mean_batch_size": 1.0,
            "mean_latency_ms": 1e3 * client.round_trip_s / max(1, client.seq)}
