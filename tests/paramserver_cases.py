"""Parameter-server shards over the real transport.

``python tests/paramserver_cases.py gloo|mpi cases`` on 5 ranks (tests/mp.py): ranks 0 and 1
are shards (a 1-shard case uses rank 0 only), ranks 2.. are workers; rank 2 also checks
what the shards report. Each case prints ``CASE <name> OK`` or ``CASE <name> FAIL: ...`` on
every rank; the ranks meet at a barrier between cases and exit 0 only if all passed.

- ``sync_k1`` / ``sync_k2``: sync, D = 0, shared RMSProp, gradients that depend on the
  parameters. After every round each worker holds exactly the parameters of a local
  reference (one whole-vector optimizer, the workers' gradients summed in rank order and
  averaged); the 2-shard run ends bit-for-bit where the 1-shard run did.
- ``async``: 2 shards, no staleness bound: every push is applied and answered with a newer
  version; per shard applied = pushed − dropped and version = applied; replaying the shard's
  record of what it applied reproduces its parameters bit-for-bit.
- ``stale``: async with S = 2. First one worker alone, with an exact script of old versions
  (lag S applied, lag S + 1 dropped); then all workers concurrently, with deliberate lags > S
  (always dropped): every outcome obeys the rule, and each shard's dropped count equals the
  STALE replies the workers got.
- ``sync_late``: sync, W = 3, D = 1, Adam. In round r worker r mod 3 is slow on purpose: it
  pushes its gradient for round r only once it sees version r + 1. Exactly those R gradients
  are discarded and counted; each update is the mean of the other two in rank order
  (bit-for-bit against a local reference).

``python tests/paramserver_cases.py gloo dead-serve`` (5 ranks, gloo): rank 0 serves async,
rank 1 sync with D = 1, workers 2..4 use both; worker 4 dies mid-run (``os._exit(3)`` right
after a push). Both shards serve on to the end and report the dead rank.

``python tests/paramserver_cases.py gloo dead-sync`` (4 ranks, gloo): rank 0 serves sync with
D = 0 to workers 1..3; worker 3 dies after round 3. The shard ends with an error naming rank 3
(``SHARD_ERROR``), long before its round deadline.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from mp import log, rank_exit, run_cases

from archzoo.comm import ControlChannel, PeerFailure, PeerTimeout, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.paramserver import (
    Adam,
    Outcome,
    ParamShard,
    PSClient,
    PSTags,
    SharedRMSProp,
    shard_bounds,
)

TIMEOUT_S = 15.0  # every transport wait
CASE_DEADLINE_S = 45.0  # a shard's serve loop
N = 1001  # parameters: not a multiple of the shard count
ROUNDS = 6
ASYNC_PUSHES = 12
STALENESS = 2
F32 = np.float32

FINAL: dict[str, np.ndarray] = {}  # this process's final parameters per sync case


# -- the known data ------------------------------------------------------------------------------
def init_params() -> np.ndarray:
    return (np.random.default_rng(12345).standard_normal(N, dtype=F32) * F32(0.1)).astype(F32)


def noise(key: int, worker: int, step: int) -> np.ndarray:
    return np.random.default_rng([key, worker, step]).standard_normal(N, dtype=F32)


def grad_of(theta: np.ndarray, key: int, worker: int, step: int) -> np.ndarray:
    """A gradient that depends on the parameters it was computed on (float32, exact)."""
    g = np.multiply(theta, F32(0.05))
    np.add(g, noise(key, worker, step), out=g)
    return g


@dataclass
class Case:
    name: str
    mode: str
    k: int
    key: int  # seeds the gradients (sync_k1 and sync_k2 share it)
    opt: str = "rmsprop"
    drop: int = 0
    staleness: int | None = None

    def optimizer(self) -> SharedRMSProp | Adam:
        return SharedRMSProp(0.01) if self.opt == "rmsprop" else Adam(0.01)


def reference(case: Case, workers: list[int], used: Callable[[int], list[int]]) -> np.ndarray:
    """One whole-vector optimizer; round r averages ``used(r)``'s gradients."""
    theta = init_params()
    opt = case.optimizer()
    for r in range(ROUNDS):
        grads = [grad_of(theta, case.key, w, r) for w in sorted(used(r))]
        # the float64 sum, rounded once to float32, divided in float32
        acc = np.sum(np.stack(grads).astype(np.float64), 0).astype(F32)
        np.divide(acc, F32(len(grads)), out=acc)
        opt.step(theta, acc)
    return theta


