"""IMPALA benchmarks: steady-state throughput and time to target.

1. Throughput: IMPALA's steady-state frames/s (median of its metrics rows after a
   warm-up) beside the same number of actor processes running the same policy and envs
   with no learner and no transport, measured in the same run.
2. Time and env steps to the target (475 on CartPole-v1), measured from the first env
   step, for several seeds, beside the ``--actors 0`` single-process baseline.
3. ``--matrix``: one solve with every launch way and backend (embedded, torchrun,
   mpiexec; gloo and MPI; async and sync).

    python benchmarks/bench_impala.py [--actors 2] [--envs-per-actor 16] [--seeds 0 1 2]
    python benchmarks/bench_impala.py --matrix --throughput-actors --seeds
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _actor_only(env_id: str, envs: int, T: int, seconds: float, seed: int, q) -> None:
    """One actor process with no learner and no transport: collect unrolls for `seconds`."""
    import torch

    torch.set_num_threads(1)
    from actors.unroll import UnrollActor, unroll_schema
    from archzoo.envs import env_spec
    from archzoo.nets import ActorCritic

    spec = env_spec(env_id)
    torch.manual_seed(seed)
    actor = UnrollActor(spec, envs, T, ActorCritic(spec.obs_shape, spec.num_actions), seed)
    msg = unroll_schema(spec, T, envs).new()
    actor.collect(msg)  # warm-up
    steps0, t0 = actor.env_steps, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        actor.collect(msg)
    q.put((actor.env_steps - steps0) / (time.perf_counter() - t0))


def actor_only_fps(actors: int, env_id: str, envs: int, T: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_actor_only, args=(env_id, envs, T, seconds, i, q))
          for i in range(actors)]
    for p in ps:
        p.start()
    rates = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    return sum(rates)


def archzoo_run(args: list[str], run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "archzoo", "run", "impala", "--quiet", "--run-dir",
           str(run_dir), *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def launch_matrix(target: float, seed: int, tmp: Path) -> None:
    """Solve once with each launch way, both backends, both modes."""
    bindir = Path(sys.executable).parent
    common = ["run", "impala", "--quiet", "--target-return", str(target), "--seed", str(seed),
              "--time-limit", "300"]
    ways = {
        "embedded, gloo, async": [sys.executable, "-m", "archzoo", *common, "--actors", "2"],
        "embedded, mpi, async": [sys.executable, "-m", "archzoo", *common, "--actors", "2",
                                 "--backend", "mpi"],
        "embedded, gloo, sync": [sys.executable, "-m", "archzoo", *common, "--actors", "2",
                                 "--mode", "sync"],
        "torchrun, gloo, async": [str(bindir / "torchrun"), "--standalone",
                                  "--nproc_per_node", "3", "-m", "archzoo", *common],
        "mpiexec, mpi, async": [str(bindir / "mpiexec"), "-n", "3", sys.executable, "-m",
                                "archzoo", *common],
        "mpiexec, mpi, sync": [str(bindir / "mpiexec"), "-n", "3", sys.executable, "-m",
                               "archzoo", *common, "--mode", "sync"],
    }
    print(f"\n### Every launch way: time to {target:g} (seed {seed})\n")
    print("| launch | exit | solved | time (s) | env steps | start-up (s) | fps | policy lag |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for i, (label, cmd) in enumerate(ways.items()):
        d = tmp / f"matrix{i}"
        r = subprocess.run([*cmd, "--run-dir", str(d)], capture_output=True, text=True)
        s = json.loads((d / "summary.json").read_text()) if r.returncode == 0 else {}
        t, steps = s.get("time_to_target_s"), s.get("env_steps_to_target")
        lag = s.get("policy_lag_mean")
        print(f"| {label} | {r.returncode} | {s.get('solved')} | "
              f"{'-' if t is None else f'{t:.1f}'} | {'-' if steps is None else f'{steps:,}'} "
              f"| {s.get('startup_s', 0):.1f} | {s.get('fps', 0):,.0f} | "
              f"{'-' if lag is None else f'{lag:.2f}'} |", flush=True)


def steady_fps(run_dir: Path, warmup_s: float) -> float:
    rows = [r for r in csv.DictReader(open(run_dir / "metrics.csv"))
            if float(r["time_s"]) > warmup_s and float(r["fps"]) > 0]
    return statistics.median(float(r["fps"]) for r in rows[:-1] or rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--unroll-length", type=int, default=20)
    p.add_argument("--backend", default="gloo", choices=("gloo", "mpi"))
    p.add_argument("--seconds", type=float, default=15.0, help="throughput run length")
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--matrix", action="store_true", help="one solve per launch way")
    p.add_argument("--throughput-actors", type=int, nargs="*", default=[1, 2],
                   help="actor counts for the throughput table (empty: skip it)")
    a = p.parse_args()
    common = ["--env", a.env, "--envs-per-actor", str(a.envs_per_actor),
              "--unroll-length", str(a.unroll_length)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if a.throughput_actors:
            print(f"\n### Throughput: {a.envs_per_actor} envs per actor, {a.env}, "
                  f"{a.backend}, {a.seconds:g} s each\n")
            print("| actors | actors only (no learner, no transport) | IMPALA async, steady "
                  "state | ratio |")
            print("| ---: | ---: | ---: | ---: |")
            for n in a.throughput_actors:
                base = actor_only_fps(n, a.env, a.envs_per_actor, a.unroll_length, a.seconds)
                d = tmp_path / f"tput{n}"
                archzoo_run([*common, "--actors", str(n), "--backend", a.backend,
                             "--target-return", "1e9", "--time-limit", str(a.seconds),
                             "--log-interval", "1"], d)
                fps = steady_fps(d, warmup_s=2.0)
                print(f"| {n} | {base:,.0f} | {fps:,.0f} | {fps / base:.2f} |", flush=True)
        if a.matrix:
            launch_matrix(a.target, a.seeds[0] if a.seeds else 0, tmp_path)
        if not a.seeds:
            return
        print(f"\n### Time to {a.target:g} from the first env step\n")
        print("| setup | seed | solved | time (s) | env steps | start-up (s) |")
        print("| --- | ---: | --- | ---: | ---: | ---: |")
        medians = {}
        for label, extra in ((f"IMPALA {a.actors} actors ({a.backend})",
                              ["--actors", str(a.actors), "--backend", a.backend]),
                             ("--actors 0 baseline", ["--actors", "0"])):
            times = []
            for seed in a.seeds:
                s = archzoo_run([*common, *extra, "--seed", str(seed), "--target-return",
                                 str(a.target), "--time-limit", "300"],
                                tmp_path / f"{label[:6]}-{seed}".replace(" ", "_"))
                t = s["time_to_target_s"]
                times.append(t if t is not None else float("inf"))
                steps = s["env_steps_to_target"]
                print(f"| {label} | {seed} | {s['solved']} | "
                      f"{'-' if t is None else f'{t:.1f}'} | "
                      f"{'-' if steps is None else f'{steps:,}'} | {s['startup_s']:.1f} |",
                      flush=True)
            medians[label] = statistics.median(times)
        print()
        for label, m in medians.items():
            print(f"median time to {a.target:g}, {label}: {m:.1f} s")


if __name__ == "__main__":
    main()
