"""Every topology collective in one launch: run on each rank, ``python tests/topology_cases.py
gloo|mpi`` under tests/mp.py (``run_gloo`` / ``run_mpi``), any world size N ≥ 1.

For star, tree and butterfly (m = 2..4), ring and native: broadcast, reduce (sum, mean),
all_reduce (sum, mean) and gather for every root, over arrays of several dtypes and shapes
(0-d, empty, length 1, sizes not divisible by N, 2-d, non-contiguous), compared with numpy
answers computed locally from the deterministic per-rank inputs; for the explicit topologies
also the messages this rank sent (transport counters, as a delta around each call) and its
rounds against ``expected_counts``. Ring gossip: repeated rounds match a local numpy simulation
bit for bit, keep the mean and shrink the spread. Argument validation is checked too, and
(N > 1, last) a silent peer: every rank waiting on it raises an error naming the peer.

Prints ``[rank r] OK <topology> ...`` per topology (and ``OK validation``, ``OK silent peer``),
or ``FAIL`` lines, then ``DONE``; exits non-zero on any failure. A collective that raises
leaves the ranks out of step, so the run stops there (exit 1, MPI: abort).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mp import abort, log, rank_exit

from archzoo.comm import PeerTimeout, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.topology.base import Topology
from archzoo.topology.counts import expected_counts
from archzoo.topology.factory import make_topology

TIMEOUT_S = 20.0
FANOUTS = (2, 3, 4)
TOPOLOGIES = ("star", "tree", "butterfly", "ring", "native")
GOSSIP_ROUNDS = 40

SILENT_TIMEOUT_S = 1.0
GOSSIP_SPREAD = 0.05  # the spread over ranks must shrink below this fraction in those rounds

# (dtype, shape): sizes 0, 1, not divisible by N, 0-d and 2-d. Broadcast and gather use all of
# them, reductions the numeric ones (float16 not on native: MPI has no half type).
COMBOS = [
    (np.float32, (131,)), (np.int64, (7,)), (np.float64, (3, 5)), (np.int32, ()),
    (np.float32, (0,)), (np.float64, (1,)), (np.uint8, (7,)), (np.bool_, (3, 5)),
    (np.float16, (131,)), (np.int64, (0,)), (np.float32, (1,)), (np.float64, (7,)),
]
REDUCE_DTYPES = [np.dtype(d) for d in (np.int64, np.int32, np.float32, np.float64, np.float16)]


class CheckFailed(Exception):
    """A wrong result or count: the ranks are still in step, so the run goes on."""


class CollectiveError(Exception):
    """A collective raised: the ranks may be out of step."""


def rank_input(r: int, dtype, shape: tuple[int, ...], salt: int) -> np.ndarray:
    """Deterministic input of rank r; float values are exact in sums of up to ~16 ranks."""
    return np.array(_values(r, dtype, shape, salt), dtype=dtype).reshape(shape)


def _values(r: int, dtype, shape: tuple[int, ...], salt: int):
    rng = np.random.default_rng([r, salt, len(shape), int(np.prod(shape, dtype=np.int64))])
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        lo, hi = (0, 256) if dt.itemsize == 1 else (-10**6, 10**6)
        return rng.integers(lo, hi, size=shape).astype(dt)
    if dt == np.float64:
        return rng.standard_normal(shape)
    if dt == np.float16:
        return (rng.integers(-64, 64, size=shape) / 4).astype(dt)
    return (rng.integers(-4096, 4096, size=shape) / 8).astype(dt)


def _same(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    if got.shape != ref.shape or got.dtype != ref.dtype:
        raise CheckFailed(f"{what}: got {got.dtype}{got.shape}, want {ref.dtype}{ref.shape}")
    if ref.dtype == np.float64:
        ok = np.allclose(got, ref, rtol=1e-12, atol=1e-12)
    else:
        ok = np.array_equal(got, ref)
    if not ok:
        raise CheckFailed(f"{what}: got {got.reshape(-1)[:6]}, want {ref.reshape(-1)[:6]}")


class Runner:
    def __init__(self, t: Transport) -> None:
        self.t = t
        self.n = t.world_size
        self.calls = 0
        self.failures: list[str] = []
        self.salt = 0

    def call(self, topo: Topology, op: str, root: int, fn):
        """Run one collective, checking messages sent and rounds against the formulas."""
        before_msgs = self.t.counters.totals()["msgs_sent"]
        before_rounds = topo.rounds
        try:
            out = fn()
        except Exception as e:
            raise CollectiveError(f"{topo.name}(m={topo.fanout}) {op} root={root}: "
                                  f"{type(e).__name__}: {e}") from e
        self.calls += 1
        if topo.name != "native":
            want = expected_counts(topo.name, op, self.n, topo.fanout, root)[self.t.rank]
            got = (self.t.counters.totals()["msgs_sent"] - before_msgs,
                   topo.rounds - before_rounds)
            if got != want:
                raise CheckFailed(f"{topo.name}(m={topo.fanout}) {op} root={root} N={self.n}: "
                                  f"(sent, rounds) = {got}, formula says {want}")
        return out

    def check(self, fn, what: str) -> None:
        try:
            fn()
        except CheckFailed as e:
            self.failures.append(str(e))
            log(self.t, f"FAIL {what}: {e}")

    def inputs(self, dtype, shape: tuple[int, ...]) -> list[np.ndarray]:
        self.salt += 1
        return [rank_input(r, dtype, shape, self.salt) for r in range(self.n)]

    def reductions(self, topo: Topology, dtype, ins: list[np.ndarray]):
        """(op, numpy answer) pairs that apply to this dtype on this topology."""
        dt = np.dtype(dtype)
        if dt not in REDUCE_DTYPES or (dt == np.float16 and topo.name == "native"):
            return []
        total = np.stack(ins).sum(0, dtype=dt)
        out = [("sum", np.asarray(total, dt))]
        if dt.kind == "f":
            out.append(("mean", np.asarray(total / np.asarray(self.n, dt), dt)))
        return out

    # -- one topology instance ------------------------------------------------------------------
    def run_topology(self, topo: Topology) -> None:
        n, me = self.n, self.t.rank
        label = f"{topo.name}(m={topo.fanout})"
        # (root, combination) pairs: every root and every combination at least once
        for i in range(max(n, len(COMBOS))):
            root, (dtype, shape) = i % n, COMBOS[i % len(COMBOS)]
            ins = self.inputs(dtype, shape)
            what = f"{label} root={root} {np.dtype(dtype)}{shape}"

            a = ins[me].copy() if me == root else np.zeros_like(ins[me])
            self.call(topo, "broadcast", root, lambda a=a, r=root: topo.broadcast(a, r))
            self.check(lambda a=a, ins=ins, r=root: _same(a, ins[r], "broadcast"), what)

            g = self.call(topo, "gather", root, lambda ins=ins, r=root: topo.gather(ins[me], r))
            if me == root:
                self.check(lambda g=g, ins=ins: _same(g, np.stack(ins), "gather"), what)
            elif g is not None:
                self.failures.append(f"gather {what}: non-root got {type(g)}")

            for op, ref in self.reductions(topo, dtype, ins):
                a = ins[me].copy()
                self.call(topo, "reduce", root, lambda a=a, op=op, r=root: topo.reduce(a, r, op))
                self.check(lambda a=a, ref=ref, ins=ins, op=op, r=root: _same(
                    a, ref if me == r else ins[me], f"reduce {op}"), what)
        for dtype, shape in COMBOS:  # all_reduce has no root: once per combination
            ins = self.inputs(dtype, shape)
            for op, ref in self.reductions(topo, dtype, ins):
                a = ins[me].copy()
                self.call(topo, "all_reduce", 0, lambda a=a, op=op: topo.all_reduce(a, op))
                self.check(lambda a=a, ref=ref, op=op: _same(a, ref, f"all_reduce {op}"),
                           f"{label} {np.dtype(dtype)}{shape}")
        # a non-contiguous (transposed) array is worked on in place all the same
        ins = self.inputs(np.float32, (5, 3))
        a = np.ascontiguousarray(ins[me].T).T  # same values, Fortran order
        self.call(topo, "all_reduce", 0, lambda: topo.all_reduce(a, "sum"))
        self.check(lambda: _same(a, np.stack(ins).sum(0), "all_reduce non-contiguous"), label)
        b = np.asfortranarray(ins[me]) if me == n - 1 else np.asfortranarray(np.zeros((5, 3),
                                                                                      np.float32))
        self.call(topo, "broadcast", n - 1, lambda: topo.broadcast(b, n - 1))
        self.check(lambda: _same(b, ins[n - 1], "broadcast non-contiguous"), label)

    # -- ring gossip ----------------------------------------------------------------------------
    def run_gossip(self, topo: Topology) -> None:
        n, me = self.n, self.t.rank
        xs = np.stack([rank_input(r, np.float64, (5,), 9999) for r in range(n)])
        mean0 = xs.mean(0)
        spread0 = np.ptp(xs, axis=0).max()
        x = xs[me].copy()
        prev_spread = spread0
        for i in range(GOSSIP_ROUNDS):
            self.call(topo, "gossip_average", 0, lambda: topo.gossip_average(x))
            if n == 2:
                xs = (xs + xs[::-1]) / 2
            elif n > 2:
                xs = (np.roll(xs, 1, axis=0) + xs + np.roll(xs, -1, axis=0)) / 3
            if not np.array_equal(x, xs[me]):
                raise CheckFailed(f"gossip round {i}: {x} != simulated {xs[me]}")
            if not np.allclose(xs.mean(0), mean0, rtol=0, atol=1e-12):
                raise CheckFailed(f"gossip round {i}: mean moved {xs.mean(0) - mean0}")
            spread = np.ptp(xs, axis=0).max()
            if spread > prev_spread + 1e-12:
                raise CheckFailed(f"gossip round {i}: spread grew {prev_spread} -> {spread}")
            prev_spread = spread
        if n > 1 and not prev_spread < GOSSIP_SPREAD * spread0:
            raise CheckFailed(f"gossip: spread {spread0} -> {prev_spread} after "
                              f"{GOSSIP_ROUNDS} rounds")
        # the real arrays, not just the simulation: sum, max and min over ranks
        tot, hi, lo = x.copy(), x.copy(), x.copy()
        self.t.all_reduce(tot, "sum", TIMEOUT_S)
        self.t.all_reduce(hi, "max", TIMEOUT_S)
        self.t.all_reduce(lo, "min", TIMEOUT_S)
        if not np.allclose(tot / n, mean0, rtol=0, atol=1e-12) or (hi - lo).max() > prev_spread:
            raise CheckFailed(f"gossip: global mean {tot / n} vs {mean0}, spread {hi - lo}")

    # -- a silent peer ------------------------------------------------------------------------
    def run_silent_peer(self) -> str:
        """Rank N−1 skips a tree reduce to rank 0: each rank on its path to the root times out
        at the transport's deadline with an error naming the child it waited for; the others
        finish. Leaves the tag's streams dead, so it runs last."""
        n, me, m = self.n, self.t.rank, 2
        topo = make_topology("tree", self.t, fanout=m, tag=999)
        path = {n - 1: None}  # rank -> its child on the way up from the silent rank
        v = n - 1
        while v:
            low = v & -v  # m = 2: the lowest set bit is the lowest non-zero digit
            path[v - low], v = v, v - low
        if me == n - 1:
            return "silent"
        saved, self.t.timeout_s = self.t.timeout_s, SILENT_TIMEOUT_S
        t0 = time.perf_counter()
        try:
            topo.reduce(np.ones(4), 0)
        except PeerTimeout as e:
            took = time.perf_counter() - t0
            text = str(e)
            if me not in path:
                raise CheckFailed(f"silent peer: rank {me} is off the path but got {e}") from e
            if e.peer != path[me] or f"rank {path[me]}" not in text or "tree reduce" not in text:
                raise CheckFailed(f"silent peer: error should name rank {path[me]}: {e}") from e
            if not SILENT_TIMEOUT_S <= took < SILENT_TIMEOUT_S + 5:
                raise CheckFailed(f"silent peer: raised after {took:.2f}s") from e
            return text
        finally:
            self.t.timeout_s = saved
        if me in path:
            raise CheckFailed(f"silent peer: rank {me} waits on {path[me]} but no error")
        return "not on the path: finished"

    # -- validation (no messages) -------------------------------------------------------------
    def run_validation(self) -> None:
        t = self.t
        bad = [
            (lambda: make_topology("tree", t, fanout=1), ValueError, "fanout"),
            (lambda: make_topology("butterfly", t, fanout=0), ValueError, "fanout"),
            (lambda: make_topology("hypercube", t), ValueError, "unknown topology"),
            (lambda: make_topology("tree", t).broadcast(np.zeros(3), self.n), ValueError,
             "root"),
            (lambda: make_topology("ring", t).reduce(np.zeros(3, np.int64), 0, "mean"),
             ValueError, "floating"),
            (lambda: make_topology("star", t).all_reduce(np.zeros(3), "prod"), ValueError,
             "unknown reduction"),
            (lambda: make_topology("tree", t).gossip_average(np.zeros(3)), NotImplementedError,
             "ring"),
            (lambda: make_topology("ring", t).gossip_average(np.zeros(3, np.int32)), ValueError,
             "floating"),
        ]
        for fn, exc, text in bad:
            try:
                fn()
            except exc as e:
                if text not in str(e):
                    raise CheckFailed(f"{exc.__name__} without {text!r}: {e}") from e
            else:
                raise CheckFailed(f"expected {exc.__name__} ({text})")


