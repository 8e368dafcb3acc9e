"""Replay memories for Ape-X (Horgan et al. 2018) with prioritized replay (Schaul et al. 2016).

Ape-X keeps a FIFO buffer (the oldest items are evicted first, not the low-priority ones), the
actors compute the initial priorities, the learner samples with P(i) = p_i^α / Σ_k p_k^α
(PER eq. 1, α = 0.6) and corrects with w_i = (N·P(i))^−β / max_j w_j (PER §3.4, β = 0.4 in
Ape-X), and writes back new priorities p = |δ| + ε.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from archzoo.replay.frames import FrameLayout, FramePool, StackedFrames
from archzoo.replay.trees import MinTree, SumTree

FieldSpec = dict[str, tuple[tuple[int, ...], np.dtype]]

# fields that replay checkpoints written before them lack, and the value that stands for
# "unknown" in their items (an item's acting version: replay_lag_stats leaves −1 out)
ADDED_FIELDS: dict[str, int] = {"version": -1}


@dataclass
class SampleBatch:
    """A sampled batch: slots, the insertion ids of their items, the data and (prioritized only)
    the items' p^α and float32 importance weights."""

    idx: np.ndarray
    item_ids: np.ndarray
    data: dict[str, np.ndarray]
    p_alpha: np.ndarray | None = None
    weights: np.ndarray | None = None


