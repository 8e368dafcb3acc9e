"""The statistics of the results page, from rliable (Agarwal et al. 2021, "Deep RL at the
Edge of the Statistical Precipice"): the interquartile mean (IQM) with 95% stratified
bootstrap intervals, the same for a difference of two setups' IQMs, and the probability
of improvement. A claim of "better" needs an interval that excludes a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from archzoo.extras import require

REPS = 5_000
"""Bootstrap replications per interval (rliable's default is 50,000; 5,000 keep the page's
~300 intervals to a few minutes, and the intervals move by less than 0.1 on these scores)."""
CONFIDENCE = 0.95
MIN_RUNS = 3
"""A comparison with fewer runs than this on either side makes no claim."""
Interval = tuple[float, float, float]  # point estimate, lower, upper


def _rliable():
    require("bench", "the learning benchmark's statistics")
    import warnings

    # rliable 1.2 hands arch its RandomState the way arch 7 deprecates (a FutureWarning on
    # every interval); the intervals are the same
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"arch\.bootstrap")
    from rliable import library, metrics

    return library, metrics


def _state() -> np.random.RandomState:
    return np.random.RandomState(0)  # the same page from the same records


@contextmanager
def _seeded_global() -> Iterator[None]:
    """rliable 1.2's stratified bootstraps draw their indices from the global ``np.random``
    and ignore ``random_state``, so an interval would change with whatever ran before it;
    seed the global generator for the call, then restore it."""
    saved = np.random.get_state()
    np.random.seed(0)
    try:
        yield
    finally:
        np.random.set_state(saved)


def interval_estimates(scores: dict, func: Callable[..., np.ndarray],
                       reps: int | None = None) -> tuple[dict, dict]:
    """rliable's ``get_interval_estimates`` (95%, percentile) from ``reps`` resamples
    (default: ``REPS``, read at the call), the same from the same scores whatever ran
    before."""
    library, _ = _rliable()
    with _seeded_global():
        return library.get_interval_estimates(
            scores, func, reps=REPS if reps is None else reps, confidence_interval_size=CONFIDENCE,
            random_state=_state())


def _matrix(x: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    return a.reshape(-1, 1) if a.ndim == 1 else a


def iqm(x: Sequence[float] | np.ndarray) -> Interval:
    """The IQM of runs ``x`` (runs, or runs × tasks) with its bootstrap interval."""
    _, metrics = _rliable()
    point, ci = interval_estimates({"x": _matrix(x)},
                                   lambda s: np.array([metrics.aggregate_iqm(s)]))
    return float(point["x"][0]), float(ci["x"][0][0]), float(ci["x"][1][0])


def difference(a: Sequence[float], b: Sequence[float]) -> Interval:
    """IQM(a) − IQM(b), with an interval from resampling a's and b's runs independently."""
    _, metrics = _rliable()
    point, ci = interval_estimates(
        {"d": [_matrix(a), _matrix(b)]},
        lambda x, y: np.array([metrics.aggregate_iqm(x) - metrics.aggregate_iqm(y)]))
    return float(point["d"][0]), float(ci["d"][0][0]), float(ci["d"][1][0])


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> Interval:
    """P(X > Y) averaged over tasks (runs × tasks matrices), with its interval."""
    _, metrics = _rliable()
    point, ci = interval_estimates(
        {"p": [_matrix(x), _matrix(y)]},
        lambda a, b: np.array([metrics.probability_of_improvement(a, b)]))
    return float(point["p"][0]), float(ci["p"][0][0]), float(ci["p"][1][0])


def normalized(scores: np.ndarray, random: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(score − random) / (reference − random) per task (the last axis)."""
    return (scores - random) / (reference - random)


def verdict(interval: Interval, tie: float, names: tuple[str, str], runs: tuple[int, int]
            ) -> str:
    """What an interval of a difference (tie 0) or of a probability of improvement (tie
    0.5) lets the page say about ``names[0]`` against ``names[1]``."""
    if min(runs) < MIN_RUNS:
        return f"too few runs (fewer than {MIN_RUNS})"
    _, lo, hi = interval
    if lo > tie:
        return f"{names[0]} better"
    if hi < tie:
        return f"{names[1]} better"
    return "no difference measured"
