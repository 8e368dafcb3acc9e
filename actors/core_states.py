"""The recurrent state a central inference server keeps for every env of every actor.

In SEED RL (Espeholt et al., ICLR 2020, §3) actors hold no model, so the learner that
answers their steps also holds the recurrent agent's core state: one per env of every
actor, carried from one answered step to the next, reset where an episode starts (the
request's ``valid`` is False: the step that produced the observation was the autoreset
step) and where an actor starts (its first request). Each unroll then starts with the
state its first step was answered from, as an IMPALA actor records it
(actors/unroll.py ``unroll_schema``'s core fields), so the V-trace learner replays the core
over SEED's unrolls as it does over IMPALA's.

GA3C's agents (Babaeizadeh et al., ICLR 2017) build their unrolls themselves but hold no
model either, so there the predictors keep the states, and the server stamps each arriving
unroll with the state its first step was answered from: with ``unroll_length`` T, the
inputs of every T-th answered step of an actor are kept, in order, until its unroll comes
(:meth:`CoreStates.unroll_start`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from archzoo.actors.unroll import CORE_FIELDS
from archzoo.messages import Message
from archzoo.nets import RecurrentCore, expect

__all__ = ["CoreStates"]


class CoreStates:
    """One core state ``(h, c)``, previous action and previous reward per env of every actor
    in ``actors`` (E envs each), on the CPU; :meth:`answer` runs one batched step."""

    def __init__(self, model: torch.nn.Module, actors: list[int], num_envs: int,
                 unroll_length: int = 0) -> None:
        """``unroll_length`` > 0: keep where each unroll of T steps starts (GA3C)."""
        core = expect(model, RecurrentCore)
        self.prev_action_reward = bool(core.prev_action_reward)
        self.T = unroll_length
        self.steps = dict.fromkeys(actors, 0)  # steps answered since the actor's start
        self.starts: dict[int, deque[dict[str, np.ndarray]]] = {a: deque() for a in actors}
        h, c = core.initial_state(num_envs)
        self.h = {a: h.clone() for a in actors}
        self.c = {a: c.clone() for a in actors}
        self.prev_action = {a: torch.zeros(num_envs, dtype=torch.int64) for a in actors}
        # the inputs of each actor's last answered step: where an unroll that starts there
        # begins (core_h0, core_c0, first0, prev_action0, prev_reward0)
        self.before: dict[int, dict[str, np.ndarray]] = {}

    def _inputs(self, actor: int, req: Mapping[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
        E = self.h[actor].shape[0]
        if bool(req["first"]):  # a new actor incarnation: nothing carries over
            first = torch.ones(E, dtype=torch.bool)
            self.steps[actor] = 0
            self.starts[actor].clear()
        else:  # x_t starts an episode when step t-1 was the autoreset step
            first = torch.from_numpy(~req["valid"])
        prev_reward = torch.from_numpy(np.array(req["rewards"], np.float32))
        h, c, pa = self.h[actor], self.c[actor], self.prev_action[actor]
        self.before[actor] = {"core_h0": h.numpy(), "core_c0": c.numpy(),
                              "first0": first.numpy(), "prev_action0": pa.numpy(),
                              "prev_reward0": prev_reward.numpy()}
        if self.T:
            if self.steps[actor] % self.T == 0:
                self.starts[actor].append({k: v.copy() for k, v in self.before[actor].items()})
            self.steps[actor] += 1
        return h, c, first, pa, prev_reward

    def answer(self, policy: Any, actors: list[int], reqs: Sequence[Mapping[str, np.ndarray]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """One forward pass over the requests of ``actors`` (rows in that order), each env
        from its own state; the states move past the answered step. Returns what
        ``BatchedPolicy.forward`` returns: actions, logits, values, version. A request needs
        ``obs``, ``first``, ``valid`` and ``rewards`` (a :class:`Message` or a dict)."""
        ins = [self._inputs(a, r) for a, r in zip(actors, reqs, strict=True)]
        h, c, first, pa, pr = (torch.cat(x) for x in zip(*ins, strict=True))
        obs = reqs[0]["obs"] if len(reqs) == 1 else np.concatenate([r["obs"] for r in reqs])
        actions, logits, values, version, (h2, c2) = policy.forward_recurrent(
            obs, (h, c), first, pa if self.prev_action_reward else None,
            pr if self.prev_action_reward else None)
        row = 0
        for a in actors:
            n = self.h[a].shape[0]
            self.h[a], self.c[a] = h2[row:row + n], c2[row:row + n]
            self.prev_action[a] = torch.as_tensor(actions[row:row + n], dtype=torch.int64)
            row += n
        return actions, logits, values, version

    def unroll_start(self, actor: int, msg: Message) -> None:
        """Fill an unroll's core fields (``core_h0``, ``core_c0``, ``first0``, and with the
        previous action and reward ``prev_action0``, ``prev_reward0``) with the state its
        first step was answered from: the oldest kept start of ``actor``. An unroll whose
        start was not kept (an actor that restarted meanwhile) starts from a fresh state."""
        start = self.starts[actor].popleft() if self.starts.get(actor) else None
        for k in CORE_FIELDS:
            if k in msg:
                if start is None:
                    msg[k][...] = k == "first0"
                else:
                    msg[k][...] = start[k]

    def drop(self, actor: int) -> None:
        """Forget an actor whose process died."""
        for d in (self.h, self.c, self.prev_action, self.before, self.steps, self.starts):
            d.pop(actor, None)
