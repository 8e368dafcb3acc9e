"""Posted receives per peer: the receiving side of a message stream.

gloo is a rendezvous (an ``isend`` completes only once the receiver posted its
receive), so a receiver keeps ``depth`` receives posted per peer it listens to,
each into its own preallocated message, and polls them. Never ``recv(src=None)``:
it cannot notice a dead peer or be withdrawn (docs/index.md, "The Transport contract").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from archzoo.comm.base import Request, Transport
from archzoo.comm.errors import PeerFailure
from archzoo.messages import Message, Schema


class Unposted(Request):
    """A receive that could not be reposted because its peer is gone: the failure is kept
    for whoever waits on it (:meth:`test` raises it), not raised by the release of a message
    that was delivered (a peer may leave right after its last message)."""

    def __init__(self, failure: PeerFailure, peer: int, what: str) -> None:
        self.failure, self.peer, self.what = failure, peer, what

    def test(self) -> bool:
        raise self.failure


class Inbox:
    """``depth`` posted receives of one schema and tag from each of ``peers``.

    Messages from one peer are delivered in the order they were sent. A delivered
    message is a view into a posted buffer: :meth:`release` it once consumed, which
    reposts the same buffer.
    """

    def __init__(self, transport: Transport, schema: Schema, peers: Iterable[int], tag: int,
                 depth: int = 2, what: str | None = None) -> None:
        self.transport, self.schema, self.tag = transport, schema, tag
        self.what = what or schema.name
        self.peers = list(peers)
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"Inbox {self.what!r}: a peer is listed twice: {self.peers}")
        self._slots: dict[int, deque[tuple[Message, Request]]] = {}
        for p in self.peers:
            self._slots[p] = deque(self._post(p, schema.new()) for _ in range(depth))
        self._next = 0  # round-robin start for fairness across peers

    def _post(self, peer: int, msg: Message) -> tuple[Message, Request]:
        return msg, self.transport.irecv(msg.buffer, peer, self.tag, self.what)

    def poll(self, peer: int) -> Message | None:
        """The oldest arrived, unreleased message from ``peer``, or None."""
        msg, req = self._slots[peer][0]
        return msg if req.test() else None

    def take(self, peer: int) -> Message:
        """:meth:`poll` of a peer that :meth:`ready` listed: its oldest arrived message."""
        msg = self.poll(peer)
        if msg is None:
            raise RuntimeError(f"no {self.what} from rank {peer} has arrived (not ready)")
        return msg

    def poll_at(self, peer: int, i: int) -> Message | None:
        """The ``i``-th oldest unreleased message from ``peer`` if it has arrived, else None
        (messages from one peer arrive in order, so the ``i-1`` older ones have too)."""
        slots = self._slots[peer]
        if i >= len(slots):
            return None
        msg, req = slots[i]
        return msg if req.test() else None

    def depth(self) -> int:
        """Receives posted per peer."""
        return len(next(iter(self._slots.values()))) if self._slots else 0

    def release(self, peer: int) -> None:
        """Consume the oldest message from ``peer`` and repost its buffer. A peer that left
        after its last message fails the repost: waiting on that receive raises, not this."""
        msg, _ = self._slots[peer].popleft()
        try:
            posted = self._post(peer, msg)
        except PeerFailure as e:
            posted = msg, Unposted(e, peer, self.what)
        self._slots[peer].append(posted)

    def ready(self) -> list[int]:
        """Peers whose oldest message has arrived, in round-robin order."""
        n = len(self.peers)
        order = [self.peers[(self._next + i) % n] for i in range(n)]
        return [p for p in order if self.poll(p) is not None]

    def drop(self, peer: int) -> None:
        """Stop listening to ``peer`` (its process died); its posted receives are abandoned
        (gloo cannot withdraw them; they fail or die with the process)."""
        if peer not in self._slots:
            return
        i = self.peers.index(peer)
        self.peers.remove(peer)
        del self._slots[peer]
        if self.peers:
            self._next = (self._next - (1 if i < self._next else 0)) % len(self.peers)
        else:
            self._next = 0

    def advance(self, peer: int) -> None:
        """Start the next :meth:`ready` scan after ``peer`` (fair round robin for callers
        that take from ``ready()`` and may stop early)."""
        self._next = (self.peers.index(peer) + 1) % len(self.peers)

    def recv_from(self, peer: int, timeout_s: float | None = None,
                  on_poll: Callable[[], object] | None = None) -> Message:
        """Wait (with a deadline) for the next message from ``peer``; release it after use."""
        _, req = self._slots[peer][0]
        self.transport.wait(req, timeout_s, on_poll)
        return self._slots[peer][0][0]
