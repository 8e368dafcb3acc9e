"""Tests of paramserver/: optimizers against plain loops of their formulas, K slices against
one vector, the async/sync/staleness rules of ShardState in one process, and shards over both
real engines (tests/paramserver_cases.py), including a worker that dies (gloo).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from archzoo.comm import PeerFailure
from archzoo.paramserver import (
    Adam,
    Outcome,
    ShardState,
    SharedRMSProp,
    clip_grad_norm,
    make_optimizer,
    shard_bounds,
)
from archzoo.runlog import VersionClock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mp  # noqa: E402  (tests/ is on the path only from here on)
import paramserver_cases as cases  # noqa: E402

CASES = str(HERE / "paramserver_cases.py")
F32 = np.float32


def _vec(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(n, dtype=F32) * F32(scale)).astype(F32)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


# ---------------------------------------------------------------------------------------------
# Optimizers: a plain per-element loop of the paper's formula, in float32
# ---------------------------------------------------------------------------------------------
def rmsprop_loop(theta, grads, lr, alpha, eps):
    """Mnih et al. 2016 §S3: g = αg + (1−α)Δθ²; θ = θ − ηΔθ/√(g+ε), element by element."""
    theta = [F32(x) for x in theta]
    g = [F32(0)] * len(theta)
    for d in grads:
        for i, di in enumerate(d):
            di = F32(di)
            g[i] = F32(alpha) * g[i] + F32(1.0 - alpha) * (di * di)
            theta[i] = theta[i] - (F32(lr) * di) / np.sqrt(g[i] + F32(eps))
    return np.array(theta, F32)


def adam_loop(theta, grads, lr, b1, b2, eps):
    """Kingma & Ba 2015, Algorithm 1, element by element."""
    theta = [F32(x) for x in theta]
    m = [F32(0)] * len(theta)
    v = [F32(0)] * len(theta)
    for t, d in enumerate(grads, start=1):
        c1, c2 = F32(1.0 - b1 ** t), F32(1.0 - b2 ** t)
        for i, di in enumerate(d):
            di = F32(di)
            m[i] = F32(b1) * m[i] + F32(1.0 - b1) * di
            v[i] = F32(b2) * v[i] + F32(1.0 - b2) * (di * di)
            theta[i] = theta[i] - (m[i] / c1 * F32(lr)) / (np.sqrt(v[i] / c2) + F32(eps))
    return np.array(theta, F32)


@pytest.mark.parametrize("lr,alpha,eps", [(0.01, 0.99, 0.1), (7e-4, 0.9, 1e-5)])
def test_rmsprop_is_the_formula(lr, alpha, eps):
    rng = np.random.default_rng(0)
    theta0 = _vec(rng, 37)
    grads = [_vec(rng, 37, 3.0) for _ in range(5)]
    p = theta0.copy()
    opt = SharedRMSProp(lr, alpha, eps)
    for g in grads:
        opt.step(p, g)
    want = rmsprop_loop(theta0, grads, lr, alpha, eps)
    assert np.array_equal(_bits(p), _bits(want))
    assert opt.steps == 5
    assert not np.array_equal(p, theta0)


@pytest.mark.parametrize("lr,betas,eps", [(1e-3, (0.9, 0.999), 1e-8), (0.05, (0.5, 0.9), 1e-3)])
def test_adam_is_the_formula(lr, betas, eps):
    rng = np.random.default_rng(1)
    theta0 = _vec(rng, 41)
    grads = [_vec(rng, 41, 0.5) for _ in range(6)]
    p = theta0.copy()
    opt = Adam(lr, betas, eps)
    for g in grads:
        opt.step(p, g)
    want = adam_loop(theta0, grads, lr, *betas, eps)
    assert np.array_equal(_bits(p), _bits(want))
    # Adam's first step moves each coordinate by lr·|g|/(|g| + ε) (m̂ = g, √v̂ = |g|)
    q = theta0.copy()
    Adam(lr, betas, eps).step(q, grads[0])
    a = np.abs(grads[0].astype(np.float64))
    assert np.allclose(np.abs(q - theta0), lr * a / (a + eps), rtol=1e-4, atol=1e-7)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), k=st.integers(1, 8), steps=st.integers(1, 5),
       kind=st.sampled_from(["rmsprop", "adam"]), seed=st.integers(0, 2**31))
def test_k_slices_equal_one_vector(n, k, steps, kind, seed):
    """Each of K optimizers on its slice gives bit-for-bit the whole-vector result."""
    k = min(k, n)
    rng = np.random.default_rng(seed)
    theta0 = _vec(rng, n)
    grads = [_vec(rng, n, 10.0 ** rng.integers(-4, 3)) for _ in range(steps)]
    whole = theta0.copy()
    opt = make_optimizer(kind, 0.01)
    for g in grads:
        opt.step(whole, g)
    parts = theta0.copy()
    opts = [make_optimizer(kind, 0.01) for _ in range(k)]
    for g in grads:
        for o, (lo, hi) in zip(opts, shard_bounds(n, k), strict=True):
            o.step(parts[lo:hi], g[lo:hi])
    assert np.array_equal(_bits(whole), _bits(parts))
    # a torch tensor is stepped in place through a numpy view, with the same bits
    t = torch.from_numpy(theta0.copy()).requires_grad_(False)
    o2 = make_optimizer(kind, 0.01)
    for g in grads:
        o2.step(t, torch.from_numpy(g))
    assert np.array_equal(_bits(t.numpy()), _bits(whole))


def test_optimizer_rejects_wrong_inputs():
    opt = SharedRMSProp(0.01)
    with pytest.raises(TypeError, match="float32"):
        opt.step(np.zeros(3), np.zeros(3))
    opt.step(np.zeros(3, F32), np.ones(3, F32))
    with pytest.raises(ValueError, match="holds the state of 3"):
        opt.step(np.zeros(4, F32), np.ones(4, F32))
    with pytest.raises(ValueError):
        Adam(0.0)
    with pytest.raises(ValueError, match="unknown optimizer"):
        make_optimizer("sgd", 0.1)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10_000), k=st.integers(1, 64))
def test_shard_bounds(n, k):
    if k > n:
        with pytest.raises(ValueError):
            shard_bounds(n, k)
        return
    b = shard_bounds(n, k)
    assert len(b) == k and b[0][0] == 0 and b[-1][1] == n
    assert all(b[i][1] == b[i + 1][0] for i in range(k - 1))
    sizes = [hi - lo for lo, hi in b]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert sizes == sorted(sizes, reverse=True)


def test_clip_grad_norm():
    g = np.array([3.0, 4.0], F32)
    assert clip_grad_norm(g, 10.0) == pytest.approx(5.0)
    assert np.array_equal(g, [3.0, 4.0])  # under the bound: untouched
    assert clip_grad_norm(g, 1.0) == pytest.approx(5.0)
    assert np.linalg.norm(g) == pytest.approx(1.0, rel=1e-5)
    t = torch.tensor([30.0, 40.0])
    clip_grad_norm(t, 5.0)
    assert float(t.norm()) == pytest.approx(5.0, rel=1e-5)
    with pytest.raises(FloatingPointError):
        clip_grad_norm(np.array([np.inf, 1.0], F32), 1.0)


# ---------------------------------------------------------------------------------------------
# ShardState: the rules, in one process
# ---------------------------------------------------------------------------------------------
N = 23


def _states(k: int, workers, **kw) -> list[ShardState]:
    theta0 = _vec(np.random.default_rng(5), N)
    return [ShardState(theta0[lo:hi], SharedRMSProp(0.01), workers, record=True, **kw)
            for lo, hi in shard_bounds(N, k)]


def _push_all(states, worker, gv, grad, seq=-1):
    """One push to every shard (as a client does); the settlements of each."""
    return [s.push(worker, gv, grad[lo:hi], seq)
            for s, (lo, hi) in zip(states, shard_bounds(N, len(states)), strict=True)]


def _params(states) -> np.ndarray:
    return np.concatenate([s.params for s in states])


@settings(max_examples=80, deadline=None)
@given(seq=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=40),
       s_bound=st.one_of(st.none(), st.integers(0, 3)), k=st.integers(2, 5))
def test_async_rule(seq, s_bound, k):
    """applied = pushed − dropped; a gradient older than S is dropped exactly; K = 1 ≡ K."""
    one, many = _states(1, range(4), staleness=s_bound), _states(k, range(4), staleness=s_bound)
    rng = np.random.default_rng(9)
    dropped = 0
    for j, (w, lag) in enumerate(seq):
        v = one[0].version
        gv = max(0, v - lag)
        g = _vec(rng, N)
        (settled,) = _push_all(one, w, gv, g, j)
        res = _push_all(many, w, gv, g, j)
        stale = s_bound is not None and v - gv > s_bound
        want = Outcome.STALE if stale else Outcome.APPLIED
        assert settled == [(w, j, want)]
        assert all(r == [(w, j, want)] for r in res)
        dropped += stale
    for s in one + many:
        st_ = s.stats
        assert st_.pushed == len(seq) and st_.dropped_stale == dropped
        assert st_.applied == st_.pushed - st_.dropped_stale == st_.version
        assert st_.dropped_late == st_.abandoned == 0
    assert np.array_equal(_bits(_params(one)), _bits(_params(many)))


@settings(max_examples=60, deadline=None)
@given(w=st.integers(1, 5), data=st.data(), k=st.integers(1, 4))
def test_sync_w_minus_d_rule(w, data, k):
    """Each round uses the first W − D arrivals, averaged in rank order; the D others are
    LATE, counted, answered at once; with D = 0 arrival order changes no bit."""
    d = data.draw(st.integers(0, w - 1))
    workers = [10 + 3 * i for i in range(w)]  # ranks need not be contiguous
    states = _states(k, workers, mode="sync", drop=d)
    ref = _states(1, workers, mode="sync", drop=0)[0]  # fed only the used gradients, sorted
    ref_opt = SharedRMSProp(0.01)
    ref_theta = ref.params.copy()
    rng = np.random.default_rng(w * 100 + d)
    rounds = data.draw(st.integers(1, 4))
    late = 0
    for r in range(rounds):
        order = data.draw(st.permutations(workers))
        theta = _params(states)
        grads = {x: _vec(rng, N) + theta * F32(0.1) for x in workers}
        used = sorted(order[: w - d])
        for i, x in enumerate(order):
            res = _push_all(states, x, r, grads[x], seq=r)
            if i < w - d - 1:
                assert all(s == [] for s in res), "answered before W − D arrived"
            elif i == w - d - 1:
                want = [(y, r, Outcome.APPLIED) for y in used]
                assert all(s == want for s in res), (res, want)
            else:
                assert all(s == [(x, r, Outcome.LATE)] for s in res)
                late += 1
        acc = np.sum(np.stack([grads[x] for x in used]).astype(np.float64), 0).astype(F32)
        np.divide(acc, F32(len(used)), out=acc)
        ref_opt.step(ref_theta, acc)
        assert np.array_equal(_bits(_params(states)), _bits(ref_theta)), r
    for s in states:
        assert s.stats.version == rounds and s.stats.dropped_late == late == d * rounds
        assert s.stats.applied == (w - d) * rounds and s.stats.pushed == w * rounds


def test_each_gradients_staleness_and_age_are_heard():
    """``on_push`` hears every gradient taken, applied or dropped: the shard's version when
    it arrived minus the version it was computed on, and that version's age on the shard's
    clock; in sync mode a late gradient is a round behind."""
    (s,) = _states(1, range(2), staleness=1)
    heard = []
    s.on_push = lambda w, lag, age: heard.append((w, lag, age))
    g = np.zeros(N, F32)
    s.push(0, 0, g)  # v0 -> v1
    time.sleep(0.05)
    s.push(1, 0, g)  # one version behind: applied (S = 1), v2
    s.push(0, 0, g)  # two behind: dropped as stale, heard all the same
    s.push(1, 2, g)  # current
    assert [(w, lag) for w, lag, _ in heard] == [(0, 0), (1, 1), (0, 2), (1, 0)]
    ages = [age for _, _, age in heard]
    assert all(a is not None and a >= 0 for a in ages)
    assert ages[1] >= 0.05 and ages[2] >= ages[1] and ages[3] < ages[2]
    (a,) = _states(1, [1, 2], mode="sync", drop=1)
    heard.clear()
    a.on_push = lambda w, lag, age: heard.append((w, lag))
    a.push(1, 0, g)  # round 0 needs W − D = 1: applied at once
    a.push(2, 0, g)  # late: round 0 is over
    assert heard == [(1, 0), (2, 1)]


def test_version_clock_ages_and_forgets():
    clock = VersionClock(0, keep=3)
    t0 = time.time()
    for v in (1, 2):
        clock.mark(v, at=t0 + v)
    clock.mark(2, at=t0 + 10)  # a version's first mark stands
    assert clock.age(2, now=t0 + 5) == pytest.approx(3.0)
    assert clock.age(1, now=t0) == 0.0  # never negative
    assert clock.age(7) is None  # never marked
    clock.mark(5, at=t0 + 5)
    assert clock.age(0) is None and clock.age(1, now=t0 + 6) == pytest.approx(5.0)  # keep 3


def test_sync_dead_worker_and_departures():
    g = np.ones(N, F32)
    # D = 0: a death while others wait ends the round with an error naming the dead rank
    (s,) = _states(1, [1, 2, 3], mode="sync")
    assert s.push(1, 0, g) == [] and s.push(2, 0, g) == []
    with pytest.raises(PeerFailure, match=r"rank 3 failed during sync round 0") as e:
        s.leave(3, dead=True)
    assert e.value.peer == "3"
    # ... or, with no round open, at the next push
    (s,) = _states(1, [1, 2, 3], mode="sync")
    assert s.leave(3, dead=True) == []
    with pytest.raises(PeerFailure, match="rank 3 failed"):
        s.push(1, 0, g)
    # D = 1: the round completes by the W − D rule without the dead worker
    (s,) = _states(1, [1, 2, 3], mode="sync", drop=1)
    assert s.push(1, 0, g) == []
    assert s.leave(2, dead=True) == []
    assert [x.worker for x in s.push(3, 0, g)] == [1, 3] and s.version == 1
    # BYE (no death) that leaves a round hopeless abandons it and answers its workers
    (s,) = _states(1, [1, 2, 3], mode="sync")
    assert s.push(1, 0, g, seq=7) == []
    assert s.leave(2) == [(1, 7, Outcome.ABANDONED)]  # W − D = 3 can no longer push
    assert s.leave(3) == []
    assert s.stats.abandoned == 1 and s.version == 0
    with pytest.raises(ValueError, match="not an active worker"):
        s.push(2, 0, g)
    # async: a death changes nothing for the others
    (s,) = _states(1, [1, 2], mode="async")
    assert s.leave(2, dead=True) == []
    assert s.push(1, 0, g) == [(1, -1, Outcome.APPLIED)]


def test_state_rejects_protocol_errors():
    g = np.ones(N, F32)
    (s,) = _states(1, [1, 2], mode="sync")
    with pytest.raises(ValueError, match="ahead of this shard's version 0"):
        s.push(1, 1, g)
    s.push(1, 0, g)
    with pytest.raises(ValueError, match="pushed twice"):
        s.push(1, 0, g)
    with pytest.raises(ValueError, match="BYE with a push unanswered"):
        s.leave(1)
    with pytest.raises(ValueError, match="shape"):
        s.push(2, 0, g[:-1])
    with pytest.raises(ValueError, match="staleness"):
        _states(1, [1, 2], mode="sync", staleness=1)
    with pytest.raises(ValueError, match="0 <= D < W"):
        _states(1, [1, 2], mode="sync", drop=2)
    with pytest.raises(ValueError, match="sync mode only"):
        _states(1, [1, 2], mode="async", drop=1)


# ---------------------------------------------------------------------------------------------
# 2 shards + 3 workers over gloo and MPI; a worker that dies (gloo)
# ---------------------------------------------------------------------------------------------
WORLD = 5


def _check_cases(ranks) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == WORLD
    for r in ranks:
        assert not r.timed_out and r.returncode == 0, report
        for name in cases.CASE_NAMES:
            assert re.search(rf"^\[rank {r.rank}\] CASE {name} OK\b", r.output, re.M), (
                f"rank {r.rank}: case {name} did not report OK\n{report}")
        n = len(cases.CASE_NAMES)
        assert f"DONE {n}/{n} passed" in r.output, report


def test_paramserver_gloo():
    _check_cases(mp.run_gloo(WORLD, [CASES, "gloo"], timeout_s=90, fail_fast_s=20))


def test_paramserver_mpi():
    job = mp.run_mpi(WORLD, [CASES, "mpi"], timeout_s=90)
    assert job.returncode == 0, mp.describe(job)
    _check_cases(job)


def test_dead_worker_servers_serve_on_gloo():
    """Worker 4 dies with a push in flight: the async shard and the sync shard (D = 1) both
    serve workers 2 and 3 to the end and report rank 4 dead."""
    ranks = mp.run_gloo(5, [CASES, "gloo", "dead-serve"], timeout_s=60, fail_fast_s=30)
    report = mp.describe(ranks)
    assert ranks[4].returncode == 3, report
    for r in ranks[:4]:
        assert not r.timed_out and r.returncode == 0, report
    for r, mode in ((ranks[0], "async"), (ranks[1], "sync")):
        assert re.search(rf"^SHARD_DONE mode={mode} ok=True .* dead=\[4\] ", r.output, re.M), (
            report)
        assert "rank 4 failed during" in r.output, report
    for r in ranks[2:4]:
        assert re.search(rf"^WORKER_DONE steps=\d+ version={cases.DEAD_ROUNDS}$", r.output,
                         re.M), report


def test_dead_worker_ends_sync_round_gloo():
    """D = 0: worker 3 dies; the shard ends with an error naming rank 3 at once (its round
    deadline is 30 s), and the waiting workers learn of the shard's end."""
    ranks = mp.run_gloo(4, [CASES, "gloo", "dead-sync"], timeout_s=60, fail_fast_s=30)
    report = mp.describe(ranks)
    assert ranks[3].returncode == 3, report
    m = re.search(r"^SHARD_ERROR elapsed=([\d.]+) peer=(\S+) version=(\d+) msg=(.*)$",
                  ranks[0].output, re.M)
    assert m and ranks[0].returncode == 4, report
    assert m.group(2) == "3", report
    assert m.group(4).startswith("rank 0: rank 3 failed during sync round"), report
    assert float(m.group(1)) < 10.0, report
    assert int(m.group(3)) == cases.DIE_AT_VERSION + 1, report
    for r in ranks[1:3]:
        assert not r.timed_out and r.returncode == 0, report
        assert "WORKER_END PeerFailure" in r.output, report
