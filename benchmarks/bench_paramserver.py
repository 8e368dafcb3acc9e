"""Parameter-server and A3C benchmarks: updates/s of the shards, A3C's frames/s, solve times.

1. Parameter server alone: K shards (1 and 2) serving W = 2 workers that do nothing but push
   random float32 gradients and take the fresh parameters (``PSClient.exchange``; no env, no
   network), async mode, shared RMSProp. Two model sizes: the default CartPole ``ActorCritic``
   (4,675 parameters) and a 1M-parameter vector; both engines (gloo: K + W ranks of this
   script started with RANK/WORLD_SIZE/MASTER_* as ``tests/mp.py`` ``run_gloo`` does; MPI:
   the same ranks under the venv's ``mpiexec``, ``run_mpi``). After ``--warmup`` seconds each
   shard reads its version counter at the start and the end of a ``--seconds`` window:
   updates/s = Δversion / Δt (averaged over the K shards, which apply the same pushes), and
   each worker times every push round trip started in the window (push to all K shards,
   wait for all K replies).
2. A3C's frames/s: ``archzoo run a3c --actors 2`` (async, 1 shard, gloo) for a fixed
   ``--time-limit`` with an unreachable ``--target-return``: the median of its metrics.csv
   fps rows after a warm-up, beside 2 spawned processes that run the same actor-learner loop
   with no server and no transport (``SegmentActor.collect`` + ``a2c_gradient`` on the same
   ``ActorCritic`` and envs; the gradient is computed and thrown away), summed, in the same
   invocation. Also the shard's steady updates/s (metrics.csv ``learner_updates``) and where
   each A3C worker's time went (summary.json ``time_breakdown_s``).
3. ``--solve``: median time to 475 on CartPole-v1, from the first env step, over ``--seeds``
   for A3C (async) and A2C (``--mode sync``), 2 actors, via ``solving.time_to_target``.

    .venv/bin/python benchmarks/bench_paramserver.py                  # 1 and 2 (~2 min)
    .venv/bin/python benchmarks/bench_paramserver.py --backend gloo --no-fps
    .venv/bin/python benchmarks/bench_paramserver.py --no-ps --fps-seconds 30
    .venv/bin/python benchmarks/bench_paramserver.py --no-ps --no-fps --solve --seeds 0 1 2

Ranks run one at a time per configuration (the machine has 2 cores; K + W = 4 processes
already oversubscribe it). Timings are not asserted anywhere; the numbers go in the "Measured"
section of docs/a3c.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # for tests.mp (the launchers) when run as a script
    sys.path.insert(0, str(REPO_ROOT))

from solving import archzoo_run, time_to_target  # noqa: E402

N_GRADS = 4  # distinct random gradients each worker cycles through
TAIL_S = 0.3  # workers push this long past the window, so the shards' end sample is loaded


# ---------------------------------------------------------------------------------------------
# 1. The ranks of one parameter-server configuration (this script with --worker)
# ---------------------------------------------------------------------------------------------
def ps_rank(backend: str, n: int, k: int, seconds: float, warmup: float) -> dict:
    """Shard (ranks 0..K-1) or pushing worker (ranks K..): one rank's measurements."""
    from archzoo.comm.factory import detect_launch, make_transport
    from archzoo.paramserver import ParamShard, PSClient, SharedRMSProp, shard_bounds
    from archzoo.tags import PS_TAGS

    if backend == "gloo":
        import torch

        torch.set_num_threads(1)
    t = make_transport(backend, detect_launch(), timeout_s=60.0)
    shards, workers = list(range(k)), list(range(k, t.world_size))
    tags = PS_TAGS  # as A3C's and Gorila's
    init = (np.random.default_rng(0).standard_normal(n, dtype=np.float32)
            * np.float32(0.1)).astype(np.float32)
    out: dict = {"rank": t.rank}
    if t.rank in shards:
        lo, hi = shard_bounds(n, k)[t.rank]
        shard = ParamShard(t, init[lo:hi], workers, SharedRMSProp(7e-4, eps=1e-5), tags,
                           mode="async")
        t.barrier()
        t0 = time.monotonic()
        start = end = None  # (monotonic time, version) at the window's ends
        while not shard.finished:
            if not shard.serve():
                t.idle(2e-4)
            now = time.monotonic()
            if start is None and now >= t0 + warmup:
                start = (now, shard.version)
            if end is None and now >= t0 + warmup + seconds:
                end = (now, shard.version)
        shard.flush()
        if start is None or end is None:
            raise RuntimeError(f"shard {t.rank}: the workers left before the window ended")
        out.update(role="shard", size=hi - lo, window_s=end[0] - start[0],
                   updates=end[1] - start[1], stats=shard.stats.as_dict())
    else:
        c = PSClient(t, shards, n, tags)
        rng = np.random.default_rng(t.rank)
        grads = [(rng.standard_normal(n, dtype=np.float32) * np.float32(0.01))
                 .astype(np.float32) for _ in range(N_GRADS)]
        t.barrier()
        t0 = time.monotonic()
        c.sync()
        w_start, w_end = t0 + warmup, t0 + warmup + seconds
        lat: list[float] = []
        i = 0
        while True:
            s = time.monotonic()
            if s >= w_end + TAIL_S:
                break
            c.exchange(grads[i % N_GRADS])
            i += 1
            if w_start <= s < w_end:
                lat.append(time.monotonic() - s)
        c.close()
        out.update(role="worker", pushes=i, window_pushes=len(lat),
                   rtt_median_s=statistics.median(lat) if lat else None,
                   rtt_p90_s=float(np.percentile(lat, 90)) if lat else None)
    t.barrier()  # every BYE taken and every reply flushed before anyone leaves
    if backend == "mpi":
        t.shutdown()
    return out


