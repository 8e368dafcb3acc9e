"""Explicit collective schedules over a Transport (docs/topologies.md describes each one).

A :class:`Topology` turns a collective (broadcast, reduce, all-reduce, gather, gossip-average)
into a fixed schedule of point-to-point messages over the :class:`~archzoo.comm.base.Transport`,
so that messages and rounds can be counted and checked against the formulas in
:mod:`archzoo.topology.counts`. Conventions shared by every schedule:

- Synchronous: every rank calls the same collectives in the same order; a call returns when
  this rank's part of the schedule is done (its receives arrived and its sends completed).
- A *round* is one step of the schedule in which this rank sends and/or receives;
  :attr:`Topology.rounds` counts them, cumulatively. In a step the receives are posted before
  the sends (gloo is a rendezvous), then all of them are awaited with the transport's deadline,
  so a dead or silent peer raises an error that names it.
- One tag per topology instance; messages between two ranks on one tag arrive in order, and
  every message is sent and received in the same global round, so the schedule cannot deadlock.
- Arrays of any shape and dtype travel as their flat contiguous bytes (a non-contiguous array
  is worked on as a contiguous copy and written back). Reductions: ``"sum"`` and ``"mean"``
  (sum, then one division by N where a single rank holds the total, so every rank ends with
  bitwise the same result); ``"mean"`` needs a floating-point array.
- ``reduce`` leaves the arrays of the non-root ranks unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from archzoo.comm.base import Transport
from archzoo.tags import TAG_COLLECTIVE_DEFAULT

OPS = ("sum", "mean")


def ceil_log(n: int, m: int) -> int:
    """⌈log_m n⌉ in integers (0 for n ≤ 1): the rounds of a radix-m tree over n ranks."""
    k, p = 0, 1
    while p < n:
        p *= m
        k += 1
    return k


def floor_log(n: int, m: int) -> int:
    """⌊log_m n⌋ for n ≥ 1: m**floor_log(n, m) is the largest power of m ≤ n."""
    k, p = 0, m
    while p <= n:
        p *= m
        k += 1
    return k


def check_fanout(fanout: int) -> int:
    """A fan-out (tree) or radix (butterfly) must be an integer ≥ 2."""
    if isinstance(fanout, bool) or not isinstance(fanout, (int, np.integer)) or fanout < 2:
        raise ValueError(f"fanout must be an integer >= 2 (each round a rank sends to m-1 >= 1 "
                         f"new ranks), got {fanout!r}")
    return int(fanout)


class Topology(ABC):
    """Who talks to whom, and in what order: one schedule per collective.

    Subclasses implement the ``_``-prefixed methods on a flat, C-contiguous view; the public
    methods validate the arguments (identically on every rank, before any message) and handle
    shapes. ``fanout`` is the tree's fan-out / butterfly's radix m (validated for every kind,
    used by tree and butterfly); ``tag`` is the one tag this instance sends on.
    """

    name: str = "?"

    def __init__(self, transport: Transport, fanout: int = 2,
                 tag: int = TAG_COLLECTIVE_DEFAULT) -> None:
        self.fanout = check_fanout(fanout)
        self.transport = transport
        self.tag = int(tag)
        self.rank = transport.rank
        self.size = transport.world_size
        self.rounds = 0

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, size={self.size}, "
                f"fanout={self.fanout}, tag={self.tag})")

    # -- public collectives ---------------------------------------------------------------------
    def broadcast(self, array: np.ndarray, root: int) -> None:
        """Copy ``array`` of ``root`` into ``array`` of every rank, in place."""
        self._check_root(root)
        with _flat(array) as flat:
            self._broadcast(flat, root)

    def reduce(self, array: np.ndarray, root: int, op: str = "sum") -> None:
        """Sum (or mean) of every rank's ``array``, in place at ``root``; others unchanged."""
        self._check_root(root)
        _check_op(op, array)
        with _flat(array) as flat:
            self._reduce(flat, root, op == "mean")

    def all_reduce(self, array: np.ndarray, op: str = "sum") -> None:
        """Sum (or mean) of every rank's ``array``, in place on every rank."""
        _check_op(op, array)
        with _flat(array) as flat:
            self._all_reduce(flat, op == "mean")

    def gather(self, array: np.ndarray, root: int) -> np.ndarray | None:
        """``[N, *array.shape]`` of every rank's ``array`` in rank order at ``root``, else None."""
        self._check_root(root)
        src = np.ascontiguousarray(array).reshape(-1)
        out = self._gather(src, root)
        if out is None:
            return None
        return out.reshape((self.size, *np.shape(array)))

    def gossip_average(self, array: np.ndarray) -> None:
        """One synchronous round of neighbour averaging, in place (ring only)."""
        if not np.issubdtype(np.asarray(array).dtype, np.inexact):
            raise ValueError(f"gossip_average needs a floating-point array, got {array.dtype}")
        with _flat(array) as flat:
            self._gossip_average(flat)

    # -- schedules ------------------------------------------------------------------------------
    @abstractmethod
    def _broadcast(self, flat: np.ndarray, root: int) -> None: ...

    @abstractmethod
    def _reduce(self, flat: np.ndarray, root: int, mean: bool) -> None: ...

    @abstractmethod
    def _all_reduce(self, flat: np.ndarray, mean: bool) -> None: ...

    @abstractmethod
    def _gather(self, flat: np.ndarray, root: int) -> np.ndarray | None:
        """Return a ``[N, flat.size]`` array in rank order at root, None elsewhere."""

    def _gossip_average(self, flat: np.ndarray) -> None:
        raise NotImplementedError(f"{self.name}: gossip averaging is defined on the ring "
                                  f"topology only (GALA, Assran et al. 2019)")

    # -- helpers for subclasses -----------------------------------------------------------------
    def _step(self, what: str, recvs: Sequence[tuple[np.ndarray, int]] = (),
              sends: Sequence[tuple[np.ndarray, int]] = ()) -> None:
        """One round: post ``recvs`` (buffer, source), then ``sends`` (buffer, destination),
        wait for all with the transport's deadline. Counts a round if anything moved."""
        if not recvs and not sends:
            return
        t = self.transport
        label = f"{self.name} {what}"
        reqs = [t.irecv(buf, peer, self.tag, label) for buf, peer in recvs]
        reqs += [t.isend(buf, peer, self.tag, label) for buf, peer in sends]
        for req in reqs:
            t.wait(req)
        self.rounds += 1

    def _check_root(self, root: int) -> None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
                or not 0 <= root < self.size:
            raise ValueError(f"root must be a rank in [0, {self.size}), got {root!r}")


def _check_op(op: str, array: np.ndarray) -> None:
    if op not in OPS:
        raise ValueError(f"unknown reduction {op!r} (choose one of {', '.join(OPS)})")
    if op == "mean" and not np.issubdtype(np.asarray(array).dtype, np.inexact):
        raise ValueError(f"op 'mean' needs a floating-point array, got {array.dtype}")


@contextmanager
def _flat(array: np.ndarray) -> Iterator[np.ndarray]:
    """A flat C-contiguous view of ``array``; a contiguous copy written back if it has none."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected a numpy array, got {type(array).__name__}")
    if not array.flags.writeable:
        raise ValueError("collectives work in place: the array must be writeable")
    if array.flags.c_contiguous:
        yield array.reshape(-1)
        return
    work = np.ascontiguousarray(array)
    yield work.reshape(-1)
    array[...] = work


def divide(flat: np.ndarray, n: int) -> None:
    """In-place ``flat /= n`` (the mean's single division, done where one rank holds the sum)."""
    np.divide(flat, n, out=flat, casting="unsafe")
