"""Asynchronous broadcast over the k-nomial tree, never blocking.

The k-nomial tree with fan-out m (docs/topologies.md) run asynchronously: the same
tree as :class:`~archzoo.topology.tree.TreeTopology` — relative ranks ``v = (rank − root) mod N``,
the parent of v > 0 is ``v − v mod m^(L+1)`` with L the position of v's lowest non-zero base-m
digit, and v's children are ``v + j·m^k < N`` for k < L, j = 1..m−1 (:func:`tree_links`) — but
without the synchronous schedule: every rank drives its part from its own loop by calling
``poll()`` (like :meth:`StarPublisher.pump <archzoo.topology.star.StarPublisher.pump>`), which
never blocks. Receives stay posted (:class:`~archzoo.comm.inbox.Inbox`: gloo is a rendezvous)
and a rank never waits for a peer except in :meth:`finish`, whose deadline names the peer.

Flow control: one data message per tree edge is outstanding at a time. The receiver answers
each data message it takes with a small cumulative *ack* on the same tag (the reverse
direction of an edge carries only acks), and the sender sends the next data message only once
the previous one is acknowledged and its send completed (:class:`_Sender` and
:class:`_Acker`, the two ends of an edge). Without this, MPI's eager protocol would complete
every small send at once and a slow rank would queue every version in MPI's
unexpected-message buffers instead of skipping them; with it, both engines behave alike: a
slow subtree skips versions. Ack messages are counted apart (``acks_sent``), never as data
messages.

:class:`AsyncTreeBroadcast` — the root publishes versions (IMPALA's parameters) at its own pace;
a relay forwards the newest version it holds to each child that has taken the previous one, so
a slow subtree skips versions instead of queueing them (latest-wins, as StarPublisher does for the
star). Per rank: messages sent/received, versions received and skipped, and the *age* of each
version at receipt, ``root version − received version`` (see the class for how a rank that
cannot see the root learns the root's version at that moment).

Shutdown protocol (the owner follows it so that a finished run leaves nothing in flight that
would hang ``MPI_Finalize``):

1. The root stops publishing and calls :meth:`~AsyncTreeBroadcast.close`, which sends the
   newest version once more, marked *final*, down the tree.
2. Every rank keeps calling ``poll()`` from its loop until ``idle()`` is True, or calls
   ``finish()`` (close, then poll until idle, with a deadline naming the peer it waits for).
   ``idle()`` means: nothing more will arrive on this tag (the final version received, every
   data message this rank sent acknowledged, every one it took acknowledged) and every send it
   started has completed. Data flows parent → child, acks the other way, and the peer a rank
   waits for is itself polling until idle, so every rank gets there.
3. ``transport.barrier()``; then MPI ranks call ``transport.shutdown()`` (which withdraws the
   receives the Inbox still has posted — no send can match them any more) and gloo ranks leave
   with ``os._exit`` (gloo cannot withdraw posted receives).

In an owner's loop (async IMPALA: the learner is the root, the actors relay)::

    bc = AsyncTreeBroadcast(t, params_schema(P), root=0, fanout=2, tag=TAG)
    learner: bc.publish(msg, version); ...; bc.poll()      # every iteration, never blocks
    actor:   bc.poll(); got = bc.latest()                   # newest (payload, version) or None
    stop:    bc.finish(); t.barrier(); t.shutdown() (MPI) / os._exit (gloo)

Times (``age_s`` and the broadcast's reconstruction of the root's version) use ``time.time()``
stamps taken on different ranks: exact on one host, off by the clock skew across hosts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from archzoo.comm.base import Backoff, Request, Transport
from archzoo.comm.errors import PeerTimeout
from archzoo.comm.inbox import Inbox
from archzoo.messages import Message, Schema
from archzoo.tags import TAG_ASYNC_BROADCAST_DEFAULT
from archzoo.topology.base import ceil_log, check_fanout
from archzoo.topology.tree import lowest_digit

__all__ = ["AsyncTreeBroadcast", "Receipt", "chain_links", "member_links", "tree_depth",
           "tree_links"]


def tree_links(rank: int, size: int, root: int, fanout: int) -> tuple[int | None, list[int]]:
    """(parent, children) of ``rank`` in the k-nomial tree with fan-out m rooted at ``root``.

    Same tree as :class:`~archzoo.topology.tree.TreeTopology`: the parent of relative rank
    v > 0 is ``v − v mod m^(L(v)+1)``; the children are ``v + j·m^k < N`` for k < L(v) (L of
    the root: ⌈log_m N⌉), listed largest subtree first. Ranks are absolute.
    """
    m = check_fanout(fanout)
    _check_rank("root", root, size)
    _check_rank("rank", rank, size)
    v = (rank - root) % size
    low = lowest_digit(v, m, ceil_log(size, m))
    parent = None if v == 0 else (v - v % m ** (low + 1) + root) % size
    kids = [(v + j * m ** k + root) % size for k in reversed(range(low)) for j in range(1, m)
            if v + j * m ** k < size]
    return parent, kids


def chain_links(rank: int, size: int, root: int) -> tuple[int | None, list[int]]:
    """(parent, children) of ``rank`` on the chain ``root → root+1 → … → root−1`` (mod N):
    the ring's pipeline, each rank relaying to its right neighbour. Ranks are absolute."""
    _check_rank("root", root, size)
    _check_rank("rank", rank, size)
    v = (rank - root) % size
    parent = None if v == 0 else (rank - 1) % size
    return parent, [(rank + 1) % size] if v + 1 < size else []


