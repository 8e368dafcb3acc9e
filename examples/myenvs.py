"""A user's own environment, in the two forms ``--env`` takes besides gymnasium's ids.

CartPole without its velocities: the observation keeps the cart's position and the pole's
angle and drops both velocities, so a memoryless policy sees only part of the state. From
the repository root:

    archzoo run impala --env examples.myenvs:MyCartNoVel-v0         # module:Id
    archzoo run impala --env-import examples.myenvs --env MyCartNoVel-v0
    archzoo run impala --env examples.myenvs:make_env                # a factory

The first two import this module, which registers ``MyCartNoVel-v0`` with gymnasium; the
third calls :func:`make_env` (with ``--env-kwargs`` as keyword arguments) for each env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "MyCartNoVel-v0"
KEEP = (0, 2)  # cart position, pole angle


class NoVelocity(gym.ObservationWrapper):
    """CartPole's observation without the cart's and the pole's velocities."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[list(KEEP)], box.high[list(KEEP)],
                                                dtype=np.float32)

    def observation(self, observation: Any) -> Any:
        return np.asarray(observation, dtype=np.float32)[list(KEEP)]


def _no_velocity(**kwargs: Any) -> gym.Env:
    from gymnasium.envs.classic_control import CartPoleEnv

    return NoVelocity(CartPoleEnv(**kwargs))


def make_env(max_episode_steps: int = 200, **kwargs: Any) -> gym.Env:
    """One env for ``--env examples.myenvs:make_env``: ``--env-kwargs`` arrive here."""
    return gym.wrappers.TimeLimit(_no_velocity(**kwargs), max_episode_steps)


make_env.reward_threshold = 195.0  # the default --target-return of the factory form

if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=_no_velocity, max_episode_steps=200,
                 reward_threshold=195.0)
