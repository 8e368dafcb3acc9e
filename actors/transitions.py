"""An Ape-X actor: ε-greedy on E envs, n-step transitions with initial priorities.

Ape-X (Horgan et al. 2018, Algorithm 1; seed 004 Algorithm 12.41): each actor acts with
its own exploration rate ε_i = ε^(1 + α·i/(N−1)), builds n-step transitions, computes
their initial priorities |δ| with its local network, and ships them in batches.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from actors.episodes import EpisodeTracker
from actors.nstep import NStepAssembler
from archzoo.comm.schema import Message
from archzoo.envs import EnvSpec, make_vector_env
from learners.dqn import initial_priorities


def epsilon(i: int, n: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X's ε ladder: ε_i = base^(1 + alpha·i/(n−1)); a single actor uses ``base``."""
    return base if n <= 1 else base ** (1 + alpha * i / (n - 1))


class TransitionActor:
    """Steps E envs ε-greedily with a local Q-network and fills transition messages."""

    def __init__(self, spec: EnvSpec, num_envs: int, n_step: int, gamma: float,
                 model: nn.Module, eps: float, seed: int) -> None:
        self.model, self.eps, self.A = model, eps, spec.num_actions
        self.envs = make_vector_env(spec.env_id, num_envs)
        self.obs, _ = self.envs.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.tracker = EpisodeTracker(num_envs)
        self.nstep = NStepAssembler(num_envs, n_step, gamma, spec.obs_shape)
        self.version = 0
        self.env_s = 0.0
        self.inference_s = 0.0
        self.first_step_time = 0.0
        self.finished: list[float] = []  # episode returns not yet reported

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.model(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()

    def collect(self, msg: Message, min_count: int) -> int:
        """Act until at least ``min_count`` transitions are in ``msg``; returns the count.

        ``msg`` needs room for ``min_count + E·n`` (one step can end E episodes of n items).
        """
        if self.first_step_time == 0.0:
            self.first_step_time = time.time()
        count = 0
        while count < min_count:
            t0 = time.perf_counter()
            actions = self.greedy(self.obs)
            explore = self.rng.random(len(actions)) < self.eps
            actions[explore] = self.rng.integers(self.A, size=int(explore.sum()))
            t1 = time.perf_counter()
            next_obs, reward, term, trunc, _ = self.envs.step(actions)
            self.env_s += time.perf_counter() - t1
            self.inference_s += t1 - t0
            valid = self.tracker.valid()
            b = self.nstep.step(self.obs, actions, reward, term, trunc, next_obs, valid)
            m = len(b)
            for k, v in (("obs", b.obs), ("action", b.action), ("ret", b.ret),
                         ("next_obs", b.next_obs), ("discount", b.discount)):
                msg[k][count:count + m] = v
            count += m
            _, rets, _ = self.tracker.step(reward, term, trunc, valid)
            self.finished.extend(rets.tolist())
            self.obs = next_obs
        t0 = time.perf_counter()
        msg["priority"][:count] = initial_priorities(
            self.model, msg["obs"][:count], msg["action"][:count], msg["ret"][:count],
            msg["next_obs"][:count], msg["discount"][:count])
        self.inference_s += time.perf_counter() - t0
        msg["count"][...] = count
        return count

    def take_finished(self) -> list[float]:
        out, self.finished = self.finished, []
        return out

    def close(self) -> None:
        self.envs.close()
