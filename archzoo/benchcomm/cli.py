"""``archzoo bench comm``'s command: the flags, one job of N ranks per (link, backend, N) at
a time, and the outputs written at the end (:mod:`~archzoo.benchcomm.report`).

Each job is started by :func:`archzoo.spawn.run_ranks` (the spawner of ``archzoo run``): gloo
as N subprocesses on loopback, MPI under the venv's ``mpiexec -n N``, or across two simulated
hosts for ``--link netns[:RATE]``; its ranks run ``python -m archzoo.benchcomm --worker ...``
(:mod:`~archzoo.benchcomm.measure`). After a rank fails the others get ``GRACE_S`` to notice
before they are killed; a job past its time limit is killed. A job that fails is reported with
the tail of its output and the exit code is 1. Bad flags: one line ``archzoo: error: ...`` and
exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from archzoo.benchcomm.fit import fit_engines
from archzoo.benchcomm.measure import (
    BACKENDS,
    OPS,
    STARTUP_S,
    TOPOLOGIES,
    n_iters,
    timed_limit,
    worker,
)
from archzoo.benchcomm.report import build_rows, figure, markdown, write_csv
from archzoo.errors import EXIT_USAGE, UsageError

DEFAULT_SIZES = "1KB,1MiB,16MiB"
DEFAULT_ITERS = 100
DEFAULT_REPEATS = 5
GRACE_S = 15.0  # after one rank fails, the others get this long to notice before being killed
UNITS = {"b": 1, "kb": 10 ** 3, "kib": 1 << 10, "mb": 10 ** 6, "mib": 1 << 20,
         "gb": 10 ** 9, "gib": 1 << 30}


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



def run_job(backend: str, n: int, worker_argv: list[str], limit_s: float,
            hosts: Any = None) -> tuple[int, str]:
    """Run one job of ``n`` ranks; (exit code, combined output). 124 if it ran past limit_s.
    ``hosts`` (:class:`archzoo.simhosts.SimHosts`): split the ranks over them, started as
    on separate machines (archzoo.multinode)."""
    from archzoo.spawn import run_ranks

    job = run_ranks(n, ["-m", "archzoo.benchcomm", "--worker", backend, *worker_argv], backend,
                    capture=True, timeout_s=limit_s, grace_s=GRACE_S, hosts=hosts)
    return job.returncode, job.all_output()


def _job_limit(args: argparse.Namespace, n: int) -> float:
    """A generous wall-clock cap for one job; the ranks' own deadlines end a stuck wait first."""
    calls = sum(n_iters(s, args.iters) * args.repeats + 12 for s in args.size_list)
    per_call = sum(max(1e-3, s * n / 2e8) for s in args.size_list) / len(args.size_list)
    work = len(args.op_list) * len(args.topology_list) * calls * per_call
    return STARTUP_S + 2 * args.timeout + 10 * work


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
