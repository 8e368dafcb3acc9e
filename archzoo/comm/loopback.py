"""An in-process engine: the ranks of a group are threads of one process (or one thread that
drives several transports in turn), so that role and protocol tests run without processes.

:class:`LoopbackGroup` makes ``n`` :class:`LoopbackTransport` objects that meet under one
lock. It keeps the contract of the engines (docs/index.md, "The Transport contract"):

- a send is matched with the oldest receive its destination posted for the same source and
  tag, so messages from one peer on one tag arrive in order, and a receive takes a message
  of exactly its buffer's size (anything else fails both sides with :class:`CommError`);
- a ``synchronous`` send completes once its receive is posted (gloo's rendezvous, every
  send with ``rendezvous=True``); any other send copies its buffer and completes at once
  (MPI's eager protocol);
- a rank that is gone (:meth:`LoopbackGroup.kill`, :meth:`LoopbackTransport.shutdown`, or
  the end of its thread under :meth:`LoopbackGroup.start`) fails every pending and later
  operation with it, collectives included, with :class:`PeerFailure` naming it; a message
  it sent before it went stays receivable;
- every wait has the deadline of :meth:`Transport.wait`, read on the group's clock: real
  time, or a :class:`ManualClock` that moves only when a test :meth:`~ManualClock.advance`\\ s
  it, so a deadline passes without anyone sleeping (:meth:`LoopbackGroup.settle` returns
  once a rank has looked at the clock again).

Only the transport's own waits read the clock (``wait``, ``wait_any``, and what is built on
them: ``recv``, ``barrier``, ``Inbox.recv_from``, ``ControlChannel.recv_from`` and ``flush``);
loops that keep their own deadlines on the wall clock keep them. For tests and in-process
use; not a ``--backend``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from archzoo.comm.base import DEFAULT_TIMEOUT_S, Request, Transport, as_bytes
from archzoo.comm.errors import CommError, PeerFailure

T = TypeVar("T")


class ManualClock:
    """A clock that stands still until :meth:`advance` moves it (seconds, from ``start``)."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        """Move the clock on by ``seconds`` (>= 0); returns the new time."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        with self._lock:
            self._t += seconds
            return self._t


class RealClock:
    """The engines' clock: ``time.perf_counter``."""

    @staticmethod
    def now() -> float:
        return time.perf_counter()


class Killed(CommError):
    """An operation of a rank that is gone (killed, shut down, or its thread ended)."""


class LoopbackRequest(Request):
    __slots__ = ("peer", "what", "direction", "nbytes", "_done", "_error", "_owner",
                 "_counted")

    def __init__(self, owner: LoopbackTransport, peer: Any, what: str, direction: str,
                 nbytes: int, counted: bool = False) -> None:
        self._owner = owner
        self.peer, self.what, self.direction, self.nbytes = peer, what, direction, nbytes
        self._done = False
        self._error: BaseException | None = None
        self._counted = counted  # a receive counts into the counters once, when tested

    def _finish(self, error: BaseException | None = None) -> None:
        """Complete (or fail) the request; called under the group's lock."""
        if self._done:
            return
        self._error = error  # before _done: a test() that sees _done sees the error too
        self._done = True
        self._owner._progress.set()

    def test(self) -> bool:
        if not self._done:
            return False
        if self._error is not None:
            raise self._error
        if not self._counted:
            self._counted = True
            self._owner.counters.received(self.peer, self.nbytes)
        return True

    def cancel(self) -> None:
        """Withdraw a receive not yet matched (as MPI can)."""
        self._owner.group._withdraw(self)


@dataclass
class _Send:
    req: LoopbackRequest
    data: np.ndarray  # the sender's bytes (a copy for an eager send)


@dataclass
class _Recv:
    req: LoopbackRequest
    buf: np.ndarray


@dataclass
class _Collective:
    kind: str
    root: int
    op: str
    parts: dict[int, tuple[np.ndarray, LoopbackRequest]]