def outcomes(c: PSClient) -> list[str]:
    return [Outcome(int(o)).name for o in c.outcomes]


# -- shards --------------------------------------------------------------------------------------
def shard_role(t: Transport, case: Case, shards: list[int], workers: list[int], tags: PSTags,
               control: ControlChannel, checker: int) -> None:
    i = shards.index(t.rank)
    lo, hi = shard_bounds(N, len(shards))[i]
    init = init_params()
    shard = ParamShard(t, init[lo:hi], workers, case.optimizer(), tags, mode=case.mode,
                       drop=case.drop, staleness=case.staleness, round_timeout_s=TIMEOUT_S,
                       record=True)
    shard.run(timeout_s=CASE_DEADLINE_S)
    report: dict = {"type": "report", "index": i, "stats": shard.stats.as_dict(),
                    "history": [[int(x) for x in h] for h in shard.state.history or []],
                    "dead": shard.dead}
    if case.mode == "async":  # the gradients depend on (worker, seq) only: replay them
        p = init[lo:hi].copy()
        opt = case.optimizer()
        for w, seq, _gv, outcome, _v in shard.state.history or []:
            if outcome == Outcome.APPLIED:
                opt.step(p, noise(case.key, w, seq)[lo:hi])
        report["replay_ok"] = bool(np.array_equal(p, shard.params))
    control.send(checker, report)
    control.flush(TIMEOUT_S)


