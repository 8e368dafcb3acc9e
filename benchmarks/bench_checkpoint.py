"""What checkpoints and failures cost.

(a) Checkpointing: IMPALA and Ape-X (``--replay-capacity 100000``; the replay kept too with
    ``--checkpoint-replay``, by its shard, in its own file) on CartPole, 2 actors, each run
    ``--seconds`` long with checkpoints every second and with none but the last; steady fps
    of each (env steps between the first metrics row after ``--warmup`` and the last, over
    that time), their ratio, and seconds per checkpoint of the learner's (summary.json
    ``checkpoints.save_s / saved``). Runs alternate so that load on this shared machine
    falls on both.
(b) Recovery: the learner of an embedded IMPALA run with ``--max-restarts 1`` is killed;
    the seconds from the kill to the first metrics row of the restarted run, and to the
    first row whose fps is again 90% of the fps before the kill. An actor killed in async
    IMPALA is also timed: the run never stops learning, and the table gives the fps after
    the death against before (the dead actor does not come back).

    python benchmarks/bench_checkpoint.py --seconds 20 --repeats 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.runs import rank_pid  # noqa: E402 - the tests' way to find a rank's process

ARCHZOO = [sys.executable, "-m", "archzoo", "run"]
COMMON = ["--actors", "2", "--quiet", "--log-interval", "0.5", "--total-steps", "1000000000",
          "--target-return", "1e9", "--seed", "1"]
APEX = ["--replay-capacity", "100000", "--eval-interval", "1e9"]
SETUPS = {"impala": ("impala", []), "apex": ("apex", APEX),  # label -> (architecture, flags)
          "apex --checkpoint-replay": ("apex", [*APEX, "--checkpoint-replay"])}


def rows(d: Path) -> list[dict]:
    f = d / "metrics.csv"
    return list(csv.DictReader(open(f))) if f.is_file() else []


def steady_fps(d: Path, warmup: float) -> float:
    r = [x for x in rows(d) if float(x["time_s"]) >= warmup]
    if len(r) < 2:
        return float("nan")
    return (int(r[-1]["env_steps"]) - int(r[0]["env_steps"])) / \
        (float(r[-1]["time_s"]) - float(r[0]["time_s"]))


def checkpoint_cost(seconds: float, warmup: float, repeats: int, tmp: Path) -> None:
    print("| architecture | fps, no periodic checkpoint | fps, one per second | ratio | "
          "s per checkpoint |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, (arch, extra) in SETUPS.items():
        fps: dict[str, list[float]] = {"off": [], "on": []}
        per = []
        for i in range(repeats):
            for mode, interval in (("off", "1e9"), ("on", "1")):
                d = tmp / f"{label.replace(' ', '')}-{mode}-{i}"
                subprocess.run([*ARCHZOO, arch, *COMMON, *extra, "--time-limit", str(seconds),
                                "--checkpoint-interval", interval, "--run-dir", str(d)],
                               check=True)
                fps[mode].append(steady_fps(d, warmup))
                c = json.loads((d / "summary.json").read_text())["checkpoints"]
                if mode == "on":
                    per.append(c["save_s"] / max(1, c["saved"]))
        off, on = statistics.median(fps["off"]), statistics.median(fps["on"])
        print(f"| {label} | {off:,.0f} | {on:,.0f} | {on / off:.2f} | "
              f"{statistics.median(per):.4f} |", flush=True)


def recovery(seconds: float, tmp: Path) -> None:
    print("\n| who is killed | run | kill -> next metrics row (s) | kill -> 90% of the fps "
          "before (s) | fps after / before |")
    print("| --- | --- | ---: | ---: | ---: |")
    for who, rank, extra in (("learner (rank 0)", 0, ["--max-restarts", "1"]),
                             ("actor (rank 2)", 2, ["--actors", "3"])):
        d = tmp / f"recovery-{rank}"
        proc = subprocess.Popen([*ARCHZOO, "impala", *COMMON, *extra, "--time-limit",
                                 str(seconds), "--checkpoint-interval", "1", "--run-dir",
                                 str(d)], stderr=subprocess.DEVNULL)
        pid = rank_pid(d, rank)
        while len(rows(d)) < 2 * seconds / 3:  # learning at full speed for a while
            if proc.poll() is not None:
                raise RuntimeError(f"the run in {d} ended before the kill")
            time.sleep(0.1)
        before = [float(r["fps"]) for r in rows(d)[-4:]]
        n_before = len(rows(d))
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        first = full = None
        while proc.poll() is None and full is None:
            new = rows(d)[n_before:]
            if new and first is None:
                first = time.time() - t_kill
            if any(float(r["fps"]) >= 0.9 * statistics.mean(before) for r in new[1:]):
                full = time.time() - t_kill
            time.sleep(0.05)
        proc.wait()
        after = [float(r["fps"]) for r in rows(d)[n_before + 1:-1]]
        ratio = statistics.mean(after) / statistics.mean(before) if after else float("nan")
        how = "--max-restarts 1: whole run restarts from its checkpoint" if rank == 0 \
            else "async, 3 actors: goes on with 2"
        print(f"| {who} | {how} | {first if first is not None else float('nan'):.1f} | "
              f"{full if full is not None else float('nan'):.1f} | {ratio:.2f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds left out of fps")
    p.add_argument("--repeats", type=int, default=2, help="runs per setup (median)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        checkpoint_cost(args.seconds, args.warmup, args.repeats, Path(tmp))
        recovery(max(30.0, args.seconds), Path(tmp))


if __name__ == "__main__":
    main()
