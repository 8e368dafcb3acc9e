"""Tests for replay/trees.py against brute-force numpy arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archzoo.replay.trees import MinTree, SumTree

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def update_batches(draw: st.DrawFn, zeros: bool = True) -> tuple[int, list]:
    """A capacity in 1..300 and a few update batches with duplicate indices (and some zeros)."""
    capacity = draw(st.integers(1, 300))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 2 * capacity + 3))
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        # Few distinct indices relative to n forces duplicates within one call.
        pool = rng.integers(0, capacity, size=max(1, n // 3 + 1))
        idx = rng.choice(pool, size=n)
        scale = 10.0 ** rng.uniform(-6, 3, size=n)
        values = rng.random(n) * scale
        if zeros:
            values[rng.random(n) < 0.3] = 0.0
        batches.append((idx, values))
    return capacity, batches


def apply(tree_cls: type, capacity: int, batches: list, fill: float) -> tuple:
    tree = tree_cls(capacity)
    ref = np.full(capacity, fill)
    for idx, values in batches:
        tree.update(idx, values)
        ref[idx] = values  # numpy fancy assignment: last value wins for repeated indices
    return tree, ref


@SETTINGS
@given(update_batches())
def test_sumtree_matches_brute_force(case: tuple) -> None:
    capacity, batches = case
    tree, ref = apply(SumTree, capacity, batches, 0.0)
    assert tree.capacity == capacity
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), ref)
    assert tree.total() == pytest.approx(ref.sum(), rel=1e-12, abs=1e-300)


@SETTINGS
@given(update_batches())
def test_mintree_matches_brute_force(case: tuple) -> None:
    capacity, batches = case
    tree, ref = apply(MinTree, capacity, batches, np.inf)
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), ref)
    assert tree.min() == ref.min()


@SETTINGS
@given(update_batches(), st.integers(0, 2**32 - 1))
def test_find_prefix_matches_searchsorted(case: tuple, seed: int) -> None:
    capacity, batches = case
    tree, ref = apply(SumTree, capacity, batches, 0.0)
    total = tree.total()
    if total == 0:
        with pytest.raises(ValueError):
            tree.find_prefix(np.array([0.0]))
        return
    rng = np.random.default_rng(seed)
    cumsum = np.cumsum(ref)
    mass = np.concatenate([rng.random(500) * total, [0.0, np.nextafter(total, 0.0)],
                           cumsum[:-1]])  # exact leaf boundaries too (checked only for > 0 leaf)
    got = tree.find_prefix(mass)
    # Never a zero-valued leaf, never a padding leaf, even at the float edge near total.
    assert np.all((got >= 0) & (got < capacity))
    assert np.all(ref[got] > 0)
    # Away from float boundaries the descent agrees with searchsorted on the cumulative sum.
    gap = np.min(np.abs(mass[:, None] - cumsum[None, :]), axis=1)
    clear = gap > 1e-9 * total
    want = np.searchsorted(cumsum, mass[clear], side="right")
    np.testing.assert_array_equal(got[clear], want)


@SETTINGS
@given(update_batches(), st.integers(1, 64), st.integers(0, 2**32 - 1))
def test_sample_stratified_one_draw_per_segment(case: tuple, batch: int, seed: int) -> None:
    capacity, batches = case
    tree, ref = apply(SumTree, capacity, batches, 0.0)
    if tree.total() == 0:
        return
    total = tree.total()
    draws = tree.sample_stratified(batch, np.random.default_rng(seed))
    assert draws.shape == (batch,)
    assert np.all(ref[draws] > 0)
    # Draw k lands in a leaf whose [cumsum_lo, cumsum_hi) overlaps segment k of [0, total).
    cumsum = np.cumsum(ref)
    lo, hi = cumsum[draws] - ref[draws], cumsum[draws]
    seg_lo = np.arange(batch) * total / batch
    seg_hi = (np.arange(batch) + 1) * total / batch
    tol = 1e-9 * total
    assert np.all(lo <= seg_hi + tol) and np.all(hi >= seg_lo - tol)
    assert np.all(np.diff(draws) >= 0)  # segments are ordered, so are the draws


def test_stratified_draws_are_in_their_segment_exactly() -> None:
    # Unit leaves: segment k of [0, n) with batch n covers exactly leaf k.
    tree = SumTree(37)
    tree.update(np.arange(37), np.ones(37))
    draws = tree.sample_stratified(37, np.random.default_rng(0))
    np.testing.assert_array_equal(draws, np.arange(37))


def test_find_prefix_float_edge_never_zero_leaf() -> None:
    tree = SumTree(5)
    tree.update(np.arange(5), np.array([0.1, 0.2, 0.3, 0.0, 0.0]))
    got = tree.find_prefix(np.array([tree.total(), np.nextafter(tree.total(), 0), 1e9]))
    np.testing.assert_array_equal(got, [2, 2, 2])


def test_duplicate_last_wins_and_validation() -> None:
    for cls in (SumTree, MinTree):
        tree = cls(3)
        tree.update(np.array([1, 1, 1]), np.array([5.0, 2.0, 7.0]))
        assert tree.get(np.array([1]))[0] == 7.0
        with pytest.raises(ValueError):
            tree.update(np.array([0]), np.array([-1.0]))
        with pytest.raises(ValueError):
            tree.update(np.array([0]), np.array([np.nan]))
        with pytest.raises(ValueError):
            tree.update(np.array([0]), np.array([np.inf]))
        with pytest.raises(IndexError):
            tree.update(np.array([3]), np.array([1.0]))
    with pytest.raises(ValueError):
        SumTree(0)


def test_capacity_one() -> None:
    s, m = SumTree(1), MinTree(1)
    assert s.total() == 0 and m.min() == np.inf
    s.update(np.array([0]), np.array([2.5]))
    m.update(np.array([0]), np.array([2.5]))
    assert s.total() == 2.5 and m.min() == 2.5
    np.testing.assert_array_equal(s.sample_stratified(4, np.random.default_rng(0)), [0] * 4)
