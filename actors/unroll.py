"""An actor that steps gymnasium vector envs with a local policy copy and emits unrolls.

An unroll (IMPALA, Espeholt et al. 2018, §3) holds T steps of E envs: T+1 observations
x_0..x_T (x_T starts the next unroll), actions, rewards, the behaviour policy's logits
μ(·|x_t), episode-end flags, and ``valid``: False on the autoreset step that follows an
episode end, which is not a transition (actors/base.py). Finished episodes' returns
and lengths travel with the unroll.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from actors.base import EnvActor
from archzoo.envs import EnvSpec
from archzoo.messages import Schema

# Cumulative seconds the actor spent, carried in every unroll: env steps, inference.
TIMING = ("env", "inference")


def unroll_schema(spec: EnvSpec, unroll_length: int, num_envs: int) -> Schema:
    """The IMPALA/SEED unroll message; every rank derives it from config and env spaces."""
    T, E = unroll_length, num_envs
    cap = E * (T // 2 + 1)  # an episode needs >= 1 step plus the masked autoreset step
    return Schema("unroll", [
        ("obs", spec.obs_dtype, (T + 1, E, *spec.obs_shape)),  # uint8 frames stay uint8
        ("actions", np.int64, (T, E)),
        ("behaviour_logits", np.float32, (T, E, spec.num_actions)),
        ("rewards", np.float32, (T, E)),
        ("terminated", np.bool_, (T, E)),
        ("truncated", np.bool_, (T, E)),
        ("valid", np.bool_, (T, E)),
        ("version", np.int64, ()),          # parameter version of the behaviour policy
        ("first_step_time", np.float64, ()),  # wall clock of the actor's first env step
        ("timing", np.float64, (len(TIMING),)),
        ("ep_count", np.int64, ()),
        ("ep_returns", np.float32, (cap,)),
        ("ep_lengths", np.int32, (cap,)),
    ])


class UnrollActor(EnvActor):
    """E envs, a local policy, and the state that carries across unrolls."""

    def __init__(self, spec: EnvSpec, num_envs: int, unroll_length: int,
                 model: torch.nn.Module, seed: int) -> None:
        super().__init__(spec, num_envs, seed)
        self.T = unroll_length
        self.model = model

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions from the local behaviour policy μ; returns (actions, logits)."""
        t0 = time.perf_counter()
        with torch.no_grad():
            logits, _ = self.model(torch.from_numpy(obs))
        logits_np = logits.numpy()
        actions = self.sample(logits_np)
        self.inference_s += time.perf_counter() - t0
        return actions, logits_np

    def collect(self, msg, on_step: Callable[[], None] | None = None) -> None:
        """Fill the unroll message ``msg`` with the next T steps of every env; ``on_step``
        runs after every step (an actor takes arriving parameters there, unloaded)."""
        self.start_clock()
        obs = msg["obs"]
        ep_returns, ep_lengths = msg["ep_returns"], msg["ep_lengths"]
        n_ep = 0
        obs[0] = self.obs
        for t in range(self.T):
            actions, logits = self.act(obs[t])
            s = self.step_envs(actions)
            msg["valid"][t] = s.valid
            msg["actions"][t] = actions
            msg["behaviour_logits"][t] = logits
            msg["rewards"][t] = s.reward
            msg["terminated"][t] = s.terminated
            msg["truncated"][t] = s.truncated
            obs[t + 1] = s.obs
            ep_returns[n_ep:n_ep + len(s.ep_returns)] = s.ep_returns
            ep_lengths[n_ep:n_ep + len(s.ep_returns)] = s.ep_lengths
            n_ep += len(s.ep_returns)
            if on_step is not None:
                on_step()
        msg["ep_count"][...] = n_ep
        msg["version"][...] = self.version
        msg["first_step_time"][...] = self.first_step_time
        msg["timing"][:] = (self.env_s, self.inference_s)
