"""A window of messages in flight to one peer: fill one buffer while others are on the wire
(IMPALA unrolls, GA3C unrolls, Ape-X and Gorila transitions)."""

from __future__ import annotations

from collections.abc import Callable

from archzoo.comm.base import Request, Transport
from archzoo.messages import Message, Schema


class SendWindow:
    """``inflight`` messages of ``schema`` sent in turn to ``dest`` with ``tag``.

    :meth:`next` returns the buffer to fill, after its previous send completed (so a
    message is never rewritten while the transport still reads it); :meth:`send` puts it
    on the wire; :meth:`flush` waits for every send. Sends are synchronous (complete once
    the receiver has the message), so at most ``inflight`` messages are ever sent and not
    yet received: a sender whose receiver stopped taking messages blocks (back-pressure),
    on MPI too, where small messages would otherwise complete eagerly and queue without
    bound. With ``inflight=1`` the sender waits, before it fills the next message, until
    the receiver took the last one: an IMPALA actor then starts every unroll after the
    learner took its previous one, with the newest parameters (the smallest policy lag).
    """

    def __init__(self, t: Transport, schema: Schema, dest: int, tag: int, what: str,
                 inflight: int = 2) -> None:
        if inflight < 1:
            raise ValueError(f"a send window needs inflight >= 1, got {inflight}")
        self.t, self.dest, self.tag, self.what = t, dest, tag, what
        self.buffers = [schema.new() for _ in range(inflight)]
        self.sending: list[Request | None] = [None] * inflight
        self.i = 0

    def next(self, on_poll: Callable[[], None] | None = None) -> Message:
        j = self.i % len(self.buffers)
        if self.sending[j] is not None:
            self.t.wait(self.sending[j], on_poll=on_poll)
            self.sending[j] = None
        return self.buffers[j]

    def send(self) -> None:
        j = self.i % len(self.buffers)
        self.sending[j] = self.t.isend(self.buffers[j].buffer, self.dest, self.tag, self.what,
                                       synchronous=True)
        self.i += 1

    def flush(self, on_poll: Callable[[], None] | None = None) -> None:
        for j, req in enumerate(self.sending):
            if req is not None:
                self.t.wait(req, on_poll=on_poll)
                self.sending[j] = None


class DoubleBuffer(SendWindow):
    """A :class:`SendWindow` of two: collect one message while the other is on the wire."""

    def __init__(self, t: Transport, schema: Schema, dest: int, tag: int, what: str) -> None:
        super().__init__(t, schema, dest, tag, what, inflight=2)