_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class LoopbackTransport(Transport):
    """One rank of a :class:`LoopbackGroup`."""

    backend = "loopback"

    def __init__(self, group: LoopbackGroup, rank: int, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self.group, self.rank, self.world_size = group, rank, group.world_size
        self._progress = threading.Event()  # set when one of this rank's requests settles
        self.polls = 0  # idle pauses so far: how LoopbackGroup.settle sees a rank wait

    def now(self) -> float:
        return self.group.clock.now()

    def idle(self, seconds: float) -> None:
        """Pause until one of this rank's requests settles, or ``seconds`` of real time
        pass (a request's flag is set before the event, so clearing loses nothing)."""
        self.polls += 1
        self._progress.wait(seconds)
        self._progress.clear()

    def isend(self, buf: np.ndarray, dst: int, tag: int, what: str = "message",
              synchronous: bool = False) -> LoopbackRequest:
        self._check_peer(dst)
        b = as_bytes(buf)
        req = LoopbackRequest(self, dst, what, "to", b.nbytes, counted=True)
        self.counters.sent(dst, b.nbytes)
        self.group._send(self.rank, dst, tag, b, req,
                         synchronous or self.group.rendezvous)
        return req

    def irecv(self, buf: np.ndarray, src: int, tag: int, what: str = "message") -> LoopbackRequest:
        self._check_peer(src)
        b = as_bytes(buf)
        req = LoopbackRequest(self, src, what, "from", b.nbytes)
        self.group._recv(src, self.rank, tag, b, req)
        return req

    def _ibarrier(self) -> LoopbackRequest:
        return self.group._collective(self, "barrier", np.zeros(0, np.uint8), 0, "")

    def _iallreduce(self, array: np.ndarray, op: str) -> LoopbackRequest:
        return self.group._collective(self, "all-reduce", array, 0, op)

    def _ibroadcast(self, array: np.ndarray, root: int) -> LoopbackRequest:
        return self.group._collective(self, "broadcast", array, root, "")

    def shutdown(self) -> None:
        """Leave the group: the peers' pending operations with this rank fail."""
        self.group.kill(self.rank, "it left the group")


class RankThread(threading.Thread, Generic[T]):
    """One rank's role in a thread; when it ends, the rank is gone (as a process that
    exits), with the role's value or the exception that ended it."""

    def __init__(self, group: LoopbackGroup, rank: int,
                 role: Callable[[LoopbackTransport], T]) -> None:
        super().__init__(name=f"loopback-rank-{rank}", daemon=True)
        self.group, self.rank, self.role = group, rank, role
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        why = "its thread ended"
        try:
            self.value = self.role(self.group.transports[self.rank])
        except BaseException as e:  # noqa: BLE001 - kept for result(), as a process's exit
            self.error = e
            why = f"its thread ended with {type(e).__name__}: {str(e)[:120]}"
        finally:
            self.group.kill(self.rank, why)

    def result(self, timeout_s: float = 30.0) -> T:
        """The role's value once it ends (its exception re-raised); TimeoutError if it is
        still running after ``timeout_s`` seconds of real time."""
        self.join(timeout_s)
        if self.is_alive():
            raise TimeoutError(f"rank {self.rank} still running after {timeout_s:g}s")
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]

    def failure(self, timeout_s: float = 30.0) -> BaseException:
        """The exception that ended the role (AssertionError if it ended without one)."""
        self.join(timeout_s)
        if self.is_alive():
            raise TimeoutError(f"rank {self.rank} still running after {timeout_s:g}s")
        if self.error is None:
            raise AssertionError(f"rank {self.rank} ended without an error: {self.value!r}")
        return self.error


