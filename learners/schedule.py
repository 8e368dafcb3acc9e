"""The learning-rate schedule IMPALA uses: linear decay to 0 over the run's budget
(Espeholt et al. 2018, Appendix G), for any learner that owns a torch optimiser, and the
fraction of a budget spent that drives it."""

from __future__ import annotations

import torch


def decay_lr(opt: torch.optim.Optimizer, lr: float, spent: float) -> float:
    """Set every parameter group's learning rate to ``lr · max(0, 1 − spent)``, where
    ``spent`` is the fraction of the budget used so far; returns the rate set."""
    now = lr * max(0.0, 1.0 - spent)
    for g in opt.param_groups:
        g["lr"] = now
    return now


def fraction_spent(*parts: tuple[float, float | None]) -> float:
    """The fraction of a budget used: the largest ``used / budget`` over the ``(used,
    budget)`` parts that have a budget (env steps, seconds, ...); 0 when none has one."""
    return max((used / budget for used, budget in parts if budget), default=0.0)
