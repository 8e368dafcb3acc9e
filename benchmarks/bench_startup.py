"""Start-up benchmark: an embedded run's ranks forked from one process that imported torch
(archzoo/forkstart.py) beside ranks started as fresh interpreters (``ARCHZOO_FORK=0``).

    python benchmarks/bench_startup.py [--repeats 5] [--actors 2] [--env CartPole-v1]

Each repeat runs ``archzoo run impala --actors A --total-steps 3000`` once each way, the two
ways alternating so that drift on a busy machine hits both alike, and takes the wall time of
the whole command and the run's own ``startup_s`` (from the launch until every rank joined).
Prints a markdown table of medians and their ratio. Nothing here is asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from archzoo import envvars

WAYS = {"fork": "1", "fresh": "0"}


def one_run(way: str, actors: int, env_id: str) -> tuple[float, float]:
    """Wall time of the command and the run's startup_s."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "archzoo", "run", "impala", "--env", env_id,
               "--actors", str(actors), "--total-steps", "3000", "--target-return", "1e9",
               "--quiet", "--run-dir", str(run_dir)]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env={**os.environ, envvars.FORK: WAYS[way]})
        wall = time.perf_counter() - t0
        summary = json.loads((run_dir / "summary.json").read_text())
        return wall, float(summary["startup_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--env", default="CartPole-v1")
    args = ap.parse_args()
    seen: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            seen[way].append(one_run(way, args.actors, args.env))
    med = {w: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for w, v in seen.items()}
    print(f"impala, {args.actors + 1} ranks, {args.env}, 3,000 agent steps; medians of "
          f"{args.repeats}\n")
    print("| ranks start as | command wall s | startup_s |")
    print("| --- | ---: | ---: |")
    for way, (wall, startup) in med.items():
        print(f"| {way} | {wall:.2f} | {startup:.2f} |")
    print(f"| fork / fresh | {med['fork'][0] / med['fresh'][0]:.2f} | "
          f"{med['fork'][1] / med['fresh'][1]:.2f} |")


if __name__ == "__main__":
    main()
