"""``archzoo study``: sweep topologies, actor counts, backends and modes; tabulate and plot.

Each grid point is one ``archzoo run ARCH ...`` in a subprocess (exactly what a user
would run); its summary.json feeds one row of ``study.csv``: the outcome (solved, time
and env steps to the target, fps) beside the communication it cost (messages and bytes
per rank, topology rounds). ``study.png`` plots fps and time to target per grid point.

    archzoo study --arch impala --mode sync --topology star,tree,butterfly --actors 1,2 \\
        --out study/ -- --total-steps 300000

``--env-latency-ms 0,5,20`` adds points whose actors' vector steps each wait that long
(archzoo/latency.py: a model of a remote or slow simulator), and ``--store FILE.jsonl``
appends one record per point (its commit, resolved config, threads, machine, the summary
and the scaling read-outs of :func:`scaling_metrics`) and skips the points the store already
holds, so a long sweep resumes where it stopped (benchmarks/bench_scaling.py).

``--link netns:1gbit`` runs each point across two simulated hosts (archzoo.simhosts, a 1 Gbit/s
link; needs root): the servers (learner, ...) alone on host 0, the actors on host 1, started as
on two machines (archzoo.multinode). ``--straggler none,1:4`` adds points where rank 1's envs
step 4x slower (Synthetic-v0's step cost), ``--params 1000000`` points with a model of about
that many parameters (the MLP width closest to it); docs/topologies.md has studies made this
way.

Every grid value is checked before anything runs or is written (an unknown topology, mode,
backend or link is one line naming it and the allowed values, exit code 2); a point whose
values are each fine but do not go together (``--topology native`` in async IMPALA) runs,
fails, and is recorded with its exit code.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

from archzoo import jsonl
from archzoo.config import MODES, TOPOLOGIES
from archzoo.resolve import parse_run

BACKENDS = ("gloo", "mpi")
COLUMNS = ("arch", "topology", "actors", "backend", "link", "mode", "seed", "straggler",
           "params",
           "hidden", "exit_code", "solved",
           "time_to_target_s", "env_steps_to_target", "env_steps", "fps", "final_mean_return",
           "eval_mean_return", "world_size", "topology_rounds", "root_msgs_sent",
           "root_bytes_sent", "max_other_bytes_sent", "total_msgs_sent", "total_bytes_sent",
           "wall_s", "learner_updates", "root_bytes_per_update", "root_comm_s_per_update",
           "policy_lag_mean", "env_latency_ms", "agent_steps_per_s", "learner_updates_per_s",
           "learner_busy", "infer_batch_mean", "infer_latency_ms", "policy_lag_s_mean",
           "root_bytes", "root_bytes_per_s", "run_dir")


def _csv_list(kind):
    def parse(text: str) -> list:
        try:
            return [kind(x) for x in text.split(",") if x]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list: {text!r}") \
                from None
    return parse


def build_parser(parser_class=argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = parser_class(prog="archzoo study", description=__doc__.splitlines()[0],
                     epilog="Flags after -- go to every run (archzoo run ARCH --help).")
    p.add_argument("--arch", required=True, help="the architecture of every run (archzoo "
                   "list), or package.module:NAME")
    p.add_argument("--topology", type=_csv_list(str), default=["star"],
                   help=f"topologies, comma-separated ({', '.join(TOPOLOGIES)}; default: star)")
    p.add_argument("--actors", type=_csv_list(int), default=[2],
                   help="actor counts, comma-separated (0: one process; default: 2)")
    p.add_argument("--backend", type=_csv_list(str), default=["gloo"],
                   help=f"transport engines, comma-separated ({', '.join(BACKENDS)}; default: "
                   "gloo)")
    p.add_argument("--mode", type=_csv_list(str), default=["async"],
                   help=f"modes, comma-separated ({', '.join(MODES)}; default: async)")
    p.add_argument("--seeds", type=_csv_list(int), default=[0],
                   help="seeds, comma-separated: one run per seed (default: 0)")
    p.add_argument("--straggler", type=_csv_list(str), default=["none"],
                   help="none or RANK:FACTOR per point: that rank's envs step FACTOR times "
                   "slower (Synthetic-v0's step cost; e.g. none,1:4)")
    p.add_argument("--params", type=_csv_list(int), default=[0],
                   help="model sizes in parameters (0: the architecture's --hidden); each "
                   "becomes the MLP width whose model is closest to it")
    p.add_argument("--link", type=_csv_list(str), default=["loopback"],
                   help="loopback (one host) or netns[:RATE] per point: the actors on a second "
                   "simulated host behind a link shaped to RATE (e.g. netns:1gbit; needs root)")
    p.add_argument("--env-latency-ms", type=_csv_list(float), default=None,
                   help="env latencies L in ms per point: each vector step of an actor waits "
                   "L ms in a sleep (a remote or slow simulator; default: the run's own)")
    p.add_argument("--store", default=None, help="JSON-lines file: append a record per point "
                   "(commit, config, machine, summary, read-outs); points already in it are "
                   "skipped")
    p.add_argument("--out", required=True, help="directory for study.csv, study.png, runs/")
    return p


def grid_problem(a: argparse.Namespace) -> str | None:
    """The first grid value that no run could take, as one line naming it and the allowed
    values; None when every value is one the architecture runs."""
    from archzoo.architectures import get

    try:
        record = get(a.arch)
    except KeyError as e:
        return str(e.args[0])

    def bad(flag: str, values: list, allowed: tuple, what: str = "") -> str | None:
        for v in values:
            if v not in allowed:
                return (f"{flag} {v}: not one of {', '.join(map(str, allowed))}"
                        + (f" ({what})" if what else ""))
        return None

    from archzoo.config import RunConfig

    checks = (bad("--topology", a.topology, record.topologies, f"the topologies {a.arch} "
                  "runs"),
              bad("--mode", a.mode, record.modes, f"the modes {a.arch} runs"),
              bad("--backend", a.backend, BACKENDS))
    for problem in checks:
        if problem:
            return problem
    for n in a.actors:
        if n < 0:
            return f"--actors {n}: actor counts are >= 0"
    for n in a.params:
        if n < 0:
            return f"--params {n}: model sizes are >= 0 (0: the architecture's --hidden)"
    for s in a.straggler:
        if s != "none":
            got = RunConfig(straggler=s).straggler_rank()
            if got is None or got[0] < 0 or got[1] < 1:
                return f"--straggler {s}: not none or RANK:FACTOR (RANK >= 0, FACTOR >= 1)"
    for link in a.link:
        if link != "loopback" and link.split(":")[0] != "netns":
            return f"--link {link}: not one of loopback, netns, netns:RATE"
    from archzoo.config import latency_problem

    for ms in a.env_latency_ms or ():
        problem = latency_problem(ms, 0.0, 0.0)
        if problem:
            return problem.replace("--env-latency-ms", f"--env-latency-ms {ms:g}:", 1)
    return None


def row_from_summary(point: dict, code: int, run_dir: Path) -> dict:
    row = dict(point, exit_code=code, run_dir=str(run_dir))
    f = run_dir / "summary.json"
    if code != 0 or not f.is_file():
        return row
    s = json.loads(f.read_text())
    for k in ("solved", "time_to_target_s", "env_steps_to_target", "env_steps", "fps",
              "final_mean_return", "eval_mean_return", "world_size", "topology_rounds",
              "wall_s", "learner_updates", "policy_lag_mean"):
        row[k] = s.get(k)
    updates = s.get("learner_updates") or 0
    comm = s.get("time_breakdown_s", {}).get("learner", {}).get("comm")
    if updates:
        root_sent = s.get("per_rank_bytes", {}).get("0", {}).get("bytes_sent", 0)
        row["root_bytes_per_update"] = root_sent / updates
        row["root_comm_s_per_update"] = comm / updates if comm is not None else None
    per = s.get("per_rank_bytes", {})
    root = per.get("0", {})
    others = [v.get("bytes_sent", 0) for r, v in per.items() if r != "0"]
    row.update(root_msgs_sent=root.get("msgs_sent"), root_bytes_sent=root.get("bytes_sent"),
               max_other_bytes_sent=max(others) if others else 0,
               total_msgs_sent=sum(v.get("msgs_sent", 0) for v in per.values()),
               total_bytes_sent=sum(v.get("bytes_sent", 0) for v in per.values()))
    row.update(scaling_metrics(s))
    return row


CENTRAL_ROLES = ("learner", "server")  # the role whose busy time bounds a central learner


def scaling_metrics(s: dict) -> dict:
    """The read-outs of a scaling point from its summary.json: agent steps and learner
    updates per second; the central learner's busy fraction (its timed work, all but its
    waits, over the run's wall time; none where no one process learns, as in A3C and GALA);
    the inference server's mean batch (requests, each of one actor's E envs) and latency
    (SEED RL, GA3C); the mean policy lag in seconds; the bytes in and out of rank 0 (the
    root: learner, or parameter server) in all and per second."""
    wall = s.get("wall_s") or 0.0

    def per_s(v: float | None) -> float | None:
        return v / wall if wall > 0 and v is not None else None

    timers = s.get("time_breakdown_s", {})
    central = next((timers[r] for r in CENTRAL_ROLES if r in timers), None)
    busy = per_s(sum(v for k, v in central.items() if k != "wait")) if central else None
    inference = s.get("inference") or {}
    root = s.get("per_rank_bytes", {}).get("0")
    root_bytes = root.get("bytes_sent", 0) + root.get("bytes_recv", 0) if root else \
        (s.get("bytes_sent", 0) + s.get("bytes_recv", 0))
    return {"agent_steps_per_s": per_s(s.get("env_steps")),
            "learner_updates_per_s": per_s(s.get("learner_updates")),
            "learner_busy": busy,
            "infer_batch_mean": inference.get("mean_batch_size"),
            "infer_latency_ms": inference.get("mean_latency_ms"),
            "policy_lag_s_mean": s.get("policy_lag", {}).get("seconds", {}).get("mean"),
            "root_bytes": root_bytes, "root_bytes_per_s": per_s(root_bytes)}


SUMMARY_DROP = ("hosts_by_rank", "checkpoints", "params_by_rank")  # not read by the records


def point_key(point: dict, extra: list[str]) -> str:
    """What makes two scaling points the same: every grid value and the flags after --."""
    keep = {k: v for k, v in point.items() if k != "hidden"}
    return json.dumps({"point": keep, "extra": list(extra)}, sort_keys=True)


def point_record(point: dict, extra: list[str], code: int, run_dir: Path,
                 row: dict) -> dict:
    """The store's record of one point: the point and its flags, the exit code, the
    read-outs, the resolved config (config.json: threads included), the summary (less the
    placement and checkpoint detail) and :func:`archzoo.provenance.provenance`."""
    from archzoo.provenance import provenance

    def read(name: str) -> dict | None:
        f = run_dir / name
        return json.loads(f.read_text()) if f.is_file() else None

    summary = read("summary.json")
    config = read("config.json")
    return {"kind": "scaling-point", "key": point_key(point, extra), "point": point,
            "extra": list(extra), "exit_code": code,
            "metrics": {k: row.get(k) for k in COLUMNS
                        if k not in point and k not in ("exit_code", "run_dir")},
            "config": config,
            "threads": {k: (config or {}).get(k) for k in ("threads", "learner_threads")},
            "summary": {k: v for k, v in (summary or {}).items() if k not in SUMMARY_DROP},
            "run_dir": str(run_dir), **provenance()}


def stored_points(path: Path | None) -> dict[str, dict]:
    """The newest successful record of every point key in the store."""
    out: dict[str, dict] = {}
    for r in jsonl.read(path) if path else ():
        if r.get("kind") == "scaling-point" and r.get("exit_code") == 0:
            out[r["key"]] = r
    return out


def hidden_for_params(n: int, extra: list[str]) -> int:
    """The MLP width whose actor-critic for the run's env (``--env``/``--env-kwargs`` among
    the extra flags, CartPole-v1 by default) has the number of parameters closest to ``n``."""
    from archzoo.envs import env_spec
    from archzoo.nets import ActorCritic, num_params

    def flag(name: str, default: str) -> str:
        return extra[extra.index(name) + 1] if name in extra[:-1] else default

    spec = env_spec(flag("--env", "CartPole-v1"), flag("--env-kwargs", ""))

    def size(h: int) -> int:
        return num_params(ActorCritic(spec.obs_shape, spec.num_actions, h))

    lo, hi = 1, 2
    while size(hi) < n:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if size(mid) < n else (lo, mid)
    return min((lo, hi), key=lambda h: abs(size(h) - n))


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['topology']}\n{r['actors']}a {r['backend']}\n{r['mode']} s{r['seed']}"
              + (f"\n{r['link']}" if r.get("link", "loopback") != "loopback" else "")
              + (f"\nslow {r['straggler']}" if r.get("straggler") not in (None, "none")
                 else "") for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(max(13, 2.2 * len(rows)), 4.5))
    panels = ((axes[0], "fps", "env frames / s", 1.0),
              (axes[1], "time_to_target_s", "time to target (s)", 1.0),
              (axes[2], "total_bytes_sent", "bytes sent, all ranks (MB)", 1e-6),
              (axes[3], "root_bytes_per_update", "rank 0's bytes sent per update (MB)", 1e-6))
    for ax, key, title, scale in panels:
        vals = [float(r[key]) * scale if r.get(key) not in (None, "") else None for r in rows]
        ax.bar(range(len(rows)), [v or 0.0 for v in vals], color="tab:blue")
        for i, v in enumerate(vals):
            if v is None:
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_title(title)
    fig.suptitle(f"archzoo study: {rows[0]['arch']}" if rows else "archzoo study")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_local(cmd: list[str]) -> tuple[int, str]:
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stderr


def run_across(cmd: list[str], link: str, actors: int, log: Path) -> tuple[int, str]:
    """``cmd`` (``python -m archzoo run ...``) across two simulated hosts: its servers on
    host 0, its actors on host 1; (exit code, output)."""
    from archzoo.simhosts import SimHosts, unavailable
    from archzoo.spawn import clean_env, run_ranks

    why = unavailable()
    if why:
        return 2, f"--link {link}: simulated hosts cannot be made here: {why}"
    argv = cmd[3:]  # after python -m archzoo
    from archzoo.architectures import world_size

    world = world_size(parse_run(argv)[0], actors)
    backend = argv[argv.index("--backend") + 1]
    rate = link.split(":", 1)[1] if ":" in link else None
    with SimHosts(2, rate) as sim:
        job = run_ranks(world, cmd[1:], backend, hosts=sim, slots=[world - actors, actors],
                        env=clean_env(), capture=True, timeout_s=3600)
    log.write_text(job.output)
    return job.returncode, job.output


def fresh_dir(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... when it exists (a point cut short before its
    record was written left it: a run never writes into a non-empty run directory)."""
    k, out = 1, path
    while out.exists():
        k += 1
        out = path.with_name(f"{path.name}-{k}")
    return out


