"""The transport interface every architecture talks to (docs/index.md, "The Transport contract").

Point-to-point with tags and non-blocking requests, receive from any of a set
of peers, barrier, and the engine's native collectives as a baseline. Every wait
polls with a short spin then a growing sleep (MPICH spins a core when blocked;
this machine has two) and has a deadline after which it raises
:class:`~archzoo.comm.errors.PeerTimeout` naming the peer.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from archzoo.comm.errors import PeerTimeout
from archzoo.records import ByteTotals

DEFAULT_TIMEOUT_S = 60.0


class Request(ABC):
    """A pending non-blocking send or receive."""

    peer: int
    what: str
    direction: str = "from"  # "from" for receives, "to" for sends (for error messages)

    @abstractmethod
    def test(self) -> bool:
        """True once complete; raises PeerFailure if the peer broke it."""

    def cancel(self) -> None:  # noqa: B027 - optional for engines that can cancel
        """Best effort: withdraw a receive that will never be matched."""


@dataclass
class Counters:
    """Messages and bytes per peer, the raw data of topology studies."""

    msgs_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    bytes_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    msgs_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    bytes_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    last_heard: dict[int, float] = field(default_factory=dict)  # peer -> time.monotonic()

    def sent(self, peer: int, nbytes: int) -> None:
        self.msgs_sent[peer] += 1
        self.bytes_sent[peer] += nbytes

    def received(self, peer: int, nbytes: int) -> None:
        self.msgs_recv[peer] += 1
        self.bytes_recv[peer] += nbytes
        self.last_heard[peer] = time.monotonic()

    def totals(self) -> ByteTotals:
        return {
            "msgs_sent": sum(self.msgs_sent.values()),
            "bytes_sent": sum(self.bytes_sent.values()),
            "msgs_recv": sum(self.msgs_recv.values()),
            "bytes_recv": sum(self.bytes_recv.values()),
        }


class Backoff:
    """Spin for ``spin_s`` (50 µs), then sleep between polls, doubling up to 1 ms.

    Spinning is time-bounded, not count-bounded: a poll costs well under a microsecond,
    while ``time.sleep`` here never sleeps less than ~70 µs. On a 2-core machine running
    three processes, a waiter that kept spinning would steal the core its peer needs.
    """

    __slots__ = ("_t0", "_sleep", "_idle", "_spin_s", "_max_sleep_s")

    def __init__(self, idle: Callable[[float], None] = time.sleep, spin_s: float = 50e-6,
                 max_sleep_s: float = 1e-3) -> None:
        self._t0 = time.perf_counter()
        self._sleep = 2.5e-5
        self._idle = idle  # sleeps at most its argument; may return early on progress
        self._spin_s = spin_s
        self._max_sleep_s = max_sleep_s

    def reset(self) -> None:
        """Progress was made: spin again before sleeping."""
        self._t0 = time.perf_counter()
        self._sleep = 2.5e-5

    def pause(self) -> None:
        if time.perf_counter() - self._t0 < self._spin_s:
            return
        self._idle(self._sleep)
        self._sleep = min(self._max_sleep_s, self._sleep * 2)


class Transport(ABC):
    """One engine's point-to-point and collective operations over flat uint8 buffers."""

    backend: str
    rank: int
    world_size: int
    spin_s: float = 50e-6  # how long a wait polls flat out before it starts to sleep

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.counters = Counters()
        self.wait_s = 0.0  # time spent blocked in waits: the "wait" of the time breakdown

    def idle(self, seconds: float) -> None:
        """Pause between polls; an engine that learns of progress may return early."""
        time.sleep(seconds)

    def now(self) -> float:
        """The clock that deadlines read, in seconds (``time.perf_counter``; the loopback
        engine's may be driven by a test)."""
        return time.perf_counter()

    # -- engine primitives -------------------------------------------------
    @abstractmethod
    def isend(self, buf: np.ndarray, dst: int, tag: int, what: str = "message",
              synchronous: bool = False) -> Request:
        """Start sending ``buf`` (contiguous, kept alive and unmodified until complete).

        ``synchronous``: the send completes only once ``dst`` has posted the matching
        receive (gloo's sends always do; MPI otherwise completes small sends eagerly, before
        the receiver asked). Latest-wins publishers need it to know a peer took a message."""

    @abstractmethod
    def irecv(self, buf: np.ndarray, src: int, tag: int, what: str = "message") -> Request:
        """Post a receive of exactly ``buf.nbytes`` bytes from ``src`` with ``tag``."""

    @abstractmethod
    def _ibarrier(self) -> Request: ...

    @abstractmethod
    def _iallreduce(self, array: np.ndarray, op: str) -> Request: ...

    @abstractmethod
    def _ibroadcast(self, array: np.ndarray, root: int) -> Request: ...

    @abstractmethod
    def shutdown(self) -> None:
        """Leave the group. Called once, after the final barrier."""

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"rank {self.rank}: bad peer rank {peer} "
                             f"(world size {self.world_size})")

    # -- waiting -----------------------------------------------------------
    def wait(self, req: Request, timeout_s: float | None = None,
             on_poll: Callable[[], object] | None = None, spin_s: float | None = None,
             max_sleep_s: float = 1e-3) -> None:
        """Wait for ``req`` with a deadline; ``on_poll`` runs between polls (e.g. check STOP).

        ``spin_s`` (default: the engine's) and ``max_sleep_s`` shape the :class:`Backoff`: a
        process that waits on every step and shares its core (a SEED actor) spins less.
        """
        if req.test():
            return
        t0 = self.now()
        deadline = t0 + (self.timeout_s if timeout_s is None else timeout_s)
        backoff = Backoff(self.idle, self.spin_s if spin_s is None else spin_s, max_sleep_s)
        try:
            while not req.test():
                if on_poll is not None:
                    on_poll()
                if self.now() >= deadline:  # a deadline that has come: a stopped clock too
                    raise PeerTimeout(self.rank, req.peer, req.what, deadline - t0,
                                      getattr(req, "direction", "from"))
                backoff.pause()
        finally:
            self.wait_s += self.now() - t0

    def wait_any(self, reqs: Sequence[Request], timeout_s: float | None = None) -> int:
        """Index of the first completed request among ``reqs`` (polled in order)."""
        if not reqs:
            raise ValueError("wait_any needs at least one request")
        t0 = self.now()
        deadline = t0 + (self.timeout_s if timeout_s is None else timeout_s)
        backoff = Backoff(self.idle, self.spin_s)
        try:
            while True:
                for i, r in enumerate(reqs):
                    if r.test():
                        return i
                if self.now() >= deadline:
                    peers = ",".join(str(r.peer) for r in reqs)
                    whats = sorted({r.what for r in reqs})
                    raise PeerTimeout(self.rank, peers, " or ".join(whats), deadline - t0)
                backoff.pause()
        finally:
            self.wait_s += self.now() - t0

    # -- blocking conveniences (always with a deadline) ---------------------
    def send(self, buf: np.ndarray, dst: int, tag: int, what: str = "message",
             timeout_s: float | None = None) -> None:
        self.wait(self.isend(buf, dst, tag, what), timeout_s)

    def recv(self, buf: np.ndarray, src: int, tag: int, what: str = "message",
             timeout_s: float | None = None) -> None:
        """Blocking receive with a deadline. On timeout the receive is withdrawn where the
        engine can (MPI); gloo cannot, so after a PeerTimeout on gloo that stream is dead
        (archzoo treats every timeout as fatal for the run)."""
        req = self.irecv(buf, src, tag, what)
        try:
            self.wait(req, timeout_s)
        except PeerTimeout:
            req.cancel()
            raise

    def barrier(self, timeout_s: float | None = None) -> None:
        self.wait(self._ibarrier(), timeout_s)

    # -- native collectives: the baseline topologies are measured against ---
    def all_reduce(self, array: np.ndarray, op: str = "sum",
                   timeout_s: float | None = None) -> None:
        """In-place all-reduce with the engine's own algorithm (``op``: sum, max, min)."""
        if op not in ("sum", "max", "min"):
            raise ValueError(f"unknown reduction {op!r}")
        self.wait(self._iallreduce(array, op), timeout_s)

    def broadcast(self, array: np.ndarray, root: int, timeout_s: float | None = None) -> None:
        """In-place broadcast from ``root`` with the engine's own algorithm."""
        self.wait(self._ibroadcast(array, root), timeout_s)


def as_bytes(buf: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (no copy)."""
    if not buf.flags.c_contiguous:
        raise ValueError("transport buffers must be C-contiguous")
    return buf.reshape(-1).view(np.uint8)
