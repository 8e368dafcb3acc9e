"""The deciding rank's run, whatever the process count: one heartbeat, one stop, one finish.

:class:`Run` is what :func:`single` (``--actors 0``: one process, no transport) yields,
and what :func:`archzoo.harness.root` yields too (:class:`~archzoo.harness.roles.RootRun`
adds the leaves). A loop has the same shape in both::

    with harness.single(ctx, parts={"learner": learner}, policy=(learner.model, meta)) as run:
        while not run.stopped:
            ...                                  # act, learn, feed run.mon
            run.tick(learner.version)            # row, checkpoint, video, stop: when due
    return run.finish(learner.model, learner.version, timers={...})

:meth:`Run.tick` is the heartbeat: a metrics row every ``--log-interval`` seconds and, at
a row, a checkpoint every ``--checkpoint-interval`` seconds and a video every
``--record-video`` seconds (:meth:`~archzoo.harness.finish.OpenRun.on_row`), the run's own
checkpoints (:meth:`Run.keep`), then the stop decision. A loop that ticks cannot forget
any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from archzoo.comm import Message
from archzoo.config import RunConfig
from archzoo.harness.finish import (
    OpenRun,
    Policy,
    Stateful,
    Times,
    byte_totals,
    finish_run,
    open_run,
)
from archzoo.harness.protocol import RankContext
from archzoo.harness.stats import account_unroll
from archzoo.records import ByeStats, PolicyMeta, Summary

if TYPE_CHECKING:
    from archzoo.learners.base import UnrollLearner
    from archzoo.nets import Weights


class Keeper(Protocol):
    """A part that keeps its own file beside the run's checkpoints (a replay memory's,
    replay/keeper.py)."""

    def maybe_save(self) -> object: ...

    def save(self) -> object: ...


class Run:
    """The deciding rank's run: the run directory and Monitor (``run_dir``, ``mon``), the
    stop decision (``stop``), the heartbeat (:meth:`tick`) and the end (:meth:`finish`)."""

    def __init__(self, ctx: RankContext[RunConfig], opened: OpenRun,
                 meta: PolicyMeta | None) -> None:
        self.ctx, self.opened = ctx, opened
        self.run_dir, self.mon = opened.run_dir, opened.mon
        self.meta = meta
        self.stop: str | None = None
        self.byes: dict[int, ByeStats] = {}  # the leaves' BYE statistics (a root's)
        self._own: list[Keeper] = []

    @property
    def stopped(self) -> bool:
        """Whether the run decided to stop (at a :meth:`tick`)."""
        return self.stop is not None

    def check_stop(self) -> str | None:
        """The Monitor's decision ('target', 'steps', 'time' or None), kept in ``stop``."""
        self.stop = self.mon.check_stop()
        return self.stop

    def stop_due(self) -> bool:
        """Whether the Monitor would stop the run now, without deciding it: a wait that
        ends early on it (the next :meth:`tick` decides)."""
        return self.mon.check_stop() is not None

    def attach(self, parts: dict[str, Stateful], policy: Policy) -> None:
        """Checkpoint ``parts`` built after the run opened (they report into the Monitor);
        ``policy``: (model, meta) for policy.pt if the run fails."""
        self.opened.attach(parts, policy)
        self.meta = policy[1]

    def keep(self, *own: Keeper) -> None:
        """Parts with a checkpoint of their own: saved when due at every :meth:`tick` (and
        :meth:`log`), and at :meth:`finish`."""
        self._own.extend(own)

    def log(self) -> None:
        """The heartbeat without the stop decision (for a wait's ``on_poll``): a metrics
        row when it is time (with this rank's bytes) and what is due at a row (a
        checkpoint, a video), then the run's own checkpoints when due."""
        if self.mon.maybe_log(*byte_totals(self.ctx.transport)):
            self.opened.on_row()
        for own in self._own:
            own.maybe_save()

    def tick(self, updates: int | None = None) -> str | None:
        """The heartbeat of every loop: ``updates`` (the learner's version) into the
        Monitor, :meth:`log`, then the stop decision; returns it (None: go on)."""
        if updates is not None:
            self.mon.updates = updates
        self.log()
        return self.check_stop()

    def finish(self, policy: Weights, updates: int, *, meta: PolicyMeta | None = None,
               extra: Mapping[str, object] | None = None, device: object = "cpu",
               topology: str | None = None, applied: str = "", timers: Times | None = None,
               role: str | Callable[[int], str] = "actor") -> Summary:
        """After the loop: the own checkpoints' last save, the last metrics row,
        summary.json (``extra``) and policy.pt (``policy``, ``meta`` or the run's); the
        rest as :func:`~archzoo.harness.finish.finish_run`'s. Returns the summary."""
        for own in self._own:
            own.save()
        return finish_run(self.opened, self.stop, policy=policy,
                          meta=self.meta if meta is None else meta, updates=updates,
                          extra=extra, device=device, topology=topology, applied=applied,
                          timers=timers, byes=self.byes, role=role)


@contextmanager
def single(ctx: RankContext[RunConfig], *, eval_window: int | None = None,
           parts: dict[str, Stateful] | None = None,
           policy: Policy | None = None) -> Iterator[Run]:
    """``--actors 0``: the run directory and Monitor (``eval_window``, ``parts``,
    ``policy``: as :func:`~archzoo.harness.finish.open_run`'s), then the body; no
    transport, so no handshake and no stop protocol. :func:`archzoo.harness.root` is the
    same with leaves."""
    yield Run(ctx, open_run(ctx, eval_window, parts=parts, policy=policy),
              None if policy is None else policy[1])


def train_on_unrolls(run: Run, collect: Callable[[Message], None], msg: Message,
                     learner: UnrollLearner, after_update: Callable[[], None] | None = None
                     ) -> None:
    """``--actors 0`` with unrolls: collect one into ``msg``, account it, take one update
    on it, tick, until the run stops."""
    while not run.stopped:
        collect(msg)
        account_unroll(run.mon, msg, learner.version)
        run.mon.add_learner_stats(learner.update([msg]))
        if after_update is not None:
            after_update()
        run.tick(learner.version)
