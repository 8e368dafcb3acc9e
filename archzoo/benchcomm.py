"""``archzoo bench comm``: broadcast and all-reduce per topology against the native collective.

    archzoo bench comm [--backend gloo,mpi] [--procs 2,3] [--sizes 1KB,1MiB,16MiB]
                       [--ops all_reduce,broadcast] [--topologies star,tree,butterfly,ring,native]
                       [--fanout 2] [--iters N] [--repeats R] [--timeout S] [--out DIR]
                       [--link loopback,netns:1gbit]

For each (backend, N) the parent (no torch import) starts one job of N ranks running ``python
-m archzoo.benchcomm --worker ...``: gloo as N subprocesses on loopback with
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (as archzoo.launcher.run_gloo does),
MPI under the venv's ``mpiexec -n N``. With ``--link netns[:RATE]`` the N ranks are split over
two simulated hosts (:mod:`archzoo.simhosts`; the link shaped to RATE) and started as on two
machines (:mod:`archzoo.multinode`: torchrun per host, or mpiexec with a host file); the table,
the fit and the figure keep each link apart (``gloo over netns:1gbit``). Each rank makes its
transport and, for every op and size:

- one *verified* call per topology (result checked against numpy; its counter deltas give the
  messages and bytes each rank sent and the rounds it took part in, for exactly one call);
- a short warm-up, then ``repeats`` rounds in which the topologies take turns (so drift on a
  busy machine hits them alike); each turn is a barrier and ``iters`` timed calls. The time of a
  turn is the max over ranks of the mean per-call time (one native all-reduce max at the end);
  the reported time is the best (min) over the repeats, which a busy machine only makes worse;
  the median and max go to comm.csv too.

Large sizes use fewer calls: ``iters`` at ≤ 64 KiB, ``iters·√(64 KiB/size)`` above (at least
min(iters, 3)). Wall-clock is measured only for N ≤ max(3, cores + 1): beyond that the ranks
oversubscribe the cores and only the counts are taken (polling ranks would contend for cores).

The parent writes into ``--out`` (default ``bench-comm-<time>/``): ``raw/<backend>-n<N>.json``
(the workers' rows), ``comm.csv`` (one row per backend, N, op, size, topology), ``comm.md``
(the table, the α–β fit and the aims of the issue) and ``comm.png`` (time vs size, one panel per
backend × op, native dashed), and prints the table and the fit. The α–β model per engine is
``t ≈ α·rounds + bytes/β`` with ``rounds`` the most rounds any rank took part in and ``bytes``
the most bytes one rank sent per call, fitted by least squares on relative error over the timed
rows of the explicit topologies (star, tree, butterfly, ring), with α, 1/β ≥ 0.

Every wait in the workers has the transport's deadline (``--timeout``); a job that fails is
reported with the tail of its output and the exit code is 1. Bad flags: one line
``archzoo: error: ...`` and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from archzoo import envvars
from archzoo.errors import EXIT_USAGE, UsageError

BACKENDS = ("gloo", "mpi")
OPS = ("all_reduce", "broadcast")
TOPOLOGIES = ("star", "tree", "butterfly", "ring", "native")
EXPLICIT = ("star", "tree", "butterfly", "ring")
DEFAULT_SIZES = "1KB,1MiB,16MiB"
DEFAULT_ITERS = 100
DEFAULT_REPEATS = 5
SMALL = 64 << 10  # sizes up to this use the full --iters
_PORTS = itertools.count(29400)  # rendezvous ports on simulated hosts (fresh per link)
GRACE_S = 15.0  # after one rank fails, the others get this long to notice before being killed
STARTUP_S = 120.0
UNITS = {"b": 1, "kb": 10 ** 3, "kib": 1 << 10, "mb": 10 ** 6, "mib": 1 << 20,
         "gb": 10 ** 9, "gib": 1 << 30}
CSV_FIELDS = [
    "backend", "link", "procs", "op", "size_bytes", "topology", "iters", "repeats", "timed",
    "time_s", "time_median_s", "time_max_s", "ratio_native", "rounds_max", "msgs_max", "bytes_max",
    "bytes_total", "rounds_per_rank", "msgs_per_rank", "bytes_per_rank",
    "expected_rounds_per_rank", "expected_msgs_per_rank", "counts_ok", "model_s",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="archzoo bench comm",
                description="Broadcast and all-reduce per topology against the engine's native "
                            "collective: time, rounds, messages, bytes, and an α–β fit.",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backend", default="gloo,mpi", help="engines, comma-separated")
    p.add_argument("--procs", default="2,3", help="world sizes N, comma-separated (each >= 2)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="message sizes: B, KB/MB/GB (10^3) or KiB/MiB/GiB (2^10); multiples of 4")
    p.add_argument("--ops", default=",".join(OPS), help="collectives, comma-separated")
    p.add_argument("--topologies", default=",".join(TOPOLOGIES),
                   help="topologies, comma-separated (native = the engine's own collective)")
    p.add_argument("--fanout", type=int, default=2, help="tree fan-out / butterfly radix m")
    p.add_argument("--link", default="loopback",
                   help="links, comma-separated: loopback (one host), netns (the N ranks split "
                   "over two simulated hosts, archzoo.simhosts; needs root) or netns:RATE (that "
                   "link shaped to RATE, e.g. netns:1gbit)")
    p.add_argument("--iters", type=int, default=DEFAULT_ITERS,
                   help="timed calls per turn at <= 64 KiB (fewer for larger sizes)")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help="turns per topology; the best is reported")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="deadline (s) of every wait on a peer")
    p.add_argument("--out", default=None, help="output directory (default bench-comm-<time>)")
    # set by the parent for the ranks
    p.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    p.add_argument("--timed", type=int, default=1, help=argparse.SUPPRESS)
    return p


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in ("", *UNITS):
        raise UsageError(f"--sizes: cannot read {text!r} (e.g. 4096, 1KB, 1MiB, 16MiB)")
    n = float(m.group(1)) * UNITS.get(unit, 1)
    if n != int(n) or int(n) <= 0 or int(n) % 4:
        raise UsageError(f"--sizes: {text!r} is {n:g} bytes; need a positive multiple of 4 "
                         f"(the data are float32)")
    if n > 1 << 30:
        raise UsageError(f"--sizes: {text!r} is larger than 1 GiB")
    return int(n)


def fmt_size(n: int) -> str:
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (10 ** 6, "MB"), (1 << 10, "KiB"),
                      (10 ** 3, "KB")):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def _split(text: str, flag: str, choices: tuple[str, ...] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"{flag}: empty list")
    if len(set(items)) != len(items):
        raise UsageError(f"{flag}: repeated entries in {text!r}")
    if choices is not None:
        bad = [x for x in items if x not in choices]
        if bad:
            raise UsageError(f"{flag}: unknown {bad[0]!r} (choose from {', '.join(choices)})")
    return items


def validate(args: argparse.Namespace) -> argparse.Namespace:
    """Resolve the comma lists into ``backends, procs, sizes, ops, topologies``; check ranges."""
    args.backends = _split(args.backend, "--backend", BACKENDS)
    try:
        args.procs_list = [int(x) for x in _split(args.procs, "--procs")]
    except ValueError:
        raise UsageError(f"--procs: expected integers, got {args.procs!r}") from None
    if any(n < 2 for n in args.procs_list):
        raise UsageError(f"--procs: every N must be >= 2, got {args.procs!r}")
    if any(n > 64 for n in args.procs_list):
        raise UsageError(f"--procs: at most 64 processes on one machine, got {args.procs!r}")
    args.size_list = [parse_size(x) for x in _split(args.sizes, "--sizes")]
    if len(set(args.size_list)) != len(args.size_list):
        raise UsageError(f"--sizes: repeated sizes in {args.sizes!r}")
    args.op_list = _split(args.ops, "--ops", OPS)
    args.link_list = _split(args.link, "--link")
    for link in args.link_list:
        if link != "loopback" and link.split(":")[0] != "netns":
            raise UsageError(f"--link: unknown {link!r} (loopback, netns or netns:RATE)")
    if args.worker is None and any(x != "loopback" for x in args.link_list):
        from archzoo.simhosts import unavailable

        why = unavailable()
        if why:
            raise UsageError(f"--link {args.link}: simulated hosts cannot be made here: {why}")
    args.topology_list = _split(args.topologies, "--topologies", TOPOLOGIES)
    for flag, value, low in (("--fanout", args.fanout, 2), ("--iters", args.iters, 1),
                             ("--repeats", args.repeats, 1)):
        if value < low:
            raise UsageError(f"{flag} must be >= {low}, got {value}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    if args.worker is None and "mpi" in args.backends:
        import importlib.util

        from archzoo.spawn import find_mpiexec

        if importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None:
            raise UsageError("--backend mpi: mpi4py or mpiexec not found "
                             "(pip install mpi4py mpich, or --backend gloo)")
    return args


def n_iters(size: int, iters: int) -> int:
    """Timed calls per turn: ``iters`` up to 64 KiB, then ∝ 1/√size, at least min(iters, 3)."""
    if size <= SMALL:
        return iters
    return max(min(iters, 3), round(iters * math.sqrt(SMALL / size)))


def timed_limit() -> int:
    """Largest N whose wall-clock is measured: max(3, cores + 1), i.e. 3 on a 2-core machine."""
    return max(3, (os.cpu_count() or 1) + 1)


# ---------------------------------------------------------------------------------------------
# The ranks
# ---------------------------------------------------------------------------------------------
def _call(topo, op: str, arr: np.ndarray) -> None:
    if op == "all_reduce":
        topo.all_reduce(arr, "sum")
    else:
        topo.broadcast(arr, 0)


def _verified_call(t, topo, op: str, arr: np.ndarray) -> tuple[int, int, int]:
    """One call on known data, checked; returns this rank's (messages, bytes, rounds) of it."""
    n = t.world_size
    if op == "all_reduce":
        arr.fill(t.rank + 1)
        want = n * (n + 1) / 2
    else:
        arr.fill(7.0 if t.rank == 0 else 0.0)
        want = 7.0
    c0, r0 = t.counters.totals(), topo.rounds
    _call(topo, op, arr)
    c1, r1 = t.counters.totals(), topo.rounds
    if not np.all(arr == want):
        bad = int(np.flatnonzero(arr != want)[0])
        raise RuntimeError(f"{topo.name} {op} of {arr.nbytes} B: wrong result on rank {t.rank} "
                           f"(element {bad} is {arr[bad]}, expected {want})")
    return (c1["msgs_sent"] - c0["msgs_sent"], c1["bytes_sent"] - c0["bytes_sent"], r1 - r0)


