"""A role is its loop: the run's lifecycle around it, the same for every architecture.

:func:`leaf` and :func:`root` are context managers that do what every role repeats: the
control channel, the start-up handshake and the stop protocol of
:mod:`archzoo.harness.protocol`; on the root also what :func:`archzoo.harness.single`
gives a one-process run (:class:`~archzoo.harness.run.Run`: the run directory and the
Monitor, the heartbeat, the stop decision and summary.json) and the actors whose death
the run survives (:class:`~archzoo.harness.survivors.Survivors`). The role supplies only
what is its own: its components, how they drain, its statistics::

    with harness.leaf(ctx, digests) as link:     # HELLO/WELCOME with rank 0
        link.on_stop(out.flush, stats=lambda: {"timing": {"env": actor.env_s}})
        while True:
            link.raise_if_stopped()              # STOP ends the body
            ...
    # flushed, BYE sent with the stats, FINAL and the final barrier passed

    with harness.root(ctx, leaves, digests, parts={"learner": learner},
                      policy=(learner.model, meta)) as run:
        run.on_stop(drain=inbox.drop_all)
        while not run.stopped:
            ...
            run.tick(learner.version)            # row, checkpoint, video, stop: when due
    # STOP sent, every BYE drained, FINAL, the barrier
    return run.finish(learner.model, learner.version, extra={...})
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, TypeVar

from archzoo.comm import CommError, ControlChannel
from archzoo.config import RunConfig
from archzoo.harness import protocol
from archzoo.harness.control_messages import ControlMessage
from archzoo.harness.finish import OpenRun, Policy, Stateful, Times, open_run
from archzoo.harness.protocol import Control, LeafControl, RankContext
from archzoo.harness.run import Run
from archzoo.harness.stats import StatsReporter, absorb_stats
from archzoo.harness.survivors import Survivors
from archzoo.records import ByeStats, LeafStats, PolicyMeta, Summary
from archzoo.tags import TAG_CONTROL

if TYPE_CHECKING:
    from archzoo.nets import Weights

T = TypeVar("T")


class Droppable(Protocol):
    """A component that forgets a peer whose process died."""

    def drop(self, peer: int) -> object: ...


def _nothing() -> None:
    return None


class LeafLink:
    """A leaf's side of the run, what :func:`leaf` yields: its control link to the root."""

    def __init__(self, ctx: RankContext[RunConfig], control: Control, root: int) -> None:
        self.ctx, self.control, self.root = ctx, control, root
        self.lc = LeafControl(control, root)
        self._flush: tuple[Callable[[], object], ...] = ()
        self._stats: Callable[[], LeafStats] = LeafStats  # none: an empty record
        self._drain: Callable[[], object] = _nothing
        self._settle: Callable[[], object] | None = None

    @property
    def stopped(self) -> bool:
        """Whether the root's STOP has arrived (looks at the control channel)."""
        self.lc.poll()
        return self.lc.stopped

    def raise_if_stopped(self) -> None:
        """Raise :class:`StopRequested` once STOP has arrived: it ends the ``with`` body (also
        from a blocking wait's ``on_poll``) and the stop protocol follows."""
        self.lc.raise_if_stopped()

    @cached_property
    def reporter(self) -> StatsReporter:
        """Episode (and update) statistics to the root, every so often."""
        return StatsReporter(self.control, self.root)

    def on_stop(self, *flush: Callable[[], object], stats: Callable[[], LeafStats] | None = None,
                drain: Callable[[], object] | None = None,
                settle: Callable[[], object] | None = None) -> None:
        """What the stop does after the body, in order: each of ``flush`` (complete the sends
        in flight), BYE with ``stats()`` (its ``timing`` gets ``wait``, and ``bytes`` is
        added), ``drain()`` until FINAL, ``settle()`` (a relay passes the last parameters
        on), the final barrier."""
        self._flush = flush
        self._stats = stats or self._stats
        self._drain = drain or self._drain
        self._settle = settle

    def _finish(self) -> None:
        t = self.ctx.net
        self.lc.poll()
        self.lc.stopped = True
        for flush in self._flush:
            flush()
        stats: ByeStats = {**self._stats(), "bytes": t.counters.totals()}
        if "timing" in stats and "wait" not in stats["timing"]:
            stats["timing"] = {**stats["timing"], "wait": t.wait_s}
        protocol.finish_leaf(self.ctx, self.control, self.lc, self.root, stats, self._drain,
                    self._settle)


