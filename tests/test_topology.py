"""Tests of archzoo.topology: every collective of every topology on both real engines for
N = 1..5, 8, 9 (tests/topology_cases.py, one launch per world size and engine), and single-process
checks of the count formulas (archzoo/topology/counts.py, docs/topologies.md) and of argument
validation.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from archzoo.topology.base import ceil_log, floor_log
from archzoo.topology.counts import expected_counts
from archzoo.topology.factory import TOPOLOGIES, make_topology

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mp  # noqa: E402  (tests/ is on the path only from here on)
import topology_cases  # noqa: E402

WORLDS = (1, 2, 3, 4, 5, 8, 9)  # powers of the fanouts 2 and 3 (and 4), and 5 between them
LAUNCH_TIMEOUT_S = 90


# ---------------------------------------------------------------------------------------------
# All collectives on the real engines
# ---------------------------------------------------------------------------------------------
def _check(ranks, n: int) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == n
    for r in ranks:
        assert not r.timed_out and r.returncode == 0, report
        for name in ("validation", *topology_cases.TOPOLOGIES, *(["silent peer"] * (n > 1))):
            assert re.search(rf"^\[rank {r.rank}\] OK {name}\b", r.output, re.M), (
                f"rank {r.rank}: {name} did not report OK\n{report}")
        assert re.search(rf"^\[rank {r.rank}\] DONE \d+ calls, 0 failures", r.output, re.M), report
        assert "FAIL" not in r.output, report


@pytest.mark.parametrize("n", WORLDS)
def test_topologies_gloo(n):
    ranks = mp.run_gloo(n, [str(HERE / "topology_cases.py"), "gloo"],
                        timeout_s=LAUNCH_TIMEOUT_S, fail_fast_s=10)
    _check(ranks, n)


@pytest.mark.parametrize("n", WORLDS)
def test_topologies_mpi(n):
    job = mp.run_mpi(n, [str(HERE / "topology_cases.py"), "mpi"], timeout_s=LAUNCH_TIMEOUT_S)
    assert job.returncode == 0, mp.describe(job)
    _check(job, n)


# ---------------------------------------------------------------------------------------------
# Count formulas, single process
# ---------------------------------------------------------------------------------------------
SIZES = range(1, 34)
FANOUTS = range(2, 6)


def _totals(counts: dict[int, tuple[int, int]]) -> tuple[int, int]:
    return sum(c[0] for c in counts.values()), max(c[1] for c in counts.values())


def test_logs():
    for m in FANOUTS:
        for n in SIZES:
            k = ceil_log(n, m)
            assert m ** k >= n and (k == 0 or m ** (k - 1) < n)
            f = floor_log(n, m)
            assert m ** f <= n < m ** (f + 1)


@pytest.mark.parametrize("m", FANOUTS)
def test_tree_broadcast_counts(m):
    for n in SIZES:
        k = ceil_log(n, m)
        for root in range(n):
            c = expected_counts("tree", "broadcast", n, m, root)
            total, rounds = _totals(c)
            assert total == n - 1  # a tree spreads the load, it does not cut the total
            assert rounds == k and c[root][1] == k  # ⌈log_m N⌉ rounds, the root in every one
            assert c[root][0] <= (m - 1) * k
            if n == m ** k:  # (m−1)⌈log_m N⌉ is the root's count, not the total
                assert c[root][0] == (m - 1) * k
            assert all(c[r][0] <= c[root][0] for r in range(n))
            # relabelling: a different root is a rotation of root 0
            c0 = expected_counts("tree", "broadcast", n, m, 0)
            assert all(c[(v + root) % n] == c0[v] for v in range(n))


@pytest.mark.parametrize("m", FANOUTS)
def test_tree_reduce_gather_all_reduce_counts(m):
    for n in SIZES:
        for root in range(n):
            b = expected_counts("tree", "broadcast", n, m, root)
            for op in ("reduce", "gather"):
                c = expected_counts("tree", op, n, m, root)
                assert c[root][0] == 0 and all(c[r][0] == 1 for r in range(n) if r != root)
                assert all(c[r][1] == b[r][1] for r in range(n))  # the same tree, reversed
        a = expected_counts("tree", "all_reduce", n, m, 0)
        assert _totals(a) == (2 * (n - 1), 2 * ceil_log(n, m))


def test_star_counts():
    for n in SIZES:
        for root in range(n):
            b = expected_counts("star", "broadcast", n, 2, root)
            assert b[root] == (n - 1, int(n > 1))
            assert all(b[r] == (0, 1) for r in range(n) if r != root)
            g = expected_counts("star", "gather", n, 3, root)
            assert g[root] == (0, int(n > 1))
            assert all(g[r] == (1, 1) for r in range(n) if r != root)


@pytest.mark.parametrize("m", FANOUTS)
def test_butterfly_counts(m):
    for k in range(4):  # N = m^k: every rank (m−1)·log_m N messages in log_m N rounds
        n = m ** k
        c = expected_counts("butterfly", "all_reduce", n, m, 0)
        assert all(c[r] == ((m - 1) * k, k) for r in range(n))
    for n in SIZES:  # fold–unfold: P·(m−1)·K + 2(N−P) messages, K + 2 rounds
        big_k = floor_log(n, m)
        p = m ** big_k
        c = expected_counts("butterfly", "all_reduce", n, m, 0)
        total, rounds = _totals(c)
        assert total == p * (m - 1) * big_k + 2 * (n - p)
        assert rounds == big_k + 2 * (n > p)
        assert all(c[r] == (1, 2) for r in range(p, n))
        # broadcast/reduce/gather are the tree's
        for op in ("broadcast", "reduce", "gather"):
            assert expected_counts("butterfly", op, n, m, n - 1) == \
                expected_counts("tree", op, n, m, n - 1)


def test_ring_counts():
    for n in SIZES:
        a = expected_counts("ring", "all_reduce", n, 2, 0)
        assert all(a[r] == (2 * (n - 1), 2 * (n - 1)) for r in range(n))
        for root in range(n):
            for op in ("broadcast", "reduce", "gather"):
                c = expected_counts("ring", op, n, 2, root)
                assert _totals(c) == (n - 1, min(2, n - 1))
        g = expected_counts("ring", "gossip_average", n, 2, 0)
        assert all(g[r] == ({1: 0, 2: 1}.get(n, 2), int(n > 1)) for r in range(n))


def test_expected_counts_rejects():
    with pytest.raises(ValueError, match="fanout"):
        expected_counts("tree", "broadcast", 4, 1, 0)
    with pytest.raises(ValueError, match="no count formula"):
        expected_counts("native", "broadcast", 4, 2, 0)
    with pytest.raises(ValueError, match="unknown collective"):
        expected_counts("tree", "scatter", 4, 2, 0)
    with pytest.raises(ValueError, match="ring only"):
        expected_counts("tree", "gossip_average", 4, 2, 0)
    with pytest.raises(ValueError, match="root"):
        expected_counts("tree", "broadcast", 4, 2, 4)


# ---------------------------------------------------------------------------------------------
# Validation, single process (nothing is sent: a stand-in with a rank and a size is enough)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("fanout", [1, 0, -3, 2.5, True])
def test_fanout_validation(name, fanout):
    with pytest.raises(ValueError, match="fanout must be an integer >= 2"):
        make_topology(name, SimpleNamespace(rank=0, world_size=4), fanout=fanout)


def test_unknown_topology():
    with pytest.raises(ValueError, match="unknown topology 'mesh'"):
        make_topology("mesh", SimpleNamespace(rank=0, world_size=4))
