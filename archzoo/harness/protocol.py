"""What every architecture's roles share: the start-up handshake, the stop protocol (the
tags are in archzoo/tags.py).

Start-up: every leaf sends HELLO with its message-schema digests to the root, which
compares them with its own and answers WELCOME or ABORT (a mismatch names the rank and
the schema). Stop is a protocol, not a kill:

1. the deciding rank sends STOP to everyone;
2. each rank stops producing, lets its in-flight sends complete, and sends BYE with
   its statistics;
3. the root drains what is in flight until it has every BYE, waits for its own
   outstanding sends, and sends FINAL;
4. all meet at a barrier with a deadline and exit 0.

With :class:`~archzoo.harness.survivors.Survivors`, an actor that died before or during
the stop is dropped instead of awaited; FINAL then tells the survivors to skip the
barrier, which would need every rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from archzoo.comm import ControlChannel, PeerTimeout, SchemaMismatch, Transport
from archzoo.comm.factory import Launch
from archzoo.config import RunConfig
from archzoo.harness import placement
from archzoo.harness.control_messages import Bye, ControlMessage, Final, Hello, Stop
from archzoo.records import ByeStats

if TYPE_CHECKING:
    from archzoo.envs import EnvSpec
    from archzoo.harness.survivors import Survivors

Control = ControlChannel[ControlMessage]  # the run's control channel
# a role's config: RankContext[ImpalaConfig] for IMPALA's roles (covariant: such a context
# is a RankContext[RunConfig] too, what the harness takes)
C = TypeVar("C", bound=RunConfig, covariant=True)
Cfg = TypeVar("Cfg", bound=RunConfig)  # the same, in a function's signature
S = TypeVar("S")  # what a role returns (the deciding rank's summary)


class StopRequested(Exception):  # noqa: N818 - a signal, not an error
    """Raised inside a leaf's wait when the root's STOP arrives."""


@dataclass(frozen=True)
class RankContext(Generic[C]):
    """One process's place in the run: its config (of its architecture's config class),
    the launch, the transport (None in a one-process run, ``--actors 0``)."""

    cfg: C
    launch: Launch
    transport: Transport | None
    t_launch: float = field(default_factory=time.time)

    @property
    def net(self) -> Transport:
        """The transport, for a rank of a run over several processes (which has one)."""
        if self.transport is None:
            raise RuntimeError(f"rank {self.rank} has no transport: a one-process run "
                               "(--actors 0) has no peers to talk to")
        return self.transport

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world_size(self) -> int:
        return self.launch.world_size


def handshake_root(control: Control, leaves: Iterable[int], digests: dict[str, str],
                   timeout_s: float) -> dict[int, Hello]:
    """Collect every leaf's HELLO, check the archzoo version and the schema digests, answer
    WELCOME (or ABORT and raise). Where each leaf runs is kept for summary.json.

    ``timeout_s`` is one deadline for every HELLO (the leaves start together), not one per
    leaf: a leaf that never answers is named ``timeout_s`` after the wait began."""
    hellos: dict[int, Hello] = {}
    problems = []
    clock = control.transport
    end = clock.now() + timeout_s
    for leaf in leaves:
        try:
            msg = control.recv_from(leaf, max(0.0, end - clock.now()))
        except PeerTimeout as e:  # named with the whole wait, not what was left of it
            raise PeerTimeout(e.rank, e.peer, e.what, timeout_s) from None
        if msg["type"] != "hello":
            raise SchemaMismatch(f"rank {leaf} sent {msg['type']!r} instead of hello")
        hellos[leaf] = msg
        version_problem = placement.record(leaf, msg.get("place"))
        if version_problem:
            problems.append(version_problem)
            continue
        for name, d in digests.items():
            if msg.get("digests", {}).get(name) != d:
                problems.append(f"rank {leaf}'s {name!r} message schema differs from rank 0's")
    for leaf in hellos:
        control.send(leaf, {"type": "abort", "reason": problems[0]} if problems
                     else {"type": "welcome"})
    control.flush(timeout_s)
    if problems:
        raise SchemaMismatch("; ".join(problems))
    return hellos


def handshake_leaf(control: Control, root: int, digests: dict[str, str],
                   timeout_s: float) -> None:
    """HELLO with this rank's schema digests and place to ``root``; its WELCOME, or its
    ABORT's reason raised."""
    control.send(root, {"type": "hello", "digests": digests, "place": placement.here()})
    reply = control.recv_from(root, timeout_s)
    if reply["type"] == "abort":
        raise SchemaMismatch(reply["reason"])
    if reply["type"] != "welcome":
        raise SchemaMismatch(f"rank {root} refused: {reply}")


