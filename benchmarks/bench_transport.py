"""Transport micro-benchmark: archzoo's Transport beside the raw engine calls, same run.

    python benchmarks/bench_transport.py [--backend gloo|mpi|both] [--iters N] [--rounds R]

For each engine it starts 2 ranks (this script re-executed: with RANK/WORLD_SIZE/MASTER_* for
gloo, under the venv's ``mpiexec`` for MPI) and measures ping-pong between them at 8 B, 1 MiB
and 16 MiB. One-way time = round trip / 2; bandwidth = size / one-way time. Paths measured:

- raw: gloo ``torch.distributed.send/recv`` (blocking); MPI ``comm.Send/Recv`` on numpy buffers
- archzoo ``isend``/``irecv`` completed through ``Transport.wait`` (a fresh receive per message)
- archzoo ``Inbox`` (receives kept posted; ``recv_from`` + ``release``; ``Transport.send``)

The three paths alternate within each of ``--rounds`` rounds and the table shows the median
round, so drift on a busy machine hits them alike. ``--iters`` is the number of round trips at
8 B; 1 MiB uses iters/10 and 16 MiB iters/50 (at least 5). Prints a markdown table.
Timings are not asserted anywhere: this is for the docs and for regressions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

SIZES = [8, 1 << 20, 16 << 20]
PATHS = ["raw", "wait", "inbox"]
PATH_LABEL = {
    "gloo": {"raw": "raw dist.send/recv", "wait": "archzoo isend/irecv+wait",
             "inbox": "archzoo Inbox"},
    "mpi": {"raw": "raw comm.Send/Recv", "wait": "archzoo isend/irecv+wait",
            "inbox": "archzoo Inbox"},
}


def n_iters(size: int, iters: int) -> int:
    if size <= 64:
        return iters
    return max(5, iters // 10) if size <= (1 << 20) else max(5, iters // 50)


# ---------------------------------------------------------------------------------------------
# The two ranks
# ---------------------------------------------------------------------------------------------
def bench_size(t, backend: str, size: int, tag: int, n: int, rounds: int) -> list[dict]:
    """Ping-pong ``size`` bytes ``n`` times per path per round; the per-path results."""
    from archzoo.comm import Inbox, Schema

    me, other = t.rank, 1 - t.rank
    schema = Schema(f"bench{size}", [("data", np.uint8, (size,))])
    inbox = Inbox(t, schema, [other], tag + 2, depth=2, what="bench message")
    out_msg = schema.new()
    out_msg["data"][:] = me + 1
    sbuf, rbuf = out_msg.buffer, np.empty(schema.nbytes, np.uint8)

    if backend == "gloo":
        import torch
        import torch.distributed as dist

        st, rt = torch.from_numpy(sbuf), torch.from_numpy(rbuf)

        def raw_once(first: bool) -> None:
            if first:
                dist.send(st, dst=other, tag=tag)
                dist.recv(rt, src=other, tag=tag)
            else:
                dist.recv(rt, src=other, tag=tag)
                dist.send(st, dst=other, tag=tag)
    else:
        comm, byte = t.MPI.COMM_WORLD, t.MPI.BYTE

        def raw_once(first: bool) -> None:
            if first:
                comm.Send([sbuf, byte], other, tag)
                comm.Recv([rbuf, byte], other, tag)
            else:
                comm.Recv([rbuf, byte], other, tag)
                comm.Send([sbuf, byte], other, tag)

    def wait_once(first: bool) -> None:
        if first:
            r = t.irecv(rbuf, other, tag + 1, "bench reply")
            t.wait(t.isend(sbuf, other, tag + 1, "bench message"))
            t.wait(r)
        else:
            t.recv(rbuf, other, tag + 1, "bench message")
            t.send(sbuf, other, tag + 1, "bench reply")

    def inbox_once(first: bool) -> None:
        if first:
            t.send(sbuf, other, tag + 2, "bench message")
            inbox.recv_from(other)
            inbox.release(other)
        else:
            inbox.recv_from(other)
            inbox.release(other)
            t.send(sbuf, other, tag + 2, "bench reply")

    fns = {"raw": raw_once, "wait": wait_once, "inbox": inbox_once}
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    for _ in range(rounds):
        for path in PATHS:
            fn = fns[path]
            for _ in range(max(2, n // 10)):  # warm-up
                fn(me == 0)
            t.barrier()
            t0 = time.perf_counter()
            for _ in range(n):
                fn(me == 0)
            times[path].append((time.perf_counter() - t0) / (2 * n))
    assert (rbuf[:size] == other + 1).all() and inbox.poll(other) is None
    return [{"size": size, "path": path, "iters": n, "one_way_s": statistics.median(times[path]),
             "rounds_s": times[path]} for path in PATHS]


def worker(backend: str, iters: int, rounds: int) -> None:
    from archzoo.comm.factory import detect_launch, make_transport

    if backend == "gloo":
        import torch

        torch.set_num_threads(1)
    t = make_transport(backend, detect_launch(), timeout_s=60.0)
    results = []
    for si, size in enumerate(SIZES):
        results += bench_size(t, backend, size, 10 * (si + 1), n_iters(size, iters), rounds)
    t.barrier()
    if t.rank == 0:
        print("RESULT " + json.dumps({"backend": backend, "results": results}), flush=True)
    if backend == "gloo":
        sys.stdout.flush()
        os._exit(0)  # gloo can't withdraw the Inbox's posted receives
    t.shutdown()


# ---------------------------------------------------------------------------------------------
# The launcher side
# ---------------------------------------------------------------------------------------------
def launch(backend: str, iters: int, rounds: int, timeout_s: float = 300) -> dict:
    """Two ranks of this script's worker (archzoo.spawn.run_ranks: two processes for gloo,
    ``mpiexec -n 2`` for MPI); rank 0's result."""
    from archzoo.spawn import clean_env, run_ranks

    job = run_ranks(2, [str(Path(__file__).resolve()), "--worker", backend, "--iters",
                        str(iters), "--rounds", str(rounds)], backend, env=clean_env(),
                    capture=True, timeout_s=timeout_s)
    out = job.all_output()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{backend} benchmark failed (rc={job.returncode}):\n{out[-3000:]}")


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def fmt_size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n >> 20} MiB"


