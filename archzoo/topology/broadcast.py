"""Parameter broadcast from a learner to its actors, over the chosen topology.

On the star the learner publishes latest-wins and never waits (:class:`StarPublisher`);
with any other topology (synchronous mode) every round is a collective broadcast in which
the actors relay to their children. :class:`ParamsBroadcast` is the learner's side,
:class:`ParamsSubscriber` an actor's.
"""

from __future__ import annotations

from collections.abc import Callable

from archzoo.comm import Inbox, Message, Schema, Transport
from archzoo.topology.factory import make_topology
from archzoo.topology.star import StarPublisher

STOP_VERSION = -1  # a parameters message with this version tells sync actors to stop


class ParamsBroadcast:
    """The learner's parameter broadcast: the non-blocking StarPublisher on the star, or a
    synchronous collective of the chosen topology where every actor relays."""

    def __init__(self, t: Transport, topology: str, fanout: int, schema: Schema,
                 actors: list[int], tag_params: int, tag_topology: int) -> None:
        self.collective = None if topology == "star" else \
            make_topology(topology, t, fanout, tag_topology)
        self.star = StarPublisher(t, schema, actors, tag_params) if self.collective is None \
            else None
        self.latest: Message = self.star.latest if self.star else schema.new()

    def publish(self, version: int) -> None:
        """Send ``self.latest`` (filled by the caller) as ``version``."""
        if self.star is not None:
            self.star.publish(version=version)
            return
        self.latest["version"][...] = version
        self.collective.broadcast(self.latest.buffer, 0)

    def drop(self, actor: int) -> None:
        """Stop sending to a dead actor: possible on the star; a collective needs every
        rank, so there the death ends the run."""
        if self.star is None:
            raise RuntimeError(f"actor {actor} died: a {type(self.collective).__name__} "
                               "broadcast cannot go on without it")
        self.star.drop(actor)

    def publish_stop(self) -> None:
        """Sync actors blocked in a collective learn that the run stopped."""
        if self.collective is not None:
            self.publish(STOP_VERSION)

    def pump(self) -> None:
        if self.star is not None:
            self.star.pump()

    def wait_all(self, timeout_s: float | None = None,
                 on_poll: Callable[[], None] | None = None) -> None:
        if self.star is not None:
            self.star.wait_all(timeout_s, on_poll)

    def rounds(self) -> int | None:
        return self.collective.rounds if self.collective is not None else None

    def messages(self) -> int | None:
        return self.star.messages if self.star is not None else None


class ParamsSubscriber:
    """An actor's side: parameters from ``root`` handed to ``on_params`` as they arrive.

    On the star, :meth:`take_newest` loads whatever arrived without waiting (async) and
    :meth:`next` waits for the next message; with a collective, :meth:`next` takes part in
    the broadcast (relaying to this rank's children). Both return the version loaded,
    which is :data:`STOP_VERSION` when the learner stopped.
    """

    def __init__(self, t: Transport, topology: str, fanout: int, schema: Schema, root: int,
                 on_params: Callable[[Message], None], tag_params: int,
                 tag_topology: int) -> None:
        self.root, self.on_params = root, on_params
        self.collective = None if topology == "star" else \
            make_topology(topology, t, fanout, tag_topology)
        self.inbox = Inbox(t, schema, [root], tag_params, depth=1, what="parameters") \
            if self.collective is None else None
        self.relay = schema.new()
        self.version = -1

    def _load(self, msg: Message) -> int:
        self.version = int(msg["version"])
        if self.version != STOP_VERSION:
            self.on_params(msg)
        return self.version

    def take_newest(self) -> None:
        while self.inbox is not None and (msg := self.inbox.poll(self.root)) is not None:
            self._load(msg)
            self.inbox.release(self.root)

    def next(self, timeout_s: float | None = None,
             on_poll: Callable[[], None] | None = None) -> int:
        if self.collective is not None:
            self.collective.broadcast(self.relay.buffer, self.root)
            return self._load(self.relay)
        version = self._load(self.inbox.recv_from(self.root, timeout_s, on_poll=on_poll))
        self.inbox.release(self.root)
        return version
