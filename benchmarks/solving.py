"""Shared by the benchmark scripts: run archzoo as a user would and tabulate solves."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def archzoo_run(arch: str, args: list[str], run_dir: Path) -> dict:
    """``archzoo run ARCH ...`` in a subprocess; returns its summary.json."""
    cmd = [sys.executable, "-m", "archzoo", "run", arch, "--quiet", "--run-dir", str(run_dir),
           *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads((run_dir / "summary.json").read_text())


@contextlib.contextmanager
def other_checkout(rev: str, tmp: Path) -> Iterator[Path]:
    """A detached git worktree of ``rev`` under ``tmp``, removed on exit: run it with
    ``PYTHONPATH`` and ``cwd`` set to the path it yields."""
    path = tmp / "other"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(path), rev],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       check=False)


def launch_matrix(arch: str, world: int, target: float, seed: int, tmp: Path,
                  extra: list[str] = (), sync: bool = True) -> None:
    """Solve once with each launch way (embedded, torchrun, mpiexec), both backends."""
    bindir = Path(sys.executable).parent
    common = ["run", arch, "--quiet", "--target-return", str(target), "--seed", str(seed),
              "--time-limit", "300", *extra]
    here = [sys.executable, "-m", "archzoo", *common]
    mpi = [str(bindir / "mpiexec"), "-n", str(world), sys.executable, "-m", "archzoo", *common]
    ways = {
        "embedded, gloo, async": here,
        "embedded, mpi, async": [*here, "--backend", "mpi"],
        "torchrun, gloo, async": [str(bindir / "torchrun"), "--standalone",
                                  "--nproc_per_node", str(world), "-m", "archzoo", *common],
        "mpiexec, mpi, async": mpi,
    }
    if sync:
        ways["embedded, gloo, sync"] = [*here, "--mode", "sync"]
        ways["mpiexec, mpi, sync"] = [*mpi, "--mode", "sync"]
    print(f"\n### {arch}: every launch way, time to {target:g} (seed {seed}, "
          f"{world} processes)\n")
    print("| launch | exit | solved | time (s) | env steps | start-up (s) | fps | policy lag |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for i, (label, cmd) in enumerate(ways.items()):
        d = tmp / f"{arch}-matrix{i}"
        r = subprocess.run([*cmd, "--run-dir", str(d)], capture_output=True, text=True)
        s = json.loads((d / "summary.json").read_text()) if r.returncode == 0 else {}
        t, steps = s.get("time_to_target_s"), s.get("env_steps_to_target")
        lag = s.get("policy_lag_mean")
        print(f"| {label} | {r.returncode} | {s.get('solved')} | "
              f"{'-' if t is None else f'{t:.1f}'} | {'-' if steps is None else f'{steps:,}'} "
              f"| {s.get('startup_s') or 0:.1f} | {s.get('fps', 0):,.0f} | "
              f"{'-' if lag is None else f'{lag:.2f}'} |", flush=True)


def time_to_target(arch: str, setups: dict[str, list[str]], seeds: list[int], target: float,
                   tmp: Path) -> dict[str, float]:
    """Rows of time and env steps to ``target`` per setup and seed; returns the medians."""
    print(f"\n### {arch}: time to {target:g} from the first env step\n")
    print("| setup | seed | solved | time (s) | env steps | start-up (s) |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    medians = {}
    for k, (label, extra) in enumerate(setups.items()):
        times = []
        for seed in seeds:
            s = archzoo_run(arch, [*extra, "--seed", str(seed), "--target-return", str(target),
                                   "--time-limit", "300"], tmp / f"{arch}-ttt{k}-{seed}")
            t, steps = s["time_to_target_s"], s["env_steps_to_target"]
            times.append(t if t is not None else float("inf"))
            print(f"| {label} | {seed} | {s['solved']} | {'-' if t is None else f'{t:.1f}'} | "
                  f"{'-' if steps is None else f'{steps:,}'} | {s['startup_s'] or 0:.1f} |",
                  flush=True)
        medians[label] = statistics.median(times)
    print()
    for label, m in medians.items():
        print(f"median time to {target:g}, {label}: {m:.1f} s")
    return medians
