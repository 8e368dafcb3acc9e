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
from typing import Any

from archzoo.comm import ControlChannel, PeerTimeout, SchemaMismatch, Transport
from archzoo.comm.factory import Launch
from archzoo.config import RunConfig
from archzoo.harness import placement


class StopRequested(Exception):  # noqa: N818 - a signal, not an error
    """Raised inside a leaf's wait when the root's STOP arrives."""


@dataclass
class RankContext:
    """One process's place in the run."""

    cfg: RunConfig
    launch: Launch
    transport: Transport | None
    t_launch: float = field(default_factory=time.time)

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world_size(self) -> int:
        return self.launch.world_size


def handshake_root(control: ControlChannel, leaves: Iterable[int], digests: dict[str, str],
                   timeout_s: float) -> dict[int, dict[str, Any]]:
    """Collect every leaf's HELLO, check the archzoo version and the schema digests, answer
    WELCOME (or ABORT and raise). Where each leaf runs is kept for summary.json.

    ``timeout_s`` is one deadline for every HELLO (the leaves start together), not one per
    leaf: a leaf that never answers is named ``timeout_s`` after the wait began."""
    hellos: dict[int, dict[str, Any]] = {}
    problems = []
    clock = control.transport
    end = clock.now() + timeout_s
    for leaf in leaves:
        try:
            msg = control.recv_from(leaf, max(0.0, end - clock.now()))
        except PeerTimeout as e:  # named with the whole wait, not what was left of it
            raise PeerTimeout(e.rank, e.peer, e.what, timeout_s) from None
        if msg.get("type") != "hello":
            raise SchemaMismatch(f"rank {leaf} sent {msg.get('type')!r} instead of hello")
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


def handshake_leaf(control: ControlChannel, root: int, digests: dict[str, str],
                   timeout_s: float, extra: dict[str, Any] | None = None) -> None:
    control.send(root, {"type": "hello", "digests": digests, "place": placement.here(),
                        **(extra or {})})
    reply = control.recv_from(root, timeout_s)
    if reply.get("type") != "welcome":
        raise SchemaMismatch(reply.get("reason", f"rank {root} refused: {reply}"))


class LeafControl:
    """A leaf's view of the control channel: notices STOP and FINAL from the root."""

    def __init__(self, control: ControlChannel, root: int) -> None:
        self.control, self.root = control, root
        self.stopped = False
        self.final = False
        self.barrier = True  # False when a rank died: the final barrier would need it

    def poll(self) -> None:
        for _, msg in self.control.poll():
            kind = msg.get("type")
            if kind == "stop":
                self.stopped = True
            elif kind == "final":
                self.final = True
                self.barrier = msg.get("barrier", True)

    def raise_if_stopped(self) -> None:
        self.poll()
        if self.stopped:
            raise StopRequested


def finish_leaf(ctx: RankContext, control: ControlChannel, lc: LeafControl, root: int,
                stats: dict[str, Any], drain: Callable[[], None],
                settle: Callable[[], None] | None = None) -> None:
    """Leaf side of stop: BYE with stats, keep draining until FINAL, ``settle`` (a relay
    passes the last parameters on: :meth:`ParamsSubscriber.settle`), the final barrier."""
    t = ctx.transport
    control.send(root, {"type": "bye", "stats": stats})
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


def finish_root(ctx: RankContext, control: ControlChannel, leaves: list[int],
                drain: Callable[[], None], outstanding: Callable[[], None],
                survivors: Any = None) -> dict[int, Any]:
    """Root side of stop: STOP to all, drain until every BYE, FINAL, final barrier.

    ``survivors`` (:class:`~archzoo.harness.survivors.Survivors`): actors that die during
    the stop are dropped, and with any actor dead the barrier is skipped."""
    t = ctx.transport
    def guarded(step: Callable[[], Any], during: str) -> bool:
        """Run ``step``; False if an actor died in it (``survivors`` dropped it, and its
        callbacks took it out of the control channel)."""
        if survivors is None:
            step()
            return True
        return survivors.guard(lambda: step() or True, during) is not None

    def alive() -> list[int]:
        return [r for r in leaves if survivors is None or r not in survivors.dead]

    for leaf in alive():
        guarded(lambda leaf=leaf: control.send(leaf, {"type": "stop"}), "the stop")
    byes: dict[int, Any] = {}
    deadline = time.time() + t.timeout_s
    while len(byes) < len(alive()):
        def step() -> None:
            drain()
            for peer, msg in control.poll():
                if msg.get("type") == "bye":
                    byes[peer] = msg.get("stats", {})
        guarded(step, "the stop's drain")
        if time.time() > deadline:
            missing = ",".join(str(r) for r in alive() if r not in byes)
            raise PeerTimeout(ctx.rank, missing, "BYE", t.timeout_s)
        time.sleep(1e-4)
    while not guarded(outstanding, "the stop's last sends"):
        pass
    barrier = survivors is None or not survivors.dead
    for leaf in alive():
        guarded(lambda leaf=leaf: control.send(leaf, {"type": "final", "barrier": barrier}),
                "the stop")
    while not guarded(control.flush, "the stop"):
        pass
    if barrier:
        t.barrier()
    return {r: b for r, b in byes.items() if r in alive()}


def play_star_roles(ctx: RankContext, single: Callable, root: Callable,
                    leaf: Callable) -> dict[str, Any] | None:
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