def measure(t, topologies: list[str], ops: list[str], sizes: list[int], iters: int,
            repeats: int, fanout: int, timed: bool) -> list[dict[str, Any]]:
    """Run the plan on transport ``t`` (every rank the same); rows complete on every rank."""
    from archzoo.tags import TAG_BENCH_COMM
    from archzoo.topology.factory import make_topology

    topos = {name: make_topology(name, t, fanout, tag=TAG_BENCH_COMM + i)
             for i, name in enumerate(topologies)}
    plan = [(op, size, name) for op in ops for size in sizes for name in topologies]
    counts = np.zeros((len(plan), t.world_size, 3), np.int64)
    times = np.zeros((len(plan), repeats if timed else 0), np.float64)
    i = 0
    for op in ops:
        for size in sizes:
            arr = np.zeros(size // 4, np.float32)
            n = n_iters(size, iters)
            first = i
            for name in topologies:
                counts[i, t.rank] = _verified_call(t, topos[name], op, arr)
                if timed:
                    arr.fill(0.0)  # sums of zeros: no overflow however many calls
                    for _ in range(max(1, min(10, n // 5))):
                        _call(topos[name], op, arr)
                i += 1
            for rep in range(repeats if timed else 0):
                for j, name in enumerate(topologies):
                    topo = topos[name]
                    arr.fill(0.0)
                    t.barrier()
                    t0 = time.perf_counter()
                    for _ in range(n):
                        _call(topo, op, arr)
                    times[first + j, rep] = (time.perf_counter() - t0) / n
    t.all_reduce(counts, "sum")  # each rank filled its own row: the sum gathers them
    if times.size:
        t.all_reduce(times, "max")
    rows = []
    for k, (op, size, name) in enumerate(plan):
        rows.append({
            "backend": t.backend, "procs": t.world_size, "op": op, "size_bytes": size,
            "topology": name, "iters": n_iters(size, iters) if timed else 0,
            "repeats": repeats if timed else 0, "timed": timed,
            "times_s": times[k].tolist(),
            "msgs_per_rank": counts[k, :, 0].tolist(),
            "bytes_per_rank": counts[k, :, 1].tolist(),
            "rounds_per_rank": counts[k, :, 2].tolist(),
        })
    return rows


def worker(args: argparse.Namespace) -> int:
    from archzoo.comm import CommError
    from archzoo.comm.factory import detect_launch, make_transport

    launch = detect_launch()
    if args.worker == "gloo":
        import torch

        torch.set_num_threads(1)
    t = None
    code = 0
    try:
        t = make_transport(args.worker, launch, args.timeout, STARTUP_S)
        rows = measure(t, args.topology_list, args.op_list, args.size_list, args.iters,
                       args.repeats, args.fanout, bool(args.timed))
        if t.rank == 0:
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps({"rows": rows}))
            tmp.replace(args.json)
        t.barrier()
    except (CommError, TimeoutError) as e:
        print(f"archzoo: rank {launch.rank}: error: {e}", file=sys.stderr, flush=True)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as e:  # noqa: BLE001 - a bug: show where
        traceback.print_exc()
        print(f"archzoo: rank {launch.rank}: error: {type(e).__name__}: {e}", file=sys.stderr,
              flush=True)
        code = 1
    if t is not None:
        if code != 0 and t.backend == "mpi":
            t.abort(code)  # MPICH would hang the other ranks otherwise
        if code == 0:
            t.shutdown()
        if t.backend == "gloo":  # gloo cannot withdraw posted receives
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return code


# ---------------------------------------------------------------------------------------------
# Launching the jobs
# ---------------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", envvars.EMBEDDED)
           and not k.startswith(("PMI_", "OMPI_", "PMIX_", "TORCHELASTIC_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    root = str(Path(__file__).resolve().parent.parent)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root + (os.pathsep + pp if pp else "")
    return env


def _kill(p: subprocess.Popen) -> None:
    """Kill the session this child leads (mpiexec's ranks included)."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
    p.wait()


def run_job(backend: str, n: int, worker_argv: list[str], limit_s: float,
            hosts: Any = None) -> tuple[int, str]:
    """Run one job of ``n`` ranks; (exit code, combined output). 124 if it ran past limit_s.
    ``hosts`` (:class:`archzoo.simhosts.SimHosts`): split the ranks over them, started as
    on separate machines (archzoo.multinode)."""
    cmd = [sys.executable, "-m", "archzoo.benchcomm", "--worker", backend, *worker_argv]
    env = _env()
    files = []
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], e: dict[str, str]) -> None:
        f = tempfile.TemporaryFile("w+b")
        files.append(f)
        procs.append(subprocess.Popen(argv, env=e, stdout=f, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True))

    try:
        if hosts is not None:
            from archzoo import multinode

            e = multinode.cross_env(backend, env)
            for c in multinode.commands(hosts, multinode.spread(n, len(hosts.hosts)), backend,
                                        cmd[1:], next(_PORTS)):
                start(c, e)
        elif backend == "mpi":
            from archzoo.spawn import find_mpiexec

            start([find_mpiexec() or "mpiexec", "-n", str(n), *cmd], env)
        else:
            from archzoo.spawn import free_port

            port = str(free_port())
            for r in range(n):
                start(cmd, dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                                LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=port))
        deadline = time.monotonic() + limit_s
        failed_at: float | None = None
        code = 0
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            for p in procs:
                if p.poll() not in (None, 0) and failed_at is None:
                    failed_at, code = now, p.returncode
            if now > deadline:
                code = 124
                break
            if failed_at is not None and now > failed_at + GRACE_S:
                break
            time.sleep(0.05)
        for p in procs:
            _kill(p)
            if code == 0 and p.returncode != 0:
                code = p.returncode
        out = []
        for f in files:
            f.seek(0)
            out.append(f.read().decode(errors="replace"))
        return (1 if code < 0 else code), "".join(out)
    finally:
        for p in procs:
            _kill(p)
        for f in files:
            f.close()


def _job_limit(args: argparse.Namespace, n: int) -> float:
    """A generous wall-clock cap for one job; the ranks' own deadlines end a stuck wait first."""
    calls = sum(n_iters(s, args.iters) * args.repeats + 12 for s in args.size_list)
    per_call = sum(max(1e-3, s * n / 2e8) for s in args.size_list) / len(args.size_list)
    work = len(args.op_list) * len(args.topology_list) * calls * per_call
    return STARTUP_S + 2 * args.timeout + 10 * work


# ---------------------------------------------------------------------------------------------
# Results: rows, fit, table, figure
# ---------------------------------------------------------------------------------------------
def fit_alpha_beta(rounds, nbytes, times) -> dict[str, float]:
    """Fit ``t ≈ α·rounds + nbytes/β`` by least squares on relative error, α ≥ 0, 1/β ≥ 0.

    Returns ``alpha_s`` (s per round), ``inv_beta_s_per_byte``, ``beta_Bps`` (bytes/s, inf when
    the bandwidth term vanishes), ``rows`` and ``median_rel_err`` (median |model − t| / t).
    """
    r = np.asarray(rounds, np.float64)
    b = np.asarray(nbytes, np.float64)
    t = np.asarray(times, np.float64)
    ok = np.isfinite(t) & (t > 0)
    r, b, t = r[ok], b[ok], t[ok]
    if t.size < 2:
        raise ValueError(f"need at least 2 timed rows to fit α and β, got {t.size}")
    a = np.stack([r / t, b / t], axis=1)  # rows scaled by 1/t: residuals are relative errors
    y = np.ones_like(t)

    def sse(x: np.ndarray) -> float:
        return float(np.sum((a @ x - y) ** 2))

    x, *_ = np.linalg.lstsq(a, y, rcond=None)
    if np.any(x < 0):  # two unknowns: the constrained optimum has one of them at 0
        cands = []
        for k in (0, 1):
            col = a[:, k]
            c = np.zeros(2)
            denom = float(col @ col)
            c[k] = max(0.0, float(col @ y) / denom) if denom > 0 else 0.0
            cands.append(c)
        x = min(cands, key=sse)
    alpha, inv_beta = float(x[0]), float(x[1])
    model = alpha * r + inv_beta * b
    return {"alpha_s": alpha, "inv_beta_s_per_byte": inv_beta,
            "beta_Bps": (1.0 / inv_beta) if inv_beta > 0 else math.inf,
            "rows": int(t.size),
            "median_rel_err": float(np.median(np.abs(model - t) / t))}


def engine(row: dict) -> str:
    """A row's engine and link, as the table, fit and figure group them: ``gloo`` on
    loopback, ``gloo over netns:1gbit`` across simulated hosts."""
    link = row.get("link", "loopback")
    return row["backend"] if link == "loopback" else f"{row['backend']} over {link}"


def build_rows(raw_rows: list[dict], fanout: int) -> list[dict[str, Any]]:
    """Summarise the workers' rows: best time, ratio to native, maxima, formula check."""
    from archzoo.topology.counts import expected_counts

    rows = []
    for w in raw_rows:
        times = [x for x in w["times_s"] if x > 0]
        row = {"link": w.get("link", "loopback")}
        row.update({k: w[k] for k in ("backend", "procs", "op", "size_bytes", "topology", "iters",
                                 "repeats", "timed", "rounds_per_rank", "msgs_per_rank",
                                 "bytes_per_rank")})
        row["time_s"] = min(times) if times else None  # noise on a shared machine only adds
        row["time_median_s"] = statistics.median(times) if times else None
        row["time_max_s"] = max(times) if times else None
        native = w["topology"] == "native"
        row["rounds_max"] = None if native else max(w["rounds_per_rank"])
        row["msgs_max"] = None if native else max(w["msgs_per_rank"])
        row["bytes_max"] = None if native else max(w["bytes_per_rank"])
        row["bytes_total"] = None if native else sum(w["bytes_per_rank"])
        if native:
            row["expected_rounds_per_rank"] = row["expected_msgs_per_rank"] = None
            row["counts_ok"] = None
        else:
            exp = expected_counts(w["topology"], w["op"], w["procs"], fanout, 0)
            row["expected_msgs_per_rank"] = [exp[r][0] for r in range(w["procs"])]
            row["expected_rounds_per_rank"] = [exp[r][1] for r in range(w["procs"])]
            row["counts_ok"] = (row["expected_msgs_per_rank"] == w["msgs_per_rank"]
                                and row["expected_rounds_per_rank"] == w["rounds_per_rank"])
        rows.append(row)
    natives = {(engine(r), r["procs"], r["op"], r["size_bytes"]): r["time_s"]
               for r in rows if r["topology"] == "native"}
    for r in rows:
        nat = natives.get((engine(r), r["procs"], r["op"], r["size_bytes"]))
        r["ratio_native"] = (r["time_s"] / nat) if (r["time_s"] and nat) else None
    return rows


def fit_engines(rows: list[dict]) -> dict[str, dict[str, float]]:
    """One α–β fit per engine (and link) over the timed rows of the explicit topologies."""
    fits = {}
    for be in dict.fromkeys(engine(r) for r in rows):
        use = [r for r in rows if engine(r) == be and r["topology"] in EXPLICIT
               and r["time_s"]]
        if len(use) < 2:
            continue
        fits[be] = fit_alpha_beta([r["rounds_max"] for r in use], [r["bytes_max"] for r in use],
                                  [r["time_s"] for r in use])
    for r in rows:
        f = fits.get(engine(r))
        r["model_s"] = (f["alpha_s"] * r["rounds_max"] + f["inv_beta_s_per_byte"] * r["bytes_max"]
                        if f and r["topology"] in EXPLICIT else None)
    return fits


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return ";".join(str(x) for x in v)
    if isinstance(v, float):
        return f"{v:.9g}"
    return str(v)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in CSV_FIELDS})


def fit_lines(fits: dict[str, dict[str, float]]) -> list[str]:
    out = ["α–β model per engine: t ≈ α·rounds + bytes/β (rounds: most any rank took part in; "
           "bytes: most one rank sent per call), least squares on relative error over the timed "
           f"{'/'.join(EXPLICIT)} rows:"]
    if not fits:
        out.append("  (no timed rows of the explicit topologies: nothing to fit)")
    for be, f in fits.items():
        beta = ("∞ (bandwidth term fitted to 0)" if not math.isfinite(f["beta_Bps"])
                else f"{f['beta_Bps'] / 1e9:.2f} GB/s")
        out.append(f"  {be}: α = {f['alpha_s'] * 1e6:.1f} µs per round, β = {beta}; "
                   f"median |error| {100 * f['median_rel_err']:.0f}% over {f['rows']} rows")
    return out


def aim_lines(rows: list[dict]) -> list[str]:
    """The issue's aims for all-reduce: gloo best explicit ≤ 1.0× native; MPI ≤ 1.5× at N = 2
    and ≤ native + 20 µs per round at ≤ 1 KiB."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["op"] == "all_reduce" and r["time_s"]:
            groups.setdefault((engine(r), r["procs"], r["size_bytes"]), []).append(r)
    for (be, n, size), rs in sorted(groups.items()):
        nat = next((r for r in rs if r["topology"] == "native"), None)
        exp = [r for r in rs if r["topology"] in EXPLICIT]
        if nat is None or not exp:
            continue
        best = min(exp, key=lambda r: r["time_s"])
        ratio = best["time_s"] / nat["time_s"]
        head = (f"  {be} N={n} {fmt_size(size)}: best explicit {best['topology']} "
                f"{fmt_time(best['time_s'])} = {ratio:.2f}× native {fmt_time(nat['time_s'])}")
        checks = []
        if nat["backend"] == "gloo":
            checks.append(f"≤ 1.0×: {'met' if ratio <= 1.0 else 'not met'}")
        else:
            if n == 2:
                checks.append(f"≤ 1.5×: {'met' if ratio <= 1.5 else 'not met'}")
            if size <= 1024:
                per_round = (best["time_s"] - nat["time_s"]) / max(1, best["rounds_max"])
                checks.append(f"{per_round * 1e6:+.1f} µs/round over native ≤ 20 µs: "
                              f"{'met' if per_round <= 20e-6 else 'not met'}")
        out.append(head + ("; " + "; ".join(checks) if checks else ""))
    if out:
        out.insert(0, "Aims (all-reduce; gloo: best explicit ≤ 1.0× native; mpi: ≤ 1.5× at N = 2, "
                      "≤ native + 20 µs per round at 1 KB):")
    return out


def markdown(rows: list[dict], fits: dict, fanout: int) -> str:
    lines = [f"# archzoo bench comm (fan-out/radix m = {fanout})", "",
             "time: best over the repeats of the max over ranks of the mean per-call time; "
             "rounds: most any rank took part in; msgs: most one rank sent; bytes: all ranks' "
             "sends per call; counts: measured messages and rounds of every rank = the formulas "
             "of archzoo.topology.counts. Native counts are the engine's own (not seen).", ""]
    for be in dict.fromkeys(engine(r) for r in rows):
        for op in dict.fromkeys(r["op"] for r in rows):
            sel = [r for r in rows if engine(r) == be and r["op"] == op]
            if not sel:
                continue
            lines += [f"## {be} {op}", "",
                      "| N | size | topology | time | × native | rounds | msgs/rank | "
                      "bytes total | counts |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in sel:
                ratio = "1 (baseline)" if r["topology"] == "native" else (
                    f"{r['ratio_native']:.2f}×" if r["ratio_native"] else "—")
                if not r["timed"]:
                    ratio = f"— (N > {timed_limit()}: counts only)"
                dash = "—"
                ok = dash if r["counts_ok"] is None else ("ok" if r["counts_ok"] else "MISMATCH")
                lines.append(
                    f"| {r['procs']} | {fmt_size(r['size_bytes'])} | {r['topology']} | "
                    f"{fmt_time(r['time_s'])} | {ratio} | "
                    f"{dash if r['rounds_max'] is None else r['rounds_max']} | "
                    f"{dash if r['msgs_max'] is None else r['msgs_max']} | "
                    f"{dash if r['bytes_total'] is None else fmt_size(r['bytes_total'])} | {ok} |")
            lines.append("")
    lines += fit_lines(fits)
    aims = aim_lines(rows)
    if aims:
        lines += ["", *aims]
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path) -> bool:
    """comm.png: time vs size per topology, one panel per backend × op; False if no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import NullLocator
    except ImportError:
        return False
    backends = list(dict.fromkeys(engine(r) for r in rows))
    ops = list(dict.fromkeys(r["op"] for r in rows))
    topologies = list(dict.fromkeys(r["topology"] for r in rows))
    procs = sorted({r["procs"] for r in rows if r["time_s"]})
    sizes = sorted({r["size_bytes"] for r in rows})
    colors = {name: f"C{i}" for i, name in enumerate(topologies)}
    markers = dict(zip(procs, "osD^v<>pPX*h", strict=False))
    fig, axes = plt.subplots(len(backends), len(ops), squeeze=False,
                             figsize=(5.2 * len(ops), 3.8 * len(backends)))
    for i, be in enumerate(backends):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            for name in topologies:
                for n in procs:
                    pts = sorted((r["size_bytes"], r["time_s"]) for r in rows
                                 if (engine(r), r["op"], r["topology"], r["procs"])
                                 == (be, op, name, n) and r["time_s"])
                    if pts:
                        xs, ys = zip(*pts, strict=True)
                        ax.plot(xs, ys, color=colors[name], marker=markers.get(n, "o"),
                                linestyle="--" if name == "native" else "-", markersize=4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes, [fmt_size(x) for x in sizes])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_title(f"{be} {op}")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("time per call (s)")
            ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=colors[t], linestyle="--" if t == "native" else "-", label=t)
               for t in topologies]
    handles += [Line2D([], [], color="gray", marker=markers[n], linestyle="", label=f"N={n}")
                for n in procs]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def _say(msg: str) -> None:
    print(f"[bench comm] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _hosts(link: str):
    """Two simulated hosts for a ``netns[:RATE]`` link (removed afterwards); None for
    loopback."""
    if link == "loopback":
        yield None
        return
    from archzoo.simhosts import SimHosts

    rate = link.split(":", 1)[1] if ":" in link else None
    with SimHosts(2, rate) as sim:
        yield sim


def run(args: argparse.Namespace) -> int:
    out = Path(args.out or f"bench-comm-{time.strftime('%Y%m%d-%H%M%S')}")
    (out / "raw").mkdir(parents=True, exist_ok=True)
    raw_rows: list[dict] = []
    failed = []
    t_all = time.monotonic()
    for link, be, n in ((x, b, n) for x in args.link_list for b in args.backends
                        for n in args.procs_list):  # one job at a time: the machine is small
        with _hosts(link) as hosts:
            timed = n <= timed_limit()
            tag = "" if link == "loopback" else "-" + link.replace(":", "-")
            path = out / "raw" / f"{be}-n{n}{tag}.json"
            path.unlink(missing_ok=True)
            wargs = ["--topologies", ",".join(args.topology_list), "--ops", ",".join(args.op_list),
                     "--sizes", ",".join(str(s) for s in args.size_list),
                     "--fanout", str(args.fanout), "--iters", str(args.iters),
                     "--repeats", str(args.repeats), "--timeout", str(args.timeout),
                     "--timed", str(int(timed)), "--json", str(path)]
            t0 = time.monotonic()
            name = f"{be} N={n}" + ("" if link == "loopback" else f" over {link}")
            _say(f"{name}{'' if timed else ' (counts only)'} ...")
            rc, output = run_job(be, n, wargs, _job_limit(args, n), hosts)
            if rc == 0 and path.is_file():
                raw_rows += [dict(r, link=link) for r in json.loads(path.read_text())["rows"]]
                _say(f"{name} done in {time.monotonic() - t0:.1f} s")
            else:
                why = "ran past its time limit" if rc == 124 else f"exit code {rc}"
                failed.append(name)
                tail = "\n".join(output.strip().splitlines()[-15:])
                print(f"archzoo: error: bench comm {name} failed ({why}):\n{tail}",
                      file=sys.stderr, flush=True)
    if not raw_rows:
        return 1
    rows = build_rows(raw_rows, args.fanout)
    fits = fit_engines(rows)
    write_csv(rows, out / "comm.csv")
    md = markdown(rows, fits, args.fanout)
    (out / "comm.md").write_text(md)
    (out / "fit.json").write_text(json.dumps(fits, indent=1))
    if not figure(rows, out / "comm.png"):
        print("archzoo: warning: matplotlib is not installed: no comm.png "
              "(pip install matplotlib)", file=sys.stderr)
    print(md, end="")
    print(f"\nwrote {out}/comm.csv, comm.md, comm.png in {time.monotonic() - t_all:.0f} s")
    if any(r["counts_ok"] is False for r in rows):
        print("archzoo: error: measured messages/rounds differ from the formulas "
              "(see the counts column)", file=sys.stderr)
        return 1
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    """``archzoo bench comm ARGS``: ``argv`` is what follows ``bench comm``."""
    try:
        args = validate(build_parser().parse_args(list(argv)))
    except UsageError as e:
        print(f"archzoo: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if args.worker:
        if not args.json:
            print("archzoo: error: --worker needs --json", file=sys.stderr)
            return EXIT_USAGE
        return worker(args)
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
