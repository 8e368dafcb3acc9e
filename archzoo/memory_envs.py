"""Environments that need memory: what a recurrent core (``--core lstm``) is for.

``archzoo/CartPoleNoVel-v1`` is gymnasium's CartPole-v1 with the velocities removed: the
observation is the cart's position and the pole's angle, ``[x, theta]``, of CartPole's
``[x, x_dot, theta, theta_dot]``. The dynamics, rewards, 500-step time limit and reward
threshold (475) are CartPole-v1's. One observation does not tell which way the pole is
falling, so a feed-forward policy cannot balance it for long; a policy with memory can infer
the velocities from consecutive observations (partially observed CartPole is a standard test
of recurrent agents). Vectorised, it is CartPole's own numpy batch of envs (next-step
autoreset) with the two columns taken out.

``archzoo/BreakoutNoTrail-v1`` is MinAtar's Breakout (Young & Tian 2019) without its
``trail`` channel: the grid shows the paddle, the ball and the bricks, but no longer where
the ball was a step before, so one observation does not say which way the ball moves; the
feed-forward agents that MinAtar's Breakout is easy for must now remember. Rewards and
episodes are MinAtar's (it needs archzoo's minatar extra).

``archzoo/BreakoutFlicker-v1`` is MinAtar's Breakout seen through a flickering screen, as
Hausknecht & Stone (2015) made Flickering Pong to test recurrent Q-learning: each
observation is blanked (all zeros) with probability 0.5, independently, from a generator
seeded by the env's seed. A feed-forward policy acts blind on half of the steps; a policy
with memory can carry the ball's and the paddle's last positions across the blanks.

Importing this module registers the ids (:func:`register_memory_envs`, idempotent); so does
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


def _kept_space(space: gym.Space) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"CartPole observes a Box, got {space}")
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


BREAKOUT_NOTRAIL_ID = "archzoo/BreakoutNoTrail-v1"


class DropChannels(gym.ObservationWrapper):
    """A MinAtar env without some of its channels (by name: MinAtar's ``channels``)."""

    def __init__(self, env: gym.Env, drop: tuple[str, ...]) -> None:
        super().__init__(env)
        channels = env.unwrapped.game.env.channels  # type: ignore[attr-defined]  # MinAtar's
        unknown = set(drop) - set(channels)
        if unknown:
            raise ValueError(f"no channel {sorted(unknown)} in {sorted(channels)}")
        self.keep = [i for n, i in sorted(channels.items(), key=lambda c: c[1])
                     if n not in drop]
        space = env.observation_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"a MinAtar env observes a Box, got {space}")
        h, w, _ = space.shape
        self.observation_space = spaces.Box(0, 1, (h, w, len(self.keep)), space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[..., self.keep]


def make_breakout_notrail(**kwargs: Any) -> gym.Env:
    """Entry point of ``archzoo/BreakoutNoTrail-v1``: MinAtar Breakout, trail removed."""
    return DropChannels(_minatar("MinAtar/Breakout-v1", f"--env {BREAKOUT_NOTRAIL_ID}",
                                 **kwargs), ("trail",))


BREAKOUT_FLICKER_ID = "archzoo/BreakoutFlicker-v1"


class Flicker(gym.ObservationWrapper):
    """Each observation blanked (zeros) with probability ``p``, from a generator seeded at
    ``reset(seed=...)`` (Hausknecht & Stone 2015, Flickering Pong)."""

    def __init__(self, env: gym.Env, p: float = 0.5) -> None:
        super().__init__(env)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"flicker probability {p} is not in [0, 1)")
        self.p = p
        self.flicker_rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.flicker_rng = np.random.default_rng(seed)
        return super().reset(seed=seed, options=options)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if self.flicker_rng.random() < self.p:
            return np.zeros_like(observation)
        return observation


def _minatar(env_id: str, flag: str, **kwargs: Any) -> gym.Env:
    from archzoo.extras import require

    require("minatar", flag)
    import minatar.gym

    if env_id not in gym.registry:
        minatar.gym.register_envs()
    return gym.make(env_id, **kwargs)


def make_breakout_flicker(p: float = 0.5, **kwargs: Any) -> gym.Env:
    """Entry point of ``archzoo/BreakoutFlicker-v1``: MinAtar Breakout, observations
    blanked with probability ``p``."""
    return Flicker(_minatar("MinAtar/Breakout-v1", f"--env {BREAKOUT_FLICKER_ID}", **kwargs),
                   p)


def register_memory_envs() -> None:
    """Register ``archzoo/CartPoleNoVel-v1``, ``archzoo/BreakoutNoTrail-v1`` and
    ``archzoo/BreakoutFlicker-v1`` with gymnasium (idempotent)."""
    if BREAKOUT_NOTRAIL_ID not in gym.registry:
        gym.register(id=BREAKOUT_NOTRAIL_ID,
                     entry_point="archzoo.memory_envs:make_breakout_notrail")
    if BREAKOUT_FLICKER_ID not in gym.registry:
        gym.register(id=BREAKOUT_FLICKER_ID,
                     entry_point="archzoo.memory_envs:make_breakout_flicker")
    if CARTPOLE_NOVEL_ID in gym.registry:
        return
    gym.register(id=CARTPOLE_NOVEL_ID, entry_point="archzoo.memory_envs:make_cartpole_novel",
                 vector_entry_point="archzoo.memory_envs:make_cartpole_novel_vector",
                 max_episode_steps=500, reward_threshold=475.0)


register_memory_envs()
