"""Parameter broadcast from a learner to its actors, over the chosen topology.

Three ways, chosen by topology and mode (docs/topologies.md has the matrix):

- star: the learner publishes latest-wins and never waits (:class:`StarPublisher`), in
  either mode;
- any other topology, synchronous mode: every round is a collective broadcast in which
  the actors relay to their children;
- tree, butterfly or ring, asynchronous mode: latest-wins down a tree of relaying actors
  (:class:`~archzoo.topology.async_tree.AsyncTreeBroadcast`), never blocking; a slow
  subtree skips versions. The butterfly's broadcast schedule is the binomial tree
  (recursive doubling: fan-out 2) and the ring's is the chain, each actor relaying to its
  right neighbour (successive versions overlap along it).

:class:`ParamsBroadcast` is the learner's side, :class:`ParamsSubscriber` an actor's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from archzoo.comm import Inbox, Message, PeerTimeout, Schema, Transport
from archzoo.comm.base import Backoff
from archzoo.topology.async_tree import AsyncTreeBroadcast
from archzoo.topology.base import Topology
from archzoo.topology.factory import make_topology
from archzoo.topology.star import StarPublisher

STOP_VERSION = -1  # a parameters message with this version tells sync actors to stop


def async_schedule(topology: str, fanout: int) -> tuple[int, bool] | None:
    """(fan-out, chain?) of the asynchronous broadcast for ``topology``, or None for the
    star's direct sends; ``native`` has none (its collectives block every rank)."""
    if topology == "star":
        return None
    if topology == "native":
        raise ValueError("--topology native has no asynchronous broadcast: torch.distributed's "
                         "collectives block every rank (use --mode sync, or star/tree/"
                         "butterfly/ring)")
    return {"tree": (fanout, False), "butterfly": (2, False), "ring": (2, True)}[topology]


def describe_broadcast(topology: str, fanout: int, mode: str) -> str:
    """How parameters travel for (topology, mode), as summary.json's topology_applied says."""
    if topology == "star":
        return "star (non-blocking, latest-wins)"
    if mode == "sync":
        name = topology + (f"(m={fanout})" if topology in ("tree", "butterfly") else "")
        return f"{name} (synchronous collective)"
    m, chain = _tree_schedule(topology, fanout)
    how = "chain" if chain else f"k-nomial tree m={m}"
    return f"{topology} as a {how} (asynchronous, latest-wins, actors relay)"


def _tree_schedule(topology: str, fanout: int) -> tuple[int, bool]:
    """:func:`async_schedule` of a topology other than the star."""
    schedule = async_schedule(topology, fanout)
    if schedule is None:
        raise ValueError("the star has no asynchronous tree broadcast")
    return schedule


def _async_tree(t: Transport, topology: str, fanout: int, schema: Schema,
                members: list[int], tag: int) -> AsyncTreeBroadcast:
    m, chain = _tree_schedule(topology, fanout)
    return AsyncTreeBroadcast(t, schema, members[0], m, tag, members=members, chain=chain)


