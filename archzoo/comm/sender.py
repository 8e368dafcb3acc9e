"""A window of messages in flight to one peer: fill one buffer while others are on the wire
(IMPALA unrolls, GA3C unrolls, Ape-X and Gorila transitions), optionally bounded by the
receiver's credit: how many of them it has used."""

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
    the receiver took the last one.

    A receiver that keeps a buffer posted takes a message on arrival, before it uses it.
    ``used`` (the receiver's credit: how many of the messages it has used so far, as it
    last said) bounds the window by use instead: :meth:`next` also waits until at most
    ``window`` − 1 sent messages are unused. An IMPALA actor with ``window`` 1 then starts
    every unroll once the learner took its previous one into a batch, with the parameters
    published then, so that an unroll waits for no other unroll of its actor (a policy lag
    of about one version per actor).
    """

    def __init__(self, t: Transport, schema: Schema, dest: int, tag: int, what: str,
                 inflight: int = 2, used: Callable[[], int] | None = None,
                 window: int = 1) -> None:
        if inflight < 1 or window < 1:
            raise ValueError(f"a send window needs inflight >= 1 and window >= 1, got "
                             f"{inflight} and {window}")
        self.t, self.dest, self.tag, self.what = t, dest, tag, what
        self.buffers = [schema.new() for _ in range(inflight)]
        self.sending: list[Request | None] = [None] * inflight
        self.i = 0  # messages sent
        self.credit = None if used is None else Credit(used, dest, what, window)

    def next(self, on_poll: Callable[[], object] | None = None) -> Message:
        j = self.i % len(self.buffers)
        pending = self.sending[j]
        if pending is not None:
            self.t.wait(pending, on_poll=on_poll)
            self.sending[j] = None
        if self.credit is not None:
            self.t.wait(self.credit.until(self.i), on_poll=on_poll)
        return self.buffers[j]

    def send(self) -> None:
        j = self.i % len(self.buffers)
        self.sending[j] = self.t.isend(self.buffers[j].buffer, self.dest, self.tag, self.what,
                                       synchronous=True)
        self.i += 1

    def flush(self, on_poll: Callable[[], object] | None = None) -> None:
        for j, req in enumerate(self.sending):
            if req is not None:
                self.t.wait(req, on_poll=on_poll)
                self.sending[j] = None


class DoubleBuffer(SendWindow):
    """A :class:`SendWindow` of two: collect one message while the other is on the wire."""

    def __init__(self, t: Transport, schema: Schema, dest: int, tag: int, what: str) -> None:
        super().__init__(t, schema, dest, tag, what, inflight=2)


class Credit(Request):
    """Complete once the receiver has used all but ``window`` − 1 of the messages sent: a
    :class:`Request` that :meth:`Transport.wait` waits for under its deadline, naming the
    receiver. ``used()`` reads the receiver's newest credit (and must poll for it)."""

    direction = "to"

    def __init__(self, used: Callable[[], int], peer: int, what: str, window: int) -> None:
        self.used, self.peer, self.window = used, peer, window
        self.what = f"{what}s into use (its credit)"
        self.sent = 0

    def until(self, sent: int) -> Credit:
        """This credit, now waiting for what ``sent`` messages need."""
        self.sent = sent
        return self

    def test(self) -> bool:
        return self.sent - self.used() < self.window
