"""n-step transitions from per-step vector-env data, as Ape-X actors store them.

Ape-X (Horgan et al., ICLR 2018, Algorithm 1: the actor) actors keep a short local
buffer per env and add n-step transitions (s_t, a_t, R_t, s_{t+n}, γ^n) to replay, with the
truncated n-step return of Sutton & Barto (§7.1): R_t = Σ_{i<k} γ^i r_{t+i}, k = min(n, L−t).

Episode ends follow actors/base.py: gymnasium's autoreset step after an end is not a transition
(``valid=False``) and is skipped; on termination the bootstrap discount is 0; on truncation the
observation returned with ``truncated=True`` is the final observation, bootstrapped with γ^k.

Optionally the assembler carries two values an ε-greedy actor has already computed, so that
a transition's initial priority needs no forward pass of its own: ``q_taken``, the behaviour
network's Q(s_t, a_t) when it acted, rides with s_t; ``next_value``, its max_a Q(s_{t+k}, a)
for the observation a step returned, is read off at emission, as next_obs is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike


@dataclass
class NStepBatch:
    """M n-step transitions: obs [M,*], action [M], ret [M], next_obs [M,*], discount [M]."""

    obs: np.ndarray
    action: np.ndarray    # int64
    ret: np.ndarray       # float32, Σ_{i<k} γ^i r_{t+i}
    next_obs: np.ndarray
    discount: np.ndarray  # float32: γ^n, γ^k (truncated) or 0 (terminated)
    q_taken: np.ndarray | None = None     # float32: Q(s_t, a_t) when the actor acted
    next_value: np.ndarray | None = None  # float32: max_a Q(next_obs, a)

    def __len__(self) -> int:
        return len(self.action)


class NStepAssembler:
    """Turns per-step vector-env data into n-step transitions (obs, action, R, next_obs, discount).

    Each env keeps a ring buffer of the last ≤ n pending (obs, action, reward) of its current
    episode. Mid-episode emission (the common case) is vectorised over envs; episode ends are
    handled per env. Emission order: by env, then oldest first.
    """

    def __init__(self, num_envs: int, n: int, gamma: float, obs_shape: tuple[int, ...],
                 obs_dtype: DTypeLike = np.float32) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.E, self.n, self.gamma = num_envs, n, float(gamma)
        self.obs_shape = tuple(obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self._obs = np.zeros((num_envs, n, *self.obs_shape), dtype=self.obs_dtype)
        self._act = np.zeros((num_envs, n), dtype=np.int64)
        self._rew = np.zeros((num_envs, n), dtype=np.float64)
        self._q = np.zeros((num_envs, n), dtype=np.float32)  # q_taken, when given
        self._head = np.zeros(num_envs, dtype=np.int64)   # slot of the oldest pending item
        self._count = np.zeros(num_envs, dtype=np.int64)  # pending items
        self._pows = [self.gamma ** i for i in range(n + 1)]

    def pending(self) -> np.ndarray:
        """Number of pending (not yet emitted) items per env."""
        return self._count.copy()

    def reset(self) -> None:
        """Drop every pending item (e.g. after the envs were reset)."""
        self._head[:] = 0
        self._count[:] = 0

    def step(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
             terminated: np.ndarray, truncated: np.ndarray, next_obs: np.ndarray,
             valid: np.ndarray, q_taken: np.ndarray | None = None,
             next_value: np.ndarray | None = None) -> NStepBatch:
        """Add one step of every env ([E, ...] arrays); return the transitions it completes.

        ``q_taken`` [E] and ``next_value`` [E] (both or neither): Q(obs, actions) and
        max_a Q(next_obs, a) under the acting network; the batch then carries them."""
        values = q_taken is not None
        if values != (next_value is not None):
            raise ValueError("q_taken and next_value go together")
        valid = np.asarray(valid, dtype=bool)
        terminated = np.asarray(terminated, dtype=bool)
        ended = valid & (terminated | np.asarray(truncated, dtype=bool))
        rows = np.flatnonzero(valid)
        slot = (self._head[rows] + self._count[rows]) % self.n
        self._obs[rows, slot] = obs[rows]
        self._act[rows, slot] = np.asarray(actions)[rows]
        self._rew[rows, slot] = np.asarray(rewards, dtype=np.float64)[rows]
        if values:
            self._q[rows, slot] = np.asarray(q_taken, dtype=np.float32)[rows]
            next_value = np.asarray(next_value, dtype=np.float32)
        self._count[rows] += 1

        parts: list[tuple[np.ndarray, ...]] = []  # (env, obs, action, ret, next_obs, discount,
        #                                            q_taken[, next_value])
        full = np.flatnonzero(valid & ~ended & (self._count == self.n))
        if len(full):  # emit the oldest item: R = Σ_{i<n} γ^i r_i, discount γ^n
            idx = (self._head[full, None] + np.arange(self.n)) % self.n
            rew = self._rew[full[:, None], idx]
            ret = np.zeros(len(full))
            for i in range(self.n):
                ret = ret + self._pows[i] * rew[:, i]
            h = self._head[full]
            nv = () if next_value is None else (next_value[full],)  # with values only
            parts.append((full, self._obs[full, h], self._act[full, h], ret,
                          next_obs[full], np.full(len(full), self._pows[self.n]),
                          self._q[full, h], *nv))
            self._head[full] = (h + 1) % self.n
            self._count[full] -= 1
        for e in np.flatnonzero(ended):  # emit everything pending, oldest first
            k = int(self._count[e])
            idx = (self._head[e] + np.arange(k)) % self.n
            rew = self._rew[e, idx]
            ret = np.zeros(k)
            for j in range(k):  # item j sums the k − j rewards it has left
                for i in range(k - j):
                    ret[j] = ret[j] + self._pows[i] * rew[j + i]
            if terminated[e]:
                disc = np.zeros(k)
            else:
                disc = np.array([self._pows[k - j] for j in range(k)])
            nv = () if next_value is None else (np.full(k, next_value[e]),)
            parts.append((np.full(k, e), self._obs[e, idx], self._act[e, idx], ret,
                          np.repeat(next_obs[e][None], k, axis=0), disc, self._q[e, idx], *nv))
            self._head[e] = 0
            self._count[e] = 0
        return self._concat(parts, values)

    def _concat(self, parts: list[tuple[np.ndarray, ...]], values: bool) -> NStepBatch:
        if not parts:
            z = np.zeros((0, *self.obs_shape), dtype=self.obs_dtype)
            f = np.zeros(0, np.float32)
            return NStepBatch(z, np.zeros(0, np.int64), f, z.copy(), f.copy(),
                              f.copy() if values else None, f.copy() if values else None)
        cols = [np.concatenate([p[i] for p in parts]) for i in range(8 if values else 6)]
        order = np.argsort(cols[0], kind="stable")  # by env; within an env parts are in order
        return NStepBatch(
            obs=cols[1][order].astype(self.obs_dtype, copy=False),
            action=cols[2][order].astype(np.int64, copy=False),
            ret=cols[3][order].astype(np.float32),
            next_obs=cols[4][order].astype(self.obs_dtype, copy=False),
            discount=cols[5][order].astype(np.float32),
            q_taken=cols[6][order].astype(np.float32) if values else None,
            next_value=cols[7][order].astype(np.float32) if values else None,
        )