class LoopbackGroup:
    """``world_size`` ranks in this process: ``transports[r]`` is rank r's Transport.

    ``clock``: what deadlines read (default :class:`RealClock`; a :class:`ManualClock` to
    drive them); ``rendezvous``: every send completes only once its receive is posted, as on
    gloo (default: only ``synchronous`` sends, as on MPI)."""

    def __init__(self, world_size: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 clock: ManualClock | RealClock | None = None, rendezvous: bool = False) -> None:
        if world_size < 1:
            raise ValueError(f"a loopback group needs at least one rank, not {world_size}")
        self.world_size = world_size
        self.clock = clock if clock is not None else RealClock()
        self.rendezvous = rendezvous
        self._lock = threading.Lock()
        # (src, dst, tag) -> sends not yet received / receives not yet matched, oldest first
        self._sends: dict[tuple[int, int, int], deque[_Send]] = defaultdict(deque)
        self._recvs: dict[tuple[int, int, int], deque[_Recv]] = defaultdict(deque)
        self._collectives: dict[int, _Collective] = {}
        self._calls = [0] * world_size  # collectives each rank has started
        self.gone: dict[int, str] = {}  # rank -> why it is gone
        self.transports = [LoopbackTransport(self, r, timeout_s) for r in range(world_size)]
        self.threads: dict[int, RankThread] = {}

    # -- running ranks --------------------------------------------------------------------
    def start(self, rank: int, role: Callable[[LoopbackTransport], T]) -> RankThread[T]:
        """Run ``role(transports[rank])`` in a thread of its own."""
        if rank in self.threads:
            raise ValueError(f"rank {rank} already runs")
        th = self.threads[rank] = RankThread(self, rank, role)
        th.start()
        return th

    def run(self, roles: Mapping[int, Callable[[LoopbackTransport], Any]],
            timeout_s: float = 30.0) -> dict[int, Any]:
        """Start every role, wait for all of them; their values by rank. The first role that
        raised is re-raised (after all ended); TimeoutError names the ranks still running."""
        threads = [self.start(r, role) for r, role in roles.items()]
        deadline = time.monotonic() + timeout_s
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        running = [th.rank for th in threads if th.is_alive()]
        if running:
            raise TimeoutError(f"ranks {running} still running after {timeout_s:g}s")
        for th in threads:
            if th.error is not None:
                raise th.error
        return {th.rank: th.value for th in threads}

    def settle(self, *ranks: int, timeout_s: float = 10.0) -> None:
        """Return once each of ``ranks`` has paused twice more in a wait since this call, so
        it read the clock again after anything done before the call (an
        :meth:`~ManualClock.advance`); TimeoutError if a rank ends or never waits."""
        want = {r: self.transports[r].polls + 2 for r in ranks}
        deadline = time.monotonic() + timeout_s
        while True:
            short = [r for r, n in want.items() if self.transports[r].polls < n]
            if not short:
                return
            ended = [r for r in short if r in self.threads and not self.threads[r].is_alive()]
            if ended or time.monotonic() > deadline:
                raise TimeoutError(f"ranks {short} are not waiting"
                                   + (f" (ranks {ended} ended)" if ended else ""))
            time.sleep(1e-4)

    def kill(self, rank: int, why: str = "killed") -> None:
        """Rank ``rank`` is gone: what its peers have pending with it fails, naming it; what
        it sent eagerly stays receivable; its own pending operations fail with
        :class:`Killed`."""
        with self._lock:
            if rank in self.gone:
                return
            self.gone[rank] = why
            for (src, dst, _), q in self._sends.items():
                if rank not in (src, dst):
                    continue
                for s in q:  # a rendezvous send never taken fails; eager ones are complete
                    s.req._finish(self._failure(s.req, src, dst))
                kept = [s for s in q if s.req._error is None and dst != rank]
                q.clear()
                q.extend(kept)
            for (src, dst, _), posted in self._recvs.items():
                if rank in (src, dst):
                    while posted:
                        recv = posted.popleft()
                        recv.req._finish(self._failure(recv.req, dst, src))
            for k, c in list(self._collectives.items()):
                for r, (_, req) in c.parts.items():
                    req._finish(self._failure(req, r, rank))
                del self._collectives[k]

    def _failure(self, req: LoopbackRequest, me: int, peer: int) -> CommError:
        """Why ``req`` of rank ``me`` with ``peer`` fails (one of them is gone)."""
        if me in self.gone:
            return Killed(f"rank {me}: this rank is gone ({self.gone[me]})")
        return PeerFailure(me, peer, req.what, self.gone[peer])

    # -- matching (under the lock) --------------------------------------------------------
    def _send(self, src: int, dst: int, tag: int, data: np.ndarray, req: LoopbackRequest,
              synchronous: bool) -> None:
        with self._lock:
            if src in self.gone or dst in self.gone:
                req._finish(self._failure(req, src, dst))
                return
            posted = self._recvs.get((src, dst, tag))
            if posted:
                self._match(src, dst, tag, _Send(req, data), posted.popleft())
                return
            if not synchronous:
                data = data.copy()
                req._finish()  # eager: the bytes are copied, the buffer is free again
            self._sends[(src, dst, tag)].append(_Send(req, data))

    def _recv(self, src: int, dst: int, tag: int, buf: np.ndarray,
              req: LoopbackRequest) -> None:
        with self._lock:
            waiting = self._sends.get((src, dst, tag))
            if dst in self.gone or (src in self.gone and not waiting):
                req._finish(self._failure(req, dst, src))
            elif waiting:
                self._match(src, dst, tag, waiting.popleft(), _Recv(req, buf))
            else:
                self._recvs[(src, dst, tag)].append(_Recv(req, buf))

    @staticmethod
    def _match(src: int, dst: int, tag: int, s: _Send, r: _Recv) -> None:
        if s.data.nbytes != r.buf.nbytes:
            e = CommError(f"rank {dst}: a {s.data.nbytes} B message from rank {src} (tag "
                          f"{tag}) for a receive of {r.buf.nbytes} B ({r.req.what})")
            r.req._finish(e)
            s.req._finish(e)
            return
        r.buf[...] = s.data
        r.req._finish()
        s.req._finish()

    def _withdraw(self, req: LoopbackRequest) -> None:
        with self._lock:
            for q in self._recvs.values():
                for r in q:
                    if r.req is req:  # complete, counting nothing, as MPI's cancel
                        q.remove(r)
                        req._counted = True
                        req._finish()
                        return

    def _collective(self, t: LoopbackTransport, kind: str, array: np.ndarray, root: int,
                    op: str) -> LoopbackRequest:
        peer: Any = root if kind == "broadcast" else "any"
        req = LoopbackRequest(t, peer, kind, "from", array.nbytes, counted=True)
        with self._lock:
            k = self._calls[t.rank]
            self._calls[t.rank] += 1
            if self.gone:  # a collective needs every rank
                req._finish(self._failure(req, t.rank, min(self.gone)))
                return req
            c = self._collectives.setdefault(k, _Collective(kind, root, op, {}))
            if (c.kind, c.root, c.op) != (kind, root, op):
                e = CommError(f"rank {t.rank}: collective #{k} is {kind}{op and ' ' + op} "
                              f"here, {c.kind}{c.op and ' ' + c.op} on another rank")
                for _, other in c.parts.values():
                    other._finish(e)
                del self._collectives[k]
                req._finish(e)
                return req
            c.parts[t.rank] = (array, req)
            if len(c.parts) == self.world_size:
                del self._collectives[k]
                arrays = [c.parts[r][0] for r in range(self.world_size)]
                if kind == "all-reduce":
                    out = arrays[0].copy()
                    for a in arrays[1:]:
                        _REDUCE[op](out, a, out=out)
                elif kind == "broadcast":
                    out = arrays[root].copy()
                for a, done in c.parts.values():
                    if kind != "barrier":
                        a[...] = out
                    done._finish()
        return req
