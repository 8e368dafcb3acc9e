"""Tests for replay/memory.py: FIFO storage, PER sampling (eq. 1), weights (§3.4), stale updates."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from archzoo.replay.memory import PrioritizedReplay, SampleBatch, UniformReplay, importance_weights

FIELDS = {"obs": ((3,), np.dtype(np.float32)), "action": ((), np.dtype(np.int64))}


def make_batch(start: int, n: int) -> dict[str, np.ndarray]:
    """Items tagged by their insertion number in `action` (and obs[:, 0])."""
    ids = np.arange(start, start + n)
    obs = np.stack([ids, ids * 2, ids * 3], axis=1).astype(np.float32)
    return {"obs": obs, "action": ids.astype(np.int64)}


# ---------------------------------------------------------------------------------------------
# χ² goodness of fit without scipy: Wilson–Hilferty quantile, made conservative by a margin.
# ---------------------------------------------------------------------------------------------
ALPHA_FP = 1e-6  # false-positive rate of each χ² test


def chi2_threshold(df: int, p: float = ALPHA_FP) -> float:
    """Upper-p quantile of χ²_df by Wilson–Hilferty, times 1.1 to err on the conservative side."""
    z = NormalDist().inv_cdf(1.0 - p)
    c = 2.0 / (9.0 * df)
    return 1.1 * df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi2_sf_even(x: float, df: int) -> float:
    """Exact survival function of χ²_df for even df: e^{−x/2} Σ_{j<df/2} (x/2)^j / j!."""
    assert df % 2 == 0
    h = x / 2.0
    return math.exp(-h) * sum(h**j / math.factorial(j) for j in range(df // 2))


def chi2_stat(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs / probs.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_chi2_threshold_is_conservative() -> None:
    for df in (2, 10, 20, 40):
        assert chi2_sf_even(chi2_threshold(df), df) < ALPHA_FP


def draw_counts(mem: PrioritizedReplay, n_items: int, draws: int, batch: int = 64) -> np.ndarray:
    counts = np.zeros(n_items, dtype=np.int64)
    for _ in range(draws // batch):
        counts += np.bincount(mem.sample(batch).idx, minlength=n_items)
    return counts


PRIORITIES = np.random.default_rng(1).permutation(np.geomspace(0.02, 5.0, 20))


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_sampling_frequencies_proportional_to_p_alpha(alpha: float) -> None:
    n = PRIORITIES.size
    mem = PrioritizedReplay(n, FIELDS, alpha=alpha, eps=1e-6, seed=3)
    mem.add(make_batch(0, n), PRIORITIES)
    counts = draw_counts(mem, n, 200_000)
    threshold = chi2_threshold(n - 1)
    p = PRIORITIES + 1e-6
    assert chi2_stat(counts, p**alpha) < threshold
    # Power: the same counts clearly reject a wrong distribution.
    wrong = p if alpha > 0 else p**0.6  # ∝ p instead of p^α; non-uniform instead of uniform
    assert chi2_stat(counts, wrong) > 10 * threshold


def test_uniform_replay_sampling_is_uniform() -> None:
    n = 20
    mem = UniformReplay(n, FIELDS, seed=5)
    mem.add(make_batch(0, n))
    counts = np.zeros(n, dtype=np.int64)
    for _ in range(200_000 // 500):
        counts += np.bincount(mem.sample(500).idx, minlength=n)
    assert chi2_stat(counts, np.ones(n)) < chi2_threshold(n - 1)
    assert chi2_stat(counts, np.arange(1, n + 1.0)) > chi2_threshold(n - 1)


# ---------------------------------------------------------------------------------------------
# Importance weights (PER §3.4)
# ---------------------------------------------------------------------------------------------
def test_importance_weights_against_formula() -> None:
    rng = np.random.default_rng(0)
    pa = rng.random(50) + 0.01
    total, mn, size, beta = float(pa.sum()), float(pa.min()), 50, 0.4
    prob = pa / total
    w = (size * prob) ** -beta
    want = w / ((size * mn / total) ** -beta)  # max_j w_j belongs to the minimum priority
    got = importance_weights(pa, total, mn, size, beta)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.max() == pytest.approx(1.0)
    np.testing.assert_array_equal(importance_weights(pa, total, mn, size, 0.0), np.ones(50))


def test_sample_weights_and_p_alpha() -> None:
    n, alpha, beta, eps = 30, 0.6, 0.4, 1e-3
    pr = np.random.default_rng(2).random(n) * 3
    mem = PrioritizedReplay(40, FIELDS, alpha=alpha, beta=beta, eps=eps, seed=0)
    mem.add(make_batch(0, n), -pr)  # |δ| is taken
    pa = (pr + eps) ** alpha
    assert mem.total() == pytest.approx(pa.sum()) and mem.min_p_alpha() == pytest.approx(pa.min())
    b = mem.sample(16)
    assert isinstance(b, SampleBatch)
    np.testing.assert_allclose(b.p_alpha, pa[b.idx])
    want = (n * pa[b.idx] / pa.sum()) ** -beta / (n * pa.min() / pa.sum()) ** -beta
    np.testing.assert_allclose(b.weights, want, rtol=1e-6)
    np.testing.assert_array_equal(b.data["action"], b.idx)  # slot k holds item k here
    np.testing.assert_array_equal(b.item_ids, b.idx)


def test_weights_across_two_shards_match_single_memory() -> None:
    rng = np.random.default_rng(7)
    n = 40
    pr = rng.random(n) * 2
    single = PrioritizedReplay(n, FIELDS, seed=0)
    single.add(make_batch(0, n), pr)
    shards = [PrioritizedReplay(n, FIELDS, seed=0) for _ in range(2)]
    split = rng.permutation(n)
    parts = [np.sort(split[:13]), np.sort(split[13:])]
    for shard, items in zip(shards, parts, strict=True):
        batch = make_batch(0, n)
        shard.add({k: v[items] for k, v in batch.items()}, pr[items])
    g_total = sum(s.total() for s in shards)
    g_min = min(s.min_p_alpha() for s in shards)
    g_size = sum(len(s) for s in shards)
    assert g_total == pytest.approx(single.total()) and g_min == single.min_p_alpha()
    for shard in shards:
        b = shard.sample(32)
        item = b.data["action"]
        got = importance_weights(b.p_alpha, g_total, g_min, g_size, 0.4)
        want = importance_weights(single._sum.get(item), single.total(), single.min_p_alpha(),
                                  len(single), 0.4)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # The shard's local weights differ when its minimum is not the global minimum.
        if shard.min_p_alpha() != g_min:
            assert not np.allclose(b.weights, want)


# ---------------------------------------------------------------------------------------------
# Stale priority updates
# ---------------------------------------------------------------------------------------------
def test_stale_update_is_dropped() -> None:
    cap = 8
    mem = PrioritizedReplay(cap, FIELDS, alpha=1.0, eps=1e-6, seed=0)
    mem.add(make_batch(0, cap), np.ones(cap))
    b = mem.sample(cap)
    mem.add(make_batch(cap, 3), np.full(3, 5.0))  # overwrites slots 0, 1, 2
    fresh = ~np.isin(b.idx, [0, 1, 2])
    applied = mem.update_priorities(b.idx, b.item_ids, np.full(cap, 100.0))
    assert applied == int(fresh.sum())
    pa = mem._sum.get(np.arange(cap))
    np.testing.assert_allclose(pa[:3], 5.0 + 1e-6)  # the new items keep their priority
    touched = np.unique(b.idx[fresh])
    np.testing.assert_allclose(pa[touched], 100.0 + 1e-6)


def test_update_after_overwrite_by_more_than_capacity_applies_nothing() -> None:
    cap = 5
    mem = PrioritizedReplay(cap, FIELDS, alpha=0.6, seed=1)
    mem.add(make_batch(0, cap), np.arange(1.0, cap + 1))
    b = mem.sample(10)
    mem.add(make_batch(cap, cap + 2), np.full(cap + 2, 0.5))
    before = mem._sum.get(np.arange(cap)).copy()
    assert mem.update_priorities(b.idx, b.item_ids, np.full(10, 9.0)) == 0
    np.testing.assert_array_equal(mem._sum.get(np.arange(cap)), before)
    b2 = mem.sample(10)  # fresh ids are accepted
    assert mem.update_priorities(b2.idx, b2.item_ids, np.full(10, 9.0)) == 10
    assert mem.total() == pytest.approx(
        len(np.unique(b2.idx)) * (9.0 + 1e-6) ** 0.6
        + (cap - len(np.unique(b2.idx))) * (0.5 + 1e-6) ** 0.6
    )


# ---------------------------------------------------------------------------------------------
# FIFO storage
# ---------------------------------------------------------------------------------------------
def stored_items(mem: UniformReplay) -> set[int]:
    return set(mem._data["action"][: len(mem)].tolist())


@pytest.mark.parametrize("prioritized", [False, True])
def test_fifo_eviction_order(prioritized: bool) -> None:
    cap = 7
    mem = PrioritizedReplay(cap, FIELDS) if prioritized else UniformReplay(cap, FIELDS)

    def add(start: int, n: int) -> np.ndarray:
        if prioritized:
            # Low priorities for new items: eviction must still be by age, not priority.
            return mem.add(make_batch(start, n), np.full(n, 1e-3))
        return mem.add(make_batch(start, n))

    if prioritized:
        mem.add(make_batch(0, 4), np.full(4, 100.0))
    else:
        add(0, 4)
    assert len(mem) == 4 and stored_items(mem) == {0, 1, 2, 3}
    np.testing.assert_array_equal(add(4, 5), [4, 5, 6, 0, 1])
    assert len(mem) == cap and stored_items(mem) == set(range(2, 9))
    np.testing.assert_array_equal(add(9, 1), [2])
    assert stored_items(mem) == set(range(3, 10))
    ids = mem._item_ids
    np.testing.assert_array_equal(ids, mem._data["action"])  # ids count insertions


@pytest.mark.parametrize("prioritized", [False, True])
def test_batch_larger_than_capacity(prioritized: bool) -> None:
    cap = 4
    mem = PrioritizedReplay(cap, FIELDS, alpha=1.0) if prioritized else UniformReplay(cap, FIELDS)
    batch = make_batch(0, 2)
    (mem.add(batch, np.ones(2)) if prioritized else mem.add(batch))
    big = make_batch(2, 11)
    pr = np.arange(11.0)
    slots = mem.add(big, pr) if prioritized else mem.add(big)
    assert len(mem) == cap and slots.size == cap
    # 13 items went through a FIFO of 4: items 9..12 remain, item k in slot k % 4.
    np.testing.assert_array_equal(slots, np.arange(9, 13) % cap)
    np.testing.assert_array_equal(mem._data["action"][slots], np.arange(9, 13))
    np.testing.assert_array_equal(mem._item_ids[slots], np.arange(9, 13))
    if prioritized:
        np.testing.assert_allclose(mem._sum.get(slots), pr[7:] + 1e-6)
        assert mem.total() == pytest.approx((pr[7:] + 1e-6).sum())


def test_dtype_preservation() -> None:
    fields = {
        "obs": ((2, 2), np.dtype(np.uint8)),
        "reward": ((), np.dtype(np.float32)),
        "done": ((), np.dtype(np.bool_)),
        "action": ((), np.dtype(np.int16)),
    }
    for mem in (UniformReplay(5, fields), PrioritizedReplay(5, fields)):
        batch = {
            "obs": np.full((3, 2, 2), 200, np.uint8),
            "reward": np.array([0.5, 1.5, 2.5], np.float32),
            "done": np.array([True, False, True]),
            "action": np.array([1, -2, 3], np.int16),
        }
        mem.add(batch, np.ones(3)) if isinstance(mem, PrioritizedReplay) else mem.add(batch)
        b = mem.sample(6)
        for name, (shape, dtype) in fields.items():
            assert b.data[name].dtype == dtype and b.data[name].shape == (6, *shape)
        assert b.item_ids.dtype == np.int64
        assert np.all(b.data["obs"] == 200)
        if b.weights is not None:
            assert b.weights.dtype == np.float32


def test_capacity_one() -> None:
    for mem in (UniformReplay(1, FIELDS), PrioritizedReplay(1, FIELDS)):
        pr = isinstance(mem, PrioritizedReplay)
        for k in range(3):
            mem.add(make_batch(k, 1), np.array([k + 1.0])) if pr else mem.add(make_batch(k, 1))
            b = mem.sample(4)
            assert len(mem) == 1
            np.testing.assert_array_equal(b.idx, [0] * 4)
            np.testing.assert_array_equal(b.data["action"], [k] * 4)
            np.testing.assert_array_equal(b.item_ids, [k] * 4)
            if pr:
                np.testing.assert_allclose(b.weights, 1.0)


def test_beta_annealing_endpoints() -> None:
    mem = PrioritizedReplay(10, FIELDS, beta=0.4, beta_final=1.0, beta_steps=4)
    pr = np.linspace(0.1, 3, 10)
    mem.add(make_batch(0, 10), pr)
    pa = (pr + 1e-6) ** 0.6
    seen = []
    for _ in range(7):
        beta = mem.beta
        b = mem.sample(8)
        np.testing.assert_allclose(b.weights, (pa[b.idx] / pa.min()) ** -beta, rtol=1e-6)
        seen.append(beta)
    np.testing.assert_allclose(seen, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0, 1.0])
    fixed = PrioritizedReplay(10, FIELDS, beta=0.4)
    fixed.add(make_batch(0, 10), pr)
    fixed.sample(2)
    assert fixed.beta == 0.4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"alpha": -0.1},
        {"beta": -0.1},
        {"beta": 1.5},
        {"beta_final": 1.2},
        {"beta_steps": -1},
        {"eps": 0.0},
    ],
)
def test_constructor_validation(kwargs: dict) -> None:
    args = {"capacity": 4, "fields": FIELDS} | kwargs
    with pytest.raises(ValueError):
        PrioritizedReplay(**args)


def test_misc_validation() -> None:
    with pytest.raises(ValueError, match="capacity"):
        UniformReplay(0, FIELDS)
    mem = PrioritizedReplay(4, FIELDS)
    with pytest.raises(ValueError, match="empty"):
        mem.sample(1)
    with pytest.raises(ValueError):
        mem.add(make_batch(0, 2), np.ones(3))
    with pytest.raises(ValueError):
        mem.add({"obs": np.zeros((2, 3), np.float32)}, np.ones(2))
