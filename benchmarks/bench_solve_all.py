"""Every architecture's CartPole solve, this checkout against another revision, in one run.

For each architecture and seed, the two checkouts run alternately (so a noisy machine
loads both alike): ``archzoo run ARCH --seed S`` embedded on gloo with the architecture's
defaults, until the target or the time limit. Prints time and env steps to the target per
run and the medians per side, and their ratio (this / other).

    python benchmarks/bench_solve_all.py --compare d7e2054 --seeds 0 1 2
    python benchmarks/bench_solve_all.py --compare HEAD~1 --archs r2d2 \
        --flags '--env archzoo/CartPoleNoVel-v1 --actors 0' --time-limit 240
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solving import ROOT, other_checkout  # noqa: E402

ARCHS = ("impala", "seed", "ga3c", "apex", "gorila", "a3c", "gala")


def solve(repo: Path, arch: str, seed: int, run_dir: Path, time_limit: float,
          flags: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo))
    cmd = [sys.executable, "-m", "archzoo", "run", arch, *flags, "--seed", str(seed), "--quiet",
           "--time-limit", str(time_limit), "--run-dir", str(run_dir)]
    r = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:]}
    return json.loads((run_dir / "summary.json").read_text())


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", default=None, help="git revision to run beside this checkout")
    p.add_argument("--archs", nargs="*", default=list(ARCHS))
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    p.add_argument("--time-limit", type=float, default=120.0)
    p.add_argument("--flags", default="", help="more flags for every run, in one string")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-solve-"))
    sides = {"this": ROOT}
    with contextlib.ExitStack() as stack:
        if a.compare:
            sides[a.compare] = stack.enter_context(other_checkout(a.compare, tmp))
        print("| arch | seed | " + " | ".join(f"{s}: time (s) | {s}: env steps" for s in sides)
              + " |")
        print("| --- | ---: | " + " | ".join("---: | ---:" for _ in sides) + " |")
        medians: dict[tuple[str, str], float] = {}
        for arch in a.archs:
            times: dict[str, list[float]] = {s: [] for s in sides}
            for seed in a.seeds:
                cells = []
                for side, repo in sides.items():
                    s = solve(repo, arch, seed, tmp / f"{arch}-{seed}-{side[:8]}", a.time_limit,
                              shlex.split(a.flags))
                    t = s.get("time_to_target_s")
                    times[side].append(t if t is not None else float("inf"))
                    cells.append(f"{_fmt(t, '.1f')} | {_fmt(s.get('env_steps_to_target'), ',')}")
                print(f"| {arch} | {seed} | " + " | ".join(cells) + " |", flush=True)
            for side in sides:
                medians[(arch, side)] = statistics.median(times[side])
    print("\n| arch | " + " | ".join(f"median {s} (s)" for s in sides)
          + (" | ratio this / other |" if a.compare else " |"))
    print("| --- | " + " | ".join("---:" for _ in sides) + (" | ---: |" if a.compare else " |"))
    for arch in a.archs:
        row = [medians[(arch, s)] for s in sides]
        ratio = f" | {row[0] / row[1]:.2f}" if a.compare and row[1] not in (0, float("inf")) \
            else (" | -" if a.compare else "")
        print(f"| {arch} | " + " | ".join(_fmt(x, ".1f") for x in row) + ratio + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
