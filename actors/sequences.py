"""An R2D2 actor: ε-greedy with a recurrent Q-network, overlapping sequences with their
stored state.

R2D2 (Kapturowski et al., ICLR 2019, §2.3 and §3): each actor acts with its own ε of Ape-X's
ladder and a local copy of the recurrent Q-network, and adds to replay fixed-length
sequences of ``T`` steps, a new one every ``period`` steps (adjacent sequences overlap by
T − period), each with the recurrent state the actor had before its first step ("stored
state") and an initial priority computed with its local network. Sequences cross episode
ends: the state resets where an episode starts (``first``), as in the network's unroll.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import torch
from torch import nn

from archzoo.actors.base import EnvActor
from archzoo.actors.unroll import CORE_FIELDS
from archzoo.envs import EnvSpec
from archzoo.learners.r2d2 import R2D2LossConfig, initial_sequence_priorities
from archzoo.messages import Message
from archzoo.nets import RecurrentQNetwork, expect
from archzoo.policy import Policy
from archzoo.replay.memory import FieldSpec

_STEP_FIELDS = ("actions", "rewards", "terminated", "truncated", "valid")


def sequence_fields(spec: EnvSpec, length: int, core_size: int,
                    prev_action_reward: bool = False) -> FieldSpec:
    """One replayed sequence: observations x_0..x_T, the T steps' actions, rewards, episode
    ends and ``valid`` (False on the autoreset step, actors/base.py), where the network's
    unroll starts: the stored state (``core_h0``, ``core_c0``), ``first0`` and, for a core
    that takes them, the previous action and reward; and ``version``, the parameters'
    version that acted the sequence's last step (its replay lag is counted from there)."""
    T = length
    out: FieldSpec = {
        "obs": ((T + 1, *spec.obs_shape), np.dtype(spec.obs_dtype)),
        "actions": ((T,), np.dtype(np.int64)), "rewards": ((T,), np.dtype(np.float32)),
        "terminated": ((T,), np.dtype(np.bool_)), "truncated": ((T,), np.dtype(np.bool_)),
        "valid": ((T,), np.dtype(np.bool_)), "first0": ((), np.dtype(np.bool_)),
        "core_h0": ((core_size,), np.dtype(np.float32)),
        "core_c0": ((core_size,), np.dtype(np.float32)),
        "version": ((), np.dtype(np.int64))}
    if prev_action_reward:
        out["prev_action0"] = ((), np.dtype(np.int64))
        out["prev_reward0"] = ((), np.dtype(np.float32))
    return out


class SequenceActor(EnvActor):
    """Steps E envs ε-greedily with a local recurrent Q-network and fills sequence
    messages (:func:`sequence_fields` plus ``priority`` and ``count``)."""

    def __init__(self, spec: EnvSpec, num_envs: int, length: int, period: int,
                 model: nn.Module, eps: float | np.ndarray, seed: int,
                 loss: R2D2LossConfig) -> None:
        super().__init__(spec, num_envs, seed)
        if not 1 <= period <= length:
            raise ValueError(f"the period between sequences must be in [1, {length}], "
                             f"got {period}")
        self.model, self.eps, self.A = expect(model, RecurrentQNetwork), eps, spec.num_actions
        self.T, self.period, self.loss = length, period, loss
        self.finished: list[float] = []  # episode returns not yet reported
        self.steps = 0  # steps taken (of every env at once)
        self.core_state = self.model.initial_state(num_envs)
        self.first = np.ones(num_envs, np.bool_)
        self.prev_action = np.zeros(num_envs, np.int64)
        self.prev_reward = np.zeros(num_envs, np.float32)
        # the last T steps: the observation and state before each, and what the step gave
        self.window: deque[dict[str, np.ndarray]] = deque(maxlen=length)
        # what the greedy evaluator acts with: argmax_a Q with its own core state per env,
        # fed each step's reward as this actor feeds the core while training
        self.greedy = Policy(model, {"net": "q"})

    def _act(self) -> np.ndarray:
        t0 = time.perf_counter()
        with torch.no_grad():
            q, self.core_state = self.model(
                torch.from_numpy(self.obs), self.core_state, torch.from_numpy(self.first),
                torch.from_numpy(self.prev_action), torch.from_numpy(self.prev_reward))
        actions = q.argmax(-1).numpy()
        explore = self.rng.random(len(actions)) < self.eps
        actions[explore] = self.rng.integers(self.A, size=int(explore.sum()))
        self.inference_s += time.perf_counter() - t0
        return actions

    def _step(self) -> None:
        """One step of every env, remembered in the window with the state before it."""
        before = {"obs": np.array(self.obs),  # a copy: an env may reuse its array
                  "core_h0": self.core_state[0].numpy(),
                  "core_c0": self.core_state[1].numpy(), "first0": self.first,
                  "prev_action0": self.prev_action, "prev_reward0": self.prev_reward}
        actions = self._act()  # moves self.core_state past this observation
        s = self.step_envs(actions)
        self.window.append({**before, "actions": actions, "rewards": s.reward,
                            "terminated": s.terminated, "truncated": s.truncated,
                            "valid": s.valid})
        self.first = ~s.valid  # after the autoreset step comes an episode's first obs
        self.prev_action = np.asarray(actions, np.int64)
        self.prev_reward = s.reward.astype(np.float32)
        self.finished.extend(s.ep_returns.tolist())
        self.steps += 1

    def _emit(self, msg: Message, at: int) -> int:
        """The window as E sequences into ``msg`` from item ``at``; returns E."""
        E, start = self.E, self.window[0]
        sl = slice(at, at + E)
        obs = np.stack([w["obs"] for w in self.window] + [self.obs])  # [T + 1, E, ...]
        msg["obs"][sl] = obs.swapaxes(0, 1)
        for k in _STEP_FIELDS:
            msg[k][sl] = np.stack([w[k] for w in self.window]).swapaxes(0, 1)
        for k in CORE_FIELDS:
            if k in msg:
                msg[k][sl] = start[k]
        msg["version"][sl] = self.version
        return E

    def collect(self, msg: Message, min_count: int) -> int:
        """Act until at least ``min_count`` sequences are in ``msg``; returns the count.

        ``msg`` needs room for ``min_count + E - 1`` (each emission adds E sequences)."""
        self.start_clock()
        count = 0
        while count < min_count:
            self._step()
            if len(self.window) == self.T and (self.steps - self.T) % self.period == 0:
                count += self._emit(msg, count)
        t0 = time.perf_counter()
        batch = {k: msg[k][:count] for k in msg if k not in ("priority", "count")}
        msg["priority"][:count] = initial_sequence_priorities(self.model, batch, self.loss)
        self.inference_s += time.perf_counter() - t0
        msg["count"][...] = count
        return count

    def take_finished(self) -> list[float]:
        out, self.finished = self.finished, []
        return out

