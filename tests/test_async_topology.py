"""Tests of archzoo.topology.async_tree (the k-nomial tree of docs/topologies.md): the
asynchronous tree broadcast on the real engines (tests/async_topology_cases.py under
gloo for N = 3, 5, 8 and MPI for N = 5, 8, fan-out 2 and 3), and single-process checks of the
tree links, a one-rank world and argument validation.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from archzoo.topology import async_tree
from archzoo.topology.async_tree import (
    AsyncTreeBroadcast,
    chain_links,
    member_links,
    tree_depth,
    tree_links,
)
from archzoo.topology.base import ceil_log
from archzoo.topology.counts import tree_broadcast_counts

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import async_topology_cases as cases  # noqa: E402  (tests/ is on the path only from here on)
import mp  # noqa: E402

LAUNCH_TIMEOUT_S = 120


def _check(ranks, n: int) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == n
    for r in ranks:
        assert not r.timed_out and r.returncode == 0, report
        assert "FAIL" not in r.output and "ABORT" not in r.output, report
        assert re.search(rf"^\[rank {r.rank}\] OK validation", r.output, re.M), report
        for m, which in cases.CASES:
            root = 0 if which == "first" else n - 1
            assert re.search(rf"^\[rank {r.rank}\] OK broadcast m={m} root={root} N={n}:",
                             r.output, re.M), f"rank {r.rank}: broadcast m={m}\n{report}"
        assert re.search(rf"^\[rank {r.rank}\] DONE 0 failures", r.output, re.M), report


@pytest.mark.parametrize("n", [3, 5, 8])
def test_async_tree_gloo(n):
    ranks = mp.run_gloo(n, [str(HERE / "async_topology_cases.py"), "gloo"],
                        timeout_s=LAUNCH_TIMEOUT_S, fail_fast_s=10)
    _check(ranks, n)


@pytest.mark.parametrize("n", [5, 8])
def test_async_tree_mpi(n):
    job = mp.run_mpi(n, [str(HERE / "async_topology_cases.py"), "mpi"],
                     timeout_s=LAUNCH_TIMEOUT_S)
    assert job.returncode == 0, mp.describe(job)
    _check(job, n)


# ---------------------------------------------------------------------------------------------
# Single process
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 3, 4, 5])
def test_tree_links_is_the_knomial_tree(m):
    """Parents and children agree, every rank reaches the root, and the tree is the one the
    synchronous schedule uses (a rank's children count = its messages in the tree broadcast)."""
    for n in range(1, 34):
        for root in (0, n // 2, n - 1):
            links = {r: tree_links(r, n, root, m) for r in range(n)}
            assert links[root][0] is None
            for r, (parent, kids) in links.items():
                v = (r - root) % n
                assert len(kids) == tree_broadcast_counts(v, n, m)[0]
                for c in kids:
                    assert links[c][0] == r
                if r != root:
                    assert r in links[parent][1]
                    assert tree_depth(r, n, root, m) == tree_depth(parent, n, root, m) + 1
                assert tree_depth(r, n, root, m) <= ceil_log(n, m)
            assert sum(len(k) for _, k in links.values()) == n - 1


def test_chain_links_is_the_rings_pipeline():
    """root -> root+1 -> ... -> root-1: one child each but the last, N-1 edges, depth = the
    distance from the root."""
    for n in range(1, 12):
        for root in range(n):
            links = {r: chain_links(r, n, root) for r in range(n)}
            for r, (parent, kids) in links.items():
                v = (r - root) % n
                assert parent == (None if v == 0 else (r - 1) % n)
                assert kids == ([(r + 1) % n] if v < n - 1 else [])


@pytest.mark.parametrize("chain", [False, True])
def test_member_links_span_only_the_members(chain):
    """Ape-X's broadcast spans the learner and its actors, not its replay shards: the links
    over members are the tree's (or chain's) over positions, mapped to the members' ranks."""
    members = [0, 3, 4, 5, 6, 7]
    for pos, r in enumerate(members):
        parent, kids = member_links(r, members, 2, chain)
        ref_parent, ref_kids = chain_links(pos, 6, 0) if chain else tree_links(pos, 6, 0, 2)
        assert parent == (None if ref_parent is None else members[ref_parent])
        assert kids == [members[k] for k in ref_kids]
        assert set(kids) <= set(members)
    with pytest.raises(ValueError, match="not among"):
        member_links(1, members, 2, chain)


def _solo():
    return SimpleNamespace(rank=0, world_size=1, timeout_s=1.0, spin_s=0.0, wait_s=0.0,
                           idle=lambda s: None)


def test_one_rank_world():
    t = _solo()
    bc = AsyncTreeBroadcast(t, 16, 0, 2, 1)
    assert bc.latest() is None and not bc.idle()
    bc.publish(np.arange(2, dtype=np.float64), 5)
    arr, ver = bc.latest()
    assert ver == 5 and np.array_equal(arr.view(np.float64), [0, 1])
    with pytest.raises(ValueError, match="strictly increasing"):
        bc.publish(np.zeros(2), 5)
    bc.finish()
    assert bc.idle()
    with pytest.raises(RuntimeError, match="after close"):
        bc.publish(np.zeros(2), 6)


def test_validation():
    t = _solo()
    with pytest.raises(ValueError, match="root"):
        AsyncTreeBroadcast(t, 8, 1, 2, 1)
    with pytest.raises(ValueError, match="fanout"):
        AsyncTreeBroadcast(t, 8, 0, 1, 1)
    with pytest.raises(ValueError, match="history"):
        AsyncTreeBroadcast(t, 8, 0, 2, 1, history=0)
    with pytest.raises(ValueError, match="payload"):
        AsyncTreeBroadcast(t, -1, 0, 2, 1)
    with pytest.raises(ValueError, match="bytes"):
        AsyncTreeBroadcast(t, 8, 0, 2, 1).publish(np.zeros(2), 0)
    with pytest.raises(RuntimeError, match="byte count"):
        AsyncTreeBroadcast(t, 8, 0, 2, 1).latest_message()


class _Req:
    def __init__(self, done: bool) -> None:
        self.done, self.peer, self.what = done, 0, "test"

    def test(self) -> bool:
        return self.done


def test_broadcast_age_reconstruction(monkeypatch):
    """The root's version at a receipt, rebuilt from the publication history that messages
    carry: exact when the history covers the gap, bracketed when it does not, settled by the
    final version. Root publications seq 1..10 at times 1..10 with versions 10·seq."""
    sent = []
    t = SimpleNamespace(rank=1, world_size=2, timeout_s=1.0, spin_s=0.0, wait_s=0.0,
                        idle=lambda s: None, irecv=lambda *a: _Req(False),
                        isend=lambda *a: sent.append(a) or _Req(True))
    now = [0.0]
    monkeypatch.setattr(async_tree, "time", SimpleNamespace(time=lambda: now[0],
                                                            perf_counter=lambda: 0.0))
    bc = AsyncTreeBroadcast(t, 8, 0, 2, 1, history=3, record=True)

    def take(seq: int, at: float, final: bool = False) -> list[int]:
        msg = bc.wire.new()
        msg["version"][...] = 10 * seq
        msg["seq"][...] = seq
        msg["final"][...] = final
        msg["payload"][:] = seq
        for i in range(3):
            msg["hist_version"][i] = 10 * (seq - i) if seq - i >= 1 else -1
            msg["hist_t"][i] = float(seq - i) if seq - i >= 1 else np.nan
        now[0] = at
        got: list[int] = []
        bc._take(msg, got)
        return got

    assert take(2, 2.5) == [20] and bc.receipts == []  # open until a later publication shows
    assert take(5, 7.2) == [50]  # publication 3 (at 3.0) came after 2.5: receipt 2 exact
    r2 = bc.receipts[0]
    assert (r2.seq, r2.age, r2.exact) == (2, 0, True)
    assert take(9, 9.5) == [90]
    # receipt 5 at 7.2: known 7 (7.0), 8 (8.0), 9: the root was at 7 -> 70 - 50, exact
    r5 = bc.receipts[1]
    assert (r5.seq, r5.age, r5.exact, r5.age_s) == (5, 20, True, pytest.approx(2.2))
    assert bc.skipped == 1 + 2 + 3 and bc.versions_received == 3
    assert take(10, 40.0) == [100]  # receipt 9 at 9.5: 10 published at 10.0 > 9.5 -> exact 0
    assert (bc.receipts[2].seq, bc.receipts[2].age, bc.receipts[2].exact) == (9, 0, True)
    assert not bc.idle()
    assert take(10, 41.0, final=True) == []  # the final mark: settles receipt 10 at 40.0
    assert (bc.receipts[3].seq, bc.receipts[3].age, bc.receipts[3].exact) == (10, 0, True)
    assert bc.final and bc.age_inexact == 0 and bc.age_max == 20

    # a gap wider than the history: receipt 1 at 6.5, next message 9 knows only 7, 8, 9
    bc = AsyncTreeBroadcast(t, 8, 0, 2, 1, history=3, record=True)
    take(1, 6.5)
    take(9, 9.5)
    r = bc.receipts[0]
    assert not r.exact and r.age == 0 and r.age_hi == 69 - 10  # true age: 60 - 10 = 50
    assert r.age <= 50 <= r.age_hi and bc.age_inexact == 1
    assert bc.out_of_order == 0
    assert take(9, 9.6) == [90] and bc.out_of_order == 1  # a repeat is listed and counted