def worker_main(backend: str, n: int, k: int, seconds: float, warmup: float) -> None:
    code = 0
    try:
        print("RESULT " + json.dumps(ps_rank(backend, n, k, seconds, warmup)), flush=True)
    except BaseException:  # noqa: BLE001 - report, and a gloo rank must still os._exit
        traceback.print_exc(file=sys.stdout)
        code = 1
    sys.stdout.flush()
    if backend == "gloo":
        os._exit(code)  # gloo can't withdraw posted receives
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# 1. The launcher side
# ---------------------------------------------------------------------------------------------
def launch_ps(backend: str, n: int, k: int, workers: int, seconds: float,
              warmup: float) -> dict:
    from tests.mp import describe, run_gloo, run_mpi

    argv = [str(Path(__file__).resolve()), "--worker", backend, "--n-params", str(n),
            "--shards-k", str(k), "--seconds", str(seconds), "--warmup", str(warmup)]
    budget = 120 + 3 * (seconds + warmup)
    ranks = (run_gloo(k + workers, argv, timeout_s=budget, fail_fast_s=10) if backend == "gloo"
             else run_mpi(k + workers, argv, timeout_s=budget))
    results = []
    for r in ranks:
        lines = [ln for ln in r.lines() if ln.startswith("RESULT ")]
        if r.returncode != 0 or not lines:
            raise RuntimeError(f"{backend} K={k} n={n}: rank {r.rank} failed\n{describe(ranks)}")
        results.append(json.loads(lines[-1][len("RESULT "):]))
    sh = [r for r in results if r["role"] == "shard"]
    wk = [r for r in results if r["role"] == "worker"]
    rates = [s["updates"] / s["window_s"] for s in sh]
    return {"backend": backend, "n": n, "k": k, "w": workers,
            "updates_s": statistics.mean(rates),
            "rtt_median_s": statistics.median(w["rtt_median_s"] for w in wk),
            "rtt_p90_s": max(w["rtt_p90_s"] for w in wk),
            "pushes": sum(w["window_pushes"] for w in wk),
            "stats": [s["stats"] for s in sh]}


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.0f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def ps_table(rows: list[dict]) -> str:
    out = ["| engine | parameters | shards K | workers W | updates/s | push round trip, median "
           "| p90 | gradient + parameter traffic |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        traffic = r["updates_s"] * 2 * 4 * r["n"]  # each update: a gradient in, params out
        out.append(f"| {r['backend']} | {r['n']:,} | {r['k']} | {r['w']} | "
                   f"{r['updates_s']:,.0f} | {fmt_time(r['rtt_median_s'])} | "
                   f"{fmt_time(r['rtt_p90_s'])} | {traffic / 1e6:,.0f} MB/s |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# 2. A3C frames/s beside the same actor-learners with no server
# ---------------------------------------------------------------------------------------------
def _actor_learner_only(env_id: str, envs: int, t_max: int, hidden: int, seconds: float,
                        seed: int, barrier, q) -> None:
    """One A3C actor-learner's loop with no server and no transport: collect a t_max segment,
    compute the gradient of the A2C loss (then drop it), for ``seconds``."""
    import torch

    torch.set_num_threads(1)
    from archzoo.actors.segment import SegmentActor
    from archzoo.envs import env_spec
    from archzoo.learners.a2c import A2CConfig, a2c_gradient
    from archzoo.nets import ActorCritic

    spec = env_spec(env_id)
    torch.manual_seed(0)
    model = ActorCritic(spec.obs_shape, spec.num_actions, hidden)
    actor = SegmentActor(spec, envs, t_max, model, seed)
    cfg = A2CConfig(t_max=t_max)
    for _ in range(20):  # warm-up
        a2c_gradient(model, actor.collect(), cfg)
    barrier.wait(timeout=120)
    steps0, t0 = actor.env_steps, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a2c_gradient(model, actor.collect(), cfg)
    q.put((actor.env_steps - steps0) / (time.perf_counter() - t0))
    actor.close()


def actor_learner_only_fps(actors: int, env_id: str, envs: int, t_max: int, hidden: int,
                           seconds: float) -> float:
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(actors)
    ps = [ctx.Process(target=_actor_learner_only,
                      args=(env_id, envs, t_max, hidden, seconds, 1000 + i, barrier, q))
          for i in range(actors)]
    for p in ps:
        p.start()
    rates = [q.get(timeout=seconds + 180) for _ in ps]
    for p in ps:
        p.join()
    return sum(rates)


def steady(run_dir: Path, warmup_s: float) -> tuple[float, float]:
    """Median fps of the metrics rows after ``warmup_s`` (the last, partial row left out),
    and the shard's updates/s over the same rows."""
    rows = [r for r in csv.DictReader(open(run_dir / "metrics.csv"))
            if float(r["time_s"]) > warmup_s and float(r["fps"]) > 0]
    rows = rows[:-1] or rows
    fps = statistics.median(float(r["fps"]) for r in rows)
    t = [float(r["time_s"]) for r in rows]
    u = [int(r["learner_updates"]) for r in rows]
    ups = (u[-1] - u[0]) / (t[-1] - t[0]) if len(rows) > 1 and t[-1] > t[0] else float("nan")
    return fps, ups


def fps_section(a: argparse.Namespace, tmp: Path) -> None:
    common = ["--env", a.env, "--envs-per-actor", str(a.envs_per_actor), "--t-max", str(a.t_max)]
    base = actor_learner_only_fps(a.actors, a.env, a.envs_per_actor, a.t_max, 64, a.fps_seconds)
    d = tmp / "a3c-fps"
    s = archzoo_run("a3c", [*common, "--actors", str(a.actors), "--backend", "gloo",
                            "--target-return", "1e9",
                            "--time-limit", str(a.fps_seconds + a.fps_warmup),
                            "--log-interval", "1"], d)
    fps, ups = steady(d, a.fps_warmup)
    print(f"\n### A3C frames/s: {a.actors} actor-learners × {a.envs_per_actor} envs, t_max "
          f"{a.t_max}, {a.env}; {a.fps_seconds:g} s steady state each\n")
    print("| actor-learners | same loop, no server, no transport (summed) | A3C async, 1 shard, "
          "gloo (median row) | ratio | shard updates/s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print(f"| {a.actors} | {base:,.0f} | {fps:,.0f} | {fps / base:.2f} | {ups:,.0f} |")
    ps = s.get("ps", {}).get("0", {})
    print(f"\nA3C run: {s['env_steps']:,} env steps, {s['learner_updates']:,} updates, "
          f"pushed {ps.get('pushed', 0):,}, dropped_stale {ps.get('dropped_stale', 0)}\n")
    print("| A3C worker | env | inference | gradient | push + pull | transport wait |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, tb in sorted(s.get("time_breakdown_s", {}).items()):
        if not tb:
            continue
        tot = sum(tb.get(x, 0.0) for x in ("env", "inference", "gradient", "push_pull")) or 1.0
        cells = " | ".join(f"{tb.get(x, 0.0):.1f} s ({100 * tb.get(x, 0.0) / tot:.0f}%)"
                           for x in ("env", "inference", "gradient", "push_pull"))
        print(f"| {name} | {cells} | {tb.get('wait', 0.0):.1f} s |")


# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("gloo", "mpi", "both"), default="both",
                   help="engines of the parameter-server table")
    p.add_argument("--sizes", type=int, nargs="+", default=[4675, 1_000_000],
                   help="parameter counts (4675: the default CartPole ActorCritic)")
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2], help="values of K")
    p.add_argument("--workers", type=int, default=2, help="W, pushing workers")
    p.add_argument("--seconds", type=float, default=5.0, help="measured window per config")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before the window")
    p.add_argument("--no-ps", action="store_true", help="skip the parameter-server table")
    p.add_argument("--no-fps", action="store_true", help="skip A3C's frames/s")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--t-max", type=int, default=5)
    p.add_argument("--fps-seconds", type=float, default=15.0, help="steady-state seconds")
    p.add_argument("--fps-warmup", type=float, default=3.0,
                   help="seconds of A3C's run (from the first env step) left out")
    p.add_argument("--solve", action="store_true", help="time to --target for A3C and A2C")
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--target", type=float, default=475.0)
    # worker mode (one rank of a parameter-server configuration)
    p.add_argument("--worker", choices=("gloo", "mpi"), help=argparse.SUPPRESS)
    p.add_argument("--n-params", type=int, help=argparse.SUPPRESS)
    p.add_argument("--shards-k", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker_main(a.worker, a.n_params, a.shards_k, a.seconds, a.warmup)
        return 0
    if a.seconds <= 0 or a.workers < 1 or min(a.shards) < 1:
        p.error("--seconds, --workers and --shards must be positive")
    t_all = time.perf_counter()
    if not a.no_ps:
        backends = ["gloo", "mpi"] if a.backend == "both" else [a.backend]
        rows = []
        for be in backends:
            for n in a.sizes:
                for k in a.shards:
                    rows.append(launch_ps(be, n, k, a.workers, a.seconds, a.warmup))
        print(f"\n### Parameter server, async, shared RMSProp: W = {a.workers} workers pushing "
              f"random float32 gradients (no env); {a.seconds:g} s window after "
              f"{a.warmup:g} s warm-up per row; {a.workers + max(a.shards)} processes at most "
              f"on this host\n")
        print(ps_table(rows), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if not a.no_fps:
            fps_section(a, tmp_path)
        if a.solve:
            common = ["--env", a.env, "--actors", str(a.actors)]
            time_to_target("a3c", {
                f"A3C async, {a.actors} actors (gloo)": common,
                f"A2C sync, {a.actors} actors (gloo)": [*common, "--mode", "sync"],
            }, a.seeds, a.target, tmp_path)
    print(f"\n(total {time.perf_counter() - t_all:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
