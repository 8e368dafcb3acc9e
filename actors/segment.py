"""An A3C/A2C actor-learner's experience: t_max-step segments of E envs, kept in-process.

A3C (Mnih et al., ICML 2016, Algorithm S3 of the supplementary material; learners/a2c.py)
acts for t_max steps *or until a terminal state* with the current parameters θ′, then computes
n-step returns backwards over that segment and pushes the gradient. Here the segment is
A2C-style: E envs of a gymnasium vector env stepped synchronously for exactly t_max steps.

Episode ends inside a segment. Gymnasium 1.x autoresets on the *next* step (actors/base.py):
if step t ends an episode (terminated or truncated; obs[t+1] is the final observation), step
t+1 is the autoreset step (reset observation, reward 0, action ignored).
The segment does not stop there: it continues through the autoreset step, which is recorded
with ``valid[t+1] = False`` (reward 0, flags False), and on into the next episode. The return
recursion (learners.a2c.n_step_returns) is cut at step t: R_t = r_t on termination, R_t =
r_t + γ V(obs[t+1]) on truncation, and the masked step contributes nothing. So for E = 1 a
segment holds exactly the transitions and returns of A3C's "until terminal or t_max" pieces
(the part before the episode end, and the part after the reset), with one difference: the
two pieces share one parameter sync and one gradient push, and the autoreset step occupies
one of the t_max slots.

A segment is an IMPALA unroll (actors/unroll.py) without behaviour logits, as a dataclass:
T+1 observations (obs[T] starts the next segment), and the episodes that finished in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from archzoo.actors.unroll import UnrollActor
from archzoo.envs import EnvSpec

__all__ = ["Segment", "SegmentActor"]


@dataclass
class Segment:
    """t_max steps of E envs, time-major; see the module docstring for ``valid``."""

    obs: np.ndarray         # [T+1, E, *obs_shape] float32; obs[t+1] follows actions[t]
    actions: np.ndarray     # [T, E] int64
    rewards: np.ndarray     # [T, E] float32, 0 where not valid
    terminated: np.ndarray  # [T, E] bool, False where not valid
    truncated: np.ndarray   # [T, E] bool, False where not valid
    valid: np.ndarray       # [T, E] bool, False on autoreset steps (not transitions)
    ep_returns: np.ndarray  # [n] float32, episodes that finished in this segment, in order
    ep_lengths: np.ndarray  # [n] int32
    # a recurrent model's start (actors/unroll.py UnrollActor.core_start): core_h0, core_c0,
    # first0, prev_action0, prev_reward0, [E, ...]; None for a feed-forward one
    core: dict[str, np.ndarray] | None = None

    @property
    def num_steps(self) -> int:
        """Valid transitions in the segment."""
        return int(self.valid.sum())


class SegmentActor(UnrollActor):
    """E envs stepped with ``model`` (the actor-learner's θ′); carries state across segments
    (with a recurrent model, its core states too, as IMPALA's actor does).

    The caller loads θ′ into ``model`` (e.g. archzoo.nets.set_flat from the parameter server)
    before :meth:`collect`; actions are sampled from softmax(logits) of that model.
    """

    def __init__(self, spec: EnvSpec, num_envs: int, t_max: int,
                 model: torch.nn.Module, seed: int) -> None:
        if t_max < 1 or num_envs < 1:
            raise ValueError(f"t_max and num_envs must be >= 1, got {t_max}, {num_envs}")
        super().__init__(spec, num_envs, t_max, model, seed)

    def act(self, obs: np.ndarray) -> np.ndarray:  # type: ignore[override]
        """Sample a ~ π(·|obs; θ′) for every env."""
        return super().act(obs)[0].astype(np.int64)

    # a segment actor shares UnrollActor's stepping, not its collect: it returns fresh
    # segments of t_max steps instead of filling unroll messages
    def collect(self) -> Segment:  # type: ignore[override]
        """The next t_max steps of every env, as a fresh :class:`Segment`."""
        T, E = self.T, self.E
        obs = np.empty((T + 1, E, *self.spec.obs_shape), dtype=self.spec.obs_dtype)
        actions = np.empty((T, E), dtype=np.int64)
        rewards = np.empty((T, E), dtype=np.float32)
        terminated = np.empty((T, E), dtype=bool)
        truncated = np.empty((T, E), dtype=bool)
        valid = np.empty((T, E), dtype=bool)
        ep_returns: list[np.ndarray] = []
        ep_lengths: list[np.ndarray] = []
        obs[0] = self.obs
        core = self.core_start() if self.recurrent else None
        for t in range(T):
            actions[t] = self.act(obs[t])
            s = self.step_envs(actions[t].copy())
            if self.recurrent:
                self.core_step_taken(actions[t], s)
            valid[t] = s.valid
            rewards[t] = s.reward
            terminated[t] = s.terminated
            truncated[t] = s.truncated
            obs[t + 1] = s.obs
            ep_returns.append(s.ep_returns)
            ep_lengths.append(s.ep_lengths)
        self.obs = obs[T].copy()
        return Segment(
            obs=obs, actions=actions, rewards=rewards, terminated=terminated,
            truncated=truncated, valid=valid,
            ep_returns=np.concatenate(ep_returns).astype(np.float32),
            ep_lengths=np.concatenate(ep_lengths).astype(np.int32), core=core,
        )
