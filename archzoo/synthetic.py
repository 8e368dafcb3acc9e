"""``archzoo/Synthetic-v0``: a synthetic environment with tunable cost, size and a learnable reward.

CartPole's 16-byte observations and microsecond steps hide where communication, inference
batching and topology matter; this environment exposes them through three knobs:

* ``step_cost_us`` -- each env step busy-waits this many microseconds (a spin on
  ``time.perf_counter``; ``sleep`` can't do microseconds). It is per env: a vector step of
  ``E`` envs costs ``E * step_cost_us``.
* ``obs_bytes`` -- observations are float32 vectors of ``max(1, obs_bytes // 4)`` values in
  ``[-1, 1]`` (Box), so a step ships ``obs_bytes`` of observation.
* ``num_actions`` / ``episode_length`` -- Discrete actions; episodes never terminate and are
  truncated after ``episode_length`` steps (gymnasium ``TimeLimit``; ``truncated=True``).

Reward: the first ``k = min(n, context_dims)`` components of each observation are a context
drawn fresh every step; the rest is distractor padding drawn at reset. The reward is 1 when
the action equals ``argmax(obs[:k] @ W)`` and 0 otherwise, where ``W`` (``k x num_actions``) is
a fixed random map chosen by ``task_seed`` (not by the reset seed, so every env of a run shares
it and a policy can learn it; a linear policy represents it exactly). See
:func:`optimal_action`.

Returns: the optimum is ``episode_length`` (every step rewarded); a uniformly random policy
gets ``episode_length / num_actions`` in expectation, whatever ``W`` is.

Importing this module registers the id (:func:`register_synthetic`, idempotent).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

ENV_ID = "archzoo/Synthetic-v0"


def spin(us: float) -> None:
    """Busy-wait ``us`` microseconds."""
    if us <= 0:
        return
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def obs_size(obs_bytes: int) -> int:
    """Number of float32 values in an observation of ``obs_bytes`` bytes (at least 1)."""
    return max(1, int(obs_bytes) // 4)


def hidden_map(obs_dim: int, num_actions: int = 4, task_seed: int = 0,
               context_dims: int = 8) -> npt.NDArray[np.float32]:
    """The fixed ``(k, num_actions)`` map ``W`` with ``k = min(obs_dim, context_dims)``."""
    k = min(obs_dim, context_dims)
    rng = np.random.default_rng([task_seed, k, num_actions])
    return rng.standard_normal((k, num_actions)).astype(np.float32)


def optimal_action(obs: npt.ArrayLike, num_actions: int = 4, task_seed: int = 0,
                   context_dims: int = 8) -> npt.NDArray[np.int64]:
    """The rewarded action(s) for observation(s) ``obs`` (shape ``(..., n)``): the oracle."""
    obs = np.asarray(obs, dtype=np.float32)
    w = hidden_map(obs.shape[-1], num_actions, task_seed, context_dims)
    return np.argmax(obs[..., : w.shape[0]] @ w, axis=-1).astype(np.int64)


def _check(step_cost_us: float, obs_bytes: int, num_actions: int, episode_length: int,
           context_dims: int) -> None:
    if step_cost_us < 0:
        raise ValueError(f"step_cost_us must be >= 0, got {step_cost_us}")
    if obs_bytes < 0:
        raise ValueError(f"obs_bytes must be >= 0, got {obs_bytes}")
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")
    if episode_length < 1:
        raise ValueError(f"episode_length must be >= 1, got {episode_length}")
    if context_dims < 1:
        raise ValueError(f"context_dims must be >= 1, got {context_dims}")


class SyntheticEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """One synthetic env (never terminates; :func:`make_synthetic_env` adds the time limit)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, step_cost_us: float = 0.0, obs_bytes: int = 64, num_actions: int = 4,
                 task_seed: int = 0, context_dims: int = 8) -> None:
        _check(step_cost_us, obs_bytes, num_actions, 1, context_dims)
        self.step_cost_us = float(step_cost_us)
        self.num_actions = int(num_actions)
        self.task_seed = int(task_seed)
        self.context_dims = int(context_dims)
        n = obs_size(obs_bytes)
        self._w = hidden_map(n, num_actions, task_seed, context_dims)
        self._k = self._w.shape[0]
        self._n = n  # observation size
        self.observation_space = spaces.Box(-1.0, 1.0, (n,), np.float32)
        self.action_space = spaces.Discrete(num_actions)
        self._obs: npt.NDArray[np.float32] | None = None
        self._target = 0

    def optimal_action(self, obs: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The rewarded action(s) for ``obs`` under this env's hidden map."""
        obs = np.asarray(obs, dtype=np.float32)
        return np.argmax(obs[..., : self._k] @ self._w, axis=-1).astype(np.int64)

    def _draw_context(self) -> None:
        assert self._obs is not None
        self._obs[: self._k] = self.np_random.uniform(-1.0, 1.0, self._k)
        self._target = int(self.optimal_action(self._obs))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """New episode: fresh padding and context (no step cost)."""
        super().reset(seed=seed)
        self._obs = self.np_random.uniform(-1.0, 1.0, self._n).astype(np.float32)
        self._draw_context()
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[npt.NDArray[np.float32], float, bool, bool,
                                         dict[str, Any]]:
        """Reward 1.0 iff ``action`` is optimal for the current observation; new context."""
        assert self._obs is not None, "call reset before step"
        spin(self.step_cost_us)
        reward = float(int(action) == self._target)
        self._draw_context()
        return self._obs.copy(), reward, False, False, {}


def make_synthetic_env(step_cost_us: float = 0.0, obs_bytes: int = 64, num_actions: int = 4,
                       episode_length: int = 100, task_seed: int = 0, context_dims: int = 8,
                       ) -> gym.Env:
    """Entry point of ``archzoo/Synthetic-v0``: a :class:`SyntheticEnv` in a ``TimeLimit``.

    Set the episode length with ``episode_length`` (not ``gym.make``'s ``max_episode_steps``,
    which would only add a second, outer time limit).
    """
    _check(step_cost_us, obs_bytes, num_actions, episode_length, context_dims)
    env = SyntheticEnv(step_cost_us, obs_bytes, num_actions, task_seed, context_dims)
    return gym.wrappers.TimeLimit(env, max_episode_steps=int(episode_length))


class SyntheticVectorEnv(VectorEnv[npt.NDArray[np.float32], npt.NDArray[np.int64], np.ndarray]):
    """``num_envs`` synthetic envs as one numpy batch, with next-step autoreset.

    After an env reports ``truncated``, its next step returns the reset observation with
    reward 0 and both flags False, ignoring the action (like gymnasium's CartPoleVectorEnv).
    Every step (autoreset steps included) busy-waits ``num_envs * step_cost_us``.
    """

    metadata: dict[str, Any] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, step_cost_us: float = 0.0, obs_bytes: int = 64,
                 num_actions: int = 4, episode_length: int = 100, task_seed: int = 0,
                 context_dims: int = 8) -> None:
        _check(step_cost_us, obs_bytes, num_actions, episode_length, context_dims)
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.step_cost_us = float(step_cost_us)
        self.num_actions = int(num_actions)
        self.episode_length = int(episode_length)
        self.task_seed = int(task_seed)
        self.context_dims = int(context_dims)
        self.render_mode = None
        n = obs_size(obs_bytes)
        self._w = hidden_map(n, num_actions, task_seed, context_dims)
        self._k = self._w.shape[0]
        self._n = n  # observation size
        self.single_observation_space = spaces.Box(-1.0, 1.0, (n,), np.float32)
        self.single_action_space = spaces.Discrete(num_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs: npt.NDArray[np.float32] | None = None
        self._target = np.zeros(self.num_envs, np.int64)
        self.steps = np.zeros(self.num_envs, np.int32)
        self.prev_done = np.zeros(self.num_envs, np.bool_)

    def optimal_action(self, obs: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The rewarded action(s) for ``obs`` under this env's hidden map."""
        obs = np.asarray(obs, dtype=np.float32)
        return np.argmax(obs[..., : self._k] @ self._w, axis=-1).astype(np.int64)

    def _draw_context(self) -> None:
        assert self._obs is not None
        self._obs[:, : self._k] = self.np_random.uniform(-1.0, 1.0, (self.num_envs, self._k))
        self._target = self.optimal_action(self._obs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        """Reset every env (no step cost)."""
        super().reset(seed=seed)
        shape = (self.num_envs, self._n)
        self._obs = self.np_random.uniform(-1.0, 1.0, shape).astype(np.float32)
        self._draw_context()
        self.steps[:] = 0
        self.prev_done[:] = False
        return self._obs.copy(), {}

    def step(self, actions: npt.ArrayLike) -> tuple[
        npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.bool_],
        npt.NDArray[np.bool_], dict[str, Any],
    ]:
        """One step of every env; envs that ended last step reset instead."""
        assert self._obs is not None, "call reset before step"
        actions = np.asarray(actions)
        assert actions.shape == (self.num_envs,), f"actions shape {actions.shape} invalid"
        spin(self.num_envs * self.step_cost_us)
        reward = (actions == self._target).astype(np.float32)
        self.steps += 1
        truncated = self.steps >= self.episode_length
        terminated = np.zeros(self.num_envs, np.bool_)

        done = self.prev_done
        if done.any():  # next-step autoreset: fresh padding, reward 0, flags False
            self._obs[done] = self.np_random.uniform(
                -1.0, 1.0, (int(done.sum()), self._obs.shape[1]))
            self.steps[done] = 0
            reward[done] = 0.0
            truncated[done] = False
        self._draw_context()
        self.prev_done = terminated | truncated
        return self._obs.copy(), reward, terminated, truncated, {}


def register_synthetic() -> None:
    """Register ``archzoo/Synthetic-v0`` with gymnasium (idempotent)."""
    if ENV_ID in gym.registry:
        return
    gym.register(
        id=ENV_ID,
        entry_point="archzoo.synthetic:make_synthetic_env",
        vector_entry_point="archzoo.synthetic:SyntheticVectorEnv",
    )


register_synthetic()
