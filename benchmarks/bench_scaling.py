"""Where distribution pays: agent steps/s against actors N and env latency L, measured for
IMPALA, SEED RL, GA3C, Ape-X, A3C and R2D2, beside the model of archzoo/scaling.py.

Every point is one ``archzoo study --store`` run (``--time-limit`` seconds of training, one
seed) appended to the store (benchmarks/results/scaling.jsonl) with its commit, config,
threads and machine; points already in the store are skipped, so the sweep resumes where it
stopped, and ``--max-minutes`` ends it between points (run it in chunks). The forward pass
per batch size of SEED RL's and GA3C's policies is measured once per env into the store
(``kind: forward-cost``). ``--report`` draws docs/figures/scaling-L*.png (steps/s against N
per L: points and the model's line, per architecture) and writes docs/scaling.md from the
store alone.

    python benchmarks/bench_scaling.py --dry-run                     # the grid, done or not
    python benchmarks/bench_scaling.py --max-minutes 14              # run the next points
    python benchmarks/bench_scaling.py --report                      # figures and the page
    python benchmarks/bench_scaling.py --archs impala,seed --envs breakout --latency 5 \\
        --actors 1,2,4 --report
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from archzoo import scaling  # noqa: E402
from archzoo.jsonl import append as append_record  # noqa: E402
from archzoo.jsonl import read as read_records  # noqa: E402

ENVS = {"breakout": ("MinAtar/Breakout-v1", ["--config", "minatar"]),
        "cartpole": ("CartPole-v1", [])}
ARCHS = scaling.ARCHS
STORE = ROOT / "benchmarks" / "results" / "scaling.jsonl"
PAGE = ROOT / "docs" / "scaling.md"
FIGURES = ROOT / "docs" / "figures"
TOPOLOGY_ARCHS = ("impala", "apex")  # the parameter broadcast compared at N = 16
FIT_LATENCY_MS = 5.0
TEN_GBIT = 10e9 / 8  # bytes/s
READOUT_N = (1, 4, 16)  # the N of the read-out table
COLORS = {"impala": "tab:blue", "seed": "tab:orange", "ga3c": "tab:green",
          "apex": "tab:red", "a3c": "tab:purple", "r2d2": "tab:brown"}
NAMES = {"impala": "IMPALA", "seed": "SEED RL", "ga3c": "GA3C", "apex": "Ape-X",
         "a3c": "A3C", "r2d2": "R2D2"}


def csv_list(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", type=csv_list(str), default=list(ARCHS))
    p.add_argument("--envs", type=csv_list(str), default=list(ENVS), help="breakout,cartpole")
    p.add_argument("--actors", type=csv_list(int), default=[1, 2, 4, 8, 16])
    p.add_argument("--latency", type=csv_list(float), default=[0.0, 1.0, 5.0, 20.0],
                   help="env latencies L in ms")
    p.add_argument("--seconds", type=float, default=30.0, help="--time-limit of each point")
    p.add_argument("--no-topology", action="store_true",
                   help="leave out the tree-broadcast points (IMPALA, Ape-X at N = 16, "
                   f"L = {FIT_LATENCY_MS:g} ms, Breakout)")
    p.add_argument("--store", type=Path, default=STORE)
    p.add_argument("--out", type=Path, default=Path("/tmp/bench-scaling"),
                   help="run directories of the points")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no point after this many minutes")
    p.add_argument("--dry-run", action="store_true", help="list the points, done or not")
    p.add_argument("--report", action="store_true",
                   help="draw the figures and write docs/scaling.md from the store")
    p.add_argument("--page", type=Path, default=PAGE, help="the page --report writes")
    p.add_argument("--figures", type=Path, default=FIGURES,
                   help="the folder of --report's figures (scaling-L*.png)")
    p.add_argument("--fit-actors", type=csv_list(int), default=[1, 4],
                   help=f"the two N the model is fitted on (at L = {FIT_LATENCY_MS:g} ms)")
    a = p.parse_args(argv)
    for name in a.archs:
        if name not in ARCHS:
            p.error(f"--archs {name}: not one of {', '.join(ARCHS)}")
    for name in a.envs:
        if name not in ENVS:
            p.error(f"--envs {name}: not one of {', '.join(ENVS)}")
    return a


# -- the grid ----------------------------------------------------------------------------------


def extra_flags(env: str, seconds: float) -> list[str]:
    """The flags after ``--`` of every point of ``env``: the env and its preset, a time
    limit, a step budget it never reaches, no TensorBoard files."""
    env_id, preset = ENVS[env]
    return ["--env", env_id, *preset, "--time-limit", f"{seconds:g}", "--total-steps",
            "1000000000", "--no-tensorboard"]


def grid(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Every point: (arch, env, actors, latency, topology)."""
    pts = [{"arch": arch, "env": env, "actors": n, "latency": ms, "topology": "star"}
           for env in a.envs for ms in a.latency for arch in a.archs for n in a.actors]
    if not a.no_topology and "breakout" in a.envs and FIT_LATENCY_MS in a.latency:
        pts += [{"arch": arch, "env": "breakout", "actors": 16, "latency": FIT_LATENCY_MS,
                 "topology": "tree"} for arch in TOPOLOGY_ARCHS if arch in a.archs]
    return pts


