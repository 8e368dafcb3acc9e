"""A small JSON-in-uint8 control channel: stop, hello, statistics, errors.

Control messages are rare and tiny; they travel as UTF-8 JSON in a fixed-capacity
byte field with a length, so the receiver's buffer size is known in advance. A channel is
typed by the messages it carries (``ControlChannel[M]``: the run's are
archzoo/harness/control_messages.py's); a received message is taken to be one of them,
as the peers run the same program.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar, cast

import numpy as np

from archzoo.comm.base import Request, Transport
from archzoo.comm.errors import CommError, PeerFailure
from archzoo.comm.inbox import Inbox
from archzoo.messages import Message, Schema

CONTROL_CAPACITY = 8192
M = TypeVar("M", bound=Mapping[str, object])  # the messages a channel carries


def control_schema(capacity: int = CONTROL_CAPACITY) -> Schema:
    return Schema("control", [("length", np.int64, ()), ("payload", np.uint8, (capacity,))])


def _settled(req: Request) -> bool:
    """Completed, or failed (a dead peer's failure surfaces where that peer is awaited)."""
    try:
        return req.test()
    except CommError:
        return True


class ControlChannel(Generic[M]):
    """JSON messages to and from a set of peers on one tag."""

    def __init__(self, transport: Transport, peers: Iterable[int], tag: int,
                 capacity: int = CONTROL_CAPACITY) -> None:
        self.transport = transport
        self.schema = control_schema(capacity)
        self.capacity = capacity
        self.tag = tag
        self.inbox = Inbox(transport, self.schema, peers, tag, depth=2, what="control message")
        self._sending: list[tuple[Message, Request]] = []
        self._failed: PeerFailure | None = None  # met after messages poll() returned

    def send(self, dst: int, obj: M) -> Request:
        """Queue ``obj`` for ``dst`` without waiting; the buffer lives until the send completes."""
        data = json.dumps(obj, separators=(",", ":")).encode()
        if len(data) > self.capacity:
            raise ValueError(f"control message of {len(data)} B exceeds {self.capacity} B")
        self._sending = [(m, r) for m, r in self._sending if not _settled(r)]
        msg = self.schema.new()
        msg["length"][...] = len(data)
        msg["payload"][: len(data)] = np.frombuffer(data, np.uint8)
        req = self.transport.isend(msg.buffer, dst, self.tag, "control message")
        self._sending.append((msg, req))
        return req

    def drop(self, peer: int) -> None:
        """Forget ``peer`` (its process died): no more receives from it, no waiting on
        the messages queued for it."""
        self.inbox.drop(peer)
        self._sending = [(m, r) for m, r in self._sending if r.peer != peer]
        if self._failed is not None and self._failed.peer == peer:
            self._failed = None

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every queued control message was taken by its receiver."""
        for _, req in self._sending:
            self.transport.wait(req, timeout_s)
        self._sending.clear()

    def _decode(self, msg: Message) -> M:
        n = int(msg["length"])
        obj = json.loads(bytes(msg["payload"][:n]).decode())
        if not isinstance(obj, dict):
            raise ValueError(f"a control message is a JSON object, got {type(obj).__name__}")
        return cast(M, obj)

    def poll(self) -> list[tuple[int, M]]:
        """Every control message that has arrived, without waiting. A peer that left right
        after its last message (a root's FINAL when no barrier follows) fails its next
        receive: the messages taken before are returned, and the failure, which stays with
        that receive, is raised by the next poll."""
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        out: list[tuple[int, M]] = []
        try:
            for p in self.inbox.ready():
                while (msg := self.inbox.poll(p)) is not None:
                    out.append((p, self._decode(msg)))
                    self.inbox.release(p)
        except PeerFailure as e:
            if not out:
                raise
            self._failed = e
        return out

    def recv_from(self, peer: int, timeout_s: float | None = None) -> M:
        msg = self.inbox.recv_from(peer, timeout_s)
        obj = self._decode(msg)
        self.inbox.release(peer)
        return obj
