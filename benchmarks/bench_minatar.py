"""Learning on MinAtar Breakout within a wall-clock budget: IMPALA, SEED, Ape-X and the
single-process baseline, median over seeds, and their learning curves in one figure.

For each setup and seed: ``archzoo run ARCH --config minatar --time-limit T`` (the bundled
preset, archzoo/presets/minatar/ARCH.toml; no step budget: the wall clock ends the run);
reports the mean return of the last 100 episodes at the end and the time (from the first
env step) at which it first reached ``--threshold``. A random policy averages about 0.4.

    python benchmarks/bench_minatar.py --minutes 5 --seeds 0 1 2 --figure docs/figures/minatar.png
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = "MinAtar/Breakout-v1"
PRESET = "minatar"  # the bundled preset of every setup: archzoo/presets/minatar/ARCH.toml
SETUPS = {  # each architecture with its documented MinAtar flags (--config minatar)
    "IMPALA, 2 actors": ["impala", "--actors", "2"],
    "SEED RL, 2 actors, MPI": ["seed", "--actors", "2", "--backend", "mpi"],
    "Ape-X, 2 actors": ["apex", "--actors", "2"],
    "single process (IMPALA --actors 0)": ["impala", "--actors", "0"],
}


def run(setup: list[str], seed: int, seconds: float, d: Path) -> tuple[dict, list[dict]]:
    cmd = [sys.executable, "-m", "archzoo", "run", setup[0], "--config", PRESET, "--env", ENV,
           *setup[1:], "--seed", str(seed),
           "--time-limit", str(seconds), "--total-steps", str(10**10), "--target-return", "1e9",
           "--quiet", "--log-interval", "5", "--run-dir", str(d)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-1500:]}")
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    return json.loads((d / "summary.json").read_text()), rows


def first_time(rows: list[dict], threshold: float) -> float | None:
    for row in rows:
        if row["mean_return_100"] and float(row["mean_return_100"]) >= threshold:
            return float(row["time_s"])
    return None


def draw(curves: dict[str, list[list[dict]]], path: str) -> None:
    """The learning curves of every run so far, one colour per setup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, runs) in enumerate(curves.items()):
        for j, rows in enumerate(runs):
            xs = [float(r["time_s"]) / 60 for r in rows if r["mean_return_100"]]
            ys = [float(r["mean_return_100"]) for r in rows if r["mean_return_100"]]
            ax.plot(xs, ys, color=f"C{i}", alpha=0.8, label=name if j == 0 else None)
    ax.axhline(0.4, color="gray", ls=":", label="random policy")
    ax.set_xlabel("wall-clock minutes from the first env step")
    ax.set_ylabel("mean return, last 100 episodes")
    ax.set_title(f"{ENV} on 2 CPU cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--threshold", type=float, default=6.0)
    p.add_argument("--setups", nargs="*", default=list(SETUPS), choices=list(SETUPS))
    p.add_argument("--figure", default=None, help="PNG of the learning curves")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-minatar-"))
    curves: dict[str, list[list[dict]]] = {}
    print(f"| setup | seed | return after {a.minutes:g} min | time to {a.threshold:g} (s) "
          "| env steps | fps |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    finals: dict[str, list[float]] = {name: [] for name in a.setups}
    times: dict[str, list[float]] = {name: [] for name in a.setups}
    for seed in a.seeds:  # setups alternate within a seed: a noisy machine loads all alike
        for name in a.setups:
            d = tmp / f"{list(SETUPS).index(name)}-{SETUPS[name][0]}-s{seed}"  # one per run
            s, rows = run(SETUPS[name], seed, a.minutes * 60, d)
            curves.setdefault(name, []).append(rows)
            final = s["final_mean_return"] or 0.0
            t = first_time(rows, a.threshold)
            finals[name].append(final)
            times[name].append(t if t is not None else float("inf"))
            print(f"| {name} | {seed} | {final:.2f} | {'-' if t is None else f'{t:.0f}'} | "
                  f"{s['env_steps']:,} | {s['fps']:,.0f} |", flush=True)
        if a.figure:  # redrawn after every seed: a run cut short still leaves its figure
            draw(curves, a.figure)
    med: dict[str, tuple[float, float | None]] = {}
    for name in a.setups:
        mt = statistics.median(times[name])
        med[name] = (statistics.median(finals[name]), None if mt == float("inf") else mt)
    print(f"\n| setup | median return after {a.minutes:g} min | median time to "
          f"{a.threshold:g} (s) |")
    print("| --- | ---: | ---: |")
    for name, (final, t) in med.items():
        print(f"| {name} | {final:.2f} | {'-' if t is None else f'{t:.0f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
