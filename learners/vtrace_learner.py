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

from archzoo import eager
from archzoo.actors.unroll import CORE_FIELDS, core_inputs
from archzoo.learners.schedule import Schedule, TrainingBudget
from archzoo.learners.vtrace import ImpalaLossConfig, impala_loss, loss_targets, step_loss
from archzoo.nets import RecurrentActorCritic, cpu_optimizer_state, cpu_state_dict

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
                 epochs: int = 1, minibatches: int = 1, *, schedule: Schedule | None = None,
                 budget: TrainingBudget | None = None) -> None:
        """``schedule``: the learning rate of every update (learners/schedule.py; default
        ``lr``, constant), which follows this learner's own ``budget``: the env steps it
        trained on and its seconds of training from the first update, of a budget of each
        (IMPALA's linear decay, Espeholt et al. 2018, Appendix G, over whichever is spent
        faster). ``epochs`` × ``minibatches``: sample reuse as in PPO (Schulman et al.
        2017) and APPO (Petrenko et al. 2020): each batch is trained on ``epochs`` times,
        each time split into ``minibatches`` random groups (of steps, or of whole
        trajectories for a recurrent core: :meth:`_reuse`), one gradient step per group;
        1 × 1 is IMPALA's single step per batch."""
        if epochs < 1 or minibatches < 1:
            raise ValueError(f"epochs {epochs} and minibatches {minibatches} must be >= 1")
        self.model = model.to(device)
        self.device = device
        self.loss_cfg = loss_cfg
        self.max_grad_norm = max_grad_norm
        self.training = TrainingBudget() if budget is None else budget
        self.schedule = (Schedule(lr) if schedule is None else schedule).follow(self.training)
        self.epochs, self.minibatches = epochs, minibatches
        self.rng = torch.Generator().manual_seed(0)  # minibatch shuffles (sample reuse only)
        if optimizer == "adam":
            self.opt = eager.optimizer(torch.optim.Adam, self.model.parameters(), lr=lr,
                                       eps=1e-5)
        elif optimizer == "rmsprop":  # IMPALA's choice (Espeholt et al. 2018, Table G.1)
            self.opt = eager.optimizer(torch.optim.RMSprop, self.model.parameters(), lr=lr,
                                       alpha=0.99, eps=0.01)
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
                    "version": self.version, **self.training.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.step_lock:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.version = int(state["version"])
            self.training.load_state_dict(state)

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
        if isinstance(self.model, RecurrentActorCritic):
            x = core_inputs(b)
            logits, values, _ = self.model.unroll(b["obs"], (b["core_h0"], b["core_c0"]),
                                                  x["first"], x["prev_action"], x["prev_reward"])
            return logits[:-1], values
        logits, values = self.model(b["obs"].reshape(T1 * B, *b["obs"].shape[2:]))
        return logits.reshape(T1, B, -1)[:-1], values.reshape(T1, B)

    def update(self, unrolls: Sequence) -> dict[str, float]:
        """Train on the given unrolls (in the given order): one step of the IMPALA loss, or
        ``epochs`` × ``minibatches`` steps with sample reuse. The version advances by one."""
        t0 = time.perf_counter()
        self.training.start(t0)
        b = batch_unrolls(unrolls, self.device)
        if self.epochs == 1 and self.minibatches == 1:
            stats = self._step(b, last=True)
        else:
            stats = self._reuse(b)
        now = time.perf_counter()
        self.training.trained(int(b["valid"].sum()), now)
        self.schedule.after_update(self.opt)  # the next update's learning rate
        self.update_s += now - t0
        return stats

    def _reuse(self, b: dict[str, torch.Tensor]) -> dict[str, float]:
        """``epochs`` passes over ``b``, each in ``minibatches`` random groups; returns the
        steps' mean statistics. A feed-forward model: at the start of each pass the V-trace
        targets and advantages of the whole batch are computed with the current parameters,
        then the groups are of single valid steps, as PPO's minibatches are. A recurrent
        model: the groups are whole trajectories (env columns, its core runs along them)
        and the targets are recomputed at each step, as in APPO."""
        recurrent = getattr(self.model, "recurrent", False)
        total: dict[str, float] = {}
        steps = 0
        for _ in range(self.epochs):
            for mb in (self._trajectory_groups(b) if recurrent else self._step_groups(b)):
                steps += 1
                last = steps == self.epochs * self.minibatches
                for k, v in (self._step(mb, last) if recurrent
                             else self._step_on_steps(mb, last)).items():
                    total[k] = total.get(k, 0.0) + v
        return {k: v / steps for k, v in total.items()}

    def _shuffle(self, n: int, what: str) -> tuple[torch.Tensor, ...]:
        if self.minibatches > n:
            raise ValueError(f"--minibatches {self.minibatches} exceeds the batch's {n} {what}")
        return torch.tensor_split(torch.randperm(n, generator=self.rng), self.minibatches)

    def _trajectory_groups(self, b: dict[str, torch.Tensor]):
        """One pass's groups of whole trajectories (env columns)."""
        for idx in self._shuffle(b["obs"].shape[1], "trajectories"):
            yield _columns(b, idx.to(b["obs"].device))

    def _step_groups(self, b: dict[str, torch.Tensor]):
        """One pass's groups of single valid steps, with the pass's targets."""
        with torch.no_grad():
            logits, values = self.logits_and_values(b)
            t = loss_targets(logits=logits, values=values, actions=b["actions"],
                             behaviour_logits=b["behaviour_logits"], rewards=b["rewards"],
                             terminated=b["terminated"], truncated=b["truncated"],
                             valid=b["valid"], cfg=self.loss_cfg)
        T, B = b["actions"].shape
        flat = {"obs": b["obs"][:-1].reshape(T * B, *b["obs"].shape[2:]),
                "actions": b["actions"].reshape(-1),
                "behaviour_logits": b["behaviour_logits"].reshape(T * B, -1),
                "vs": t.vs.reshape(-1), "advantages": t.advantages.reshape(-1)}
        valid = torch.nonzero(b["valid"].reshape(-1)).squeeze(-1)
        for idx in self._shuffle(len(valid), "valid steps"):
            yield {k: v[valid[idx.to(valid.device)]] for k, v in flat.items()}

    def _step_on_steps(self, mb: dict[str, torch.Tensor], last: bool) -> dict[str, float]:
        """One gradient step of :func:`step_loss` on a group of steps with fixed targets."""
        logits, values = self.model(mb["obs"])
        loss, stats = step_loss(logits=logits, values=values, actions=mb["actions"],
                                behaviour_logits=mb["behaviour_logits"], vs=mb["vs"],
                                advantages=mb["advantages"],
                                valid=torch.ones_like(mb["actions"], dtype=torch.bool),
                                cfg=self.loss_cfg)
        return self._apply(loss, len(mb["actions"]), stats, last)

    def _step(self, b: dict[str, torch.Tensor], last: bool) -> dict[str, float]:
        """One gradient step of the loss on batch ``b``; its statistics. ``last``: the
        update's last step, which advances the version with it (under the step lock)."""
        logits, values = self.logits_and_values(b)
        loss, stats = self.loss(b, logits, values)
        return self._apply(loss, int(b["valid"].sum()), stats, last)

    def _apply(self, loss: torch.Tensor, n_valid: int, stats: dict[str, float],
               last: bool) -> dict[str, float]:
        """Backward, clip, optimiser step (and, if ``last``, the version); the stats."""
        if self.sum_loss:  # the loss's terms are means over valid steps: back to their sum
            loss = loss * max(1, n_valid)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"] = float(nn.utils.clip_grad_norm_(self.model.parameters(),
                                                            self.max_grad_norm))
        stats["lr"] = self.opt.param_groups[0]["lr"]
        with self.step_lock:
            eager.step(self.opt)
            self.version += last
        return stats


def _columns(b: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """The env columns ``idx`` of a batch: axis 1 of the [T(+1), B, ...] fields, axis 0 of
    a recurrent core's [B, ...] initial state."""
    return {k: v.index_select(0 if k in CORE_FIELDS else 1, idx) for k, v in b.items()}