def member_links(rank: int, members: list[int], fanout: int, chain: bool = False
                 ) -> tuple[int | None, list[int]]:
    """(parent, children) of ``rank`` in the tree (or chain) over ``members``, rooted at
    ``members[0]``: the k-nomial tree's links computed on positions in the list, mapped back
    to ranks, so a broadcast can span some ranks of a world (Ape-X's learner and actors,
    not its replay shards)."""
    if rank not in members:
        raise ValueError(f"rank {rank} is not among the broadcast's members {members}")
    n, pos = len(members), members.index(rank)
    parent, kids = chain_links(pos, n, 0) if chain else tree_links(pos, n, 0, fanout)
    return (None if parent is None else members[parent]), [members[k] for k in kids]


def tree_depth(rank: int, size: int, root: int, fanout: int) -> int:
    """Hops from ``rank`` to ``root``: the number of non-zero base-m digits of v."""
    m = check_fanout(fanout)
    v, d = (rank - root) % size, 0
    while v:
        d += v % m != 0
        v //= m
    return d


def _check_rank(what: str, r: int, size: int) -> None:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < size:
        raise ValueError(f"{what} must be a rank in [0, {size}), got {r!r}")


def _payload_nbytes(payload: int | Schema) -> int:
    if isinstance(payload, Schema):
        return payload.nbytes
    if isinstance(payload, bool) or not isinstance(payload, (int, np.integer)) or payload < 0:
        raise ValueError(f"payload must be a Schema or a byte count >= 0, got {payload!r}")
    return int(payload)


def _as_bytes(data: np.ndarray | Message, nbytes: int, what: str) -> np.ndarray:
    arr = data.buffer if isinstance(data, Message) else np.ascontiguousarray(data)
    if arr.nbytes != nbytes:
        raise ValueError(f"{what}: payload has {arr.nbytes} bytes, this instance carries "
                         f"{nbytes}")
    return arr.reshape(-1).view(np.uint8)


ACK = Schema("async_tree_ack", [("taken", np.int64, ())])