def study_argv(pt: dict[str, Any], a: argparse.Namespace) -> list[str]:
    return ["study", "--arch", pt["arch"], "--topology", pt["topology"], "--actors",
            str(pt["actors"]), "--env-latency-ms", f"{pt['latency']:g}", "--store",
            str(a.store), "--out", str(a.out / pt["env"]), "--",
            *extra_flags(pt["env"], a.seconds)]


def point_of(pt: dict[str, Any], a: argparse.Namespace) -> tuple[dict, list[str]]:
    """The study's point and flags for ``pt`` (what its store key is made of)."""
    point = {"arch": pt["arch"], "topology": pt["topology"], "actors": pt["actors"],
             "backend": "gloo", "mode": "async", "seed": 0, "straggler": "none",
             "params": None, "hidden": None, "link": "loopback",
             "env_latency_ms": pt["latency"]}
    return point, extra_flags(pt["env"], a.seconds)


def point_seconds(pt: dict[str, Any], seconds: float) -> float:
    """A point's wall time on this machine, start-up and stop included: 30-s points took
    37-46 s at N <= 4 and about 60 s at N = 16 (2 cores)."""
    return seconds + 8 + 1.5 * pt["actors"]


def forward_flags(arch: str, env: str) -> list[str]:
    env_id, preset = ENVS[env]
    return [arch, "--env", env_id, *preset]


def measure_forwards(a: argparse.Namespace, records: list[dict]) -> None:
    """The forward pass per batch size of SEED RL's and GA3C's policies, once per env."""
    from archzoo.provenance import provenance

    have = {(r["arch"], r["env"]) for r in records if r.get("kind") == "forward-cost"}
    for env in a.envs:
        for arch in scaling.BATCHED:
            if arch in a.archs and (arch, env) not in have:
                f0, f1 = scaling.measure_forward(forward_flags(arch, env))
                append_record(a.store, {"kind": "forward-cost", "arch": arch, "env": env,
                                        "f0_s": f0, "f1_s": f1, **provenance()})
                print(f"forward pass of {arch} on {env}: {f0 * 1e6:.0f} µs + "
                      f"{f1 * 1e6:.2f} µs per observation", flush=True)


