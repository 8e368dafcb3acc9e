"""The R2D2 learner: recurrent n-step double Q-learning on replayed sequences.

R2D2 (Kapturowski et al., ICLR 2019) trains a recurrent Q-network (archzoo/nets.py
``RecurrentQNetwork``) on fixed-length sequences drawn from a prioritized replay, each
stored with the actor's recurrent state at its start (§3, "stored state"):

- **burn-in** (§3): the first ``burn_in`` steps only run the network from the stored state
  to a better one; they carry no gradient and no loss;
- **targets** (§2.3): n-step double Q-learning with the invertible value rescaling
  h(x) = sign(x)(√(|x|+1) − 1) + εx (Pohlen et al. 2018):
  ŷ_t = h( Σ_{k<n} γ^k r_{t+k} + γ^n h⁻¹(Q⁻(s_{t+n}, a*)) ), a* = argmax_a Q(s_{t+n}, a),
  with Q⁻ the target network; a return stops at an episode's end (no bootstrap after a
  termination, the final observation's value after a truncation) and at the sequence's end;
- **priorities** (§2.3): p = η·max_t |δ_t| + (1 − η)·mean_t |δ_t| over the sequence's trained
  steps, η = 0.9;
- the loss is ½δ², averaged over a sequence's trained steps and weighted by the
  importance weights of prioritized replay (Schaul et al. 2016).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from archzoo.actors.unroll import CoreInputs, core_inputs
from archzoo.learners.dqn import DQNConfig, DQNLearner
from archzoo.learners.schedule import Schedule
from archzoo.nets import RecurrentQNetwork

SEQUENCE_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "valid", "first0",
                 "core_h0", "core_c0")
CORE_EXTRA_KEYS = ("prev_action0", "prev_reward0")  # with --core-prev-action-reward


def value_rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """h(x) = sign(x)(√(|x|+1) − 1) + εx (Pohlen et al. 2018; R2D2 §2.3)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """h⁻¹(x) = sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / (2ε))² − 1) (Pohlen et al. 2018,
    Proposition A.2)."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root * root - 1.0)


def n_step_returns(rewards: Tensor, terminated: Tensor, truncated: Tensor,
                   bootstrap: Tensor, gamma: float, n: int) -> Tensor:
    """G_t = Σ_{k<m} γ^k r_{t+k} + γ^m v_{t+m} for every step t of time-major ``[T, B]``
    inputs, ``bootstrap`` v [T + 1, B] the value of each observation x_0..x_T.

    m = n, or less where the return meets the sequence's end (m = T − t) or an episode's
    end at step t+k (m = k + 1: no bootstrap after a termination, v of the final
    observation x_{t+k+1} after a truncation)."""
    T = rewards.shape[0]
    pad = torch.zeros((n,) + tuple(rewards.shape[1:]), dtype=rewards.dtype,
                      device=rewards.device)
    r = torch.cat([rewards, pad])
    term = torch.cat([terminated.bool(), pad.bool()])
    trunc = torch.cat([truncated.bool(), pad.bool()])
    v = torch.cat([bootstrap, pad])
    steps = torch.arange(T, device=rewards.device).view(T, *([1] * (rewards.dim() - 1)))
    ret = torch.zeros_like(rewards)
    alive = torch.ones_like(rewards, dtype=torch.bool)
    discount = 1.0
    for k in range(n):
        ret = ret + alive.to(r.dtype) * discount * r[k:k + T]
        ended = term[k:k + T] | trunc[k:k + T]
        last = (steps + k + 1 == T) | (k == n - 1)  # the next observation is bootstrapped
        boot = alive & ~term[k:k + T] & (trunc[k:k + T] | last)
        ret = ret + boot.to(r.dtype) * (discount * gamma) * v[k + 1:k + 1 + T]
        alive = alive & ~ended & ~last
        discount *= gamma
    return ret


def sequence_priorities(td_abs: Tensor, mask: Tensor, eta: float = 0.9) -> Tensor:
    """p = η·max_t |δ_t| + (1 − η)·mean_t |δ_t| over the steps where ``mask`` [T, B] is true
    (R2D2 §2.3); 0 for a sequence with none."""
    m = mask.to(td_abs.dtype)
    count = m.sum(0)
    mean = (td_abs * m).sum(0) / count.clamp(min=1.0)
    peak = (td_abs * m).amax(0)
    return eta * peak + (1.0 - eta) * mean


@dataclass
class R2D2LossConfig:
    gamma: float = 0.997
    n_step: int = 5
    burn_in: int = 40
    eta: float = 0.9
    rescale_eps: float = 1e-3


def time_major(batch: Mapping[str, np.ndarray | Tensor], device: torch.device
               ) -> dict[str, Tensor]:
    """A batch of sequences ``[B, T(+1), ...]`` as time-major tensors ``[T(+1), B, ...]``
    (the per-sequence fields stay ``[B, ...]``)."""
    out = {}
    for k in (*SEQUENCE_KEYS, *CORE_EXTRA_KEYS):
        if k not in batch:
            continue
        x = torch.as_tensor(np.asarray(batch[k]), device=device)
        out[k] = x.transpose(0, 1) if k in ("obs", "actions", "rewards", "terminated",
                                             "truncated", "valid") else x
    return out


def _q_unroll(model: RecurrentQNetwork, b: dict[str, Tensor], ins: CoreInputs,
              lo: int, hi: int, state: tuple[Tensor, Tensor]
              ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Q over observations x_lo..x_{hi−1} from ``state``."""
    pa, pr = ins["prev_action"], ins["prev_reward"]
    return model.unroll(b["obs"][lo:hi], state, ins["first"][lo:hi],
                        None if pa is None else pa[lo:hi], None if pr is None else pr[lo:hi])


