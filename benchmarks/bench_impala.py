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
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

from solving import archzoo_run, launch_matrix, time_to_target


def _actor_only(env_id: str, envs: int, T: int, seconds: float, seed: int, q) -> None:
    """One actor process with no learner and no transport: collect unrolls for `seconds`."""
    import torch

    torch.set_num_threads(1)
    from archzoo.actors.unroll import UnrollActor, unroll_schema
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
                archzoo_run("impala", [*common, "--actors", str(n), "--backend", a.backend,
                             "--target-return", "1e9", "--time-limit", str(a.seconds),
                             "--log-interval", "1"], d)
                fps = steady_fps(d, warmup_s=2.0)
                print(f"| {n} | {base:,.0f} | {fps:,.0f} | {fps / base:.2f} |", flush=True)
        if a.matrix:
            launch_matrix("impala", a.actors + 1, a.target, a.seeds[0] if a.seeds else 0,
                          tmp_path)
        if a.seeds:
            time_to_target("impala", {
                f"IMPALA {a.actors} actors ({a.backend})":
                    [*common, "--actors", str(a.actors), "--backend", a.backend],
                "--actors 0 baseline": [*common, "--actors", "0"],
            }, a.seeds, a.target, tmp_path)


if __name__ == "__main__":
    main()