def table(runs: list[dict]) -> str:
    rows = ["| engine | size | path | one-way | bandwidth | archzoo / raw | rounds (min–max) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        be = run["backend"]
        by = {(r["size"], r["path"]): r for r in run["results"]}
        for size in SIZES:
            raw = by[(size, "raw")]["one_way_s"]
            for path in PATHS:
                s = by[(size, path)]["one_way_s"]
                bw = "—" if size < 1024 else f"{size / s / 1e9:.2f} GB/s"
                ratio = "1 (baseline)" if path == "raw" else f"{s / raw:.2f}×"
                spread = by[(size, path)]["rounds_s"]
                rows.append(f"| {be} | {fmt_size(size)} | {PATH_LABEL[be][path]} | "
                            f"{fmt_time(s)} | {bw} | {ratio} | "
                            f"{fmt_time(min(spread))} – {fmt_time(max(spread))} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["gloo", "mpi", "both"], default="both")
    ap.add_argument("--iters", type=int, default=1000,
                    help="round trips at 8 B (1 MiB: /10, 16 MiB: /50, at least 5)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; median shown")
    ap.add_argument("--worker", choices=["gloo", "mpi"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.iters < 1 or a.rounds < 1:
        ap.error("--iters and --rounds must be positive")
    if a.worker:
        worker(a.worker, a.iters, a.rounds)
        return 0
    backends = ["gloo", "mpi"] if a.backend == "both" else [a.backend]
    runs = []
    t0 = time.perf_counter()
    for be in backends:  # one engine at a time: the machine has 2 cores
        runs.append(launch(be, a.iters, a.rounds))
    iters = ", ".join(f"{fmt_size(s)}: {n_iters(s, a.iters)}" for s in SIZES)
    total = time.perf_counter() - t0
    print(f"Transport ping-pong, 2 ranks on one host; one-way = round trip / 2; median of "
          f"{a.rounds} rounds (round trips per round: {iters}); total {total:.0f}s\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
