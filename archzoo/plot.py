"""``archzoo plot RUN_DIR... --out fig.png``: several runs' learning curves in one figure.

Each run directory's metrics.csv gives a curve (``--x time|steps`` against ``--y
return|fps|lag``). Runs whose config.json differ only in the seed form one group, drawn as
the median over its runs with a min–max band; the runs of a group are interpolated on a
common grid up to the shortest run's last point, so every point of the band stands on all
of them. Labels name the architecture and the flags that differ between the groups of that
architecture (a flag a group leaves unset, None, is not named; two architectures' defaults
differ anyway).

Every finished run is drawn: its metrics.csv rows, and its summary.json's final values as
the last point where they come after the last row (a run stopped by a signal or an error
writes no last row). A group whose runs have a single point each (a short run writes one
metrics row, at its end) is drawn as those points with their median marked. Where no run
has a value at all, one line says so (exit code 2).

    archzoo plot runs/impala-s0 runs/impala-s1 runs/seed-s0 --x steps --out curves.png
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from archzoo.errors import UsageError

X = {"time": ("time_s", "seconds from the first env step"), "steps": ("env_steps", "env steps")}
Y = {"return": ("mean_return_100", "mean return, last 100 episodes"),
     "fps": ("fps", "env steps per second"),
     "lag": ("policy_lag", "policy lag (parameter versions)")}
# summary.json's key for the final value of each axis (wall_s counts from the first env
# step, as metrics.csv's time_s does)
SUMMARY_X = {"time": "wall_s", "steps": "env_steps"}
SUMMARY_Y = {"return": "final_mean_return", "fps": "fps", "lag": "policy_lag_mean"}
# config.json keys that do not make two runs different experiments
NOT_A_DIFFERENCE = {"seed", "run_dir", "config", "git_sha", "versions", "argv", "quiet",
                    "log_interval", "comm_timeout", "startup_timeout"}
GRID_POINTS = 200


@dataclass
class Group:
    """Runs that differ only in the seed, and what sets them apart from the other groups."""

    config: dict[str, Any]
    runs: list[Path] = field(default_factory=list)
    label: str = ""


def load_curve(run_dir: Path, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) points of ``run_dir``'s metrics.csv where y was logged, then summary.json's
    final values where they come after the last row."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise UsageError(f"{run_dir}: no metrics.csv (not a run directory?)")
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get(Y[y][0]) not in (None, "")]
    xs = [float(r[X[x][0]]) for r in rows]
    ys = [float(r[Y[y][0]]) for r in rows]
    last = final_point(run_dir, x, y)
    if last is not None and (not xs or last[0] > xs[-1]):
        xs.append(last[0])
        ys.append(last[1])
    return np.array(xs), np.array(ys)


def final_point(run_dir: Path, x: str, y: str) -> tuple[float, float] | None:
    """(x, y) of the run's end from its summary.json, or None without one or a value."""
    try:
        s = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    fx, fy = s.get(SUMMARY_X[x]), s.get(SUMMARY_Y[y])
    if not isinstance(fx, int | float) or not isinstance(fy, int | float):
        return None
    return float(fx), float(fy)


def group_runs(run_dirs: list[Path]) -> list[Group]:
    """Group the runs by their config without the seed; label each group."""
    groups: dict[str, Group] = {}
    for d in run_dirs:
        path = d / "config.json"
        if not path.is_file():
            raise UsageError(f"{d}: no config.json (not a run directory?)")
        cfg = {k: v for k, v in json.loads(path.read_text()).items()
               if k not in NOT_A_DIFFERENCE}
        key = json.dumps(cfg, sort_keys=True, default=str)
        groups.setdefault(key, Group(cfg)).runs.append(d)
    out = list(groups.values())
    for g in out:  # flags are compared between groups of one architecture only
        peers = [h for h in out if h.config.get("arch") == g.config.get("arch")]
        differ = sorted(k for k in {k for h in peers for k in h.config} if k != "arch"
                        and len({json.dumps(h.config.get(k)) for h in peers}) > 1)
        parts = [f"{k}={g.config[k]}" for k in differ if g.config.get(k) is not None]
        g.label = ", ".join([str(g.config.get("arch", "?")), *parts])
        if len(g.runs) > 1:
            g.label += f" ({len(g.runs)} seeds)"
    return out


