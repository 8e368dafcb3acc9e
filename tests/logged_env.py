"""A toy gymnasium environment that records every step it takes, for actor tests.

``ArchzooTestLogged-v0``: observations ``[k, L, u]`` (step in the episode, the episode's
length L drawn at reset from 1..6, a uniform draw that makes every observation distinct),
3 actions, reward ``k + 0.25·action + u`` (u of the observation acted on: the reward
depends on the step, the action and the state). The episode
terminates after L steps and is truncated after MAX_STEPS (L = MAX_STEPS: both flags, which
counts as terminated). No vector entry point, so archzoo.envs.make_vector_env builds a
SyncVectorEnv: sub-env i of a vector env reset with seed s is reset with seed s + i, and the
autoreset step after an episode end is a reset of the sub-env, not a step (never recorded).

Every instance appends itself to :data:`INSTANCES` when created and records its steps as
``(obs, action, reward, terminated, truncated, next_obs)`` in its ``log``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "ArchzooTestLogged-v0"
MAX_STEPS = 4
NUM_ACTIONS = 3
INSTANCES: list[Logged] = []


class Logged(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.log: list[tuple] = []
        self.k = self.length = 0
        self.obs = np.zeros(3, np.float32)
        INSTANCES.append(self)

    def _observe(self) -> np.ndarray:
        self.obs = np.array([self.k, self.length, self.np_random.random()], np.float32)
        return self.obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        self.length = int(self.np_random.integers(1, 7))
        return self._observe(), {}

    def step(self, action):
        obs = self.obs
        self.k += 1
        reward = float(self.k + 0.25 * int(action) + float(obs[2]))
        term, trunc = self.k >= self.length, self.k >= MAX_STEPS
        nxt = self._observe()
        self.log.append((obs, int(action), reward, term, trunc, nxt))
        return nxt, reward, term, trunc, {}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=Logged)


def episodes(log: list[tuple]) -> list[tuple[list[tuple], str | None]]:
    """One instance's log split into episodes: (steps, "terminated" | "truncated" | None)."""
    out, cur = [], []
    for step in log:
        cur.append(step)
        if step[3] or step[4]:
            out.append((cur, "terminated" if step[3] else "truncated"))
            cur = []
    if cur:
        out.append((cur, None))
    return out
