"""Pixel throughput: the env alone, env + CNN forward, every architecture, bytes per frame.

For ALE/Pong-v5 and MinAtar/Breakout-v1, in one run:
(a) frames/s of the env alone (random actions, the same vector env, 1 and 2 processes);
(b) env + the CNN's forward pass (no learner), 1 and 2 processes;
(c) each architecture's steady frames/s with 1 and 2 actor processes (env steps from the
    first metrics row after ``--warmup`` seconds to the last, over the time between), with
    the flag defaults (``--config none``: not the env family's preset) but no greedy
    evaluation in Ape-X and Gorila (their actors would play it instead of collecting);
(d) bytes on the wire per frame (every rank's sends / frames, with 2 actors);
(e) SEED's and GA3C's mean inference batch and latency (with 2 actors).
Frames are ALE frames (agent steps × frame skip 4) for ALE ids and agent steps for MinAtar.
With ``--compare REV`` the architecture rows run this checkout and a worktree of REV
alternately (so a noisy machine loads both alike) and print both and their ratio.

    python benchmarks/bench_pixels.py --seconds 20
    python benchmarks/bench_pixels.py --seconds 20 --compare 377197b^
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solving import ROOT, other_checkout  # noqa: E402

ENVS = {"ALE/Pong-v5": 4, "MinAtar/Breakout-v1": 1}  # env: frames per agent step
ARCHS = ("impala", "seed", "ga3c", "apex", "gorila", "a3c", "gala")


def _env_loop(env_id: str, envs: int, seconds: float, forward: bool, out) -> None:
    import numpy as np
    import torch

    from archzoo.envs import env_spec, make_vector_env
    from archzoo.nets import ActorCritic

    torch.set_num_threads(1)
    spec = env_spec(env_id)
    vec = make_vector_env(spec, envs)
    model = ActorCritic(spec.obs_shape, spec.num_actions, model="auto",
                        obs_dtype=spec.obs_dtype) if forward else None
    rng = np.random.default_rng(0)
    obs, _ = vec.reset(seed=0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if model is not None:
            with torch.no_grad():
                logits, _ = model(torch.from_numpy(obs))
            actions = logits.argmax(-1).numpy()
        else:
            actions = rng.integers(spec.num_actions, size=envs)
        obs, *_ = vec.step(actions)
        steps += envs
    out.put(steps / (time.perf_counter() - t0))
    vec.close()


def env_fps(env_id: str, procs: int, envs: int, seconds: float, forward: bool) -> float:
    """Agent steps/s of ``procs`` processes stepping ``envs`` envs each."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_env_loop, args=(env_id, envs, seconds, forward, q))
          for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    return sum(rates)


def arch_run(arch: str, env_id: str, actors: int, envs: int, seconds: float, warmup: float,
             tmp: Path, repo: Path = ROOT) -> dict:
    d = tmp / f"{arch}-{env_id.replace('/', '_')}-{actors}-{repo.name}"
    cmd = [sys.executable, "-m", "archzoo", "run", arch, "--env", env_id, "--actors",
           str(actors), "--envs-per-actor", str(envs), "--time-limit", str(seconds),
           "--target-return", "1e9", "--quiet", "--log-interval", "1", "--run-dir", str(d)]
    if arch in ("apex", "gorila"):  # no greedy evaluation: an actor would play it, not collect
        cmd += ["--eval-interval", "3600"]
    cmd += no_family_preset(repo)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=repo,
                       env=dict(os.environ, PYTHONPATH=str(repo)))
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    s = json.loads((d / "summary.json").read_text())
    s["steady_fps"] = steady_fps(d / "metrics.csv", warmup) or s["fps"]
    return s


def no_family_preset(repo: Path) -> list[str]:
    """``--config none`` where ``repo`` gives a MinAtar/ or ALE/ id its family's preset without
    ``--config`` (since 845d9fa), so that every revision runs the same flag defaults."""
    text = (repo / "archzoo" / "presets" / "__init__.py").read_text()
    return ["--config", "none"] if "def family(" in text else []