# -- workers -------------------------------------------------------------------------------------
def expect_error(kind: type[Exception], fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except kind:
        return
    raise AssertionError(f"{what}: no {kind.__name__}")


def sync_worker(t: Transport, case: Case, c: PSClient, workers: list[int]) -> dict:
    # the client's own rules: versions come from a pull; one request in flight
    expect_error(ValueError, lambda: c.push(np.zeros(N, F32)), "push before any pull")
    expect_error(RuntimeError, lambda: c.wait_params(0.1), "wait with nothing asked")
    c.pull()
    expect_error(RuntimeError, c.pull, "a second request in flight")
    theta, v = c.wait_params(TIMEOUT_S)
    assert (v == 0).all() and np.array_equal(theta, init_params()), "initial pull"
    expect_error(ValueError, lambda: c.push(np.zeros(N - 1, F32)), "a gradient of wrong size")
    theta, v = c.sync(TIMEOUT_S)
    assert (v == 0).all() and np.array_equal(theta, init_params()), "initial pull"
    for r in range(ROUNDS):
        g = grad_of(theta, case.key, t.rank, r)
        theta, v = c.exchange(g, TIMEOUT_S)
        assert outcomes(c) == ["APPLIED"] * case.k, (r, outcomes(c))
        assert (v == r + 1).all(), (r, v.tolist())
    ref = reference(case, workers, lambda r: workers)
    assert np.array_equal(theta, ref), (
        f"{case.name}: parameters differ from the reference in "
        f"{int((theta != ref).sum())} places")
    FINAL[case.name] = theta.copy()
    if case.name == "sync_k2":
        assert "sync_k1" in FINAL, "sync_k1 did not finish on this rank"
        assert np.array_equal(FINAL["sync_k1"], theta), "2 shards ended elsewhere than 1 shard"
    return {}


def sync_late_worker(t: Transport, case: Case, c: PSClient, workers: list[int]) -> dict:
    theta, v = c.sync(TIMEOUT_S)
    late = 0
    for r in range(ROUNDS):
        g = grad_of(theta, case.key, t.rank, r)
        if t.rank == workers[r % len(workers)]:  # this round's slow worker
            polls = 0
            while True:
                _, v = c.sync(TIMEOUT_S)
                if (v > r).all():
                    break
                assert ((v == r) | (v == r + 1)).all(), (r, v.tolist())  # shards in turn
                polls += 1
                assert polls < 5000, f"round {r} never completed"
                time.sleep(0.002)
            assert (v == r + 1).all(), (r, v.tolist())
            c.push(g, versions=[r] * case.k)
            theta, v = c.wait_params(TIMEOUT_S)
            assert outcomes(c) == ["LATE"] * case.k, (r, outcomes(c))
            late += 1
        else:
            theta, v = c.exchange(g, TIMEOUT_S)
            assert outcomes(c) == ["APPLIED"] * case.k, (r, outcomes(c))
        assert (v == r + 1).all(), (r, v.tolist())
    ref = reference(case, workers,
                    lambda r: [w for w in workers if w != workers[r % len(workers)]])
    assert np.array_equal(theta, ref), (
        f"parameters differ from the W-D reference in {int((theta != ref).sum())} places")
    return {"late": late}


def async_push(c: PSClient, case: Case, rank: int, versions: np.ndarray) -> tuple[list, np.ndarray]:
    c.push(noise(case.key, rank, c.seq + 1), versions=versions)  # seq: this push's number
    _, v = c.wait_params(TIMEOUT_S)
    return outcomes(c), v


def async_worker(t: Transport, case: Case, c: PSClient, workers: list[int]) -> dict:
    _, v = c.sync(TIMEOUT_S)
    seen = v.copy()
    for j in range(ASYNC_PUSHES):
        gv = c.versions.copy()
        out, v = async_push(c, case, t.rank, gv)
        assert out == ["APPLIED"] * case.k, (j, out)
        assert (v > gv).all() and (v > seen).all(), (j, gv.tolist(), seen.tolist(), v.tolist())
        seen = v.copy()
        time.sleep(0.001 * (t.rank % 3))
    return {"pushes": ASYNC_PUSHES}


LAGS = [0, 1, 3, 0, 2, 5, 0, 4, 1, 3]  # phase B: lags > S are dropped for sure


def stale_worker(t: Transport, case: Case, c: PSClient, workers: list[int],
                 control: ControlChannel, checker: int) -> dict:
    s = case.staleness
    assert s == STALENESS
    stale = np.zeros(case.k, np.int64)
    pushes = 0
    if t.rank == checker:  # phase A: alone, an exact script
        _, v = c.sync(TIMEOUT_S)
        assert (v == 0).all(), v.tolist()
        script = [(0, "APPLIED", 1), (0, "APPLIED", 2), (0, "APPLIED", 3), (0, "STALE", 3),
                  (1, "APPLIED", 4), (1, "STALE", 4), (4, "APPLIED", 5)]
        try:
            for gv, want, want_v in script:
                out, v = async_push(c, case, t.rank, np.full(case.k, gv))
                pushes += 1
                assert out == [want] * case.k and (v == want_v).all(), (
                    f"push on version {gv}: got {out} at {v.tolist()}, want {want} at {want_v}")
                stale += np.array([o == "STALE" for o in out])
            assert [d["dropped_stale"] for d in c.shard_stats()] == [2] * case.k, (
                c.shard_stats())
        finally:  # release the others even after a failure
            for w in workers:
                if w != checker:
                    control.send(w, {"type": "go"})
    else:
        go = control.recv_from(checker, TIMEOUT_S)
        assert go.get("type") == "go", go
        c.sync(TIMEOUT_S)
    for lag in LAGS:  # phase B: everyone at once
        gv = np.maximum(c.versions - lag, 0)
        deliberate = (c.versions - lag >= 0) & (lag > s)  # older than S when pushed: dropped
        out, v = async_push(c, case, t.rank, gv)
        pushes += 1
        for i, o in enumerate(out):
            if o == "APPLIED":  # handled at version v − 1
                assert not deliberate[i], f"shard {i}: applied a gradient of lag {lag} > S"
                assert v[i] - 1 - gv[i] <= s, (
                    f"shard {i}: applied a gradient {v[i] - 1 - gv[i]} versions old")
            else:
                assert o == "STALE", o
                assert v[i] - gv[i] > s, f"shard {i}: dropped a gradient {v[i] - gv[i]} old"
                stale[i] += 1
        time.sleep(0.001 * (t.rank % 3))
    return {"stale": stale.tolist(), "pushes": pushes}


# -- the checker ---------------------------------------------------------------------------------
def check(case: Case, workers: list[int], reports: dict[int, dict], wrep: dict[int, dict]) -> None:
    n_w = len(workers)
    for i, rep in sorted((r["index"], r) for r in reports.values()):
        st, hist = rep["stats"], rep["history"]
        assert rep["dead"] == [], rep["dead"]
        assert st["pushed"] == len(hist), (i, st["pushed"], len(hist))
        outs = [Outcome(h[3]).name for h in hist]
        if case.mode == "sync":
            assert st["version"] == ROUNDS, (i, st)
            assert st["pushed"] == n_w * ROUNDS, (i, st)
            assert st["applied"] == (n_w - case.drop) * ROUNDS, (i, st)
            assert st["dropped_late"] == case.drop * ROUNDS, (i, st)
            assert st["dropped_stale"] == 0 and st["abandoned"] == 0, (i, st)
            for r in range(ROUNDS):
                rnd = {h[0]: Outcome(h[3]).name for h in hist if h[2] == r}
                slow = workers[r % n_w] if case.drop else None
                want = {w: ("LATE" if w == slow else "APPLIED") for w in workers}
                assert rnd == want, (i, r, rnd, want)
            if case.drop:
                assert sum(d["late"] for d in wrep.values()) == st["dropped_late"], wrep
            continue
        # async: applied = pushed − dropped, version counts applied gradients
        assert rep["replay_ok"], f"shard {i}: replaying its record does not give its params"
        assert st["applied"] == st["pushed"] - st["dropped_stale"], (i, st)
        assert st["version"] == st["applied"], (i, st)
        assert st["dropped_late"] == 0 and st["abandoned"] == 0, (i, st)
        assert st["pushed"] == sum(d["pushes"] for d in wrep.values()), (i, st, wrep)
        assert outs.count("APPLIED") == st["applied"], (i, outs)
        v = 0
        for _w, _seq, gv, o, after in hist:  # every outcome obeys the rule at its version
            if case.staleness is not None and v - gv > case.staleness:
                assert o == Outcome.STALE and after == v, (i, v, gv, o, after)
            else:
                assert o == Outcome.APPLIED and after == v + 1, (i, v, gv, o, after)
                v += 1
        for w in workers:
            seqs = [h[1] for h in hist if h[0] == w]
            assert seqs == sorted(seqs), f"shard {i}: rank {w}'s pushes out of order"
        if case.staleness is not None:
            got = sum(d["stale"][i] for d in wrep.values())
            assert st["dropped_stale"] == got, (
                f"shard {i} counts {st['dropped_stale']} stale, the workers got {got} STALE")
            assert got >= 2 + sum(1 for lag in LAGS if lag > STALENESS), got


def worker_role(t: Transport, case: Case, shards: list[int], workers: list[int], tags: PSTags,
                control: ControlChannel, checker: int) -> None:
    c = PSClient(t, shards, N, tags, timeout_s=TIMEOUT_S)
    try:
        if case.name == "stale":
            mine = stale_worker(t, case, c, workers, control, checker)
        elif case.mode == "async":
            mine = async_worker(t, case, c, workers)
        elif case.drop:
            mine = sync_late_worker(t, case, c, workers)
        else:
            mine = sync_worker(t, case, c, workers)
    except BaseException:
        try:  # still say BYE, so the shards finish instead of waiting for their deadline
            c.close(TIMEOUT_S)
        except Exception as e:  # noqa: BLE001
            log(t, f"  (closing after the failure failed too: {type(e).__name__}: {e})")
        raise
    c.close(TIMEOUT_S)
    if t.rank != checker:
        control.send(checker, {"type": "worker", **mine})
        control.flush(TIMEOUT_S)
        return
    reports: dict[int, dict] = {}
    wrep = {t.rank: mine}
    deadline = time.monotonic() + CASE_DEADLINE_S
    while len(reports) < len(shards) or len(wrep) < len(workers):
        for p, m in control.poll():
            if m.get("type") == "report":
                reports[p] = m
            elif m.get("type") == "worker":
                wrep[p] = m
        if time.monotonic() > deadline:
            raise TimeoutError(f"reports from {sorted(reports)}, workers {sorted(wrep)}")
        time.sleep(1e-3)
    check(case, workers, reports, wrep)
    log(t, f"  {case.name}: " + "; ".join(
        f"shard {r['index']} " + json.dumps(r["stats"], separators=(",", ":"))
        for r in sorted(reports.values(), key=lambda r: r["index"])))


CASES = [
    Case("sync_k1", "sync", 1, key=1),
    Case("sync_k2", "sync", 2, key=1),
    Case("async", "async", 2, key=3),
    Case("stale", "async", 2, key=4, staleness=STALENESS),
    Case("sync_late", "sync", 2, key=5, opt="adam", drop=1),
]
CASE_NAMES = [c.name for c in CASES]


def run_case(t: Transport, case: Case, base_tag: int) -> None:
    shards = list(range(case.k))
    workers = list(range(2, t.world_size))
    checker = workers[0]
    tags = PSTags.at(base_tag)
    ctl_tag = base_tag + 5
    if t.rank in shards:
        control = ControlChannel(t, [checker], ctl_tag)
        shard_role(t, case, shards, workers, tags, control, checker)
    elif t.rank in workers:
        peers = shards + [w for w in workers if w != checker] if t.rank == checker else [checker]
        control = ControlChannel(t, peers, ctl_tag)
        worker_role(t, case, shards, workers, tags, control, checker)


def all_cases(backend: str) -> int:
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    assert t.world_size >= 5, "2 shards and at least 3 workers"
    code = run_cases(t, [(c.name, partial(run_case, t, c)) for c in CASES], CASE_DEADLINE_S)
    t.shutdown()
    return code


# -- a worker dies (gloo) --------------------------------------------------------------------------
DEAD_ROUNDS = 12
DIE_AT_VERSION = 3


def dead_serve(t: Transport) -> int:
    """Rank 0 async, rank 1 sync (D = 1); workers 2..4 use both; rank 4 dies mid-run."""
    workers, dying = [2, 3, 4], 4
    a_tags, s_tags = PSTags.at(10), PSTags.at(20)
    init = init_params()
    t0 = time.monotonic()
    if t.rank in (0, 1):
        mode = "async" if t.rank == 0 else "sync"
        shard = ParamShard(t, init, workers, SharedRMSProp(0.01),
                           a_tags if t.rank == 0 else s_tags, mode=mode,
                           drop=0 if mode == "async" else 1, round_timeout_s=30.0)
        shard.run(timeout_s=CASE_DEADLINE_S)
        st = shard.stats
        ok = shard.dead == [dying]
        if mode == "async":
            ok = ok and st.applied == st.pushed - st.dropped_stale and st.version == st.applied
        else:
            ok = ok and st.version == DEAD_ROUNDS and st.applied == 2 * DEAD_ROUNDS \
                and st.pushed == st.applied + st.dropped_late + st.abandoned
        print(f"SHARD_DONE mode={mode} ok={ok} elapsed={time.monotonic() - t0:.2f} "
              f"dead={shard.dead} stats={json.dumps(st.as_dict(), separators=(',', ':'))} "
              f"failure={shard.failures.get(dying, '')[:160]!r} all={shard.failures!r}", flush=True)
        return 0 if ok else 5
    a = PSClient(t, [0], N, a_tags, timeout_s=TIMEOUT_S)
    s = PSClient(t, [1], N, s_tags, timeout_s=TIMEOUT_S)
    a.sync()
    theta, v = s.sync()
    step = 0
    while v[0] < DEAD_ROUNDS:
        if t.rank == dying and v[0] >= DIE_AT_VERSION:
            a.push(noise(7, t.rank, step))
            os._exit(3)  # dies with a push in flight and its replies unposted
        a.exchange(noise(7, t.rank, step))
        theta, v = s.exchange(grad_of(theta, 8, t.rank, step))
        step += 1
        time.sleep(0.002)
    a.close()
    s.close()
    print(f"WORKER_DONE steps={step} version={int(v[0])}", flush=True)
    return 0


def dead_sync(t: Transport) -> int:
    """Rank 0 sync with D = 0 for workers 1..3; rank 3 dies after round 3."""
    workers, dying = [1, 2, 3], 3
    tags = PSTags.at(30)
    t0 = time.monotonic()
    if t.rank == 0:
        shard = ParamShard(t, init_params(), workers, SharedRMSProp(0.01), tags, mode="sync",
                           round_timeout_s=30.0)
        try:
            shard.run(timeout_s=CASE_DEADLINE_S)
        except PeerFailure as e:
            print(f"SHARD_ERROR elapsed={time.monotonic() - t0:.2f} peer={e.peer} "
                  f"version={shard.version} msg={e}", flush=True)
            return 4
        except PeerTimeout as e:
            print(f"SHARD_TIMEOUT elapsed={time.monotonic() - t0:.2f} msg={e}", flush=True)
            return 5
        print(f"SHARD_DONE unexpectedly: stats={shard.stats.as_dict()}", flush=True)
        return 6
    c = PSClient(t, [0], N, tags, timeout_s=TIMEOUT_S)
    theta, v = c.sync()
    try:
        for r in range(DEAD_ROUNDS):
            if t.rank == dying and r == DIE_AT_VERSION + 1:
                os._exit(3)
            theta, v = c.exchange(grad_of(theta, 9, t.rank, r))
    except (PeerFailure, PeerTimeout) as e:
        print(f"WORKER_END {type(e).__name__} elapsed={time.monotonic() - t0:.2f} msg={e}",
              flush=True)
        return 0
    print("WORKER_DONE unexpectedly", flush=True)
    return 7


def main() -> int:
    backend, what = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cases"
    if what == "cases":
        return all_cases(backend)
    assert backend == "gloo", "a dead rank ends an MPI job: gloo only"
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    return {"dead-serve": dead_serve, "dead-sync": dead_sync}[what](t)


if __name__ == "__main__":
    rank_exit(main)