class ParamsBroadcast:
    """The learner's parameter broadcast: the non-blocking StarPublisher on the star, a
    synchronous collective of the chosen topology where every actor relays (sync mode), or
    the asynchronous latest-wins tree (async mode)."""

    def __init__(self, t: Transport, topology: str, fanout: int, schema: Schema,
                 actors: list[int], tag_params: int, tag_topology: int,
                 mode: str = "sync") -> None:
        self.collective: Topology | None = None
        self.tree: AsyncTreeBroadcast | None = None
        self.star: StarPublisher | None = None
        self.publications = 0  # the async tree's order: a version may go out again (a newer
        # credit with the same parameters), so the tree numbers publications, not versions
        if topology == "star":
            self.star = StarPublisher(t, schema, actors, tag_params)
        elif mode == "sync":
            self.collective = make_topology(topology, t, fanout, tag_topology)
        else:
            self.tree = _async_tree(t, topology, fanout, schema, [t.rank, *actors], tag_params)
        self.latest: Message = self.star.latest if self.star else schema.new()

    def publish(self, version: int) -> None:
        """Send ``self.latest`` (filled by the caller) as ``version``."""
        if self.star is not None:
            self.star.publish(version=version)
            return
        self.latest["version"][...] = version
        self.publications += 1
        if self.tree is not None:
            self.tree.publish(self.latest, self.publications)
        else:
            assert self.collective is not None  # neither star nor tree: the collective
            self.collective.broadcast(self.latest.buffer, 0)

    def drop(self, actor: int) -> None:
        """Stop sending to a dead actor: possible on the star; a collective needs every
        rank, and a tree's relay feeds a subtree, so there the death ends the run."""
        if self.star is None:
            how = ("the asynchronous tree broadcast passes parameters through its actors"
                   if self.tree is not None else "a synchronous collective needs every rank")
            raise RuntimeError(f"actor {actor} died and {how}, so the run cannot go on "
                               "without it (--topology star survives dead actors)")
        self.star.drop(actor)

    def publish_stop(self) -> None:
        """Sync actors blocked in a collective learn that the run stopped."""
        if self.collective is not None:
            self.publish(STOP_VERSION)

    def pump(self) -> None:
        if self.star is not None:
            self.star.pump()
        elif self.tree is not None:
            self.tree.poll()

    def wait_all(self, timeout_s: float | None = None,
                 on_poll: Callable[[], object] | None = None) -> None:
        """Until every send completed; the async tree closes first (its last version goes
        down marked final) and waits until every child took it."""
        if self.star is not None:
            self.star.wait_all(timeout_s, on_poll)
        elif self.tree is not None:
            self.tree.finish(timeout_s, on_poll)

    def rounds(self) -> int | None:
        return self.collective.rounds if self.collective is not None else None

    def messages(self) -> int | None:
        """Parameter messages the learner sent (star and async tree)."""
        if self.star is not None:
            return self.star.messages
        return self.tree.msgs_sent if self.tree is not None else None


