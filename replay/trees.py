"""Segment trees for prioritized experience replay (Schaul et al. 2016, Appendix B.2.1).

`SumTree` holds the p_i^α of every slot so that sampling P(i) = p_i^α / Σ_k p_k^α (PER eq. 1)
is an O(log N) prefix-sum descent; `MinTree` holds min_i p_i^α, which gives max_j w_j for the
importance weights (PER §3.4). Both trees store their leaves in a power-of-two array (heap
layout: node n has children 2n and 2n+1, leaves at [size, 2·size)); padding leaves hold the
identity of the reduction (0 for sums, +inf for minima). Updates are vectorised level by level.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _last_wins(idx: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicate `idx`, keeping the last value given for each index (numpy `a[idx] = v`)."""
    rev_idx = idx[::-1]
    uniq, first_in_rev = np.unique(rev_idx, return_index=True)
    return uniq, values[::-1][first_in_rev]


class _SegmentTree:
    """Shared storage and level-by-level vectorised update for a binary segment tree."""

    _identity: float
    _combine: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def __init__(self, capacity: int) -> None:
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity: int = capacity
        size = 1
        while size < capacity:
            size *= 2
        self._size = size
        self._depth = size.bit_length() - 1  # number of edges from root to a leaf
        self._tree = np.full(2 * size, self._identity, dtype=np.float64)

    def _check_idx(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise IndexError(f"index out of range [0, {self.capacity})")
        return idx

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves `idx` to `values` (finite, >= 0); for a repeated index the last value wins."""
        idx = self._check_idx(idx)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.shape != idx.shape:
            raise ValueError(f"{idx.size} indices but {values.size} values")
        if idx.size == 0:
            return
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("tree values must be finite and >= 0")
        idx, values = _last_wins(idx, values)
        nodes = idx + self._size
        self._tree[nodes] = values
        # All leaves sit at the same depth, so the touched nodes of one level form one set;
        # recompute each touched parent from its two children, one level at a time.
        for _ in range(self._depth):
            nodes = np.unique(nodes >> 1)
            self._tree[nodes] = self._combine(self._tree[2 * nodes], self._tree[2 * nodes + 1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        """Leaf values at `idx`."""
        return self._tree[self._check_idx(idx) + self._size].reshape(np.shape(idx))


class SumTree(_SegmentTree):
    """Binary segment tree of float64 sums over `capacity` leaves (any capacity, not only powers
    of two). Used to sample slot i with probability P(i) = p_i^α / Σ_k p_k^α (PER eq. 1)."""

    _identity = 0.0
    _combine = staticmethod(np.add)  # type: ignore[assignment]  # numpy's ufunc stubs

    def total(self) -> float:
        """Σ of all leaves, O(1)."""
        return float(self._tree[1])

    def find_prefix(self, mass: np.ndarray) -> np.ndarray:
        """Smallest i with cumsum(leaves)[i] > mass, for 0 <= mass < total (vectorised).

        Never returns a zero-valued leaf nor an index >= capacity: the descent only enters a
        subtree whose sum is positive, so round-off near `total` lands on the last positive leaf.
        """
        if not self._tree[1] > 0:
            raise ValueError("cannot search a SumTree whose total is 0")
        mass = np.maximum(np.asarray(mass, dtype=np.float64), 0.0)
        shape = mass.shape
        mass = mass.reshape(-1).copy()
        node = np.ones(mass.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = self._tree[2 * node]
            right = self._tree[2 * node + 1]
            go_right = (mass >= left) & (right > 0)
            mass = np.where(go_right, mass - left, mass)
            node = 2 * node + go_right
        return (node - self._size).reshape(shape)

    def sample_stratified(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """One uniform draw in each of `batch_size` equal segments of [0, total) (PER App. B.2.1).

        Each draw has marginal P(i) ∝ leaf_i over the batch; stratification lowers variance."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        segment = self.total() / batch_size
        mass = (np.arange(batch_size) + rng.random(batch_size)) * segment
        return self.find_prefix(mass)


class MinTree(_SegmentTree):
    """Segment tree of minima (empty leaves = +inf); gives min_i p_i^α for max_j w_j (PER §3.4)."""

    _identity = float("inf")
    _combine = staticmethod(np.minimum)  # type: ignore[assignment]  # numpy's ufunc stubs

    def min(self) -> float:
        """Minimum over all leaves (+inf when none was set), O(1)."""
        return float(self._tree[1])
