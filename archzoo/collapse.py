"""When a learning curve counts as collapsed: one criterion for the CI guard
(tests/test_learning_guard.py) and the learning benchmark (benchmarks/bench_learning.py).

A run collapsed if, once its best window reached a threshold, its final window is under
:data:`COLLAPSE_RATIO` of that best. The windows are the ones metrics.csv logs: the mean
return of the last 100 episodes, or for the ε-greedy architectures (Ape-X, Gorila, R2D2)
the greedy evaluation's last 30 episodes. A window of 30 moves by ±2 at a return of 7, so
its best is mostly a lucky draw; those are judged on the mean of :data:`GREEDY_ROWS`
consecutive windows (up to 90 episodes), near the others' 100.
"""

from __future__ import annotations

from collections.abc import Sequence

COLLAPSE_RATIO = 0.7
GREEDY_ROWS = 3
RETURN_WINDOW = "mean_return_100"
"""metrics.csv's column of the mean return of the last 100 episodes."""
GREEDY_WINDOW = "eval_mean_return"
"""metrics.csv's column of the greedy evaluation's last 30 episodes (the ε-greedy archs)."""


def smoothed(w: Sequence[float], k: int) -> list[float]:
    """The mean of every ``k`` consecutive windows (none when there are fewer than ``k``)."""
    return [sum(w[i - k + 1:i + 1]) / k for i in range(k - 1, len(w))]


def judged(w: Sequence[float], greedy: bool) -> list[float]:
    """The windows a run is judged on: ``w`` as logged, or smoothed over
    :data:`GREEDY_ROWS` rows for the greedy evaluation's windows of 30 episodes."""
    return smoothed(w, GREEDY_ROWS) if greedy else list(w)


def collapsed(best: float | None, final: float | None, threshold: float) -> bool:
    """The final window under :data:`COLLAPSE_RATIO` × the best, after the best reached
    ``threshold``."""
    return best is not None and final is not None and best >= threshold and \
        final < COLLAPSE_RATIO * best