def main() -> int:
    backend = sys.argv[1]
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    run = Runner(t)
    t_all = time.perf_counter()
    try:
        run.check(run.run_validation, "validation")
        log(t, "OK validation" if not run.failures else "FAIL validation")
        for i, name in enumerate(TOPOLOGIES):
            t0, calls0, fails0 = time.perf_counter(), run.calls, len(run.failures)
            fanouts = FANOUTS if name in ("tree", "butterfly") else (2,)
            for m in fanouts:
                topo = make_topology(name, t, fanout=m, tag=200 + 10 * i + m)
                run.run_topology(topo)
                if name == "ring":
                    run.check(lambda topo=topo: run.run_gossip(topo), "ring gossip")
            status = "OK" if len(run.failures) == fails0 else "FAIL"
            log(t, f"{status} {name} m={','.join(map(str, fanouts))} N={run.n}: "
                   f"{run.calls - calls0} calls in {time.perf_counter() - t0:.2f}s")
        t.barrier(TIMEOUT_S)
        if run.n > 1:
            fails0, seen = len(run.failures), []
            run.check(lambda: seen.append(run.run_silent_peer()), "silent peer")
            t.barrier(TIMEOUT_S)
            ok = len(run.failures) == fails0
            log(t, f"OK silent peer: {seen[0]}" if ok else "FAIL silent peer")
    except CollectiveError as e:
        abort(t, str(e), trace=True)
    log(t, f"DONE {run.calls} calls, {len(run.failures)} failures, "
           f"{time.perf_counter() - t_all:.2f}s")
    if backend == "mpi":
        t.shutdown()
    return 1 if run.failures else 0


if __name__ == "__main__":
    rank_exit(main)
