"""A double-buffered stream of messages to one peer: fill one buffer while the other is
on the wire (IMPALA unrolls, GA3C unrolls, Ape-X and Gorila transitions)."""

from __future__ import annotations

from collections.abc import Callable

from archzoo.comm.base import Request, Transport
from archzoo.messages import Message, Schema


class DoubleBuffer:
    """Two messages of ``schema`` sent alternately to ``dest`` with ``tag``.

    :meth:`next` returns the buffer to fill, after its previous send completed (so a
    message is never rewritten while the transport still reads it); :meth:`send` puts it
    on the wire; :meth:`flush` waits for both sends. Sends are synchronous, so a sender
    whose receiver stopped taking messages blocks after two (back-pressure), on MPI too,
    where small messages would otherwise complete eagerly and queue without bound.
    """

    def __init__(self, t: Transport, schema: Schema, dest: int, tag: int, what: str) -> None:
        self.t, self.dest, self.tag, self.what = t, dest, tag, what
        self.buffers = [schema.new(), schema.new()]
        self.sending: list[Request | None] = [None, None]
        self.i = 0

    def next(self, on_poll: Callable[[], None] | None = None) -> Message:
        j = self.i % 2
        if self.sending[j] is not None:
            self.t.wait(self.sending[j], on_poll=on_poll)
            self.sending[j] = None
        return self.buffers[j]

    def send(self) -> None:
        j = self.i % 2
        self.sending[j] = self.t.isend(self.buffers[j].buffer, self.dest, self.tag, self.what,
                                       synchronous=True)
        self.i += 1

    def flush(self, on_poll: Callable[[], None] | None = None) -> None:
        for j, req in enumerate(self.sending):
            if req is not None:
                self.t.wait(req, on_poll=on_poll)
                self.sending[j] = None
