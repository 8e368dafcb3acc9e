"""Greedy evaluation episodes: how good is the policy without exploration noise?

An Ape-X actor at ε = 0.4 cannot average 475 on CartPole however good its Q-network, so
architectures that explore with ε are judged by greedy episodes, as the Ape-X paper
(Horgan et al. 2018, §4) reports its scores.

An actor evaluates a slice at a time (:meth:`GreedyEvaluator.maybe_advance`), as many
evaluation steps as it has just acted, so that an evaluation never stops its stream of
transitions: a replay learner waiting for them would otherwise time out on a long one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from archzoo.actors.base import vector_seed
from archzoo.envs import EVAL_MAX_STEPS, EnvSpec, make_vector_env
from archzoo.seeding import env_seeds

Act = Callable[[np.ndarray], np.ndarray]


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
        self._obs: np.ndarray | None = None  # the evaluation under way, if any
        self._ret = np.zeros(episodes)
        self._done = np.zeros(episodes, dtype=bool)
        self._t = 0

    @property
    def under_way(self) -> bool:
        """Whether an evaluation has started and not yet ended."""
        return self._obs is not None

    @property
    def _ended(self) -> bool:
        """Every env has finished its episode, or the step cap is reached."""
        return bool(self._done.all()) or self._t >= self.max_steps

    def _start(self, act: Act) -> None:
        """Evaluation k starts from seed ``seed + 7919·k``: new start states each time."""
        self._obs, _ = self.envs.reset(seed=vector_seed(
            self.envs, env_seeds(self.seed + 7919 * self.rounds, self.episodes)))
        self.rounds += 1
        if hasattr(act, "reset"):  # a recurrent policy: a fresh state per env
            act.reset(self.episodes)
        self._ret[:] = 0.0
        self._done[:] = False
        self._t = 0

    def _advance(self, act: Act, steps: int,
                 on_poll: Callable[[], object] | None = None) -> np.ndarray | None:
        """At most ``steps`` more steps of the evaluation under way; its returns if it
        ended, else None."""
        for _ in range(steps):
            if self._ended:
                break
            if on_poll is not None and self._t % 100 == 99:
                on_poll()
            assert self._obs is not None, "an evaluation is under way (_start)"
            self._obs, r, term, trunc, _ = self.envs.step(act(self._obs))
            if hasattr(act, "observe"):  # a policy fed its previous reward (R2D2's core)
                act.observe(r)
            self._ret += np.where(self._done, 0.0, r)
            self._done |= term | trunc
            self._t += 1
        if not self._ended:
            return None
        self._obs = None
        self.last_run = time.time()
        return self._ret.copy()

    def run(self, act: Act, on_poll: Callable[[], object] | None = None) -> np.ndarray:
        """Returns of one episode per env under ``act`` (observations -> actions; one with a
        ``reset(num_envs)`` method is reset first, one with ``observe(rewards)`` is given
        each step's rewards), in one go; ``on_poll`` every 100 steps
        (a stop request raises from it, so a long evaluation does not delay a stop)."""
        assert not self.under_way, "run() would discard the sliced evaluation under way"
        self._start(act)
        out = self._advance(act, self.max_steps, on_poll)
        assert out is not None
        return out

    def maybe_advance(self, act: Act, interval_s: float, steps: int) -> list[float]:
        """A slice of evaluation: starts one if ``interval_s`` passed since the last ended,
        takes at most ``steps`` steps of the one under way; its returns once it ends, else
        nothing. ``act`` may change between slices (new parameters): an evaluation plays
        with whatever the actor holds at each step."""
        if not self.under_way:
            if time.time() - self.last_run < interval_s:
                return []
            self._start(act)
        out = self._advance(act, max(1, steps))
        return [] if out is None else out.tolist()

    def close(self) -> None:
        self.envs.close()