class _Sender:
    """The sending side of one tree edge: one data message outstanding. The next may go once
    the receiver acknowledged taking the previous one and the send completed."""

    __slots__ = ("transport", "peer", "tag", "what", "buf", "req", "sent", "acked")

    def __init__(self, transport: Transport, schema: Schema, peer: int, tag: int,
                 what: str) -> None:
        self.transport, self.peer, self.tag, self.what = transport, peer, tag, what
        self.buf = schema.new()
        self.req: Request | None = None
        self.sent = 0  # data messages sent
        self.acked = 0  # data messages the receiver has taken (its last ack)

    def free(self) -> bool:
        return self.acked >= self.sent and _completed(self)

    def send(self) -> None:
        self.req = self.transport.isend(self.buf.buffer, self.peer, self.tag, self.what)
        self.sent += 1


class _Acker:
    """The receiving side of one tree edge: counts the data messages taken and tells the
    sender with cumulative acks, one in flight at a time."""

    __slots__ = ("transport", "peer", "tag", "buf", "req", "taken", "told", "sent")

    def __init__(self, transport: Transport, peer: int, tag: int) -> None:
        self.transport, self.peer, self.tag = transport, peer, tag
        self.buf = ACK.new()
        self.req: Request | None = None
        self.taken = 0
        self.told = 0  # the count in the last ack sent
        self.sent = 0  # ack messages sent

    def pump(self) -> None:
        if self.told == self.taken or not _completed(self):
            return
        self.buf["taken"][...] = self.taken
        self.req = self.transport.isend(self.buf.buffer, self.peer, self.tag, "async tree ack")
        self.told = self.taken
        self.sent += 1

    def settled(self) -> bool:
        return self.told >= self.taken and _completed(self)


def _completed(end: _Sender | _Acker) -> bool:
    """The last send of this end of an edge has completed (its request is then dropped)."""
    if end.req is not None:
        if not end.req.test():
            return False
        end.req = None
    return True


# ---------------------------------------------------------------------------------------------
# Broadcast
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Receipt:
    """One version a non-root rank took in :meth:`AsyncTreeBroadcast.poll` (``record=True``).

    ``seq``: the root's publication number of the version (1, 2, …); ``t_recv``: when poll took
    it; ``age``: root version at ``t_recv`` − ``version`` (a lower bound when not ``exact``;
    then the true age is at most ``age_hi``); ``age_s``: seconds from publication to receipt.
    """

    seq: int
    version: int
    t_recv: float
    age: int
    age_hi: int
    exact: bool
    age_s: float