@contextmanager
def leaf(ctx: RankContext[RunConfig], digests: dict[str, str], *,
         root: int = 0) -> Iterator[LeafLink]:
    """A leaf role: the handshake with ``root`` (``digests``: this rank's message schemas),
    then the body; when it ends (by :class:`StopRequested` or on its own) the stop protocol
    of :meth:`LeafLink.on_stop`. Any other exception propagates, with no BYE."""
    control = ControlChannel[ControlMessage](ctx.net, [root], TAG_CONTROL)
    protocol.handshake_leaf(control, root, digests, ctx.cfg.startup_timeout)
    link = LeafLink(ctx, control, root)
    try:
        yield link
    except protocol.StopRequested:
        pass
    link._finish()


class RootRun(Run):
    """The deciding rank's side of the run, what :func:`root` yields: a
    :class:`~archzoo.harness.run.Run` (the run directory and Monitor, the heartbeat
    :meth:`~archzoo.harness.run.Run.tick`, the stop decision ``stop``), the control channel
    to the leaves, the ``survivors`` (None where every actor is needed) and, after the stop,
    the leaves' BYE statistics (``byes``)."""

    def __init__(self, ctx: RankContext[RunConfig], control: Control, leaves: list[int],
                 opened: OpenRun, survivors: Survivors | None, meta: PolicyMeta | None,
                 keep_stop_error: bool) -> None:
        super().__init__(ctx, opened, meta)
        self.control, self.leaves, self.survivors = control, leaves, survivors
        self.keep_stop_error = keep_stop_error
        self.stop_error: CommError | None = None
        self._drain: Callable[[], object] = _nothing
        self._outstanding: Callable[[], object] = _nothing

    def survive(self, *components: Droppable | None) -> None:
        """A dead actor is dropped from each of ``components`` too (their ``drop``)."""
        for c in components:
            if c is not None and self.survivors is not None:
                self.survivors.on_drop(c.drop)

    def guard(self, step: Callable[[], T], during: str) -> T | None:
        """``step()``; with survivors, an actor that dies in it is dropped (None)."""
        if self.survivors is None:
            return step()
        return self.survivors.guard(step, during)

    def absorb(self, version: int, age: Callable[[int], float | None] | None = None,
               lag: bool = True) -> None:
        """The leaves' statistics into the Monitor (:func:`absorb_stats`)."""
        def take() -> None:
            for _, msg in self.control.poll():
                absorb_stats(self.mon, msg, version, age, lag)
        self.guard(take, "taking statistics")

    def serve(self, serve: Callable[[], bool], version: Callable[[], int],
              age: Callable[[int], float | None] | None = None, lag: bool = True) -> str:
        """Rank 0 as a server (a parameter-server shard) that keeps the learning curve:
        ``serve()`` (True if it did something), absorb, tick, until the run stops."""
        t = self.ctx.net
        while not self.stopped:
            if not serve():
                t.idle(2e-4)
            self.absorb(version(), age, lag)
            self.tick(version())
        assert self.stop is not None, "the serve loop ends when the run stops"
        return self.stop

    def on_stop(self, drain: Callable[[], object] | None = None,
                outstanding: Callable[[], object] | None = None) -> None:
        """What the stop protocol does while it waits for the BYEs (``drain``: take and
        drop what is in flight) and before FINAL (``outstanding``: complete own sends)."""
        self._drain = drain or self._drain
        self._outstanding = outstanding or self._outstanding

    def finish(self, policy: Weights, updates: int, *, meta: PolicyMeta | None = None,
               extra: Mapping[str, object] | None = None, device: object = "cpu",
               topology: str | None = None, applied: str = "", timers: Times | None = None,
               role: str | Callable[[int], str] = "actor") -> Summary:
        """After the ``with``: :meth:`Run.finish <archzoo.harness.run.Run.finish>` with the
        leaves' BYE statistics and the survivors' counts in ``extra``. Returns the summary;
        with ``keep_stop_error``, a stop protocol that failed is raised here, once
        written."""
        extra = dict(extra or {})
        if self.survivors is not None:
            extra.update(self.survivors.summary())
        if self.keep_stop_error:
            extra["stop_error"] = None if self.stop_error is None else str(self.stop_error)
        summary = super().finish(policy, updates, meta=meta, extra=extra, device=device,
                                 topology=topology, applied=applied, timers=timers, role=role)
        if self.stop_error is not None:
            raise self.stop_error
        return summary

    def stop_and_drain(self) -> None:
        """The end of :func:`root`'s body: the stop protocol (STOP, every BYE while
        :meth:`on_stop`'s ``drain`` runs, ``outstanding``, FINAL, the final barrier); the
        leaves' BYE statistics into ``byes``. With ``keep_stop_error`` a failure is kept
        for :meth:`finish`."""
        try:
            self.byes = protocol.finish_root(self.ctx, self.control, self.leaves, self._drain,
                                             self._outstanding, self.survivors)
        except CommError as e:
            if not self.keep_stop_error:
                raise
            self.stop_error = e


