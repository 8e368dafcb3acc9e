"""Episode returns and lengths from vector-env steps, skipping autoreset steps."""

from __future__ import annotations

import numpy as np


class EpisodeTracker:
    """Accumulates each env's return and length over valid steps; reports finished episodes.

    ``prev_done`` marks envs whose next step is gymnasium's autoreset step (see the module
    docstring of actors/base.py): that step is not a transition, so :meth:`valid` is False there.
    """

    def __init__(self, num_envs: int) -> None:
        self.ret = np.zeros(num_envs, dtype=np.float64)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.prev_done = np.zeros(num_envs, dtype=bool)
        self.episodes = 0
        self.env_steps = 0

    def valid(self) -> np.ndarray:
        """Which envs' next step is a real transition."""
        return ~self.prev_done

    def step(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
             valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record one step; returns (done, finished returns, finished lengths)."""
        self.ret += np.where(valid, reward, 0.0)
        self.length += valid
        done = (terminated | truncated) & valid
        finished_ret, finished_len = self.ret[done].copy(), self.length[done].copy()
        self.ret[done] = 0.0
        self.length[done] = 0
        self.prev_done = done
        self.episodes += len(finished_ret)
        self.env_steps += int(valid.sum())
        return done, finished_ret, finished_len
