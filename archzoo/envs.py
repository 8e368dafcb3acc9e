"""Environment ids, spaces and gymnasium vector environments.

Gymnasium 1.x vector envs autoreset on the *next* step (``AutoresetMode.NEXT_STEP``):
after an episode ends, the following step returns the reset observation with reward 0
and ignores the action. Actors mask that step out (actors/base.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class EnvError(ValueError):
    """An environment id that can't be used (unknown, or unsupported spaces)."""


@dataclass(frozen=True)
class EnvSpec:
    """What every rank needs to derive message schemas and networks."""

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int


def _gym():
    """gymnasium, with archzoo's own environments (archzoo/Synthetic-v0) registered."""
    import gymnasium as gym

    from archzoo.synthetic import register_synthetic

    register_synthetic()
    return gym


def check_env_id(env_id: str) -> None:
    """Raise EnvError with one clear line if gymnasium doesn't know ``env_id``."""
    gym = _gym()

    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        raise EnvError(f"unknown environment {env_id!r}: {e}") from None


def env_spec(env_id: str) -> EnvSpec:
    """Spaces of ``env_id``; only Box observations and Discrete actions are supported."""
    gym = _gym()
    check_env_id(env_id)
    env = gym.make(env_id)
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(act, gym.spaces.Discrete):
        raise EnvError(f"{env_id}: needs a Discrete action space, got {act}")
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(f"{env_id}: needs a Box observation space, got {obs}")
    return EnvSpec(env_id, tuple(obs.shape), np.dtype(np.float32).str, int(act.n))


def make_vector_env(env_id: str, num_envs: int):
    """A gymnasium vector env with next-step autoreset.

    Uses the env's own vectorised implementation when it registers one (CartPole does:
    a numpy batch of all envs), else ``SyncVectorEnv`` (one process, envs in a loop).
    """
    gym = _gym()
    spec = gym.spec(env_id)
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
    autoreset = envs.metadata.get("autoreset_mode")
    if autoreset is not None and getattr(autoreset, "name", str(autoreset)) != "NEXT_STEP":
        raise EnvError(f"{env_id}: vector env autoreset mode {autoreset} is not NEXT_STEP")
    return envs
