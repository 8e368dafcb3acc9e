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
"""

from __future__ import annotations

from typing import Any

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


class StackedFrames:
    """Observations ``[*obs_shape]`` kept as frames along ``axis`` (all of it: one frame)."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype: np.dtype | str,
                 axis: int | None, pool: FramePool | None = None) -> None:
        self.obs_shape, self.axis = tuple(obs_shape), axis
        self.k = 1 if axis is None else obs_shape[axis]
        frame_shape = self.obs_shape if axis is None else \
            tuple(s for i, s in enumerate(self.obs_shape) if i != axis)
        # about one new frame per transition: room for that, committed only as it is used
        self.pool = pool if pool is not None else FramePool(frame_shape, dtype, capacity + 1024)
        self.slots = np.full((capacity, self.k), -1, np.int64)

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        """[n, *obs_shape] -> [n * k, *frame_shape]."""
        if self.axis is None:
            return obs
        return np.moveaxis(obs, self.axis + 1, 1).reshape(-1, *self.pool.frame_shape)

    def write(self, rows: np.ndarray, obs: np.ndarray) -> None:
        """Store ``obs`` ``[n, *obs_shape]`` in ``rows``, releasing what they held."""
        old = self.slots[rows]
        new = self.pool.put(self._frames(np.asarray(obs))).reshape(len(rows), self.k)
        self.pool.release(old[old >= 0])
        self.slots[rows] = new

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The observations of ``rows``, ``[n, *obs_shape]``, rebuilt from their frames."""
        frames = self.pool.frames[self.slots[rows]]  # [n, k, *frame_shape]
        if self.axis is None:
            return frames[:, 0]
        return np.moveaxis(frames, 1, self.axis + 1)