class LeafControl:
    """A leaf's view of the control channel: notices STOP and FINAL from the root."""

    def __init__(self, control: Control, root: int) -> None:
        self.control, self.root = control, root
        self.stopped = False
        self.final = False
        self.barrier = True  # False when a rank died: the final barrier would need it

    def poll(self) -> None:
        for _, msg in self.control.poll():
            if msg["type"] == "stop":
                self.stopped = True
            elif msg["type"] == "final":
                self.final = True
                self.barrier = msg.get("barrier", True)

    def raise_if_stopped(self) -> None:
        self.poll()
        if self.stopped:
            raise StopRequested


def finish_leaf(ctx: RankContext[RunConfig], control: Control, lc: LeafControl, root: int,
                stats: ByeStats, drain: Callable[[], object],
                settle: Callable[[], object] | None = None) -> None:
    """Leaf side of stop: BYE with stats, keep draining until FINAL, ``settle`` (a relay
    passes the last parameters on: :meth:`ParamsSubscriber.settle`), the final barrier."""
    t = ctx.net
    bye: Bye = {"type": "bye", "stats": stats}
    control.send(root, bye)
    deadline = time.time() + t.timeout_s
    while not lc.final:
        drain()
        lc.poll()
        if time.time() > deadline:
            raise PeerTimeout(ctx.rank, root, "FINAL", t.timeout_s)
        time.sleep(1e-3)
    if settle is not None:
        settle()
    control.flush()
    if lc.barrier:
        t.barrier()


def finish_root(ctx: RankContext[RunConfig], control: Control, leaves: list[int],
                drain: Callable[[], object], outstanding: Callable[[], object],
                survivors: Survivors | None = None) -> dict[int, ByeStats]:
    """Root side of stop: STOP to all, drain until every BYE, FINAL, final barrier.

    ``survivors`` (:class:`~archzoo.harness.survivors.Survivors`): actors that die during
    the stop are dropped, and with any actor dead the barrier is skipped."""
    t = ctx.net

    def guarded(step: Callable[[], object], during: str) -> bool:
        """Run ``step``; False if an actor died in it (``survivors`` dropped it, and its
        callbacks took it out of the control channel)."""
        if survivors is None:
            step()
            return True
        return survivors.guard(lambda: step() or True, during) is not None

    def alive() -> list[int]:
        return [r for r in leaves if survivors is None or r not in survivors.dead]

    stop: Stop = {"type": "stop"}
    for leaf in alive():
        guarded(partial(control.send, leaf, stop), "the stop")
    byes: dict[int, ByeStats] = {}
    deadline = time.time() + t.timeout_s
    while len(byes) < len(alive()):
        def step() -> None:
            drain()
            for peer, msg in control.poll():
                if msg["type"] == "bye":
                    byes[peer] = msg["stats"]
        guarded(step, "the stop's drain")
        if time.time() > deadline:
            missing = ",".join(str(r) for r in alive() if r not in byes)
            raise PeerTimeout(ctx.rank, missing, "BYE", t.timeout_s)
        time.sleep(1e-4)
    while not guarded(outstanding, "the stop's last sends"):
        pass
    barrier = survivors is None or not survivors.dead
    final: Final = {"type": "final", "barrier": barrier}
    for leaf in alive():
        guarded(partial(control.send, leaf, final), "the stop")
    while not guarded(control.flush, "the stop"):
        pass
    if barrier:
        t.barrier()
    return {r: b for r, b in byes.items() if r in alive()}


def play_star_roles(ctx: RankContext[Cfg], single: Callable[[RankContext[Cfg], EnvSpec], S],
                    root: Callable[[RankContext[Cfg], EnvSpec], S],
                    leaf: Callable[[RankContext[Cfg], EnvSpec], object]) -> S | None:
    """The star role map: ``single`` when alone, else ``root`` on rank 0 and ``leaf`` on
    the others; each gets the env's spec. Returns the root's summary."""
    from archzoo.builders import env_spec

    spec = env_spec(ctx.cfg)
    if ctx.world_size == 1:
        return single(ctx, spec)
    if ctx.rank == 0:
        return root(ctx, spec)
    leaf(ctx, spec)
    return None