def importance_weights(
    p_alpha: np.ndarray, total: float, min_p_alpha: float, size: int, beta: float
) -> np.ndarray:
    """w_i = (N·P(i))^−β / max_j w_j with P(i) = p_alpha_i/total (PER §3.4).

    max_j w_j comes from the minimum priority, so with the GLOBAL total, min and size this gives
    the same weights across shards as one memory would. N and the total cancel in the ratio:
    w_i = (p_alpha_i / min_p_alpha)^−β, which is what is computed (no under/overflow). float32.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if not total > 0:
        raise ValueError(f"total must be > 0, got {total}")
    if not min_p_alpha > 0:
        raise ValueError(f"min_p_alpha must be > 0, got {min_p_alpha}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    ratio = np.asarray(p_alpha, dtype=np.float64) / float(min_p_alpha)
    return np.power(ratio, -float(beta)).astype(np.float32)


class UniformReplay:
    """FIFO replay in preallocated arrays (Ape-X evicts oldest first); uniform sampling."""

    def __init__(self, capacity: int, fields: FieldSpec, seed: int = 0,
                 frames: FrameLayout | tuple | None = None) -> None:
        """``frames`` (replay/frames.py :class:`FrameLayout`, or a tuple of its fields)
        keeps those fields as frames stored once, in one pool: x_{t+n} is a later x_t."""
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if not fields:
            raise ValueError("fields must name at least one field")
        self.capacity: int = capacity
        self._frames: dict[str, StackedFrames] = {}
        if frames:
            layout = FrameLayout(*frames)
            shape, dtype = fields[layout.names[0]]
            pool = FramePool(tuple(shape)[len(shape) - layout.frame_ndim:], dtype,
                             int(capacity * layout.new_per_item) + 1024)
            for name in layout.names:
                self._frames[name] = StackedFrames(capacity, tuple(fields[name][0]), pool)
        self._data = {
            name: np.zeros((capacity, *tuple(shape)), dtype=np.dtype(dtype))
            for name, (shape, dtype) in fields.items() if name not in self._frames
        }
        self._shapes = {name: tuple(shape) for name, (shape, _) in fields.items()}
        self._item_ids = np.full(capacity, -1, dtype=np.int64)
        self._next_slot = 0
        self._next_id = 0
        self._size = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self._size

    @property
    def field_names(self) -> tuple[str, ...]:
        """The fields of every item, in the order they were given."""
        return tuple(self._shapes)

    def _write(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
        """Store the batch FIFO; returns (slots written, number of leading items skipped)."""
        if set(batch) != set(self._shapes):
            raise ValueError(f"batch fields {sorted(batch)} != memory fields "
                             f"{sorted(self._shapes)}")
        lengths = {len(v) for v in batch.values()}
        if len(lengths) != 1:
            raise ValueError(f"batch fields have different lengths: {sorted(lengths)}")
        n = lengths.pop()
        kept = min(n, self.capacity)
        skipped = n - kept  # items older than the last `capacity` would be evicted at once
        slots = (self._next_slot + skipped + np.arange(kept)) % self.capacity
        for name, shape in self._shapes.items():
            values = np.asarray(batch[name])[skipped:]
            if values.shape[1:] != shape:
                raise ValueError(f"field {name!r}: item shape {values.shape[1:]} != {shape}")
            if name in self._frames:
                self._frames[name].write(slots, values)
            else:
                self._data[name][slots] = values
        self._item_ids[slots] = self._next_id + skipped + np.arange(kept, dtype=np.int64)
        self._next_id += n
        self._next_slot = (self._next_slot + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return slots, skipped

    # -- checkpoints (--checkpoint-replay; replay/keeper.py) ------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The stored items (up to the size), slots, counters and sampling generator."""
        import torch

        n = self._size
        pool = self.frame_pool
        return {"capacity": self.capacity, "size": n, "next_slot": self._next_slot,
                "next_id": self._next_id, "item_ids": torch.from_numpy(self._item_ids[:n]),
                "data": {k: torch.from_numpy(v[:n]) for k, v in self._data.items()},
                "frame_slots": {k: torch.from_numpy(f.slots[:n]) for k, f in self._frames.items()},
                "pool": pool.state_dict() if pool is not None else None,
                "rng": json.dumps(self._rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"a replay of capacity {state['capacity']}, this one holds "
                             f"{self.capacity} (keep --replay-capacity and the shards)")
        n = int(state["size"])
        for k in set(self._data) - set(state["data"]):
            if k not in ADDED_FIELDS:
                raise ValueError(f"the checkpoint holds no replay field {k!r}")
            self._data[k][:n] = ADDED_FIELDS[k]
        for k, v in state["data"].items():
            if k not in self._data or tuple(v.shape[1:]) != self._data[k].shape[1:]:
                raise ValueError(f"replay field {k!r} of shape {tuple(v.shape[1:])} does not "
                                 "fit this memory")
            self._data[k][:n] = v.numpy()
        for k, v in state["frame_slots"].items():
            self._frames[k].slots[:n] = v.numpy()
        if state["pool"] is not None:
            pool = self.frame_pool
            if pool is None:
                raise ValueError("the state has a frame pool, this memory keeps none")
            pool.load_state_dict(state["pool"])
        self._item_ids[:n] = state["item_ids"].numpy()
        self._size, self._next_slot = n, int(state["next_slot"])
        self._next_id = int(state["next_id"])
        self._rng.bit_generator.state = json.loads(state["rng"])

    def add(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Append a batch (leading axis = items), evicting the oldest; returns the slots used.
        A batch larger than capacity keeps its last `capacity` items."""
        return self._write(batch)[0]

    def _gather(self, idx: np.ndarray) -> SampleBatch:
        return SampleBatch(
            idx=idx,
            item_ids=self._item_ids[idx].copy(),
            data={**{name: store[idx] for name, store in self._data.items()},
                  **{name: f.read(idx) for name, f in self._frames.items()}},
        )

    @property
    def frame_pool(self) -> FramePool | None:
        """The pool of distinct frames, when observations are kept as frames."""
        return next(iter(self._frames.values())).pool if self._frames else None

    def sample(self, batch_size: int) -> SampleBatch:
        """Uniform sample with replacement over the stored items."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        # Slots fill from 0 and wrap only when full, so [0, size) are exactly the stored items.
        return self._gather(self._rng.integers(0, self._size, size=batch_size))


class PrioritizedReplay(UniformReplay):
    """FIFO replay sampled ∝ p^α (PER eq. 1) with importance weights (PER §3.4), as in Ape-X:
    initial priorities come from the actors, p = |δ| + ε, α = 0.6, β = 0.4 (optionally annealed
    linearly from `beta` to `beta_final` over `beta_steps` calls to `sample`)."""

    def __init__(
        self,
        capacity: int,
        fields: FieldSpec,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int = 0,
        beta_final: float | None = None,
        beta_steps: int = 0,
        frames: FrameLayout | tuple | None = None,
    ) -> None:
        super().__init__(capacity, fields, seed, frames)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}")
        if beta_final is not None and not 0.0 <= beta_final <= 1.0:
            raise ValueError(f"beta_final must be in [0, 1], got {beta_final}")
        if beta_steps < 0:
            raise ValueError(f"beta_steps must be >= 0, got {beta_steps}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0 (keeps every priority positive), got {eps}")
        self.alpha = float(alpha)
        self.beta0 = float(beta)
        self.beta_final = self.beta0 if beta_final is None else float(beta_final)
        self.beta_steps = int(beta_steps)
        self.eps = float(eps)
        self._samples = 0
        self._sum = SumTree(self.capacity)
        self._min = MinTree(self.capacity)

    @property
    def beta(self) -> float:
        """β for the next `sample` call: linear from beta to beta_final over beta_steps calls."""
        if self.beta_steps == 0:
            return self.beta_final
        frac = min(1.0, self._samples / self.beta_steps)
        return self.beta0 + frac * (self.beta_final - self.beta0)

    def _p_alpha(self, priorities: np.ndarray) -> np.ndarray:
        p = np.abs(np.asarray(priorities, dtype=np.float64).reshape(-1))
        if not np.all(np.isfinite(p)):
            raise ValueError("priorities must be finite")
        return np.power(p + self.eps, self.alpha)

    def _set(self, idx: np.ndarray, p_alpha: np.ndarray) -> None:
        self._sum.update(idx, p_alpha)
        self._min.update(idx, p_alpha)

    def add(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> np.ndarray:  # type: ignore[override]
        """Append a batch with the actor-computed |δ| (Ape-X); stored p = |δ| + ε, tree p^α."""
        p_alpha = self._p_alpha(priorities)
        n = len(next(iter(batch.values()))) if batch else 0
        if p_alpha.size != n:
            raise ValueError(f"{n} items but {p_alpha.size} priorities")
        slots, skipped = self._write(batch)
        self._set(slots, p_alpha[skipped:])
        return slots

    def sample(self, batch_size: int) -> SampleBatch:
        """Stratified sample by prefix sums (P(i) ∝ p_i^α); weights from THIS memory's totals."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        beta = self.beta
        idx = self._sum.sample_stratified(batch_size, self._rng)
        out = self._gather(idx)
        out.p_alpha = self._sum.get(idx)
        out.weights = importance_weights(out.p_alpha, self.total(), self.min_p_alpha(),
                                         self._size, beta)
        self._samples += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {**super().state_dict(), "samples": self._samples,
                "sum_tree": torch.from_numpy(self._sum._tree),
                "min_tree": torch.from_numpy(self._min._tree)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._samples = int(state["samples"])
        self._sum._tree[:] = state["sum_tree"].numpy()
        self._min._tree[:] = state["min_tree"].numpy()

    def update_priorities(
        self, idx: np.ndarray, item_ids: np.ndarray, priorities: np.ndarray
    ) -> int:
        """Set p = |δ| + ε for sampled slots. An update whose slot now holds a different item
        (overwritten since sampling: item_ids mismatch) is dropped. Returns how many applied."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        item_ids = np.asarray(item_ids, dtype=np.int64).reshape(-1)
        p_alpha = self._p_alpha(priorities)
        if not idx.size == item_ids.size == p_alpha.size:
            raise ValueError("idx, item_ids and priorities must have the same length")
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise IndexError(f"slot index out of range [0, {self.capacity})")
        fresh = self._item_ids[idx] == item_ids
        self._set(idx[fresh], p_alpha[fresh])
        return int(fresh.sum())

    def total(self) -> float:
        """Σ_k p_k^α over the stored items."""
        return self._sum.total()

    def min_p_alpha(self) -> float:
        """min_k p_k^α over the stored items (+inf when empty)."""
        return self._min.min()