def main(argv: list[str], parser_class=argparse.ArgumentParser) -> int:
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    else:
        extra = []
    from archzoo.architectures import dir_name

    parser = build_parser(parser_class)
    a = parser.parse_args(argv)
    problem = grid_problem(a)
    if problem:
        parser.error(problem)  # before anything is written
    out = Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    latencies = a.env_latency_ms or [None]
    grid = list(itertools.product(a.topology, a.actors, a.backend, a.mode, a.seeds,
                                  a.straggler, a.params, a.link, latencies))
    store = Path(a.store) if a.store else None
    done = stored_points(store)
    rows = []
    for k, (topo, actors, backend, mode, seed, slow, params, link, ms) in enumerate(grid, 1):
        hidden = hidden_for_params(params, extra) if params else None
        point = {"arch": a.arch, "topology": topo, "actors": actors, "backend": backend,
                 "mode": mode, "seed": seed, "straggler": slow, "params": params or None,
                 "hidden": hidden, "link": link, "env_latency_ms": ms}
        said = (f"[study {k}/{len(grid)}] {topo} actors={actors} {backend} {mode} seed={seed} "
                f"straggler={slow} params={params or '-'} link={link}"
                + (f" latency={ms:g}ms" if ms is not None else ""))
        stored = done.get(point_key(point, extra))
        if stored is not None:
            rows.append({**point, **stored["metrics"], "exit_code": 0,
                         "run_dir": stored["run_dir"]})
            print(f"{said}: in {store}, skipped", flush=True)
            continue
        name = f"{dir_name(a.arch)}-{topo}-{actors}a-{backend}-{mode}-s{seed}"
        name += (f"-slow{slow.replace(':', 'x')}" if slow != "none" else "") + \
            (f"-p{params}" if params else "") + \
            (f"-{link.replace(':', '-')}" if link != "loopback" else "") + \
            (f"-L{ms:g}ms" if ms is not None else "")
        run_dir = fresh_dir(out / "runs" / name)
        cmd = [sys.executable, "-m", "archzoo", "run", a.arch, "--topology", topo,
               "--actors", str(actors), "--backend", backend, "--mode", mode,
               "--seed", str(seed), "--run-dir", str(run_dir), "--quiet", *extra]
        if slow != "none":
            cmd += ["--straggler", slow]
        if hidden:
            cmd += ["--hidden", str(hidden)]
        if ms is not None:
            cmd += ["--env-latency-ms", f"{ms:g}"]
        t0 = time.time()
        code, stderr = (run_local(cmd) if link == "loopback"
                        else run_across(cmd, link, actors, out / "runs" / f"{name}.log"))
        err = stderr.strip().splitlines()[-1] if code and stderr.strip() else ""
        row = row_from_summary(point, code, run_dir)
        rows.append(row)
        if store is not None:
            jsonl.append(store, point_record(point, extra, code, run_dir, row))
        print(f"{said}: exit {code} in {time.time() - t0:.1f}s {err}", flush=True)
    with open(out / "study.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot(rows, out / "study.png")
    print(f"wrote {out / 'study.csv'} and {out / 'study.png'}")
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1
