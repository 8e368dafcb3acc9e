"""GA3C's trainer loss: the A3C n-step advantage actor-critic on unrolls from the queue.

GA3C (Babaeizadeh et al., ICLR 2017, §4) trains with A3C's loss (Mnih et al.
2016, Algorithm S3; learners/a2c.py) on experience whose actions came from the predictor,
i.e. from parameters that may be a few updates old: GA3C's "policy lag", which it leaves
uncorrected (§5 of the paper discusses the instability it causes). ``--loss vtrace`` swaps
in IMPALA's V-trace correction with the behaviour logits the predictor returned.
"""

from __future__ import annotations

import torch

from archzoo.learners.a2c import a2c_loss, n_step_returns
from archzoo.learners.vtrace_learner import VTraceLearner


class A3CUnrollLearner(VTraceLearner):
    """:class:`~archzoo.learners.vtrace_learner.VTraceLearner` with the A3C loss instead of
    V-trace."""

    def loss(self, b: dict[str, torch.Tensor], logits: torch.Tensor,
             values: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.loss_cfg
        returns = n_step_returns(b["rewards"], values.detach(), b["terminated"],
                                 b["truncated"], b["valid"], cfg.gamma)
        return a2c_loss(logits, values[:-1], b["actions"], returns, b["valid"],
                        cfg.baseline_coef, cfg.entropy_coef)
