"""What every actor shares: E gymnasium vector envs, episode bookkeeping, timers.

Gymnasium 1.x autoresets on the step after an episode ends: that step returns the reset
observation, reward 0, and ignores the action. It is not a transition, so
:meth:`EnvActor.step_envs` marks it ``valid = False`` and masks its reward and flags; every
loss, return and priority skips it. Unroll, segment, transition and SEED actors differ
only in how they choose actions and what they record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from archzoo.actors.episodes import EpisodeTracker
from archzoo.envs import EnvSpec, make_vector_env
from archzoo.seeding import env_seeds, sampler


@dataclass
class EnvStep:
    """One step of every env: raw outputs, the valid mask, and the episodes it finished.

    ``train_reward`` and ``train_terminated`` are what the losses see: the reward clipped to
    [−1, 1] when the env's spec says so, and a lost life counted as an episode end under
    ``--episodic-life``. The episode returns are always the raw game scores."""

    obs: np.ndarray
    raw_reward: np.ndarray
    raw_terminated: np.ndarray
    raw_truncated: np.ndarray
    valid: np.ndarray
    ep_returns: np.ndarray
    ep_lengths: np.ndarray
    train_reward: np.ndarray
    train_terminated: np.ndarray

    @property
    def reward(self) -> np.ndarray:
        """The losses' reward, 0 on the autoreset step."""
        return np.where(self.valid, self.train_reward, 0.0)

    @property
    def terminated(self) -> np.ndarray:
        return self.train_terminated & self.valid

    @property
    def truncated(self) -> np.ndarray:
        return self.raw_truncated & self.valid


def vector_seed(envs: object, seeds: list[int]) -> int | list[int] | np.ndarray:
    """``seeds`` (one per env) as ``envs.reset`` takes them: a list for gymnasium's
    Sync/AsyncVectorEnv, an array for ale-py's AtariVectorEnv, and the first alone for a
    batched numpy env that draws every env from one generator (CartPole's). A wrapped
    vector env (archzoo/latency.py's) takes the seeds as the env it wraps."""
    envs = getattr(envs, "unwrapped", envs)
    if isinstance(envs, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
        return seeds
    if type(envs).__name__ == "AtariVectorEnv":
        return np.asarray(seeds, dtype=np.int64)
    return seeds[0]


class EnvActor:
    """E envs, each reset with its own seed spawned from ``seed`` (archzoo/seeding.py), a
    random generator from the same seed, and the counters
    (env steps, episodes, seconds in envs and in inference) every actor reports. With the
    spec's ``latency`` (``--env-latency-ms``) each step of the E envs waits once."""

    def __init__(self, spec: EnvSpec, num_envs: int, seed: int) -> None:
        self.spec, self.E = spec, num_envs
        self.envs = make_vector_env(spec, num_envs, latency=spec.latency, seed=seed)
        self.obs, _ = self.envs.reset(seed=vector_seed(self.envs, env_seeds(seed, num_envs)))
        self.rng = sampler(seed)
        self.tracker = EpisodeTracker(num_envs)
        self.version = 0  # the parameters' version acting now
        self.env_s = 0.0
        self.inference_s = 0.0
        self.first_step_time = 0.0
        self.lives: np.ndarray | None = None  # --episodic-life: lives before this step

    def start_clock(self) -> None:
        """Note when the first env step was taken (time to target is measured from it)."""
        if self.first_step_time == 0.0:
            self.first_step_time = time.time()

    def sample(self, logits: np.ndarray) -> np.ndarray:
        """a ~ softmax(logits) per env, by Gumbel-max: argmax(logits + Gumbel noise)."""
        return np.argmax(logits + self.rng.gumbel(size=logits.shape), axis=-1)

    def step_envs(self, actions: np.ndarray) -> EnvStep:
        """Step every env once; the new observations become :attr:`obs`."""
        t0 = time.perf_counter()
        obs, reward, term, trunc, info = self.envs.step(actions)
        self.env_s += time.perf_counter() - t0
        valid = self.tracker.valid()  # False: this was the autoreset step
        _, rets, lens = self.tracker.step(reward, term, trunc, valid)
        self.obs = obs
        train_reward = np.clip(reward, -1.0, 1.0) if self.spec.clip_rewards else reward
        train_term = term
        if self.spec.episodic_life:
            lives = np.asarray(info["lives"])
            if self.lives is not None:  # a life lost mid-game ends the losses' episode
                train_term = term | (valid & (lives < self.lives))
            self.lives = lives
        return EnvStep(obs, reward, term, trunc, valid, rets, lens, train_reward, train_term)

    def fast_forward(self, actions: np.ndarray, num_actions: int) -> None:
        """Take the steps of an earlier run again: its ``actions`` (steps, E), with the
        sampling noise :meth:`sample` drew for each step (actors/action_log.py)."""
        self.check_log(actions)
        for a in actions:
            self.rng.gumbel(size=(self.E, num_actions))
            self.step_envs(a.astype(np.int64))

    def check_log(self, actions: np.ndarray) -> None:
        """An action log (steps, E) must be one of this many envs."""
        if len(actions) and actions.shape[1] != self.E:
            raise ValueError(f"an action log of {actions.shape[1]} envs, this actor has {self.E}")

    @property
    def env_steps(self) -> int:
        """Valid transitions so far."""
        return self.tracker.env_steps

    @property
    def episodes(self) -> int:
        return self.tracker.episodes

    def close(self) -> None:
        self.envs.close()
