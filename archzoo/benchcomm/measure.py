"""What each rank of an ``archzoo bench comm`` job runs (``python -m archzoo.benchcomm
--worker gloo|mpi ...``): the transport, then for every op and size:

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
Every wait has the transport's deadline (``--timeout``). Rank 0 writes the rows to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

BACKENDS = ("gloo", "mpi")
OPS = ("all_reduce", "broadcast")
TOPOLOGIES = ("star", "tree", "butterfly", "ring", "native")
EXPLICIT = ("star", "tree", "butterfly", "ring")
SMALL = 64 << 10  # sizes up to this use the full --iters
STARTUP_S = 120.0


def n_iters(size: int, iters: int) -> int:
    """Timed calls per turn: ``iters`` up to 64 KiB, then ∝ 1/√size, at least min(iters, 3)."""
    if size <= SMALL:
        return iters
    return max(min(iters, 3), round(iters * math.sqrt(SMALL / size)))


def timed_limit() -> int:
    """Largest N whose wall-clock is measured: max(3, cores + 1), i.e. 3 on a 2-core machine."""
    return max(3, (os.cpu_count() or 1) + 1)



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
    from archzoo.comm.mpi import MPITransport

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
        if code != 0 and isinstance(t, MPITransport):
            t.abort(code)  # MPICH would hang the other ranks otherwise
        if code == 0:
            t.shutdown()
        if t.backend == "gloo":  # gloo cannot withdraw posted receives
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return code


