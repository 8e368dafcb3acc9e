"""Greedy evaluation episodes: how good is the policy without exploration noise?

An Ape-X actor at ε = 0.4 cannot average 475 on CartPole however good its Q-network, so
architectures that explore with ε are judged by greedy episodes, as the Ape-X paper
(Horgan et al. 2018, §4) reports its scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from archzoo.actors.base import vector_seed
from archzoo.envs import EVAL_MAX_STEPS, EnvSpec, make_vector_env
from archzoo.seeding import env_seeds


class GreedyEvaluator:
    """Runs ``episodes`` envs side by side until each has finished one episode, or
    ``max_steps`` steps have passed: an episode still running then counts what it earned
    so far (an env without a time limit may never end under a greedy policy)."""

    def __init__(self, env: str | EnvSpec, episodes: int, seed: int,
                 max_steps: int = EVAL_MAX_STEPS) -> None:
        self.envs = make_vector_env(env, episodes)
        self.episodes, self.seed, self.max_steps = episodes, seed, max_steps
        self.rounds = 0
        self.last_run = time.time()

    def run(self, act: Callable[[np.ndarray], np.ndarray],
            on_poll: Callable[[], object] | None = None) -> np.ndarray:
        """Returns of one episode per env under ``act`` (observations -> actions; one with a
        ``reset(num_envs)`` method is reset first); ``on_poll`` every 100 steps (a stop
        request raises from it, so a long evaluation does not delay a stop)."""
        obs, _ = self.envs.reset(seed=vector_seed(
            self.envs, env_seeds(self.seed + 7919 * self.rounds, self.episodes)))
        self.rounds += 1
        if hasattr(act, "reset"):  # a recurrent policy: a fresh state per env
            act.reset(self.episodes)
        ret = np.zeros(self.episodes)
        done = np.zeros(self.episodes, dtype=bool)
        for t in range(self.max_steps):
            if on_poll is not None and t % 100 == 99:
                on_poll()
            obs, r, term, trunc, _ = self.envs.step(act(obs))
            ret += np.where(done, 0.0, r)
            done |= term | trunc
            if done.all():
                break
        return ret

    def maybe_run(self, act: Callable[[np.ndarray], np.ndarray], interval_s: float,
                  on_poll: Callable[[], object] | None = None) -> list[float]:
        """:meth:`run` if ``interval_s`` passed since the last evaluation, else nothing."""
        if time.time() - self.last_run < interval_s:
            return []
        returns = self.run(act, on_poll).tolist()
        self.last_run = time.time()
        return returns

    def close(self) -> None:
        self.envs.close()
