"""The V-trace actor-critic learner of IMPALA, SEED RL and GA3C.

It batches unrolls, applies the V-trace loss (Espeholt et al. 2018, eq. 1) and versions its
parameters.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn

from archzoo.actors.unroll import CORE_FIELDS, core_inputs
from archzoo.learners.vtrace import ImpalaLossConfig, impala_loss
from archzoo.nets import cpu_optimizer_state, cpu_state_dict

_FIELDS = ("obs", "actions", "behaviour_logits", "rewards", "terminated", "truncated", "valid")


def batch_unrolls(unrolls: Sequence, device: torch.device) -> dict[str, torch.Tensor]:
    """Concatenate unroll messages along the env axis: [T(+1), E, ...] -> [T(+1), sum E, ...]
    (a recurrent core's fields, [E, ...], along their first axis)."""
    out = {}
    for axis, names in ((1, _FIELDS), (0, [k for k in CORE_FIELDS if k in unrolls[0]])):
        for k in names:
            arr = unrolls[0][k] if len(unrolls) == 1 else \
                np.concatenate([u[k] for u in unrolls], axis)
            out[k] = torch.as_tensor(np.array(arr, copy=True)).to(device, non_blocking=True)
    return out


class VTraceLearner:
    """Owns the model and optimiser; :meth:`update` takes one gradient step on unrolls."""

    def __init__(self, model: nn.Module, loss_cfg: ImpalaLossConfig, lr: float,
                 max_grad_norm: float, device: torch.device, optimizer: str = "adam",
                 lr_decay_steps: int | None = None) -> None:
        """``lr_decay_steps``: decay the learning rate linearly to 0 over that many env steps
        trained on (IMPALA, Espeholt et al. 2018, Appendix G); None keeps it constant."""
        self.model = model.to(device)
        self.device = device
        self.loss_cfg = loss_cfg
        self.max_grad_norm = max_grad_norm
        self.lr, self.lr_decay_steps = lr, lr_decay_steps
        self.steps_trained = 0  # valid env steps in the batches so far
        if optimizer == "adam":
            self.opt = torch.optim.Adam(self.model.parameters(), lr=lr, eps=1e-5)
        elif optimizer == "rmsprop":  # IMPALA's choice (Espeholt et al. 2018, Table G.1)
            self.opt = torch.optim.RMSprop(self.model.parameters(), lr=lr, alpha=0.99, eps=0.01)
        else:
            raise ValueError(f"unknown optimizer {optimizer!r}")
        # RMSProp's eps 0.01 assumes the paper's loss scale: summed over the batch's steps
        # (as IMPALA's and TorchBeast's implementations do). With a per-step mean the
        # gradients (~1e-3) sit far below eps and RMSProp degrades to slow SGD.
        self.sum_loss = optimizer == "rmsprop"
        self.version = 0  # number of updates applied: the parameters' version
        self.update_s = 0.0
        # Held around the optimiser step: a thread that reads the model concurrently (GA3C's
        # predictors) holds it for a whole forward pass, so it never sees half an update.
        self.step_lock: AbstractContextManager = nullcontext()

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser and version: what a checkpoint keeps of the learner."""
        with self.step_lock:
            return {"model": cpu_state_dict(self.model), "optimizer": cpu_optimizer_state(self.opt),
                    "version": self.version, "steps_trained": self.steps_trained}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.step_lock:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.version = int(state["version"])
            self.steps_trained = int(state.get("steps_trained", 0))

    def loss(self, b: dict[str, torch.Tensor], logits: torch.Tensor,
             values: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The IMPALA loss: V-trace targets with π = the current model, μ = behaviour."""
        return impala_loss(
            logits=logits, values=values, actions=b["actions"],
            behaviour_logits=b["behaviour_logits"], rewards=b["rewards"],
            terminated=b["terminated"], truncated=b["truncated"], valid=b["valid"],
            cfg=self.loss_cfg,
        )

    def logits_and_values(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """π's logits [T, B, A] and V [T+1, B] on a batch of unrolls. A recurrent model runs
        its core over the T+1 observations from each unroll's initial state, resetting it
        where the actor did (:func:`archzoo.actors.unroll.core_inputs`)."""
        T1, B = b["obs"].shape[:2]
        if getattr(self.model, "recurrent", False):
            x = core_inputs(b)
            logits, values, _ = self.model.unroll(b["obs"], (b["core_h0"], b["core_c0"]),
                                                  x["first"], x["prev_action"], x["prev_reward"])
            return logits[:-1], values
        logits, values = self.model(b["obs"].reshape(T1 * B, *b["obs"].shape[2:]))
        return logits.reshape(T1, B, -1)[:-1], values.reshape(T1, B)

    def update(self, unrolls: Sequence) -> dict[str, float]:
        """One step of the IMPALA loss on the given unrolls (in the given order)."""
        t0 = time.perf_counter()
        b = batch_unrolls(unrolls, self.device)
        logits, values = self.logits_and_values(b)
        loss, stats = self.loss(b, logits, values)
        if self.sum_loss:  # the loss's terms are means over valid steps: back to their sum
            loss = loss * b["valid"].sum().clamp(min=1)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"] = float(nn.utils.clip_grad_norm_(self.model.parameters(),
                                                            self.max_grad_norm))
        stats["lr"] = self.opt.param_groups[0]["lr"]
        with self.step_lock:
            self.opt.step()
            self.version += 1
        self.steps_trained += int(b["valid"].sum())
        if self.lr_decay_steps:  # the next update's learning rate
            for g in self.opt.param_groups:
                g["lr"] = self.lr * max(0.0, 1.0 - self.steps_trained / self.lr_decay_steps)
        self.update_s += time.perf_counter() - t0
        return stats