def steady_fps(metrics: Path, warmup: float) -> float | None:
    """Env steps/s from the first metrics row after ``warmup`` s to the last: a slope, not a
    median of rows, since rate-limited actors (Ape-X, Gorila) report their steps in bursts
    and most one-second rows then read 0. The rows logged during start-up (their clock
    restarts at the first env step) are left out."""
    with open(metrics, newline="") as f:
        rows = [(float(r["time_s"]), float(r["env_steps"])) for r in csv.DictReader(f)]
    restart = max((i for i in range(1, len(rows)) if rows[i][0] < rows[i - 1][0]), default=0)
    rows = [r for r in rows[restart:] if r[0] >= warmup]
    if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
        return None
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


def compare_rows(env_id: str, a: argparse.Namespace, tmp: Path, other: Path) -> None:
    """Each architecture's steady frames/s here and at ``a.compare``, alternating."""
    skip, E = ENVS[env_id], a.envs_per_actor
    print(f"\n| architecture | actors | this | {a.compare} | ratio this / other |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for arch in a.archs:
        for n in a.actors:
            runs = [arch_run(arch, env_id, n, E, a.seconds, a.warmup, tmp, repo)
                    for repo in (ROOT, other)]
            if any("error" in r for r in runs):
                print(f"| {arch} | {n} | error: {[r.get('error') for r in runs]} |||")
                continue
            f = [r["steady_fps"] * skip for r in runs]
            print(f"| {arch} | {n} | {f[0]:,.0f} | {f[1]:,.0f} | {f[0] / f[1]:.2f} |",
                  flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds left out of steady fps")
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--envs", nargs="*", default=list(ENVS))
    p.add_argument("--archs", nargs="*", default=list(ARCHS))
    p.add_argument("--actors", type=int, nargs="*", default=[1, 2],
                   help="actor processes per run (--compare rows)")
    p.add_argument("--compare", default=None,
                   help="git revision whose architectures run beside this checkout's")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pixels-"))
    E = a.envs_per_actor
    with contextlib.ExitStack() as stack:
        other = stack.enter_context(other_checkout(a.compare, tmp)) if a.compare else None
        for env_id in a.envs:
            skip = ENVS[env_id]
            unit = "ALE frames/s (agent steps × 4)" if skip == 4 else "frames/s (agent steps)"
            print(f"\n### {env_id}: {unit}, {E} envs per process\n")
            if other is not None:
                compare_rows(env_id, a, tmp, other)
            else:
                table(env_id, a, tmp)
    return 0


def table(env_id: str, a: argparse.Namespace, tmp: Path) -> None:
    """(a) to (e) for one env."""
    skip, E = ENVS[env_id], a.envs_per_actor
    print("| what | 1 process | 2 processes |")
    print("| --- | ---: | ---: |")
    base = {}
    for label, fwd in (("(a) env alone, random actions", False),
                       ("(b) env + CNN forward, no learner", True)):
        fps = [env_fps(env_id, n, E, a.seconds, fwd) * skip for n in (1, 2)]
        base[fwd] = fps
        print(f"| {label} | {fps[0]:,.0f} | {fps[1]:,.0f} |", flush=True)
    print("\n| architecture | frames/s, 1 actor | of (b) | frames/s, 2 actors | of (b) "
          "| bytes/frame | inference batch | latency (ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arch in a.archs:
        runs = [arch_run(arch, env_id, n, E, a.seconds, a.warmup, tmp) for n in (1, 2)]
        if any("error" in r for r in runs):
            print(f"| {arch} | error: {[r.get('error') for r in runs]} |||||||")
            continue
        f1, f2 = (r["steady_fps"] * skip for r in runs)
        bpf = runs[1]["bytes_sent_per_env_step"] / skip  # 2 actors: every role talks
        inf = runs[1].get("inference") or {}
        batch = f"{inf['mean_batch_size']:.2f}" if inf else "-"
        lat = f"{inf['mean_latency_ms']:.2f}" if inf else "-"
        name = f"{arch} (1 actor: one agent, no transport)" if arch == "gala" else arch
        print(f"| {name} | {f1:,.0f} | {f1 / base[True][0]:.2f} | {f2:,.0f} | "
              f"{f2 / base[True][1]:.2f} | {bpf:,.0f} | {batch} | {lat} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
