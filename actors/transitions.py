"""An Ape-X actor: ε-greedy on E envs, n-step transitions with initial priorities.

Ape-X (Horgan et al., ICLR 2018, Algorithm 1: the actor): each actor acts with
its own exploration rate ε_i = ε^(1 + α·i/(N−1)), builds n-step transitions, computes
their initial priorities |δ| with its local network, and ships them in batches.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from archzoo.actors.base import EnvActor
from archzoo.actors.nstep import NStepAssembler
from archzoo.envs import EnvSpec
from archzoo.messages import Message


def epsilon(i: int, n: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X's ε ladder: ε_i = base^(1 + alpha·i/(n−1)); a single actor uses ``base``."""
    return base if n <= 1 else base ** (1 + alpha * i / (n - 1))


def ladder_over_envs(num_envs: int, rungs: int, base: float = 0.4,
                     alpha: float = 7.0) -> np.ndarray:
    """ε per env when one process stands in for ``rungs`` actors: the envs split into
    ``rungs`` contiguous groups (as even as they go), group i at :func:`epsilon` (i, rungs),
    so its exploration is that of a ``rungs``-actor run."""
    groups = np.array_split(np.arange(num_envs), rungs)
    eps = np.empty(num_envs, np.float64)
    for i, g in enumerate(groups):
        eps[g] = epsilon(i, rungs, base, alpha)
    return eps


class TransitionActor(EnvActor):
    """Steps E envs ε-greedily with a local Q-network and fills transition messages."""

    def __init__(self, spec: EnvSpec, num_envs: int, n_step: int, gamma: float,
                 model: nn.Module, eps: float | np.ndarray, seed: int) -> None:
        super().__init__(spec, num_envs, seed)
        self.model, self.eps, self.A = model, eps, spec.num_actions
        self.nstep = NStepAssembler(num_envs, n_step, gamma, spec.obs_shape, spec.obs_dtype)
        self.finished: list[float] = []  # episode returns not yet reported

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(obs, ·) under the acting network, [E, A] float32."""
        with torch.no_grad():
            return self.model(torch.as_tensor(obs)).numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.q_values(obs).argmax(-1)

    def _acting_q(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`q_values`, its time counted as the actor's inference."""
        t0 = time.perf_counter()
        q = self.q_values(obs)
        self.inference_s += time.perf_counter() - t0
        return q

    def collect(self, msg: Message, min_count: int) -> int:
        """Act until at least ``min_count`` transitions are in ``msg``; returns the count.

        ``msg`` needs room for ``min_count + E·n`` (one step can end E episodes of n items).
        A transition's initial priority |R + γ^k max_a Q(s_{t+k}, a) − Q(s_t, a_t)| (the
        local network as both online and target network) reuses the Q-values computed to
        act: Q(s_t, ·) when it acted on s_t, Q(s_{t+k}, ·) computed once the step returned
        s_{t+k}, which is also what the next step acts on. Each step costs one forward pass;
        each batch one more, as the batch starts on fresh parameters.
        """
        self.start_clock()
        count = 0
        q = self._acting_q(self.obs)  # the parameters may have changed since the last batch
        rows = np.arange(self.E)
        while count < min_count:
            t0 = time.perf_counter()
            actions = q.argmax(-1)
            explore = self.rng.random(len(actions)) < self.eps
            actions[explore] = self.rng.integers(self.A, size=int(explore.sum()))
            q_taken = q[rows, actions]
            self.inference_s += time.perf_counter() - t0
            obs = self.obs
            s = self.step_envs(actions)
            q = self._acting_q(s.obs)  # the next step acts on it; the bootstraps read it
            b = self.nstep.step(obs, actions, s.train_reward, s.train_terminated,
                                s.raw_truncated, s.obs, s.valid, q_taken, q.max(-1))
            m = len(b)
            for k, v in (("obs", b.obs), ("action", b.action), ("ret", b.ret),
                         ("next_obs", b.next_obs), ("discount", b.discount)):
                msg[k][count:count + m] = v
            msg["version"][count:count + m] = self.version
            msg["priority"][count:count + m] = np.abs(b.ret + b.discount * b.next_value
                                                     - b.q_taken)
            count += m
            self.finished.extend(s.ep_returns.tolist())
        msg["count"][...] = count
        return count

    def take_finished(self) -> list[float]:
        out, self.finished = self.finished, []
        return out