def band(curves: list[tuple[np.ndarray, np.ndarray]],
         points: int = GRID_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid, median, min, max) of the curves, linearly interpolated on a common grid from
    the latest first point to the earliest last point of the runs; a curve of fewer than two
    points is left out (empty arrays when none is left)."""
    curves = [(x, y) for x, y in curves if len(x) >= 2]
    if not curves:
        return (np.empty(0),) * 4
    lo_x = max(float(x[0]) for x, _ in curves)
    hi_x = min(float(x[-1]) for x, _ in curves)
    grid = np.linspace(lo_x, hi_x, points) if hi_x > lo_x else np.array([hi_x])
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    return grid, np.median(ys, axis=0), ys.min(axis=0), ys.max(axis=0)


def plot(run_dirs: list[Path], x: str, y: str, out: Path, title: str | None = None
         ) -> list[Group]:
    """Draw every group into ``out`` (PNG, SVG or PDF by its suffix); returns the groups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = group_runs(run_dirs)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn, empty = 0, []
    for i, g in enumerate(groups):
        curves = [load_curve(d, x, y) for d in g.runs]
        empty += [d for d, (xs, _) in zip(g.runs, curves, strict=True) if not len(xs)]
        color = f"C{i % 10}"
        grid, med, lo, hi = band(curves)
        if len(grid) > 1:
            ax.plot(grid, med, color=color, label=g.label)
            if len(g.runs) > 1:
                ax.fill_between(grid, lo, hi, color=color, alpha=0.2, linewidth=0)
        elif points := [(float(xs[-1]), float(ys[-1])) for xs, ys in curves if len(xs)]:
            # single points (or curves that share no stretch): each run's last point, and
            # the group's median where there are several
            px, py = zip(*points, strict=True)
            several = len(points) > 1
            ax.scatter(px, py, color=color, alpha=0.5 if several else 1.0, s=25,
                       label=None if several else g.label)
            if several:
                ax.scatter([np.median(px)], [np.median(py)], color=color, marker="D", s=50,
                           label=g.label + " (median)")
        else:
            continue
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise UsageError(f"--y {y}: none of the runs has a value of {Y[y][0]} (no metrics row "
                         f"with it and no {SUMMARY_Y[y]} in summary.json): nothing to draw")
    for d in empty:
        print(f"archzoo plot: {d}: left out, no {Y[y][0]} in metrics.csv and no "
              f"{SUMMARY_Y[y]} in summary.json", file=sys.stderr)
    ax.set_xlabel(X[x][1])
    ax.set_ylabel(Y[y][1])
    ax.set_title(title or ", ".join(sorted({str(g.config.get("env")) for g in groups})))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return groups


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
                 ) -> argparse.ArgumentParser:
    p = parser_class(prog="archzoo plot", description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path, help="run directories")
    p.add_argument("--x", choices=list(X), default="time", help="x axis (default: time)")
    p.add_argument("--y", choices=list(Y), default="return", help="y axis (default: return)")
    p.add_argument("--out", type=Path, required=True, help="the figure (.png, .svg, .pdf)")
    p.add_argument("--title", default=None, help="default: the environments")
    return p


def main(argv: list[str], parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
         ) -> int:
    a = build_parser(parser_class).parse_args(argv)
    groups = plot(a.run_dirs, a.x, a.y, a.out, a.title)
    print(f"wrote {a.out}: {len(groups)} group(s) of {len(a.run_dirs)} run(s)")
    return 0
