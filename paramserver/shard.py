"""One parameter-server shard: a slice of the flat parameter vector, its optimizer state and
a version counter, served over the Transport.

The flat vector is split into K contiguous slices (:func:`shard_bounds`) held by K ranks, as in
Gorila's sharded parameter server (Nair et al. 2015, "Massively Parallel Methods for Deep
Reinforcement Learning"). Clients push gradients of the loss and pull parameters; every shard
counts its own versions (updates applied).

- async (A3C, Mnih et al. 2016, Algorithm S3): each gradient is applied as it arrives and
  answered with the fresh parameters. With a staleness bound S, a gradient computed on
  parameters more than S versions old is dropped and counted.
- sync (the chief of DPPO, Heess et al. 2017, "Emergence of Locomotion Behaviours in Rich
  Environments"): a round collects gradients computed on the current version until W − D of
  the W workers have pushed, sums them in ascending worker rank (in float64), divides by
  W − D and applies once. A gradient for a round already applied (one of the D late ones)
  is discarded and counted, and its worker is answered with the fresh parameters at once.

:class:`ShardState` is the rule without a transport (testable, usable in one process);
:class:`ParamShard` serves it without ever blocking, like ``archzoo.replay.server.ReplayServer``.

Protocol (per worker and shard: one request in flight, every request answered once):
push (tag ``push``: seq, the version the gradient was computed on, the gradient slice) or
request (tag ``request``: seq, PULL or BYE, the slice size the client expects); the reply
(tag ``reply``) carries the seq, the outcome, the shard's version and counters, and its
parameters. BYE is not answered; after it the worker is gone.

A worker that dies: under gloo its posted receives fail (PeerFailure) and the shard stops
listening to it. In async mode the others are served on. In sync mode a round still completes
by the W − D rule while enough workers live; once a round that workers wait on can no longer
gather W − D gradients (at the death, or at the next push if no round was open) the shard
raises PeerFailure naming the dead rank(s). Workers that said BYE are no error: a round they
leave hopeless is abandoned and its workers are answered. A silent worker (or an MPI peer,
whose death no receive reports) ends a sync round after ``round_timeout_s`` with PeerTimeout
naming the workers that did not push.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np

from archzoo.comm import Inbox, PeerFailure, PeerTimeout, Request, Schema, SchemaMismatch, Transport
from archzoo.paramserver.optim import FlatOptimizer, as_f32
from archzoo.runlog import VersionClock
from archzoo.tags import PSTags  # defined with every other tag; paramserver.PSTags is it


class Outcome(IntEnum):
    """What became of a request, as the reply says."""

    PULLED = 0     # a pull: here are the parameters
    APPLIED = 1    # the gradient went into an update (async: alone; sync: in its round)
    STALE = 2      # async: computed more than S versions ago; dropped
    LATE = 3       # sync: its round was already applied (one of the D late ones); discarded
    ABANDONED = 4  # sync: its round can never complete (workers left); discarded


PULL, BYE = 1, 2  # request kinds


@dataclass
class ShardStats:
    """A shard's counters. async: ``applied == pushed − dropped_stale`` and ``version`` counts
    applied gradients; sync: ``version`` counts rounds, each of W − D applied gradients, and
    ``pushed == applied + dropped_late + abandoned`` once no round is open."""

    version: int = 0
    pushed: int = 0
    applied: int = 0
    dropped_stale: int = 0
    dropped_late: int = 0
    abandoned: int = 0
    pulls: int = 0

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f) for f in STAT_FIELDS], dtype=np.int64)

    def as_dict(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in STAT_FIELDS}


STAT_FIELDS = tuple(f.name for f in fields(ShardStats))


def shard_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """K contiguous slices [lo, hi) of a flat vector of n; the first n mod K get one more."""
    if k < 1 or n < k:
        raise ValueError(f"cannot split {n} parameters into {k} shards")
    q, r = divmod(n, k)
    out, lo = [], 0
    for i in range(k):
        hi = lo + q + (1 if i < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def push_schema(n: int) -> Schema:
    """Worker -> shard: a gradient slice of the loss and the version it was computed on."""
    return Schema("ps_push", [("seq", np.int64, ()), ("version", np.int64, ()),
                              ("grad", np.float32, (n,))])


def request_schema() -> Schema:
    """Worker -> shard: PULL (answered with the parameters) or BYE (not answered)."""
    return Schema("ps_request", [("seq", np.int64, ()), ("kind", np.int64, ()),
                                 ("size", np.int64, ())])


def reply_schema(n: int) -> Schema:
    """Shard -> worker: the outcome of the request, the shard's version, counters, parameters."""
    return Schema("ps_reply", [("seq", np.int64, ()), ("outcome", np.int64, ()),
                               ("version", np.int64, ()),
                               ("stats", np.int64, (len(STAT_FIELDS),)),
                               ("params", np.float32, (n,))])


