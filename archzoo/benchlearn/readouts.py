"""What a learning record says: its read-outs, from its metrics rows and its evaluation.

- **train**: the training return100 at the end (the mean return of the last 100 episodes,
  pooled over all envs of all actors; the ε-greedy architectures' includes exploration);
- **eval**: the frozen evaluation: :data:`~archzoo.benchlearn.protocol.EVAL_EPISODES`
  episodes of the final parameters in a separate pass (greedy for Q-networks, sampled for
  actor-critic policies);
- **auc**: the mean of return100 over the run (a row every few seconds), so that a schedule
  that freezes the policy at the read-out cannot hide a collapse before it.
"""

from __future__ import annotations

from typing import Any

from archzoo.benchlearn.protocol import EPSILON_ARCHS
from archzoo.collapse import GREEDY_WINDOW, collapsed, judged

Row = dict[str, float]
RETURN = "mean_return_100"
ENTROPY = "learner/entropy"
ENTROPY_FLOOR = 0.05
"""An actor-critic policy whose entropy ends below this has collapsed (the issue's bar)."""
COLLAPSE_FROM = 4.0
"""A run is judged for a collapse once its best window reached this return."""
READOUTS = ("eval", "train", "auc")


def windows(rows: list[Row], col: str = RETURN) -> list[float]:
    return [r[col] for r in rows if r.get(col) is not None]


def final(rows: list[Row], col: str = RETURN) -> float | None:
    w = windows(rows, col)
    return w[-1] if w else None


def best(rows: list[Row], col: str = RETURN) -> float | None:
    w = windows(rows, col)
    return max(w) if w else None


def mean_over_run(rows: list[Row], col: str = RETURN) -> float | None:
    """The mean of ``col`` over the rows that have it (rows are evenly spaced in time)."""
    w = windows(rows, col)
    return sum(w) / len(w) if w else None


def readouts(rows: list[Row], evaluation: dict[str, Any] | None) -> dict[str, Any]:
    """A record's read-outs (see the module's docstring) and what judges a collapse."""
    return {"train": final(rows), "train_best": best(rows), "auc": mean_over_run(rows),
            "eval": None if not evaluation else evaluation.get("mean_return"),
            "entropy_final": final(rows, ENTROPY)}


def collapse(record: dict[str, Any]) -> str | None:
    """Why a run counts as collapsed, or None, by :mod:`archzoo.collapse`'s rule (the CI
    guard's): its final window ended under COLLAPSE_RATIO × its best (once that reached
    :data:`COLLAPSE_FROM`), or its policy's entropy ended under :data:`ENTROPY_FLOOR`. The
    windows are the training return100, or for the ε-greedy architectures the periodic
    greedy evaluation's (smoothed as the guard does): their return100 pools the whole ε
    ladder, whose most exploring envs end the most episodes."""
    r = record.get("readouts") or {}
    if record.get("arch") in EPSILON_ARCHS:
        w = judged(windows(record.get("rows") or [], GREEDY_WINDOW), greedy=True)
        top, end, what = (max(w) if w else None), (w[-1] if w else None), "greedy return"
    else:
        top, end, what = r.get("train_best"), r.get("train"), "return"
    if collapsed(top, end, COLLAPSE_FROM):
        return f"{what} fell to {end:.1f} from a best window of {top:.1f}"
    ent = r.get("entropy_final")
    if ent is not None and ent < ENTROPY_FLOOR:
        return f"entropy ended at {ent:.3g}"
    return None


def score(record: dict[str, Any], readout: str) -> float | None:
    """One read-out of a finished record (None for a failed run)."""
    if record.get("error"):
        return None
    return (record.get("readouts") or {}).get(readout)
