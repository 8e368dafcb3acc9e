"""The learning-rate schedule IMPALA uses: linear decay to 0 over the run's budget
(Espeholt et al. 2018, Appendix G), for any learner that owns a torch optimiser."""

from __future__ import annotations

import torch


def decay_lr(opt: torch.optim.Optimizer, lr: float, spent: float) -> float:
    """Set every parameter group's learning rate to ``lr · max(0, 1 − spent)``, where
    ``spent`` is the fraction of the budget used so far; returns the rate set."""
    now = lr * max(0.0, 1.0 - spent)
    for g in opt.param_groups:
        g["lr"] = now
    return now