@contextmanager
def root(ctx: RankContext[RunConfig], leaves: list[int], digests: dict[str, str], *,
         actors: list[int] | None = None, eval_window: int | None = None,
         parts: dict[str, Stateful] | None = None, policy: Policy | None = None,
         keep_stop_error: bool = False) -> Iterator[RootRun]:
    """The deciding rank: the handshake with ``leaves``, the run directory and Monitor
    (``eval_window``, ``parts``, ``policy``: as :func:`open_run`'s), then the body; when it
    ends, the stop protocol (:meth:`RootRun.on_stop`); when it raises, none.
    ``actors``: the leaves whose death the run survives (None: none; [] still counts the
    survivors in the summary). ``keep_stop_error``: a stop protocol that fails (an actor
    silent) is kept for :meth:`RootRun.finish`, which writes the summary with
    ``stop_error`` before raising it."""
    run = open_root(ctx, leaves, digests, actors=actors, eval_window=eval_window,
                    parts=parts, policy=policy, keep_stop_error=keep_stop_error)
    yield run
    run.stop_and_drain()


def open_root(ctx: RankContext[RunConfig], leaves: list[int], digests: dict[str, str], *,
              actors: list[int] | None = None, eval_window: int | None = None,
              parts: dict[str, Stateful] | None = None, policy: Policy | None = None,
              keep_stop_error: bool = False) -> RootRun:
    """:func:`root` up to its body (for a context of its own that is a root, such as
    :class:`~archzoo.harness.unroll_link.LearnerLink`, which ends with
    :meth:`RootRun.stop_and_drain`)."""
    cfg = ctx.cfg
    control = ControlChannel[ControlMessage](ctx.net, leaves, TAG_CONTROL)
    protocol.handshake_root(control, leaves, digests, cfg.startup_timeout)
    opened = open_run(ctx, eval_window, parts=parts, policy=policy)
    survivors = None
    if actors is not None:
        survivors = Survivors(ctx.rank, actors, cfg.min_actors, opened.mon.elapsed)
        survivors.on_drop(control.drop)
    return RootRun(ctx, control, leaves, opened, survivors,
                   None if policy is None else policy[1], keep_stop_error)
