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
from typing import TypedDict

import numpy as np
import torch
from numpy.typing import DTypeLike

from archzoo.actors.base import EnvActor, EnvStep
from archzoo.envs import EnvSpec
from archzoo.messages import Message, Schema
from archzoo.nets import RecurrentCore, expect

# Cumulative seconds the actor spent, carried in every unroll: env steps, inference.
TIMING = ("env", "inference")


# where a replay of a recurrent core starts (unroll_schema's core fields; R2D2's sequences
# and GA3C's stamped unrolls carry the same): [E, ...], env first
CORE_FIELDS = ("core_h0", "core_c0", "first0", "prev_action0", "prev_reward0")


def unroll_schema(spec: EnvSpec, unroll_length: int, num_envs: int, core_size: int = 0,
                  prev_action_reward: bool = False) -> Schema:
    """The IMPALA/SEED unroll message; every rank derives it from config and env spaces.

    ``core_size`` > 0 (``--core lstm:SIZE``): the unroll also carries what the learner needs
    to run the recurrent core over it again (:func:`core_inputs`): the actor's core state
    before x_0 (``core_h0``, ``core_c0``, [E, SIZE] float32, not yet reset), ``first0`` (x_0
    starts an episode, so the state is reset before it) and, with ``prev_action_reward``,
    the action and reward of the step before x_0 (``prev_action0``, ``prev_reward0``). Later
    resets need no field: x_t (t >= 1) starts an episode exactly when step t-1 was the
    autoreset step, ``valid[t-1] == False``."""
    T, E = unroll_length, num_envs
    cap = E * (T // 2 + 1)  # an episode needs >= 1 step plus the masked autoreset step
    core: list[tuple[str, DTypeLike, tuple[int, ...]]] = []
    if core_size:
        core = [("core_h0", np.float32, (E, core_size)), ("core_c0", np.float32, (E, core_size)),
                ("first0", np.bool_, (E,))]
        if prev_action_reward:
            core += [("prev_action0", np.int64, (E,)), ("prev_reward0", np.float32, (E,))]
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
        *core,
    ])


class CoreInputs(TypedDict):
    """A recurrent core's inputs over an unroll's T+1 observations (:func:`core_inputs`)."""
    first: torch.Tensor
    prev_action: torch.Tensor | None
    prev_reward: torch.Tensor | None


def core_inputs(b: dict[str, torch.Tensor]) -> CoreInputs:
    """A batch of unrolls (time-major tensors, :func:`unroll_schema`'s core fields) as the
    inputs of ``RecurrentActorCritic.unroll`` over its T+1 observations: ``first`` [T+1, B]
    (x_0's from ``first0``, x_t's = not ``valid[t-1]``), and with the previous action and
    reward, ``prev_action`` and ``prev_reward`` [T+1, B] (step t-1's, step -1's from the
    unroll)."""
    first = torch.cat([b["first0"][None], ~b["valid"]], 0)  # [1 + T, B]
    out: CoreInputs = {"first": first, "prev_action": None, "prev_reward": None}
    if "prev_action0" in b:
        out["prev_action"] = torch.cat([b["prev_action0"][None], b["actions"]], 0)
        out["prev_reward"] = torch.cat([b["prev_reward0"][None], b["rewards"]], 0)
    return out


class UnrollActor(EnvActor):
    """E envs, a local policy, and the state that carries across unrolls.

    With a recurrent model (``model.recurrent``, archzoo/nets.py ``RecurrentActorCritic``)
    the actor also keeps one core state per env, ``first`` (the next observation starts an
    episode: the model resets the state before it) and, for a core that takes them, the
    previous action and reward; each unroll records them as they were before its x_0."""

    def __init__(self, spec: EnvSpec, num_envs: int, unroll_length: int,
                 model: torch.nn.Module | None, seed: int) -> None:
        super().__init__(spec, num_envs, seed)
        self.T = unroll_length
        self.model = model
        self.recurrent = bool(getattr(model, "recurrent", False))
        if self.recurrent:
            self.reset_core()

    def reset_core(self) -> None:
        """Forget every env's memory: zero state, and the next observation counts as an
        episode's first (a resumed run's actor starts so: its core states were not saved)."""
        self.core_state = expect(self._model(), RecurrentCore).initial_state(self.E)
        self.first = np.ones(self.E, np.bool_)
        self.prev_action = np.zeros(self.E, np.int64)
        self.prev_reward = np.zeros(self.E, np.float32)

    def core_start(self) -> dict[str, np.ndarray]:
        """Where a replay of the core over the next steps starts (copies): the state before
        the next observation (not yet reset), ``first0``, and the previous action and
        reward (:func:`unroll_schema`'s core fields)."""
        return {"core_h0": self.core_state[0].numpy().copy(),
                "core_c0": self.core_state[1].numpy().copy(), "first0": self.first.copy(),
                "prev_action0": self.prev_action.copy(),
                "prev_reward0": self.prev_reward.copy()}

    def core_step_taken(self, actions: np.ndarray, s: EnvStep) -> None:
        """After a step: the next observation starts an episode where this step was the
        autoreset step; the step's action and reward are the next step's previous ones."""
        self.first = ~s.valid
        self.prev_action = np.asarray(actions, np.int64)
        self.prev_reward = s.reward.astype(np.float32)

    def fast_forward(self, actions: np.ndarray, num_actions: int) -> None:
        super().fast_forward(actions, num_actions)
        if self.recurrent and len(actions):
            self.reset_core()

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions from the local behaviour policy μ; returns (actions, logits)."""
        t0 = time.perf_counter()
        with torch.no_grad():
            if self.recurrent:
                logits, _, self.core_state = self._model()(
                    torch.from_numpy(obs), self.core_state, torch.from_numpy(self.first),
                    torch.from_numpy(self.prev_action), torch.from_numpy(self.prev_reward))
            else:
                logits, _ = self._model()(torch.from_numpy(obs))
        logits_np = logits.numpy()
        actions = self.sample(logits_np)
        self.inference_s += time.perf_counter() - t0
        return actions, logits_np

    def _model(self) -> torch.nn.Module:
        """The local policy (an actor built without one overrides :meth:`act`)."""
        if self.model is None:
            raise TypeError(f"{type(self).__name__} has no local model to act with")
        return self.model

    def collect(self, msg: Message, on_step: Callable[[], object] | None = None) -> None:
        """Fill the unroll message ``msg`` with the next T steps of every env; ``on_step``
        runs after every step (an actor takes arriving parameters there, unloaded)."""
        self.start_clock()
        obs = msg["obs"]
        ep_returns, ep_lengths = msg["ep_returns"], msg["ep_lengths"]
        n_ep = 0
        obs[0] = self.obs
        if self.recurrent:  # where the learner's replay of the core starts
            for k, v in self.core_start().items():
                if k in msg:
                    msg[k][:] = v
        for t in range(self.T):
            actions, logits = self.act(obs[t])
            s = self.step_envs(actions)
            if self.recurrent:
                self.core_step_taken(actions, s)
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
