"""Tests of replay/server.py: replay shards over both real engines, and the in-process client.

The multi-process tests launch real ranks (tests/mp.py) running tests/replay_server_cases.py:
rank 0 learner, ranks 1..K shards, the rest actors. The local tests drive LocalReplayClient and
RateLimiter in one process.
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from archzoo.replay.memory import PrioritizedReplay
from archzoo.replay.server import (
    LocalReplayClient,
    RateLimiter,
    insert,
    insert_schema,
    memory_fields,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mp  # noqa: E402  (tests/ is on the path only from here on)
import replay_server_cases as cases  # noqa: E402

CASES = str(HERE / "replay_server_cases.py")


# ---------------------------------------------------------------------------------------------
# Learner + K shards + 2 actors, over gloo and MPI
# ---------------------------------------------------------------------------------------------
def _check(ranks, world: int) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == world
    for r in ranks:
        assert not r.timed_out, report
        assert r.returncode == 0, report
        for name in cases.CASE_NAMES:
            assert re.search(rf"^\[rank {r.rank}\] CASE {name} OK\b", r.output, re.M), (
                f"rank {r.rank}: case {name} did not report OK\n{report}")
        n = len(cases.CASE_NAMES)
        assert f"DONE {n}/{n} passed" in r.output, report


@pytest.mark.parametrize("k_shards", [1, 2])
def test_replay_server_gloo(k_shards):
    world = 1 + k_shards + 2
    _check(mp.run_gloo(world, [CASES, "gloo", str(k_shards)], timeout_s=90, fail_fast_s=20),
           world)


def test_replay_server_mpi():
    world = 5  # 2 shards, 2 actors
    job = mp.run_mpi(world, [CASES, "mpi", "2"], timeout_s=90)
    assert job.returncode == 0, mp.describe(job)
    _check(job, world)


# ---------------------------------------------------------------------------------------------
# RateLimiter and LocalReplayClient, one process
# ---------------------------------------------------------------------------------------------
OBS = (3,)
CAP = 4  # transitions per insert message


class Feeder:
    """Inserts known transitions (ret = id, obs = id) through archzoo.replay.server.insert()."""

    def __init__(self, memory, limiter: RateLimiter) -> None:
        self.memory, self.limiter = memory, limiter
        self.msg = insert_schema(memory_fields(OBS), CAP).new()
        self.next_id = 0

    def __call__(self, n: int = 1) -> int:
        m = self.msg
        m["obs"][...] = -1.0  # poison beyond `count`
        m["ret"][...] = -1.0
        m["priority"][...] = 1e9
        ids = np.arange(self.next_id, self.next_id + n)
        m["obs"][:n] = ids[:, None]
        m["next_obs"][:n] = ids[:, None]
        m["ret"][:n] = ids
        m["priority"][:n] = 1.0
        m["count"][...] = n
        self.next_id += n
        got = insert(self.memory, m)
        self.limiter.inserted += got
        return got


def _memory(capacity: int = 1 << 15, seed: int = 0) -> PrioritizedReplay:
    return PrioritizedReplay(capacity, memory_fields(OBS), alpha=0.6, beta=0.4, seed=seed)


def test_can_sample_waits_for_learning_starts():
    for spi in (0.0, 2.0):
        lim = RateLimiter(learning_starts=10, samples_per_insert=spi, slack=8)
        for size in range(10):
            lim.inserted = size
            assert not lim.can_sample(size, 4), (spi, size)
        lim.inserted = 10
        assert lim.can_sample(10, 4), spi
    # learning_starts 0 still needs one item
    lim = RateLimiter(learning_starts=0, samples_per_insert=0)
    assert not lim.can_sample(0, 1) and lim.can_sample(1, 1)
    # samples_per_insert 0: no ratio at all, either way
    lim = RateLimiter(learning_starts=5, samples_per_insert=0, slack=1)
    lim.inserted, lim.sampled = 10**6, 0
    assert lim.can_insert() and lim.can_sample(5, 64)
    lim.inserted, lim.sampled = 5, 10**6
    assert lim.can_insert() and lim.can_sample(5, 64)


def test_sampling_leads_by_no_more_items_than_were_inserted():
    """With learning_starts below the slack, the first batches may run ahead of the ratio
    by the items inserted, not by the whole slack: the first items are replayed about
    samples_per_insert times each before more arrive, not slack / learning_starts times
    that."""
    ls, spi, slack, bs = 10, 4.0, 100, 4
    lim = RateLimiter(learning_starts=ls, samples_per_insert=spi, slack=slack)
    lim.inserted = ls
    while lim.can_sample(ls, bs):
        lim.sampled += bs
    assert spi * ls - bs < lim.sampled <= spi * ls, lim.sampled  # 40, where slack gave 400
    lim.inserted = 10 * slack  # a memory larger than the slack: ahead by the slack
    lim.sampled = spi * (lim.inserted - ls)
    while lim.can_sample(lim.inserted, bs):
        lim.sampled += bs
    assert spi * slack - bs < lim.sampled - spi * (lim.inserted - ls) <= spi * slack


def test_local_client_waits_for_learning_starts():
    mem = _memory()
    lim = RateLimiter(learning_starts=12, samples_per_insert=2.0, slack=8)
    client = LocalReplayClient(mem, batch_size=4, limiter=lim)
    feed = Feeder(mem, lim)
    assert client.prioritized and client.size == 0 and client.inserted == 0
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        client.receive(timeout_s=0.2)  # nothing inserts meanwhile
    assert time.perf_counter() - t0 >= 0.2  # it waited out its deadline, not less
    assert lim.sampled == 0
    feed(3)
    assert feed(0) == 0  # an empty message inserts nothing
    batch = client.receive(on_poll=feed, timeout_s=10)
    # It sampled as soon as (and not before) learning_starts items were in.
    assert len(mem) == 12 and client.size == 12 and client.inserted == 12
    assert lim.sampled == 4
    ids = batch.data["ret"]
    assert ((ids >= 0) & (ids < 12)).all() and np.array_equal(batch.data["obs"][:, 0], ids)
    assert batch.weights is not None and batch.weights.dtype == np.float32
    assert np.array_equal(batch.item_ids, batch.idx) and (batch.shard == 0).all()


def test_local_client_priority_updates():
    mem = _memory(seed=3)
    lim = RateLimiter(learning_starts=8, samples_per_insert=0)
    client = LocalReplayClient(mem, batch_size=8, limiter=lim)
    Feeder(mem, lim)(4)
    assert not lim.can_sample(len(mem), 8)
    Feeder(mem, lim)(4)
    b = client.receive(timeout_s=5)
    target = int(b.idx[0])
    pr = np.where(b.idx == target, 1e6, 1.0).astype(np.float32)
    client.update_priorities(b, pr)
    b2 = client.receive(timeout_s=5)
    assert (b2.idx == target).sum() >= 7, b2.idx.tolist()
    # the others now weigh 1 relative to the minimum; the dominant one far less
    assert np.allclose(b2.weights[b2.idx != target], 1.0)
    want = ((1e6 + 1e-6) / (1.0 + 1e-6)) ** (-0.6 * 0.4)
    assert np.allclose(b2.weights[b2.idx == target], want, rtol=1e-5), b2.weights


def test_rate_limiter_holds_the_ratio_both_ways():
    ls, spi, slack, bs = 20, 2.0, 16, 4
    mem = _memory()
    lim = RateLimiter(learning_starts=ls, samples_per_insert=spi, slack=slack)
    client = LocalReplayClient(mem, batch_size=bs, limiter=lim)
    feed = Feeder(mem, lim)
    # Inserting alone: allowed up to learning_starts, then until it is more than `slack`
    # items ahead of the target ratio.
    for _ in range(10_000):
        if not lim.can_insert():
            break
        feed(1)
    else:
        pytest.fail("can_insert never turned False with nothing sampled")
    assert lim.inserted - ls == slack + 1, lim.inserted
    assert lim.can_sample(len(mem), bs)
    # Sampling alone: allowed until it is more than `slack` items' worth ahead.
    for _ in range(10_000):
        if not lim.can_sample(len(mem), bs):
            break
        client.receive(timeout_s=1)
    else:
        pytest.fail("can_sample never turned False with nothing inserted")
    target = spi * (lim.inserted - ls)
    assert target + spi * slack - bs < lim.sampled <= target + spi * slack, lim.sampled
    assert lim.can_insert()
    # A blocked receive inserts (on_poll) exactly until sampling is allowed again.
    need = math.ceil((lim.sampled + bs - spi * slack) / spi) + ls - lim.inserted
    before = lim.inserted
    client.receive(on_poll=feed, timeout_s=5)
    assert lim.inserted - before == need, (lim.inserted - before, need)
    # Steady state, with a fast inserter then a fast sampler: both limits bite and the
    # sampled/inserted ratio stays within the slack of samples_per_insert.
    rng = np.random.default_rng(0)
    refused = {"insert": 0, "sample": 0}
    for step in range(6000):
        p_insert = 0.9 if step < 3000 else 0.1
        if rng.random() < p_insert:
            if lim.can_insert():
                feed(int(rng.integers(1, CAP + 1)))
            else:
                refused["insert"] += 1
        elif lim.can_sample(len(mem), bs):
            client.receive(timeout_s=1)
        else:
            refused["sample"] += 1
        ahead_items = (lim.inserted - ls) - lim.sampled / spi
        assert ahead_items <= slack + CAP, (step, ahead_items)  # inserts: one message over
        assert -ahead_items <= slack, (step, ahead_items)  # samples: never past the slack
    assert refused["insert"] > 100 and refused["sample"] > 100, refused
    ratio = lim.sampled / (lim.inserted - ls)
    assert abs(ratio - spi) <= spi * (slack + CAP) / (lim.inserted - ls), ratio
    assert lim.inserted - ls > 20 * slack, lim.inserted


def test_rate_limiter_small_ratio_large_batch_never_deadlocks() -> None:
    """A ratio so small that a batch exceeds 2·spi·slack must still let one side move."""
    lim = RateLimiter(learning_starts=0, samples_per_insert=0.01, min_sample=128)
    for _ in range(10_000):
        if lim.can_insert():
            lim.inserted += 256
        elif lim.can_sample(lim.inserted, 128):
            lim.sampled += 128
        else:
            raise AssertionError(f"both sides blocked: {lim.inserted=} {lim.sampled=}")
    assert lim.sampled > 0 and lim.inserted > 0
