"""Episode statistics from the leaves to the deciding rank's Monitor.

Leaves that hold no unroll stream (Ape-X and Gorila actors, A3C actor-learners, GALA
agents) report their finished episodes on the control channel every
:data:`REPORT_INTERVAL_S`; the deciding rank folds them into its Monitor. Unrolls carry
their own episode statistics (:func:`account_unroll`). Leaves that compute updates (A3C's
actor-learners, Gorila's learners, GALA's agents) add their updates' statistics
(:data:`~archzoo.runlog.LEARNER_STATS`) to the same reports, as sums and counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from archzoo.comm import Message
from archzoo.harness.control_messages import ControlMessage, Stats
from archzoo.harness.protocol import Control
from archzoo.runlog import Monitor, accumulate_learner_stats

REPORT_INTERVAL_S = 0.25  # how often a leaf reports its episodes


def stats_message(steps: int, returns: Sequence[float], version: int | None,
                  first_step_time: float | None, eval_returns: Sequence[float] = (),
                  learner: dict[str, list[float]] | None = None) -> Stats:
    """What a leaf tells the root about its episodes (JSON on the control channel):
    ``version`` the parameters it acts with (None: it does not act), ``learner`` its
    updates' statistics since the last report, name -> [sum, count]."""
    msg: Stats = {"type": "stats", "steps": steps, "returns": [float(r) for r in returns],
                  "eval": [float(r) for r in eval_returns], "version": version,
                  "first_step_time": first_step_time}
    if learner:
        msg["learner"] = learner
    return msg


def absorb_stats(mon: Monitor, msg: ControlMessage, version: int,
                 age: Callable[[int], float | None] | None = None, lag: bool = True) -> bool:
    """Feed a leaf's stats message into the root's Monitor; False if it was no stats.

    The leaf's policy lag is ``version`` (the root's) − the version it acts with, and
    ``age(its version)`` in seconds where given (a :class:`~archzoo.runlog.VersionClock`'s);
    ``lag=False`` where the root measures the policy lag itself (A3C's shards)."""
    if msg["type"] != "stats":
        return False
    mon.add_episodes(msg["returns"])
    mon.add_steps(msg["steps"], msg.get("first_step_time"))
    mon.add_eval(msg["eval"])
    acted = msg.get("version")
    if lag and acted is not None:
        v = int(acted)
        mon.add_lag(version - v, None if age is None else age(v))
    if msg.get("learner"):
        mon.add_learner_sums(msg["learner"])
    return True


def account_unroll(mon: Monitor, msg: Message, learner_version: int,
                   lag_s: float | None = None) -> None:
    """An unroll's episodes, valid steps and policy lag (in versions, and in seconds when
    the caller knows the behaviour policy's age) into the Monitor."""
    n = int(msg["ep_count"])
    mon.add_episodes(msg["ep_returns"][:n])
    mon.add_steps(int(msg["valid"].sum()), float(msg["first_step_time"]))
    mon.add_lag(learner_version - int(msg["version"]), lag_s)


class StatsReporter:
    """A leaf's side: episode returns, env steps and greedy-evaluation returns since the
    last report, sent to ``root`` at most every :data:`REPORT_INTERVAL_S` (or at once when
    evaluation returns or many episodes are waiting)."""

    def __init__(self, control: Control, root: int) -> None:
        self.control, self.root = control, root
        self.reported_steps = 0
        self.returns: list[float] = []
        self.evals: list[float] = []
        self.learner: dict[str, list[float]] = {}  # name -> [sum, count] since the report
        self.last = time.time()

    def add(self, returns: Iterable[float] = (), evals: Iterable[float] = ()) -> None:
        self.returns.extend(float(r) for r in returns)
        self.evals.extend(float(r) for r in evals)

    def add_learner(self, stats: dict[str, float]) -> None:
        """One update's statistics (those of :data:`~archzoo.runlog.LEARNER_STATS`)."""
        accumulate_learner_stats(self.learner, stats)

    def maybe_report(self, env_steps: int, version: int | None, first_step_time: float | None,
                     max_episodes: int = 300) -> bool:
        """Send what accumulated if it is time (or evaluations wait); True if sent."""
        now = time.time()
        if not (now - self.last >= REPORT_INTERVAL_S or self.evals
                or len(self.returns) > max_episodes):
            return False
        self.control.send(self.root, stats_message(env_steps - self.reported_steps,
                                                   self.returns, version, first_step_time,
                                                   self.evals, self.learner))
        self.reported_steps, self.last = env_steps, now
        self.returns, self.evals, self.learner = [], [], {}
        return True

