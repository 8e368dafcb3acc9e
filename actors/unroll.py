"""An actor that steps gymnasium vector envs with a local policy copy and emits unrolls.

An unroll (IMPALA, Espeholt et al. 2018, §3) holds T steps of E envs: T+1 observations
x_0..x_T (x_T starts the next unroll), actions, rewards, the behaviour policy's logits
μ(·|x_t), episode-end flags, and ``valid``: False on the autoreset step that follows an
episode end, which is not a transition (DESIGN.md, Episodes). Finished episodes' returns
and lengths travel with the unroll.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from actors.episodes import EpisodeTracker
from archzoo.comm.schema import Schema
from archzoo.envs import EnvSpec, make_vector_env

# Cumulative seconds the actor spent, carried in every unroll: env steps, inference.
TIMING = ("env", "inference")


def unroll_schema(spec: EnvSpec, unroll_length: int, num_envs: int) -> Schema:
    """The IMPALA/SEED unroll message; every rank derives it from config and env spaces."""
    T, E = unroll_length, num_envs
    cap = E * (T // 2 + 1)  # an episode needs >= 1 step plus the masked autoreset step
    return Schema("unroll", [
        ("obs", np.float32, (T + 1, E, *spec.obs_shape)),
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


class UnrollActor:
    """E envs, a local policy, and the state that carries across unrolls."""

    def __init__(self, spec: EnvSpec, num_envs: int, unroll_length: int,
                 model: torch.nn.Module, seed: int) -> None:
        self.T, self.E = unroll_length, num_envs
        self.model = model
        self.envs = make_vector_env(spec.env_id, num_envs)
        self.obs, _ = self.envs.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.tracker = EpisodeTracker(num_envs)
        self.version = 0
        self.env_s = 0.0
        self.inference_s = 0.0
        self.first_step_time = 0.0

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions from the local behaviour policy μ; returns (actions, logits)."""
        t0 = time.perf_counter()
        with torch.no_grad():
            logits, _ = self.model(torch.from_numpy(obs))
        logits_np = logits.numpy()
        # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits).
        actions = np.argmax(logits_np + self.rng.gumbel(size=logits_np.shape), axis=-1)
        self.inference_s += time.perf_counter() - t0
        return actions, logits_np

    def collect(self, msg) -> None:
        """Fill the unroll message ``msg`` with the next T steps of every env."""
        if self.first_step_time == 0.0:
            self.first_step_time = time.time()
        obs, valid = msg["obs"], msg["valid"]
        ep_returns, ep_lengths = msg["ep_returns"], msg["ep_lengths"]
        n_ep = 0
        obs[0] = self.obs
        for t in range(self.T):
            actions, logits = self.act(obs[t])
            t0 = time.perf_counter()
            next_obs, reward, term, trunc, _ = self.envs.step(actions)
            self.env_s += time.perf_counter() - t0
            ok = self.tracker.valid()
            valid[t] = ok
            msg["actions"][t] = actions
            msg["behaviour_logits"][t] = logits
            msg["rewards"][t] = np.where(ok, reward, 0.0)
            msg["terminated"][t] = term & ok
            msg["truncated"][t] = trunc & ok
            obs[t + 1] = next_obs
            _, rets, lens = self.tracker.step(reward, term, trunc, ok)
            ep_returns[n_ep:n_ep + len(rets)] = rets
            ep_lengths[n_ep:n_ep + len(rets)] = lens
            n_ep += len(rets)
        self.obs = next_obs
        msg["ep_count"][...] = n_ep
        msg["version"][...] = self.version
        msg["first_step_time"][...] = self.first_step_time
        msg["timing"][:] = (self.env_s, self.inference_s)

    @property
    def env_steps(self) -> int:
        """Valid transitions so far."""
        return self.tracker.env_steps

    @property
    def episodes(self) -> int:
        return self.tracker.episodes

    def close(self) -> None:
        self.envs.close()
