"""Frames stored once: the replay memory of pixel observations.

An n-step transition holds two observations, x_t and x_{t+n}, and on Atari each is a stack
of the last 4 frames, so consecutive transitions of one env share most of their frames
(x_{t+1}'s stack repeats three of x_t's, and x_{t+n} is a later transition's x_t). The
DQN-family codebases keep one frame per env step and rebuild stacks on sampling; here the
transitions arrive from many actors, interleaved, so the pool is content-addressed
instead: a frame is stored once however many stacks show it, with a reference count, and
freed when the last transition that shows it is evicted. Sampling gathers the frames back
into stacks, so what comes out is exactly what went in (across episode boundaries and
FIFO wrap-around alike).

R2D2's sequences (Kapturowski et al. 2019) share frames the same way and more: a sequence
of T + 1 stacked observations shows about T + 4 distinct frames, and overlapping
sequences of one env show the same ones again, so a sequence item is kept as its
(T + 1)·4 frame slots, not as (T + 1) whole stacks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class FramePool:
    """Distinct frames with reference counts; grows by doubling when full."""

    def __init__(self, frame_shape: tuple[int, ...], dtype: np.dtype | str,
                 capacity: int = 1024) -> None:
        self.frame_shape, self.dtype = tuple(frame_shape), np.dtype(dtype)
        self.frames = np.zeros((capacity, *self.frame_shape), self.dtype)
        self.refs = np.zeros(capacity, np.int64)
        self.keys = np.zeros(capacity, np.int64)
        self.index: dict[int, int] = {}  # content hash -> slot
        self.free = list(range(capacity - 1, -1, -1))  # low slots first: few pages touched

    def __len__(self) -> int:
        """Distinct frames stored."""
        return len(self.frames) - len(self.free)

    @property
    def nbytes(self) -> int:
        return len(self) * self.frames[0].nbytes

    def _grow(self) -> None:
        n = len(self.frames)
        frames = np.zeros((2 * n, *self.frame_shape), self.dtype)  # pages untouched: lazy
        frames[:n] = self.frames
        self.frames = frames
        self.refs = np.concatenate([self.refs, np.zeros(n, np.int64)])
        self.keys = np.concatenate([self.keys, np.zeros(n, np.int64)])
        self.free = list(range(2 * n - 1, n - 1, -1)) + self.free

    def put(self, frames: np.ndarray) -> np.ndarray:
        """Slots of ``frames`` ``[k, *frame_shape]``, storing the ones not seen yet; each
        returned slot holds one more reference."""
        slots = np.empty(len(frames), np.int64)
        for i, f in enumerate(frames):
            key = hash(f.tobytes())
            slot = self.index.get(key)
            if slot is None or not np.array_equal(self.frames[slot], f):
                if not self.free:
                    self._grow()
                slot = self.free.pop()
                self.frames[slot] = f
                self.keys[slot] = key
                self.index.setdefault(key, slot)  # on a hash collision the first keeps it
            self.refs[slot] += 1
            slots[i] = slot
        return slots

    def state_dict(self) -> dict[str, Any]:
        """The frames up to the highest slot in use, their reference counts and the pool's
        size (a checkpoint; content hashes are per process and are computed again)."""
        import torch

        used = np.flatnonzero(self.refs)
        top = int(used.max()) + 1 if used.size else 0
        return {"capacity": len(self.frames), "frames": torch.from_numpy(self.frames[:top]),
                "refs": torch.from_numpy(self.refs[:top])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        frames, refs = state["frames"].numpy(), state["refs"].numpy()
        if frames.shape[1:] != self.frame_shape:
            raise ValueError(f"frames of shape {frames.shape[1:]}, this pool keeps "
                             f"{self.frame_shape}")
        n = int(state["capacity"])
        self.frames = np.zeros((n, *self.frame_shape), self.dtype)
        self.frames[:len(frames)] = frames
        self.refs = np.zeros(n, np.int64)
        self.refs[:len(refs)] = refs
        self.keys = np.zeros(n, np.int64)
        self.index = {}
        for slot in np.flatnonzero(self.refs):
            self.keys[slot] = key = hash(self.frames[slot].tobytes())
            self.index.setdefault(key, int(slot))
        self.free = [int(i) for i in np.flatnonzero(self.refs == 0)[::-1]]

    def release(self, slots: np.ndarray) -> None:
        """Drop one reference to each slot; a frame nobody shows any more is freed."""
        for slot in np.asarray(slots, np.int64).reshape(-1):
            self.refs[slot] -= 1
            if self.refs[slot] == 0:
                key = int(self.keys[slot])
                if self.index.get(key) == slot:
                    del self.index[key]
                self.free.append(int(slot))


class FrameLayout(NamedTuple):
    """Which replay fields are kept as frames (``obs`` and ``next_obs``, or a sequence's
    ``obs``), how many trailing dims make one frame (2 for Atari's stacks of 84×84 frames,
    all 3 of a MinAtar grid), and about how many new frames each item brings (1 for an
    n-step transition, the stride for overlapping sequences): the pool is sized for
    ``capacity × new_per_item`` frames up front (pages are committed only as they are
    written), so a full replay never doubles a pool of many GB."""

    names: tuple[str, ...]
    frame_ndim: int
    new_per_item: float = 1.0


class StackedFrames:
    """Items ``[*item_shape]`` kept as the frames of ``pool`` (its ``frame_shape`` is the
    items' trailing dims), in order: an Atari stack ``[4, 84, 84]`` is 4 frames, a sequence
    of them ``[T + 1, 4, 84, 84]`` is (T + 1)·4, a whole MinAtar grid ``[10, 10, C]`` one."""

    def __init__(self, capacity: int, item_shape: tuple[int, ...], pool: FramePool) -> None:
        self.item_shape, self.pool = tuple(item_shape), pool
        lead = len(item_shape) - len(pool.frame_shape)
        if lead < 0 or self.item_shape[lead:] != pool.frame_shape:
            raise ValueError(f"items of shape {item_shape} are not frames of "
                             f"{pool.frame_shape}")
        self.k = int(np.prod(self.item_shape[:lead], dtype=np.int64))
        self.slots = np.full((capacity, self.k), -1, np.int64)

    def write(self, rows: np.ndarray, items: np.ndarray) -> None:
        """Store ``items`` ``[n, *item_shape]`` in ``rows``, releasing what they held."""
        old = self.slots[rows]
        frames = np.asarray(items).reshape(-1, *self.pool.frame_shape)
        new = self.pool.put(frames).reshape(len(rows), self.k)
        self.pool.release(old[old >= 0])
        self.slots[rows] = new

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The items of ``rows``, ``[n, *item_shape]``, rebuilt from their frames."""
        return self.pool.frames[self.slots[rows]].reshape(len(rows), *self.item_shape)
