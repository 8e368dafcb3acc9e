"""Batched inference: requests/s against batch size, SEED's fps beside IMPALA's, time to 475.

Three tables (each ratio against a baseline measured in the same run):

1. ``--curve``: the inference server's compute path (actors/inference.py: gather B requests'
   observations, ONE forward pass of the default network, sample actions, split the answers
   into B replies) against the unbatched rate (B forward passes of one request each), for
   B = 1 … 256, on the CPU and, where there is one, on CUDA. A request carries
   ``--envs`` observations (1 = SEED's one-env actor; archzoo's actors send E = 16).
2. ``--fps``: steady frames/s of SEED, GA3C and IMPALA with the same actors and envs per
   actor, on gloo and on MPI (median of the metrics rows after a warm-up).
3. ``--solve``: time to 475 on CartPole-v1 over seeds (median), SEED and GA3C.

    python benchmarks/bench_inference.py            # all three
    python benchmarks/bench_inference.py --curve --device cuda
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema  # noqa: E402
from archzoo.envs import env_spec  # noqa: E402
from archzoo.nets import ActorCritic  # noqa: E402
from benchmarks.bench_impala import steady_fps  # noqa: E402
from benchmarks.solving import archzoo_run, time_to_target  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _serve(policy: BatchedPolicy, reqs: list, reps: list) -> None:
    """What InferenceServer.serve does with B arrived requests, minus the transport."""
    obs = reqs[0]["obs"] if len(reqs) == 1 else np.concatenate([r["obs"] for r in reqs])
    actions, logits, values, version = policy.forward(obs)
    row = 0
    for req, rep in zip(reqs, reps, strict=True):
        n = req["obs"].shape[0]
        rep["actions"][:] = actions[row:row + n]
        rep["logits"][:] = logits[row:row + n]
        rep["values"][:] = values[row:row + n]
        rep["version"][...] = version
        row += n


def requests_per_s(policy: BatchedPolicy, reqs: list, reps: list, batched: bool,
                   min_s: float) -> float:
    """Requests answered per second, batched (one pass) or unbatched (one pass each)."""
    def once() -> None:
        if batched:
            _serve(policy, reqs, reps)
        else:
            for q, p in zip(reqs, reps, strict=True):
                _serve(policy, [q], [p])
        if policy.device.type == "cuda":
            torch.cuda.synchronize()

    once()  # warm-up (allocations, CUDA kernels)
    n, t0 = 0, time.perf_counter()
    while (el := time.perf_counter() - t0) < min_s or n < 3:
        once()
        n += 1
    return n * len(reqs) / el


def curve(device: str, env: str, envs: int, hidden: int, min_s: float) -> None:
    spec = env_spec(env)
    torch.manual_seed(0)
    policy = BatchedPolicy(ActorCritic(spec.obs_shape, spec.num_actions, hidden),
                           torch.device(device), seed=0)
    rs, ps = request_schema(spec, envs), reply_schema(spec, envs)
    rng = np.random.default_rng(0)
    print(f"\n### inference requests/s vs batch size — {device}, {env}, MLP {hidden}x{hidden}, "
          f"{envs} observation(s) per request, torch threads {torch.get_num_threads()}\n")
    print("| batch (requests) | rows | unbatched req/s | batched req/s | batched / unbatched |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for b in BATCHES:
        reqs = [rs.new() for _ in range(b)]
        reps = [ps.new() for _ in range(b)]
        for r in reqs:
            r["obs"][:] = rng.standard_normal(r["obs"].shape)
        un = requests_per_s(policy, reqs, reps, False, min_s)
        ba = requests_per_s(policy, reqs, reps, True, min_s)
        print(f"| {b} | {b * envs} | {un:,.0f} | {ba:,.0f} | {ba / un:.1f}× |", flush=True)


def fps_table(actors: int, envs: int, seconds: float, tmp: Path) -> None:
    print(f"\n### steady frames/s, {actors} actors × {envs} envs, CartPole-v1, "
          f"{seconds:.0f} s each (median metrics row after 3 s)\n")
    print("| backend | IMPALA fps | SEED fps | SEED / IMPALA | GA3C fps | GA3C / IMPALA | "
          "SEED batch | SEED latency (ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for backend in ("gloo", "mpi"):
        fps, summaries = {}, {}
        for arch in ("impala", "seed", "ga3c"):
            d = tmp / f"fps-{arch}-{backend}"
            summaries[arch] = archzoo_run(arch, [
                "--actors", str(actors), "--envs-per-actor", str(envs), "--backend", backend,
                "--target-return", "1e9", "--time-limit", str(seconds), "--log-interval", "1",
                "--total-steps", "100000000"], d)
            fps[arch] = steady_fps(d, 3.0)
        inf = summaries["seed"]["inference"]
        print(f"| {backend} | {fps['impala']:,.0f} | {fps['seed']:,.0f} | "
              f"{fps['seed'] / fps['impala']:.2f} | {fps['ga3c']:,.0f} | "
              f"{fps['ga3c'] / fps['impala']:.2f} | {inf['mean_batch_size']:.2f} | "
              f"{inf['mean_latency_ms']:.3f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--curve", action="store_true", help="requests/s vs batch size only")
    p.add_argument("--fps", action="store_true", help="SEED/GA3C vs IMPALA fps only")
    p.add_argument("--solve", action="store_true", help="time to 475 only")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cpu, and cuda if any)")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", type=int, nargs="*", default=[1, 16],
                   help="observations per request in the curve")
    p.add_argument("--hidden", type=int, default=64, help="the default network's width")
    p.add_argument("--min-s", type=float, default=0.3, help="seconds per curve point")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--backend", default="mpi", choices=("gloo", "mpi"),
                   help="backend of the time-to-475 runs")
    a = p.parse_args()
    everything = not (a.curve or a.fps or a.solve)
    torch.set_num_threads(1)
    if a.curve or everything:
        devices = [a.device] if a.device else ["cpu"] + (["cuda"] if torch.cuda.is_available()
                                                         else [])
        for dev in devices:
            for e in a.envs:
                curve(dev, a.env, e, a.hidden, a.min_s)
    with tempfile.TemporaryDirectory() as tmp:
        if a.fps or everything:
            fps_table(a.actors, a.envs_per_actor, a.seconds, Path(tmp))
        if a.solve or everything:
            for arch in ("seed", "ga3c"):
                time_to_target(arch, {f"{a.actors} actors, {a.backend}": [
                    "--actors", str(a.actors), "--backend", a.backend]}, a.seeds, 475.0,
                    Path(tmp))
    print(f"\n(torch {torch.__version__})")


if __name__ == "__main__":
    main()