def sequence_td(online: RecurrentQNetwork, target: RecurrentQNetwork, b: dict[str, Tensor],
                cfg: R2D2LossConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(δ_t = ŷ_t − Q(s_t, a_t) [T − burn_in, B] with grad through ``online``, the trained
    steps' mask, Q(s_t, a_t)) for time-major sequences ``b`` (:func:`time_major`).

    Both networks start from the stored state; ``online`` runs the burn-in without grad."""
    T, B = b["actions"].shape
    ins = core_inputs(b)
    state = (b["core_h0"].float(), b["core_c0"].float())
    with torch.no_grad():
        _, state_b = _q_unroll(online, b, ins, 0, cfg.burn_in, state) if cfg.burn_in else \
            (None, state)
        q_target, _ = _q_unroll(target, b, ins, 0, T + 1, state)
    q, _ = _q_unroll(online, b, ins, cfg.burn_in, T + 1, state_b)  # x_burn_in..x_T
    actions = b["actions"][cfg.burn_in:].long()
    q_sa = q[:-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        a_star = q.detach().argmax(-1, keepdim=True)  # argmax_a Q(x_j, a), j >= burn_in
        boot = torch.zeros(T + 1, B, device=q.device)
        boot[cfg.burn_in:] = inverse_value_rescale(
            q_target[cfg.burn_in:].gather(-1, a_star).squeeze(-1), cfg.rescale_eps)
        g = n_step_returns(b["rewards"].float(), b["terminated"], b["truncated"], boot,
                           cfg.gamma, cfg.n_step)[cfg.burn_in:]
        y = value_rescale(g, cfg.rescale_eps)
    return y - q_sa, b["valid"][cfg.burn_in:].bool(), q_sa


def sequence_loss(td: Tensor, mask: Tensor, weights: Tensor | None) -> Tensor:
    """½δ² summed over each sequence's trained steps, weighted by the sequence's importance
    weight, averaged over the batch (as R2D2's learner does). A sum, not a mean, over time:
    with Adam's ε of 1e-3 a per-step mean shrinks the gradients of a long sequence below ε
    and the step with them."""
    m = mask.to(td.dtype)
    per_seq = (0.5 * td.pow(2) * m).sum(0)
    if weights is not None:
        per_seq = per_seq * weights
    return per_seq.mean()


@torch.no_grad()
def initial_sequence_priorities(model: RecurrentQNetwork,
                                batch: Mapping[str, np.ndarray | Tensor],
                                cfg: R2D2LossConfig) -> np.ndarray:
    """The priorities of new sequences under the actor's network, used as both online and
    target network (as Ape-X's actors do; R2D2 §2.3); float32 [B]."""
    device = next(model.parameters()).device
    b = time_major(batch, device)
    if b["actions"].shape[1] == 0:
        return np.zeros(0, np.float32)
    td, mask, _ = sequence_td(model, model, b, cfg)
    return sequence_priorities(td.abs(), mask, cfg.eta).cpu().numpy().astype(np.float32)


class R2D2Learner(DQNLearner):
    """The online and target recurrent Q-networks and the optimiser (Adam with ε 1e-3, as
    R2D2's Table 2); checkpoints, gradient clipping and target refreshes are the DQN
    learner's (learners/dqn.py)."""

    model: RecurrentQNetwork
    target: RecurrentQNetwork

    def __init__(self, model: RecurrentQNetwork, cfg: R2D2LossConfig, lr: float,
                 target_update_period: int, max_grad_norm: float,
                 device: torch.device, *, schedule: Schedule | None = None) -> None:
        super().__init__(model, DQNConfig(lr=lr, target_update_period=target_update_period,
                                          max_grad_norm=max_grad_norm, adam_eps=1e-3), device,
                         schedule=schedule)
        self.loss_cfg = cfg

    def update(self, batch: Mapping[str, np.ndarray | Tensor],
               weights: np.ndarray | Tensor | None = None
               ) -> tuple[np.ndarray, dict[str, float]]:
        """One Adam step on a batch of sequences; returns the sequences' new priorities
        (from δ before the step) and the update's statistics."""
        t0 = time.perf_counter()
        b = time_major(batch, self.device)
        w = None if weights is None else torch.as_tensor(weights, device=self.device).float()
        td, mask, q_sa = sequence_td(self.model, self.target, b, self.loss_cfg)
        loss = sequence_loss(td, mask, w)
        grad_norm = self.step(loss)
        td_abs = td.detach().abs()
        priorities = sequence_priorities(td_abs, mask, self.loss_cfg.eta).cpu().numpy()
        valid = td_abs[mask]
        stats = {"loss": float(loss.detach()), "grad_norm": float(grad_norm),
                 "mean_q": float(q_sa.detach()[mask].mean()) if valid.numel() else 0.0,
                 "td_abs_mean": float(valid.mean()) if valid.numel() else 0.0,
                 "td_abs_max": float(valid.max()) if valid.numel() else 0.0,
                 "lr": self.opt.param_groups[0]["lr"]}
        if w is not None:
            stats["is_weight_mean"] = float(w.mean())
        self.schedule.after_update(self.opt)  # the next update's learning rate
        self.update_s += time.perf_counter() - t0
        return priorities.astype(np.float32), stats
