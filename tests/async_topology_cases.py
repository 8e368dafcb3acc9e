"""Asynchronous tree broadcast (archzoo.topology.async_tree) on real engines: run on
each rank, ``python tests/async_topology_cases.py gloo|mpi`` under tests/mp.py, N ≥ 1.

For (fanout, root) in ((2, 0), (3, N−1)):

- broadcast (fan-out 2: a Schema and a 64-publication history; fan-out 3: a byte count and a
  4-publication history): the root publishes versions 3, 6, …, 3V
  (publication numbers 1..V) every ~1 ms while the other ranks poll at their own random pace,
  ranks with relative rank v ≡ 2 (mod 3) slowly (15–30 ms, relays among them); then the shutdown
  protocol (root close, poll until idle, barrier). Checks: each rank ends with the final version
  and its payload; the versions a rank takes are strictly increasing and every payload it holds
  is f(version) (no corruption, no mixing); received + skipped publications = V on every rank
  and slow ranks skipped some; messages each rank got = messages sent to it (all-reduced
  counters); every receipt's age equals (or, when inexact, brackets) the age computed from the
  root's publication log, broadcast to all ranks after the run; slow ranks saw a positive age.

Prints ``[rank r] OK <case> ...`` or ``FAIL`` lines, then ``DONE``; exit 1 on any failure, and
an error (a deadline passed) aborts the run.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mp import abort, log, rank_exit

from archzoo.comm import Schema, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.topology.async_tree import AsyncTreeBroadcast

TIMEOUT_S = 25.0
CASES = ((2, "first"), (3, "last"))  # (fanout, root) with root 0 or N−1
V = 200  # publications
PARAM = 515  # float32 parameters (a size that is not a round number)
SEED = 4


def params_of(version: int) -> np.ndarray:
    """f(version): every element depends on the version, so a torn or mixed copy shows."""
    i = np.arange(PARAM, dtype=np.int64)
    return ((i * 7919 + version * 104729) % 1000003).astype(np.float32)


class Runner:
    def __init__(self, t: Transport) -> None:
        self.t, self.n, self.me = t, t.world_size, t.rank
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        if len(self.failures) < 20:
            log(self.t, f"FAIL {what}")
        self.failures.append(what)

    def expect(self, cond: bool, what: str) -> None:
        if not cond:
            self.fail(what)

    def sum_over_ranks(self, values: list[float]) -> np.ndarray:
        a = np.array(values, dtype=np.float64)
        self.t.all_reduce(a, "sum", TIMEOUT_S)
        return a

    # -- broadcast ----------------------------------------------------------------------------
    def broadcast(self, m: int, root: int, tag: int) -> str:
        t, n, me = self.t, self.n, self.me
        v = (me - root) % n
        slow = v % 3 == 2
        rng = np.random.default_rng([SEED, me, m])
        schema = Schema("params", [("params", np.float32, (PARAM,)), ("step", np.int64, ())])
        # fanout 2 moves the schema's Messages, fanout 3 a plain byte count
        # fanout 3 keeps a short history: ages may then be bracketed rather than exact
        hist = 64 if m == 2 else 4
        bc = AsyncTreeBroadcast(t, schema if m == 2 else schema.nbytes, root, m, tag,
                                history=hist, record=True)
        label = f"broadcast m={m} root={root}"
        pub_t = np.full(V + 1, np.nan)  # root: publication times by publication number
        t.barrier(TIMEOUT_S)
        if me == root:
            msg = schema.new()
            for s in range(1, V + 1):
                msg["params"][:] = params_of(3 * s)
                msg["step"][...] = s
                bc.publish(msg if m == 2 else msg.buffer, 3 * s)
                pub_t[s] = float(bc._latest["hist_t"][0])
                got = bc.latest()
                self.expect(got is not None and got[1] == 3 * s, f"{label}: root latest {got}")
                bc.poll()
                time.sleep(float(rng.uniform(0.0005, 0.0015)))
            bc.finish(TIMEOUT_S)
        else:
            last, checked = -1, 0
            deadline = time.perf_counter() + TIMEOUT_S
            while not bc.idle():
                got = bc.poll()
                for ver in got:
                    self.expect(ver > last, f"{label}: version {ver} after {last}")
                    last = max(last, ver)
                if got:
                    held = bc.latest()
                    if held is None or held[1] != got[-1]:
                        self.fail(f"{label}: latest {None if held is None else held[1]} "
                                  f"after taking {got}")
                    else:
                        arr = held[0].view(np.float32)[:PARAM]
                        if m == 2:
                            msg_view = bc.latest_message()[0]
                            arr = msg_view["params"]
                            self.expect(int(msg_view["step"]) == held[1] // 3,
                                        f"{label}: step field {int(msg_view['step'])}")
                        self.expect(np.array_equal(arr, params_of(held[1])),
                                    f"{label}: payload of version {held[1]} corrupted")
                        checked += 1
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"rank {me}: {label} not idle after {TIMEOUT_S}s: {bc}")
                time.sleep(float(rng.uniform(0.015, 0.03)) if slow
                           else float(rng.uniform(0.0, 0.002)))
            self.expect(checked >= 1, f"{label}: no payload checked")
        t.barrier(TIMEOUT_S)
        final = bc.latest()
        self.expect(final is not None and final[1] == 3 * V, f"{label}: ends with "
                    f"{None if final is None else final[1]}, want {3 * V}")
        if final is not None:
            self.expect(np.array_equal(final[0].view(np.float32)[:PARAM], params_of(3 * V)),
                        f"{label}: final payload corrupted")
        self.expect(bc.out_of_order == 0, f"{label}: {bc.out_of_order} messages out of order")
        if me != root:
            self.expect(bc.versions_received + bc.skipped == V,
                        f"{label}: received {bc.versions_received} + skipped {bc.skipped} != {V}")
            if slow:
                self.expect(bc.skipped > 0, f"{label}: a slow rank skipped nothing")
            self.expect(bc.msgs_received >= 1 and bc.age_count == bc.versions_received,
                        f"{label}: {bc.age_count} ages for {bc.versions_received} receipts")
        # every message sent to a rank was received by it
        sent_to = [0.0] * n
        for c, k in bc.sent_to.items():
            sent_to[c] = k
        recv = [0.0] * n
        recv[me] = bc.msgs_received
        tot = self.sum_over_ranks(sent_to + recv + [bc.msgs_sent])
        self.expect(np.array_equal(tot[:n], tot[n:2 * n]),
                    f"{label}: sent to each rank {tot[:n]} != received {tot[n:2 * n]}")
        # ages against the root's publication log
        t.broadcast(pub_t, root, TIMEOUT_S)
        slow_pos = 0
        for rc in bc.receipts:
            idx = np.nonzero(pub_t[1:] <= rc.t_recv)[0]
            true_ver = 3 * (int(idx[-1]) + 1) if idx.size else rc.version
            true_age = true_ver - rc.version
            if rc.exact:
                self.expect(rc.age == true_age, f"{label}: seq {rc.seq} age {rc.age}, "
                            f"log says {true_age}")
            else:
                self.expect(rc.age <= true_age <= rc.age_hi, f"{label}: seq {rc.seq} age in "
                            f"[{rc.age}, {rc.age_hi}], log says {true_age}")
            self.expect(rc.age_s >= -1e-3, f"{label}: age_s {rc.age_s}")
            slow_pos += rc.age > 0
        if slow:
            self.expect(slow_pos > 0, f"{label}: a slow rank never saw a positive age")
        t.barrier(TIMEOUT_S)
        return (f"{label} N={n}: sent {bc.msgs_sent} received {bc.msgs_received} versions "
                f"{bc.versions_received} skipped {bc.skipped} age mean {bc.age_mean:.2f} max "
                f"{bc.age_max} inexact {bc.age_inexact} age_s max {bc.age_s_max * 1e3:.1f}ms "
                f"(all ranks: {int(tot[-1])} messages)")

    # -- validation (no messages) -------------------------------------------------------------
    def validation(self, tag: int) -> str:
        t, n = self.t, self.n
        bc = AsyncTreeBroadcast(t, 8, 0, 2, tag)
        cases = [
            (lambda: AsyncTreeBroadcast(t, 8, n, 2, tag + 1), ValueError, "root"),
            (lambda: AsyncTreeBroadcast(t, 8, 0, 1, tag + 2), ValueError, "fanout"),
            (lambda: AsyncTreeBroadcast(t, 8, 0, 2, tag + 3, history=0), ValueError, "history"),
            (lambda: bc.publish(np.zeros(3), 1), (ValueError, RuntimeError), ""),
        ]
        if self.me == 0:
            cases.append((lambda: bc.publish(np.zeros(1), -1), ValueError, "increasing"))
        else:
            cases.append((lambda: bc.publish(np.zeros(1), 1), RuntimeError, "only the root"))
        for fn, exc, text in cases:
            try:
                fn()
            except exc as e:
                self.expect(text in str(e), f"validation: {type(e).__name__} without {text!r}")
            else:
                self.fail(f"validation: no {exc} ({text})")
        return "validation"


def main() -> int:
    backend = sys.argv[1]
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    run = Runner(t)
    t0 = time.perf_counter()
    try:
        # the validation's instances post receives on tags 900.. that are never used again
        run.validation(900)
        t.barrier(TIMEOUT_S)
        log(t, "OK validation" if not run.failures else "FAIL validation")
        for i, (m, which) in enumerate(CASES):
            root = 0 if which == "first" else t.world_size - 1
            fails0, c0 = len(run.failures), time.perf_counter()
            text = run.broadcast(m, root, 400 + 10 * i)
            ok = len(run.failures) == fails0
            log(t, f"{'OK' if ok else 'FAIL'} {text} in {time.perf_counter() - c0:.2f}s")
    except Exception as e:  # a deadline passed or an error: the ranks are out of step
        abort(t, f"{type(e).__name__}: {e}", trace=True)
    log(t, f"DONE {len(run.failures)} failures, {time.perf_counter() - t0:.2f}s")
    if backend == "mpi":
        t.shutdown()
    return 1 if run.failures else 0


if __name__ == "__main__":
    rank_exit(main)