class ParamsSubscriber:
    """An actor's side: parameters from ``root`` handed to ``on_params`` as they arrive.

    On the star, :meth:`take_newest` loads whatever arrived without waiting (async) and
    :meth:`next` waits for the next message; with a collective, :meth:`next` takes part in
    the broadcast (relaying to this rank's children); on the async tree both poll it (which
    relays) and load the newest version held. Both return the version loaded, which is
    :data:`STOP_VERSION` when the learner stopped. ``members`` lists the broadcast's ranks,
    root first (default: the whole world).
    """

    def __init__(self, t: Transport, topology: str, fanout: int, schema: Schema, root: int,
                 on_params: Callable[[Message], None], tag_params: int,
                 tag_topology: int, mode: str = "sync",
                 members: list[int] | None = None) -> None:
        self.t, self.root, self.on_params = t, root, on_params
        self.collective: Topology | None = None
        self.tree: AsyncTreeBroadcast | None = None
        self.inbox: Inbox | None = None
        if topology == "star":
            self.inbox = Inbox(t, schema, [root], tag_params, depth=1, what="parameters")
        elif mode == "sync":
            self.collective = make_topology(topology, t, fanout, tag_topology)
        else:
            members = list(range(t.world_size)) if members is None else members
            self.tree = _async_tree(t, topology, fanout, schema, members, tag_params)
        self.relay = schema.new()
        self.slot = schema.new()  # star: the newest message received, not yet loaded
        self.slot["version"][...] = STOP_VERSION
        self.version = -1
        self.seen = 0  # async tree: the newest publication taken
        self.loads = 0  # versions handed to on_params

    def _load(self, msg: Message) -> int:
        self.version = int(msg["version"])
        if self.version != STOP_VERSION:
            self.on_params(msg)
            self.loads += 1
        return self.version

    def stats(self) -> dict[str, int | float | None]:
        """For the actor's BYE: the last version and how many were loaded; on the async
        tree also the versions this rank skipped, its receipt age in versions (root version
        minus received version) and the messages it relayed to its children."""
        out: dict[str, int | float | None] = {"version": self.version, "loads": self.loads}
        if self.tree is not None:
            st = self.tree.stats()
            out.update(skipped=st["skipped"], out_of_order=st["out_of_order"],
                       age_mean=st["age_mean"], age_max=st["age_max"],
                       relayed=st["msgs_sent"], parent=self.tree.parent)
        return out

    def _take_tree(self) -> bool:
        """Poll the tree; load its newest message if its version is newer than the one
        loaded (a publication of the same version again only brings a newer credit)."""
        assert self.tree is not None, "an async tree subscriber's"
        self.tree.poll()
        got = self.tree.latest_message()
        if got is None or got[1] <= self.seen:
            return False
        self.seen = got[1]
        if int(got[0]["version"]) <= self.version:
            return False
        self._load(got[0])
        return True

    def drain(self) -> None:
        """Take what has arrived without loading it (cheap: call it every env step). On
        the star each arrival is copied into a latest-wins slot and its receive reposted at
        once, so the learner's next send goes straight out instead of waiting, with an old
        version in it, until the next load; on the async tree this polls (and relays)."""
        if self.tree is not None:
            self.tree.poll()
            return
        while self.inbox is not None and (msg := self.inbox.poll(self.root)) is not None:
            if int(msg["version"]) >= int(self.slot["version"]):  # the same again: a newer
                self.slot.copy_from(msg)  # credit (sends to a leaf never overtake)
            self.inbox.release(self.root)

    def newest(self) -> Message | None:
        """The newest message :meth:`drain` took, loaded or not (None before the first);
        asynchronous broadcasts only."""
        if self.tree is not None:
            got = self.tree.latest_message()
            return None if got is None else got[0]
        return self.slot if int(self.slot["version"]) != STOP_VERSION else None

    def take_newest(self) -> None:
        """Load the newest version that has arrived, if newer than the one loaded."""
        if self.tree is not None:
            self._take_tree()
            return
        self.drain()
        if int(self.slot["version"]) > self.version:
            self._load(self.slot)

    def next(self, timeout_s: float | None = None,
             on_poll: Callable[[], object] | None = None) -> int:
        if self.collective is not None:
            self.collective.broadcast(self.relay.buffer, self.root)
            return self._load(self.relay)
        if self.tree is not None:
            return self._next_tree(timeout_s, on_poll)
        if int(self.slot["version"]) > self.version:  # drained already, not yet loaded
            return self._load(self.slot)
        assert self.inbox is not None  # neither collective nor tree: the star's inbox
        version = self._load(self.inbox.recv_from(self.root, timeout_s, on_poll=on_poll))
        self.inbox.release(self.root)
        return version

    def _next_tree(self, timeout_s: float | None, on_poll: Callable[[], object] | None) -> int:
        t0 = time.perf_counter()
        limit = self.t.timeout_s if timeout_s is None else timeout_s
        backoff = Backoff(self.t.idle, self.t.spin_s)
        tree = self.tree
        assert tree is not None, "an async tree subscriber's"
        while not self._take_tree():
            if on_poll is not None:
                on_poll()
            if time.perf_counter() - t0 > limit:
                raise PeerTimeout(self.t.rank, "?" if tree.parent is None else tree.parent,
                                  "parameters (async tree broadcast)", limit)
            backoff.pause()
        return self.version

    def settle(self, timeout_s: float | None = None) -> None:
        """At the stop: relay the async tree's final version to this rank's subtree and
        wait until every child took it (nothing to do on the star or a collective)."""
        if self.tree is not None:
            self.tree.finish(timeout_s)