class AsyncTreeBroadcast:
    """Latest-wins broadcast of versions from ``root`` down the k-nomial tree, non-blocking.

    ``payload`` is a :class:`Schema` (e.g. :func:`~archzoo.topology.star.params_schema`) or a
    byte count. The root calls :meth:`publish` (``version`` strictly increasing, ≥ 0); every
    rank calls :meth:`poll` from its loop, which takes what arrived from the parent and sends
    the newest version held to each child that has taken (acknowledged) the previous one — one
    version outstanding per child, each child with its own send buffer, so a slow child (and
    its subtree) skips versions instead of queueing them. :meth:`latest` is the newest version
    held. ``msgs_sent``/``msgs_received`` count data messages; ``acks_sent`` the acks.
    ``members`` (root first) spans the tree over some ranks only; ``chain=True`` replaces the
    tree by the ring's pipeline, each member relaying to the next (:func:`chain_links`).

    Ages. ``age = root version − received version at receipt`` needs the root's version at the
    moment a rank far down the tree takes a message, which it cannot see. So every message
    carries the (version, publication time) of the root's last ``history`` publications, and a
    receipt taken at time t is settled once a rank knows a publication later than t: the root's
    version at t is the last publication at or before t. Exact when the history covers the gap
    (``history`` ≥ versions published between two receipts of this rank); otherwise a lower
    bound is kept and counted in ``age_inexact``. Receipts still open when the final version
    arrives are settled against it (the root publishes nothing after it). ``skipped`` counts the
    publications a rank never received (exact, from the publication numbers).
    """

    def __init__(self, transport: Transport, payload: int | Schema, root: int, fanout: int = 2,
                 tag: int = TAG_ASYNC_BROADCAST_DEFAULT, *, history: int = 64,
                 record: bool = False, members: list[int] | None = None,
                 chain: bool = False) -> None:
        self.transport, self.tag = transport, int(tag)
        self.rank, self.size = transport.rank, transport.world_size
        self.root, self.fanout = root, check_fanout(fanout)
        if members is None and not chain:
            self.parent, self.children = tree_links(self.rank, self.size, root, fanout)
        else:
            members = list(range(self.size)) if members is None else list(members)
            if not members or members[0] != root:
                raise ValueError(f"members must start with the root {root}, got {members}")
            self.parent, self.children = member_links(self.rank, members, fanout, chain)
        self.schema = payload if isinstance(payload, Schema) else None
        self.nbytes = _payload_nbytes(payload)
        if isinstance(history, bool) or not isinstance(history, (int, np.integer)) \
                or history < 1:
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        self.history = int(history)
        self.wire = Schema("async_tree_broadcast", [
            ("payload", np.uint8, (self.nbytes,)), ("version", np.int64, ()),
            ("seq", np.int64, ()), ("final", np.int64, ()),
            ("hist_version", np.int64, (self.history,)), ("hist_t", np.float64, (self.history,)),
        ])
        self._latest = self.wire.new()
        self._latest["version"][...] = -1
        self._latest["hist_version"][:] = -1
        self._latest["hist_t"][:] = np.nan
        self.seq = 0  # publication number of the version held (0: none)
        self.final = False  # the root closed: no version follows the one held
        what = "async tree broadcast version"
        self._down = {c: _Sender(transport, self.wire, c, self.tag, what) for c in self.children}
        self._stale: set[int] = set()
        self._acks_in = Inbox(transport, ACK, self.children, self.tag, 1, "async tree ack") \
            if self.children else None
        self._inbox = Inbox(transport, self.wire, [self.parent], self.tag, 1, what) \
            if self.parent is not None else None
        self._acker = _Acker(transport, self.parent, self.tag) if self.parent is not None \
            else None
        # statistics
        self.msgs_sent = 0
        self.msgs_received = 0
        self.versions_received = 0
        self.skipped = 0
        self.out_of_order = 0  # a message not newer than the held version (never, if correct)
        self.sent_to: dict[int, int] = dict.fromkeys(self.children, 0)
        self.age_count = 0
        self.age_sum = 0
        self.age_max = 0
        self.age_inexact = 0
        self.age_s_sum = 0.0
        self.age_s_max = 0.0
        self.record = record
        self.receipts: list[Receipt] = []
        self._known: dict[int, tuple[int, float]] = {}  # publication seq -> (version, time)
        self._pending: deque[tuple[int, int, float, float]] = deque()  # seq, version, t, t_pub

    def __repr__(self) -> str:
        return (f"AsyncTreeBroadcast(rank={self.rank}, root={self.root}, fanout={self.fanout}, "
                f"parent={self.parent}, children={self.children}, seq={self.seq})")

    # -- the root -----------------------------------------------------------------------------
    def publish(self, data: np.ndarray | Message, version: int) -> None:
        """Root only: make ``data`` (``nbytes`` bytes, any dtype, or a Message of the schema)
        version ``version`` and start sending it to the children that are free."""
        if self.rank != self.root:
            raise RuntimeError(f"rank {self.rank}: only the root ({self.root}) publishes")
        if self.final:
            raise RuntimeError("publish after close()")
        cur = int(self._latest["version"])
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)) \
                or version < 0 or version <= cur:
            raise ValueError(f"versions must be integers >= 0 and strictly increasing: "
                             f"{version!r} after {cur}")
        self._latest["payload"][:] = _as_bytes(data, self.nbytes, "publish")
        self._latest["version"][...] = version
        self.seq += 1
        self._latest["seq"][...] = self.seq
        hv, ht = self._latest["hist_version"], self._latest["hist_t"]
        hv[1:] = hv[:-1].copy()
        ht[1:] = ht[:-1].copy()
        hv[0], ht[0] = version, time.time()
        self._stale = set(self.children)
        self._take_acks()  # a root that publishes without polling
        self._pump()

    def close(self) -> None:
        """Root: no more versions — send the newest once more, marked final. Others: no-op."""
        if self.rank != self.root or self.final:
            return
        self.final = True
        self._latest["final"][...] = 1
        self._stale = set(self.children)
        self._pump()

    # -- every rank ---------------------------------------------------------------------------
    def poll(self) -> list[int]:
        """Take what arrived from the parent, forward the newest version to free children.

        Returns the versions of the messages taken in this call, in arrival order (the final
        mark re-sending a version already held is not listed). Never blocks."""
        got: list[int] = []
        if self._inbox is not None:
            p, acker = self.parent, self._acker
            assert p is not None and acker is not None  # a rank with an inbox has a parent
            while (msg := self._inbox.poll(p)) is not None:
                self._take(msg, got)
                self._inbox.release(p)
                acker.taken += 1
            acker.pump()
        self._take_acks()
        self._pump()
        return got

    def latest(self) -> tuple[np.ndarray, int] | None:
        """(payload bytes, version) of the newest version held, or None before the first.

        The array is a view, valid until the next :meth:`poll` or :meth:`publish`."""
        if self.seq == 0:
            return None
        return self._latest["payload"], int(self._latest["version"])

    def latest_message(self) -> tuple[Message, int] | None:
        """As :meth:`latest`, the payload as a Message of the schema given at construction."""
        if self.schema is None:
            raise RuntimeError("constructed with a byte count: use latest()")
        got = self.latest()
        return None if got is None else (Message(self.schema, got[0]), got[1])

    def idle(self) -> bool:
        """The final version is here (root: closed), every child has taken it, and every send
        (data and acks) completed."""
        if not self.final or self._stale:
            return False
        if self._acker is not None and not self._acker.settled():
            return False
        return all(snd.free() for snd in self._down.values())

    def finish(self, timeout_s: float | None = None,
               on_poll: Callable[[], object] | None = None) -> None:
        """Close (root), then poll until :meth:`idle`; raises PeerTimeout naming the peer."""
        self.close()
        t = self.transport
        t0 = time.perf_counter()
        deadline = t0 + (t.timeout_s if timeout_s is None else timeout_s)
        backoff = Backoff(t.idle, t.spin_s)
        try:
            while True:
                self.poll()
                if self.idle():
                    return
                if on_poll is not None:
                    on_poll()
                if time.perf_counter() > deadline:
                    raise self._stuck(deadline - t0)
                backoff.pause()
        finally:
            t.wait_s += time.perf_counter() - t0

    @property
    def age_mean(self) -> float:
        return self.age_sum / self.age_count if self.age_count else 0.0

    @property
    def age_s_mean(self) -> float:
        return self.age_s_sum / self.age_count if self.age_count else 0.0

    @property
    def acks_sent(self) -> int:
        return self._acker.sent if self._acker is not None else 0

    def stats(self) -> dict[str, float | int]:
        return {
            "msgs_sent": self.msgs_sent, "msgs_received": self.msgs_received,
            "acks_sent": self.acks_sent,
            "versions_received": self.versions_received, "skipped": self.skipped,
            "out_of_order": self.out_of_order, "age_count": self.age_count,
            "age_mean": self.age_mean, "age_max": self.age_max, "age_inexact": self.age_inexact,
            "age_s_mean": self.age_s_mean, "age_s_max": self.age_s_max,
        }

    # -- internals ----------------------------------------------------------------------------
    def _take_acks(self) -> None:
        if self._acks_in is None:
            return
        for p, snd in self._down.items():
            while (msg := self._acks_in.poll(p)) is not None:
                snd.acked = max(snd.acked, int(msg["taken"]))
                self._acks_in.release(p)

    def _take(self, msg: Message, got: list[int]) -> None:
        t_recv = time.time()
        self.msgs_received += 1
        seq, version, final = int(msg["seq"]), int(msg["version"]), bool(msg["final"])
        if seq > self.seq:
            got.append(version)
            self.versions_received += 1
            self.skipped += seq - self.seq - 1
            self._latest.copy_from(msg)
            self.seq = seq
            self._stale = set(self.children)
            self._learn(msg)
            self._pending.append((seq, version, t_recv, float(msg["hist_t"][0])))
        elif seq == self.seq and final and not self.final:
            self._latest["final"][...] = 1
            self._stale = set(self.children)
        else:
            got.append(version)
            self.out_of_order += 1
        if final and not self.final and seq >= self.seq:
            self.final = True
        self._settle()

    def _learn(self, msg: Message) -> None:
        seq = int(msg["seq"])
        for i, (v, t) in enumerate(zip(msg["hist_version"].tolist(), msg["hist_t"].tolist(),
                                       strict=True)):
            if seq - i < 1 or v < 0:
                break
            self._known[seq - i] = (v, t)

    def _settle(self) -> None:
        """Settle the open receipts for which a later publication (or the final) is known."""
        if not self._pending:
            return
        keys = sorted(self._known)
        still: deque[tuple[int, int, float, float]] = deque()
        for seq_x, ver_x, t_r, t_pub in self._pending:
            later = [s for s in keys if s > seq_x]
            star = next((s for s in later if self._known[s][1] > t_r), None)
            if star is None and not self.final:
                still.append((seq_x, ver_x, t_r, t_pub))
                continue
            before = [s for s in later if star is None or s < star]  # published by t_r
            a = before[-1] if before else seq_x
            ver_a = self._known[a][0] if before else ver_x
            if star is None:  # final: nothing was published after the last known publication
                exact, ver_hi = True, ver_a
            else:
                exact = a + 1 == star
                ver_hi = ver_a if exact else self._known[star][0] - 1
            self._record(seq_x, ver_x, t_r, ver_a - ver_x, ver_hi - ver_x, exact, t_r - t_pub)
        self._pending = still
        low = still[0][0] if still else self.seq
        for s in [s for s in keys if s < low]:
            del self._known[s]

    def _record(self, seq: int, version: int, t_r: float, age: int, age_hi: int, exact: bool,
                age_s: float) -> None:
        self.age_count += 1
        self.age_sum += age
        self.age_max = max(self.age_max, age)
        self.age_inexact += not exact
        self.age_s_sum += age_s
        self.age_s_max = max(self.age_s_max, age_s)
        if self.record:
            self.receipts.append(Receipt(seq, version, t_r, age, age_hi, exact, age_s))

    def _pump(self) -> None:
        if not self._stale:
            return
        for c in self.children:
            if c not in self._stale:
                continue
            snd = self._down[c]
            if not snd.free():
                continue
            snd.buf.copy_from(self._latest)
            snd.send()
            self.msgs_sent += 1
            self.sent_to[c] += 1
            self._stale.discard(c)

    def _stuck(self, waited_s: float) -> PeerTimeout:
        if not self.final and self.parent is not None:
            return PeerTimeout(self.rank, self.parent, "the final version (async tree broadcast)",
                               waited_s)
        if self._acker is not None and not self._acker.settled():
            return PeerTimeout(self.rank, self._acker.peer, "an ack (async tree broadcast)",
                               waited_s, "to")
        for c in self.children:
            if c in self._stale or not self._down[c].free():
                return PeerTimeout(self.rank, c, "the final version (async tree broadcast)",
                                   waited_s, "to")
        return PeerTimeout(self.rank, "?", "async tree broadcast", waited_s)