def ps_schemas(n: int) -> list[Schema]:
    """Every schema of a shard of n parameters (for the start-up digest exchange)."""
    return [push_schema(n), request_schema(), reply_schema(n)]


class Settled(NamedTuple):
    """A push that has its answer: reply ``outcome`` to ``worker`` for its request ``seq``."""

    worker: int
    seq: int
    outcome: Outcome


def average_gradients(total: np.ndarray, count: int, out: np.ndarray) -> np.ndarray:
    """The mean gradient of a synchronous round from the float64 sum of its ``count``
    float32 gradients: rounded once to float32, then divided by ``count`` in float32.

    The float64 sum of a few float32 gradients is exact unless their exponents are more than
    about 2^26 apart, so it does not depend on the order of the additions: the parameter
    server's rank-order sum and an all-reduce over any topology (A2C without a server) give
    the same mean, bit for bit (in the rare inexact case the two float64 sums differ in their
    last bit, which the rounding to float32 hides unless it sits on a tie)."""
    np.copyto(out, total, casting="same_kind")
    np.divide(out, np.float32(count), out=out)
    return out


class ShardState:
    """A shard's parameters, optimizer, version and update rule, without a transport.

    :meth:`push` takes one gradient and returns the pushes settled by it (in sync mode a
    round's worth at once, or nothing while the round waits; the caller must keep a held
    gradient's memory intact until its push is settled). :meth:`leave` takes a worker out.

    ``clock`` marks when each version came into being; ``on_push(worker, staleness,
    age_s)``, if set, hears of every gradient taken: its staleness (this shard's version
    when it arrived − the version it was computed on) and the age in seconds of the version
    it was computed on (None if forgotten).
    """

    def __init__(self, params: object, optimizer: FlatOptimizer, workers: Iterable[int],
                 mode: str = "async", drop: int = 0, staleness: int | None = None,
                 record: bool = False, rank: int = -1, version: int = 0) -> None:
        p = as_f32(params, "params")
        if p.ndim != 1 or p.size == 0:
            raise ValueError(f"params must be a non-empty flat vector, got shape {p.shape}")
        self.params = np.array(p, dtype=np.float32, copy=True)
        self.optimizer = optimizer
        self.workers = sorted(set(workers))
        if not self.workers:
            raise ValueError("a parameter shard needs at least one worker")
        if mode not in ("async", "sync"):
            raise ValueError(f"unknown mode {mode!r} (choose async or sync)")
        w = len(self.workers)
        if mode == "async" and drop:
            raise ValueError("drop (D) applies to sync mode only")
        if not 0 <= drop < w:
            raise ValueError(f"sync mode needs 0 <= D < W; got D={drop}, W={w}")
        if staleness is not None and (mode != "async" or staleness < 0):
            raise ValueError("the staleness bound S >= 0 applies to async mode only "
                             "(in sync mode every gradient of an old round is late)")
        self.mode, self.drop, self.staleness, self.rank = mode, drop, staleness, rank
        self.need = w - drop  # W − D
        self.stats = ShardStats(version=version)
        self.dead: set[int] = set()
        self.departed: set[int] = set()
        self.history: list[tuple[int, int, int, Outcome, int]] | None = [] if record else None
        self._round: dict[int, tuple[int, np.ndarray]] = {}  # worker -> (seq, grad view)
        self.round_started: float | None = None  # monotonic time of the round's first push
        self.clock = VersionClock(version)
        self.on_push: Callable[[int, int, float | None], None] | None = None
        self._acc = np.empty_like(self.params)
        self._total = np.empty(self.params.shape, np.float64)

    @property
    def version(self) -> int:
        return self.stats.version

    @property
    def size(self) -> int:
        return self.params.size

    def state_dict(self) -> dict[str, Any]:
        """Parameters, version and optimizer state: what a checkpoint keeps of the shard."""
        import torch

        return {"params": torch.from_numpy(self.params.copy()), "version": self.version,
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["params"].numel() != self.params.size:
            raise ValueError(f"a checkpoint of {state['params'].numel()} parameters for a "
                             f"shard of {self.params.size}")
        self.params[:] = state["params"].numpy()
        self.stats.version = int(state["version"])
        self.clock = VersionClock(self.stats.version)
        self.optimizer.load_state_dict(state["optimizer"])

    def active(self) -> list[int]:
        """Workers neither departed nor dead, in rank order."""
        return [w for w in self.workers if w not in self.dead and w not in self.departed]

    def in_round(self) -> list[int]:
        """Workers whose gradient for the open sync round is held, in rank order."""
        return sorted(self._round)

    def _log(self, worker: int, seq: int, grad_version: int, outcome: Outcome) -> None:
        if self.history is not None:
            self.history.append((worker, seq, grad_version, outcome, self.stats.version))

    def push(self, worker: int, grad_version: int, grad: np.ndarray,
             seq: int = -1) -> list[Settled]:
        """One gradient (of the loss) from ``worker``, computed on ``grad_version``."""
        if worker not in self.workers or worker in self.departed or worker in self.dead:
            raise ValueError(f"rank {self.rank}: push from rank {worker}, which is not an "
                             f"active worker of this shard")
        g = as_f32(grad, "grad")
        if g.shape != self.params.shape:
            raise ValueError(f"rank {self.rank}: gradient of shape {g.shape} from rank {worker}, "
                             f"this shard holds {self.params.shape}")
        v = self.stats.version
        if grad_version > v:
            raise ValueError(f"rank {self.rank}: rank {worker} pushed a gradient computed on "
                             f"version {grad_version}, ahead of this shard's version {v}")
        self.stats.pushed += 1
        if self.on_push is not None:
            self.on_push(worker, v - grad_version, self.clock.age(grad_version))
        if self.mode == "async":
            if self.staleness is not None and v - grad_version > self.staleness:
                self.stats.dropped_stale += 1
                outcome = Outcome.STALE
            else:
                self.optimizer.step(self.params, g)
                self.stats.version += 1
                self.clock.mark(self.stats.version)
                self.stats.applied += 1
                outcome = Outcome.APPLIED
            self._log(worker, seq, grad_version, outcome)
            return [Settled(worker, seq, outcome)]
        # sync
        if grad_version < v:
            self.stats.dropped_late += 1
            self._log(worker, seq, grad_version, Outcome.LATE)
            return [Settled(worker, seq, Outcome.LATE)]
        if worker in self._round:
            raise ValueError(f"rank {self.rank}: rank {worker} pushed twice in round {v}")
        if not self._round:
            self.round_started = time.monotonic()
        self._round[worker] = (seq, g)
        return self._resolve()

    def leave(self, worker: int, dead: bool = False) -> list[Settled]:
        """``worker`` said BYE (or died): stop counting on it. Raises PeerFailure naming the
        dead rank(s) when a sync round can no longer gather W − D gradients."""
        if worker in self.dead or worker in self.departed:
            return []
        if dead:
            self.dead.add(worker)
        else:
            if worker in self._round:
                raise ValueError(f"rank {self.rank}: rank {worker} said BYE with a push "
                                 f"unanswered")
            self.departed.add(worker)
        return self._resolve() if self.mode == "sync" else []

    def _resolve(self) -> list[Settled]:
        """Apply the round once it has W − D gradients; give it up if it never can. With no
        gradient held nobody waits, so departures alone (the end of a run) are no error: the
        next push then finds its round hopeless."""
        if not self._round:
            return []
        if len(self._round) >= self.need:
            return self._apply_round()
        possible = len(self._round) + sum(1 for w in self.active() if w not in self._round)
        if possible >= self.need:
            return []
        if self.dead:
            dead = sorted(self.dead)
            raise PeerFailure(
                self.rank, ",".join(map(str, dead)), f"sync round {self.stats.version}",
                f"the round needs W - D = {self.need} of {len(self.workers)} workers' gradients "
                f"and only {possible} can still arrive (dead: {dead}, departed: "
                f"{sorted(self.departed)})")
        out = []
        for w in sorted(self._round):
            seq, _ = self._round[w]
            self.stats.abandoned += 1
            self._log(w, seq, self.stats.version, Outcome.ABANDONED)
            out.append(Settled(w, seq, Outcome.ABANDONED))
        self._round.clear()
        self.round_started = None
        return out

    def _apply_round(self) -> list[Settled]:
        """Sum in float64 (ascending worker rank), :func:`average_gradients`, apply once."""
        used = sorted(self._round)
        total = self._total
        np.copyto(total, self._round[used[0]][1])
        for w in used[1:]:
            np.add(total, self._round[w][1], out=total)
        average_gradients(total, len(used), out=self._acc)
        self.optimizer.step(self.params, self._acc)
        v = self.stats.version
        self.stats.version += 1
        self.clock.mark(self.stats.version)
        self.stats.applied += len(used)
        out = []
        for w in used:
            seq, _ = self._round[w]
            self._log(w, seq, v, Outcome.APPLIED)
            out.append(Settled(w, seq, Outcome.APPLIED))
        self._round.clear()
        self.round_started = None
        return out


class ParamShard:
    """Serves one :class:`ShardState` to its workers over the Transport, never blocking.

    Call :meth:`serve` in the rank's loop (or :meth:`run`); it takes every arrived request
    and gradient, applies them by the mode's rule and starts the replies.
    """

    def __init__(self, transport: Transport, params: object, workers: Sequence[int],
                 optimizer: FlatOptimizer, tags: PSTags, *, mode: str = "async", drop: int = 0,
                 staleness: int | None = None, round_timeout_s: float | None = None,
                 record: bool = False) -> None:
        self.t, self.tags = transport, tags
        self.state = ShardState(params, optimizer, workers, mode, drop, staleness, record,
                                rank=transport.rank)
        n = self.state.size
        self.round_timeout_s = transport.timeout_s if round_timeout_s is None else round_timeout_s
        ws = self.state.workers
        self.pushes = Inbox(transport, push_schema(n), ws, tags.push, depth=1,
                            what="gradient push")
        self.requests = Inbox(transport, request_schema(), ws, tags.request, depth=2,
                              what="parameter request")
        rs = reply_schema(n)
        self._reply = {w: rs.new() for w in ws}
        self._sending: dict[int, Request] = {}
        self._held: set[int] = set()  # workers whose push message waits in its round
        self.failures: dict[int, str] = {}  # dead worker -> the error that showed it

    # -- views -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state)

    @property
    def params(self) -> np.ndarray:
        return self.state.params

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def stats(self) -> ShardStats:
        return self.state.stats

    @property
    def dead(self) -> list[int]:
        return sorted(self.state.dead)

    @property
    def finished(self) -> bool:
        """Every worker said BYE or died, and every reply has been taken."""
        self._reap()
        return not self.state.active() and not self._sending

    # -- serving -----------------------------------------------------------------------------
    def serve(self) -> bool:
        """One non-blocking pass over every active worker; True if anything happened."""
        did = self._reap()
        st = self.state
        for w in st.active():
            if w in st.dead:  # died during this pass (a failed reply)
                continue
            try:
                req = self.requests.poll(w)
            except PeerFailure as e:
                self._lost(w, e)
                continue
            if req is not None:
                did = True
                seq, kind, size = int(req["seq"]), int(req["kind"]), int(req["size"])
                if kind == BYE:  # not reposted: the worker sends nothing more (and may be gone)
                    self._settle(st.leave(w))
                    continue
                if not self._repost(self.requests, w):
                    continue
                if kind != PULL:
                    raise ValueError(f"rank {self.t.rank}: unknown request kind {kind} "
                                     f"from rank {w}")
                if size != st.size:
                    raise SchemaMismatch(f"rank {self.t.rank}: rank {w} expects a shard of "
                                         f"{size} parameters, this shard holds {st.size}")
                if w in self._held:
                    raise ValueError(f"rank {self.t.rank}: rank {w} pulled with its push "
                                     f"unanswered (one request in flight per worker)")
                st.stats.pulls += 1
                self._send(w, seq, Outcome.PULLED)
            if w in self._held or w in st.dead or w in st.departed:
                continue
            try:
                msg = self.pushes.poll(w)
            except PeerFailure as e:
                self._lost(w, e)
                continue
            if msg is not None:
                did = True
                settled = st.push(w, int(msg["version"]), msg["grad"], int(msg["seq"]))
                if all(s.worker != w for s in settled):
                    self._held.add(w)  # its gradient is a view into the posted buffer
                self._settle(settled)
        self._check_round_deadline()
        return did

    def run(self, timeout_s: float | None = None,
            should_stop: Callable[[], bool] | None = None) -> None:
        """Serve until every worker is gone (or ``should_stop()``), then flush the replies."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.finished:
            if should_stop is not None and should_stop():
                break
            if not self.serve():
                self.t.idle(2e-4)
            if timeout_s is not None and deadline is not None and time.monotonic() > deadline:
                active = ",".join(map(str, self.state.active())) or "-"
                raise PeerTimeout(self.t.rank, active, "BYE from the parameter server's "
                                  "workers", timeout_s)
        self.flush()

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every started reply was taken (dead workers' ones are dropped)."""
        for w, req in list(self._sending.items()):
            try:
                self.t.wait(req, timeout_s)
            except PeerFailure as e:
                self._lost(w, e)
            self._sending.pop(w, None)

    # -- internals ---------------------------------------------------------------------------
    def _reap(self) -> bool:
        did = False
        for w, req in list(self._sending.items()):
            try:
                done = req.test()
            except PeerFailure as e:
                self._sending.pop(w, None)
                self._lost(w, e)
                continue
            if done:
                self._sending.pop(w, None)
                did = True
        return did

    def _repost(self, inbox: Inbox, w: int) -> bool:
        """Release a consumed message (reposting its receive); False if the worker is gone."""
        try:
            inbox.release(w)
        except PeerFailure as e:
            self._lost(w, e)
            return False
        return True

    def _lost(self, w: int, err: BaseException) -> None:
        """A worker's stream broke: it left after BYE, or it died. A dead worker is no longer
        listened to; in sync mode its death may end the run."""
        if w in self.state.dead or w in self.state.departed:
            return
        if self._said_bye(w):
            self._settle(self.state.leave(w))
            return
        self.failures[w] = str(err)
        self._held.discard(w)  # its gradient (if held) stays in the round; its buffer is left
        self._sending.pop(w, None)
        self._settle(self.state.leave(w, dead=True))

    def _said_bye(self, w: int, grace_s: float = 5.0) -> bool:
        """Whether ``w``'s next request is a BYE. A worker exits once its BYE was taken, and
        under gloo its other posted receives may fail before the BYE's receive is flagged
        done (each stream has its own waiter thread), so let the request stream settle: a
        loaded machine may not run that thread for a second or more. A dead worker's stream
        fails at once and ends the wait."""
        deadline = time.monotonic() + grace_s
        while True:
            try:
                msg = self.requests.poll(w)
            except PeerFailure:
                return False
            if msg is not None:
                return int(msg["kind"]) == BYE  # not released: nobody will send again
            if time.monotonic() > deadline:
                return False
            time.sleep(1e-4)

    def _settle(self, settled: list[Settled]) -> None:
        for s in settled:
            if s.worker in self.state.dead:
                self._held.discard(s.worker)
                continue
            self._held.discard(s.worker)
            if self._repost(self.pushes, s.worker):
                self._send(s.worker, s.seq, s.outcome)

    def _send(self, w: int, seq: int, outcome: Outcome) -> None:
        prev = self._sending.pop(w, None)
        try:
            if prev is not None:  # the worker took it before asking again: completes at once
                self.t.wait(prev)
            msg = self._reply[w]
            msg["seq"][...] = seq
            msg["outcome"][...] = int(outcome)
            msg["version"][...] = self.state.version
            msg["stats"][...] = self.state.stats.as_array()
            np.copyto(msg["params"], self.state.params)
            self._sending[w] = self.t.isend(msg.buffer, w, self.tags.reply, "parameters")
        except PeerFailure as e:
            self._lost(w, e)

    def _check_round_deadline(self) -> None:
        st = self.state
        if st.round_started is None or time.monotonic() - st.round_started <= self.round_timeout_s:
            return
        missing = [w for w in st.active() if w not in st.in_round()]
        raise PeerTimeout(self.t.rank, ",".join(map(str, missing)) or "-",
                          f"a gradient for sync round {st.version} (have "
                          f"{len(st.in_round())} of W - D = {st.need})", self.round_timeout_s)
