"""SEED RL's unrolls, assembled on the learner from the inference traffic itself.

In SEED RL (Espeholt et al., ICLR 2020, §3) actors only step environments, so
the learner, which answers every step, keeps one unroll buffer per actor: request k brings
x_k (and the reward, episode-end flags and ``valid`` of the step that produced it); the
reply brings a_k and the behaviour logits μ(·|x_k). After T steps the request's x_T closes
the unroll and also opens the next one as its x_0 — the same layout as an IMPALA unroll
(actors/unroll.py), so the V-trace learner takes it unchanged.

A request whose ``run_id`` differs from the buffer's comes from a restarted actor: the
partial unroll is dropped (its steps came from envs that no longer exist) and a new one
starts at that request. A buffer loaded from a checkpoint instead adopts the next run id:
its actor has taken the logged steps again (actors/action_log.py) and goes on with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archzoo.messages import Message, Schema


class UnrollBuilder:
    """One actor's unroll in progress; :meth:`add` returns each unroll as it completes."""

    def __init__(self, schema: Schema, unroll_length: int) -> None:
        self.schema, self.T = schema, unroll_length
        self.msg = schema.new()
        self.t = 0                      # actions recorded in the current unroll
        self.run_id: int | None = None
        self.restarts = 0               # run-id changes after the first
        self.dropped_steps = 0          # steps of partial unrolls dropped at a restart
        self.adopt = False              # loaded from a checkpoint: take the next run id on

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {"msg": torch.from_numpy(self.msg.buffer.copy()), "t": self.t,
                "restarts": self.restarts, "dropped_steps": self.dropped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.msg.buffer[:] = state["msg"].numpy().astype(np.uint8)
        self.t, self.restarts = int(state["t"]), int(state["restarts"])
        self.dropped_steps = int(state["dropped_steps"])
        self.run_id, self.adopt = None, True

    def _open(self, req: Message, rep: Message, core: dict[str, np.ndarray] | None) -> None:
        """The request's observation is x_0 of the unroll in ``msg``."""
        self.msg["obs"][0] = req["obs"]
        self.msg["version"][...] = rep["version"]
        if core is not None:
            for k, v in core.items():
                if k in self.msg:
                    self.msg[k][...] = v

    def logged_actions(self) -> np.ndarray:
        """The actions of the unroll in progress, (t, E)."""
        return self.msg["actions"][: self.t]

    def add(self, req: Message, rep: Message,
            core: dict[str, np.ndarray] | None = None) -> Message | None:
        """Record one answered request; the completed unroll (a fresh message) or None.
        ``core``: a recurrent model's inputs of this step (actors/core_states.py), recorded
        where the request's observation opens an unroll."""
        run_id = int(req["run_id"])
        if self.adopt and not bool(req["first"]):
            self.run_id = run_id  # the resumed actor of this unroll
        self.adopt = False
        done = None
        if run_id != self.run_id or bool(req["first"]):
            if self.run_id is not None:
                self.restarts += 1
                self.dropped_steps += self.t
            self.run_id = run_id
            self.t = 0
            self._open(req, rep, core)
        else:
            m, s = self.msg, self.t - 1  # the request reports step s (taken with a_s)
            m["rewards"][s] = req["rewards"]
            m["terminated"][s] = req["terminated"]
            m["truncated"][s] = req["truncated"]
            m["valid"][s] = req["valid"]
            m["obs"][self.t] = req["obs"]
            if self.t == self.T:
                done, self.msg = m, self.schema.new()
                self._open(req, rep, core)
                self.t = 0
        self.msg["actions"][self.t] = rep["actions"]
        self.msg["behaviour_logits"][self.t] = rep["logits"]
        self.t += 1
        return done
