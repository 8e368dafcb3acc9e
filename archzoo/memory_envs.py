"""Environments that need memory: what a recurrent core (``--core lstm``) is for.

``archzoo/CartPoleNoVel-v1`` is gymnasium's CartPole-v1 with the velocities removed: the
observation is the cart's position and the pole's angle, ``[x, theta]``, of CartPole's
``[x, x_dot, theta, theta_dot]``. The dynamics, rewards, 500-step time limit and reward
threshold (475) are CartPole-v1's. One observation does not tell which way the pole is
falling, so a feed-forward policy cannot balance it for long; a policy with memory can infer
the velocities from consecutive observations (partially observed CartPole is a standard test
of recurrent agents). Vectorised, it is CartPole's own numpy batch of envs (next-step
autoreset) with the two columns taken out.

Importing this module registers the id (:func:`register_memory_envs`, idempotent); so does
every archzoo process before it makes an env (archzoo/envs.py).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv
from gymnasium.vector import VectorObservationWrapper
from gymnasium.vector.utils import batch_space

CARTPOLE_NOVEL_ID = "archzoo/CartPoleNoVel-v1"
KEEP = [0, 2]  # x and theta of CartPole's [x, x_dot, theta, theta_dot]


def _kept_space(space: spaces.Box) -> spaces.Box:
    return spaces.Box(space.low[KEEP], space.high[KEEP], (len(KEEP),), np.float32)


class NoVelocity(gym.ObservationWrapper):
    """One CartPole env whose observations are ``[x, theta]``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = _kept_space(env.observation_space)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, np.float32)[KEEP]


class NoVelocityVector(VectorObservationWrapper):
    """A CartPole vector env whose observations are ``[num_envs, 2]``: ``[x, theta]``."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.single_observation_space = _kept_space(env.single_observation_space)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def observations(self, observations: np.ndarray) -> np.ndarray:
        return np.asarray(observations, np.float32)[:, KEEP]


def make_cartpole_novel(**kwargs: Any) -> gym.Env:
    """Entry point of ``archzoo/CartPoleNoVel-v1`` (gym.make adds the 500-step limit)."""
    return NoVelocity(CartPoleEnv(**kwargs))


def make_cartpole_novel_vector(num_envs: int = 1, max_episode_steps: int = 500,
                               **kwargs: Any) -> NoVelocityVector:
    """Vector entry point: CartPole's numpy batch of ``num_envs`` envs, velocities removed."""
    return NoVelocityVector(CartPoleVectorEnv(num_envs=num_envs,
                                              max_episode_steps=max_episode_steps, **kwargs))


def register_memory_envs() -> None:
    """Register ``archzoo/CartPoleNoVel-v1`` with gymnasium (idempotent)."""
    if CARTPOLE_NOVEL_ID in gym.registry:
        return
    gym.register(id=CARTPOLE_NOVEL_ID, entry_point="archzoo.memory_envs:make_cartpole_novel",
                 vector_entry_point="archzoo.memory_envs:make_cartpole_novel_vector",
                 max_episode_steps=500, reward_threshold=475.0)


register_memory_envs()