def run(a: argparse.Namespace) -> int:
    from archzoo.study import point_key, stored_points

    done = stored_points(a.store)
    pts = grid(a)
    todo = [pt for pt in pts if point_key(*point_of(pt, a)) not in done]
    if a.dry_run:
        for pt in pts:
            state = "todo" if pt in todo else "done"
            print(f"{state}  {pt['env']:8s} {pt['arch']:6s} N={pt['actors']:<3d} "
                  f"L={pt['latency']:g}ms {pt['topology']}")
        minutes = sum(point_seconds(pt, a.seconds) for pt in todo) / 60
        print(f"{len(todo)} of {len(pts)} points to run, about {minutes:.0f} min")
        return 0
    t0 = time.time()
    measure_forwards(a, read_records(a.store))
    failed = 0
    for k, pt in enumerate(todo, 1):
        if a.max_minutes is not None and time.time() - t0 > 60 * a.max_minutes:
            print(f"stopped after {a.max_minutes:g} min: {len(todo) - k + 1} points left")
            break
        cmd = [sys.executable, "-m", "archzoo", *study_argv(pt, a)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = (r.stdout + r.stderr).strip().splitlines()
        said = lines[-2] if len(lines) > 1 else " ".join(lines)
        print(f"[{k}/{len(todo)}] {pt['env']} {pt['arch']} {said.split('] ', 1)[-1]}",
              flush=True)
        failed += r.returncode != 0
    return 1 if failed else 0


# -- the report ----------------------------------------------------------------------------------


def load(store: Path) -> tuple[list[dict], dict[tuple[str, str], tuple[float, float]]]:
    """The newest successful record of every point (with its env's short name) and the
    forward costs per (arch, env)."""
    records = read_records(store)
    env_of = {v[0]: k for k, v in ENVS.items()}
    newest: dict[str, dict] = {}
    forwards = {}
    for r in records:
        if r.get("kind") == "forward-cost":
            forwards[(r["arch"], r["env"])] = (r["f0_s"], r["f1_s"])
        elif r.get("kind") == "scaling-point" and r.get("exit_code") == 0 and r.get("config"):
            r["env"] = env_of.get(r["config"]["env"], r["config"]["env"])
            newest[r["key"]] = r
    return list(newest.values()), forwards


def n_of(r: dict) -> int:
    return int(r["point"]["actors"])


def ms_of(r: dict) -> float:
    return float(r["point"].get("env_latency_ms") or 0.0)


def fps(r: dict) -> float:
    return float(r["metrics"]["agent_steps_per_s"])


def models(points: list[dict], forwards: dict, fit_actors: list[int]) -> dict:
    """(arch, env) -> (Costs, the two records fitted on), from the star points at L = 5 ms."""
    ab = scaling.load_alpha_beta("gloo")
    out = {}
    for arch, env in sorted({(r["point"]["arch"], r["env"]) for r in points}):
        at = {n_of(r): r for r in points if r["point"]["arch"] == arch and r["env"] == env
              and r["point"]["topology"] == "star" and ms_of(r) == FIT_LATENCY_MS}
        first = at.get(fit_actors[0])
        if first is None:
            continue
        second = at.get(fit_actors[1]) or (at[max(at)] if max(at) > fit_actors[0] else None)
        cores = first.get("cpu_count")
        out[(arch, env)] = (scaling.fit(first, second, ab, forwards.get((arch, env)), cores),
                            [x for x in (first, second) if x is not None])
    return out


def measured_knee(series: dict[int, float], efficiency: float = 0.8) -> tuple[int, float]:
    """The last measured N (in order) whose steps/s is at least ``efficiency`` × N × the
    one-actor steps/s, with its efficiency."""
    one = series.get(1)
    best = (1, 1.0)
    if not one:
        return best
    for n in sorted(series):
        eff = series[n] / (n * one)
        if eff < efficiency:
            break
        best = (n, eff)
    return best


def figure(points: list[dict], fitted: dict, ms: float, envs: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(envs), figsize=(6.2 * len(envs), 4.6), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        for arch in ARCHS:
            pts = sorted((n_of(r), fps(r)) for r in points if r["point"]["arch"] == arch
                         and r["env"] == env and ms_of(r) == ms
                         and r["point"]["topology"] == "star")
            if not pts:
                continue
            ax.plot(*zip(*pts, strict=True), "o", color=COLORS[arch], label=NAMES[arch])
            if (arch, env) in fitted:
                c = fitted[(arch, env)][0]
                ns = list(range(1, max(16, max(n for n, _ in pts)) + 1))
                ax.plot(ns, [scaling.predict(c, n, ms * 1e-3).steps_per_s for n in ns], "-",
                        color=COLORS[arch], alpha=0.7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("actors N")
        ax.set_ylabel("agent steps / s")
        ax.set_title(f"{ENVS[env][0]}, L = {ms:g} ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("points: measured; lines: the model (fitted at N = 1 and one more point, "
                 f"L = {FIT_LATENCY_MS:g} ms)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fmt(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:,.{digits}f}"


def report(a: argparse.Namespace) -> None:
    points, forwards = load(a.store)
    if not points:
        raise SystemExit(f"no scaling points in {a.store}: run the sweep first")
    fitted = models(points, forwards, a.fit_actors)
    envs = [e for e in ENVS if any(r["env"] == e for r in points)]
    lats = sorted({ms_of(r) for r in points})
    figs = []
    for ms in lats:
        path = a.figures / f"scaling-L{ms:g}.png"
        figure(points, fitted, ms, envs, path)
        figs.append((ms, path))
    a.page.write_text(page(points, fitted, figs, envs, lats, a))
    print(f"wrote {a.page} and {', '.join(str(p) for _, p in figs)}")


def page(points: list[dict], fitted: dict, figs: list, envs: list[str], lats: list[float],
         a: argparse.Namespace) -> str:
    star = [r for r in points if r["point"]["topology"] == "star"]
    commits = sorted({(r["commit"] or "?")[:9] + ("+dirty" if r.get("dirty") else "")
                      for r in points})
    machine = {(r["cpu_count"], r["cpu_model"]) for r in points}
    secs = sorted({float(r["config"]["time_limit"]) for r in points})
    store = a.store.resolve()
    source = str(store.relative_to(ROOT)) if store.is_relative_to(ROOT) else str(store)
    L = ["# When distribution pays", "",
         "Generated by `python benchmarks/bench_scaling.py --report` from "
         f"[{source}]({os.path.relpath(a.store.resolve(), a.page.resolve().parent)}) "
         "(one JSON line per point: its commit, config, threads, machine, summary); do not "
         "edit.",
         "",
         "These architectures were built for environments slower than the learner "
         "([Espeholt et al. 2018](references.md#impala); [Horgan et al. 2018]"
         "(references.md#ape-x); [Babaeizadeh et al. 2017](references.md#ga3c); "
         "[Espeholt et al. 2020](references.md#seed-rl)). "
         "`--env-latency-ms L` models such a simulator (a game engine behind an RPC, a robot, "
         "a physics engine elsewhere): each vector step of an actor waits L ms in a sleep, "
         "once for all its envs, without CPU (archzoo/latency.py), so N actor processes on "
         "this machine's cores are N remote simulators, while inference and learning still "
         "cost real CPU (`--env-latency-jitter-ms J` draws each wait from [L − J, L + J], "
         "`--env-latency-spin S` makes a fraction S of it CPU work). Each point below is one "
         f"run of {'/'.join(f'{s:g}' for s in secs)} s of training (one seed) with the env's "
         f"preset; machine: {'; '.join(f'{c} cores, {m}' for c, m in sorted(machine))}; "
         f"commit {', '.join(commits)}. This page holds {len(points)} of the "
         f"{len(grid(parse([])))} points of the full grid (`--dry-run` lists them).", "",
         "The model (archzoo/scaling.py) is a bottleneck model: an actor's vector step of E "
         "envs takes t = L + σ·(c_env + c_actor) + r (its own CPU, and r, its wait on a "
         "central service: SEED RL's and GA3C's inference, A3C's push-pull); each central "
         "process i costs k_i CPU seconds per env step on one core; agent steps/s X = "
         "min(N·E/t, 1/(σ·k_i), B/bytes at the root), σ ≥ 1 slowing all CPU work until "
         "X·(Σ per-step CPU) fits in the C cores the processes had. The costs come from the "
         "one-actor run's time breakdown, the α–β fit of `archzoo bench comm` and "
         "`scaling.measure_forward` (SEED RL's and GA3C's forward pass per batch size); C is "
         "fitted to a second point.", ""]
    # -- knees
    L += ["## The knee of each architecture", "",
          "Per L: the last measured N whose agent steps/s is still at least 80% of N × the "
          "one-actor steps/s, with that efficiency and the one-actor steps/s; then the model's "
          "knee and why it stops there (`learner`, `inference`, `replay`, `ps`: a central "
          "process is saturated; `cores`: the machine's cores are shared out; `root "
          "broadcast`, `root bandwidth`: the root's sends or its link; `updates`: SEED RL's "
          "actors wait behind the learner's updates, which stop its inference; `actors`: it "
          "still scales).", "",
          "| env | arch | " + " | ".join(f"L = {ms:g} ms" for ms in lats) + " |",
          "| --- | --- | " + " | ".join("---" for _ in lats) + " |"]
    for env in envs:
        for arch in ARCHS:
            cells = []
            for ms in lats:
                series = {n_of(r): fps(r) for r in star if r["point"]["arch"] == arch
                          and r["env"] == env and ms_of(r) == ms}
                if not series:
                    cells.append("–")
                    continue
                kn, ke = measured_knee(series)
                cell = f"{kn} ({ke:.2f} of {fmt(series.get(1))}/s)"
                if (arch, env) in fitted:
                    mk, why = scaling.knee(fitted[(arch, env)][0], ms * 1e-3)
                    cell += f"; model {mk}, {why}"
                cells.append(cell)
            if any(c != "–" for c in cells):
                L.append(f"| {env} | {NAMES[arch]} | " + " | ".join(cells) + " |")
    # -- crossover
    L += ["", "## SEED RL against IMPALA", "",
          "Central batched inference (SEED RL) against inference on each actor (IMPALA): the "
          "smallest measured N at which SEED RL's steps/s passes IMPALA's, per env and L "
          "(the model's beside it, N up to 256).", "",
          "| env | L (ms) | measured | model |", "| --- | --- | --- | --- |"]
    for env in envs:
        for ms in lats:
            s = {n_of(r): fps(r) for r in star if r["point"]["arch"] == "seed"
                 and r["env"] == env and ms_of(r) == ms}
            i = {n_of(r): fps(r) for r in star if r["point"]["arch"] == "impala"
                 and r["env"] == env and ms_of(r) == ms}
            if not s or not i:
                continue
            both = sorted(set(s) & set(i))
            meas = next((f"N = {n}" for n in both if s[n] > i[n]),
                        f"not up to N = {both[-1]}" if both else "–")
            mod = "–"
            if ("seed", env) in fitted and ("impala", env) in fitted:
                cs, ci = fitted[("seed", env)][0], fitted[("impala", env)][0]
                mod = next((f"N = {n}" for n in range(1, 257)
                            if scaling.predict(cs, n, ms * 1e-3).steps_per_s
                            > scaling.predict(ci, n, ms * 1e-3).steps_per_s), "never")
            L.append(f"| {env} | {ms:g} | {meas} | {mod} |")
    # -- model error
    L += ["", "## The model against the points", "",
          f"Fitted per architecture and env on N = {a.fit_actors[0]} and N = "
          f"{a.fit_actors[1]} at L = {FIT_LATENCY_MS:g} ms (archzoo/scaling.py: the costs of "
          "the one-actor run, calibrated to its steps/s, and the cores the processes had to "
          "the second point); every other point is a prediction. Error: |model − measured| / "
          "measured.", "",
          "| arch | env | fitted cores | predicted points | median error | "
          "worst (N, L, error, bound) |", "| --- | --- | --- | --- | --- | --- |"]
    misses = []
    for (arch, env), (c, used) in sorted(fitted.items()):
        one = used[0]
        used_keys = {r["key"] for r in used}
        errs = []
        for r in star:
            if r["point"]["arch"] != arch or r["env"] != env or r["key"] in used_keys:
                continue
            p = scaling.predict(c, n_of(r), ms_of(r) * 1e-3)
            errs.append((abs(p.steps_per_s - fps(r)) / fps(r), n_of(r), ms_of(r), p.bound,
                         why_missed(r, c, one)))
        if not errs:
            continue
        worst = max(errs)
        misses += [(arch, env, *e) for e in errs if e[0] > 0.25]
        L.append(f"| {NAMES[arch]} | {env} | {c.cores:.2f} | {len(errs)} | "
                 f"{statistics.median(e[0] for e in errs):.0%} | "
                 f"N = {worst[1]}, L = {worst[2]:g}, {worst[0]:.0%}, {worst[3]} |")
    if misses:
        L += ["", f"Points off by more than 25%: {len(misses)} of "
              f"{sum(1 for r in star)} ("
              + "; ".join(f"{NAMES[m[0]]} {m[1]} N = {m[3]} L = {m[4]:g}: {m[2]:.0%}, "
                          f"model {m[5]}{m[6]}" for m in sorted(misses)[:8])
              + ("; ..." if len(misses) > 8 else "") + "). Where the measured CPU falls short of "
              "the cores while the central process's update slows down many times over, the "
              "cost is one the model leaves out: one that grows with the number of processes "
              "on the cores (switching between them, their polling), not with the work."]
    # -- topology
    L += topology_section(points, fitted)
    # -- learning and the rest of the read-outs
    L += ["", f"## Read-outs at L = {FIT_LATENCY_MS:g} ms, N = "
          f"{', '.join(map(str, READOUT_N))}", "",
          "Learner updates/s and busy fraction (its timed work over the wall time), inference "
          "batch (requests per forward pass) and latency, policy lag, bytes at the root, and "
          f"the mean return of the last 100 episodes after the point's "
          f"{'/'.join(f'{s:g}' for s in secs)} s.", "",
          "| env | arch | N | steps/s | updates/s | learner busy | batch | latency (ms) | lag "
          "(s) | root MB/s | return |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env in envs:
        for arch in ARCHS:
            for r in sorted((r for r in star if r["point"]["arch"] == arch and r["env"] == env
                             and ms_of(r) == FIT_LATENCY_MS and n_of(r) in READOUT_N),
                            key=n_of):
                m = r["metrics"]
                L.append(f"| {env} | {NAMES[arch]} | {n_of(r)} | {fmt(fps(r))} | "
                         f"{fmt(m.get('learner_updates_per_s'), 1)} | "
                         f"{fmt(m.get('learner_busy'), 2)} | {fmt(m.get('infer_batch_mean'), 1)}"
                         f" | {fmt(m.get('infer_latency_ms'), 2)} | "
                         f"{fmt(m.get('policy_lag_s_mean'), 3)} | "
                         f"{fmt((m.get('root_bytes_per_s') or 0) / 1e6, 1)} | "
                         f"{fmt(m.get('final_mean_return'), 1)} |")
    # -- figures and commands
    L += ["", "## Figures", ""]
    for ms, path in figs:
        L += [f"![steps/s against N at L = {ms:g} ms](figures/{path.name})", ""]
    L += ["## Reproduce", "",
          "```sh",
          "python benchmarks/bench_scaling.py --dry-run          # the grid, done or not",
          "python benchmarks/bench_scaling.py --max-minutes 14   # the next points; repeat",
          "python benchmarks/bench_scaling.py --report           # these figures and page",
          "# one point by hand:",
          "archzoo study --arch seed --actors 1,2,4,8,16 --env-latency-ms 5 --store s.jsonl \\",
          "  --out study/ -- --env MinAtar/Breakout-v1 --config minatar --time-limit 30",
          "```", ""]
    return "\n".join(L)


def update_s(r: dict) -> float | None:
    """Seconds per update of the point's central learner (its timed update over updates)."""
    s = r["summary"]
    t = next((s["time_breakdown_s"][k] for k in ("learner", "server")
              if k in s["time_breakdown_s"]), None)
    return t["update"] / s["learner_updates"] if t and s.get("learner_updates") else None


def why_missed(r: dict, c: scaling.Costs, one: dict) -> str:
    """What the measurement says at a missed point: the cores its steps/s account for at the
    one-actor costs, and how much slower each update of the learner ran than alone."""
    used = fps(r) * c.cpu_per_step
    text = f" (its steps/s use {used:.2f} of {c.cores:.2f} cores at the one-actor costs"
    u, u1 = update_s(r), update_s(one)
    if u and u1:
        text += f"; an update takes {u / u1:.1f}x its one-actor time"
    return text + ")"


def topology_section(points: list[dict], fitted: dict) -> list[str]:
    L = ["", "## Parameter broadcast at N = 16: star against tree", "",
         f"IMPALA and Ape-X at N = 16, L = {FIT_LATENCY_MS:g} ms on Breakout, the parameters "
         "broadcast over a star (the root sends every actor its copy) or a binary tree (the "
         "root sends ⌈log2 17⌉ = 5, the actors forward): bytes at the root and steps/s "
         "measured; then the model's extrapolation to N = 256 actors on a 10 Gb/s link at the "
         "root, every process on its own machine (no shared cores).", "",
         "| arch | broadcast | steps/s (measured) | root MB/s (measured) | N = 256 on 10 Gb/s:"
         " steps/s (extrapolated), bound |", "| --- | --- | --- | --- | --- |"]
    rows = 0
    for arch in TOPOLOGY_ARCHS:
        for topo in ("star", "tree"):
            r = next((r for r in points if r["point"]["arch"] == arch and r["env"] == "breakout"
                      and n_of(r) == 16 and ms_of(r) == FIT_LATENCY_MS
                      and r["point"]["topology"] == topo), None)
            ext = "–"
            if (arch, "breakout") in fitted:
                p = scaling.predict(fitted[(arch, "breakout")][0], 256, FIT_LATENCY_MS * 1e-3,
                                    topology=topo, link_Bps=TEN_GBIT, cores=math.inf)
                ext = f"{fmt(p.steps_per_s)}, {p.bound}"
            if r is None and ext == "–":
                continue
            rows += 1
            m = r["metrics"] if r else {}
            L.append(f"| {NAMES[arch]} | {topo} | {fmt(m.get('agent_steps_per_s'))} | "
                     f"{fmt((m.get('root_bytes_per_s') or 0) / 1e6, 1) if r else '–'} | "
                     f"{ext} |")
    return L if rows else []


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    code = 0
    if not a.report or a.dry_run:
        code = run(a)
    if a.report and not a.dry_run:
        report(a)
    return code


if __name__ == "__main__":
    sys.exit(main())
