"""The Ape-X DQN learner: n-step double Q-learning with a dueling network and a target copy.

Ape-X (Horgan et al., ICLR 2018, Algorithm 2: the learner): sample a prioritised
batch, compute the n-step double-Q target (van Hasselt et al. 2016)
    y = R + γ^n · Q_target(s', argmax_a Q_online(s', a))     (γ^n → 0 on termination),
minimise the importance-weighted Huber loss of δ = y − Q(s, a), return |δ| as the new
priorities, and periodically copy the online network into the target network.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from archzoo import eager
from archzoo.learners.schedule import Schedule
from archzoo.nets import cpu_optimizer_state, cpu_state_dict, dueling, make_torso

_KEYS = ("obs", "action", "ret", "next_obs", "discount")


class QNetwork(nn.Module):
    """Q-network on a torso (archzoo/nets.py), optionally with the dueling head
    Q = V + A − mean_a A (Wang et al. 2016, eq. 9)."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int = 64,
                 dueling: bool = False, model: str = "mlp", obs_dtype: str = "<f4") -> None:
        super().__init__()
        self.num_actions = num_actions
        self.dueling = dueling
        self.torso = make_torso(model, tuple(obs_shape), obs_dtype, hidden, num_actions)
        out = self.torso.out_dim
        self.head = nn.Linear(out, num_actions)  # Q, or the advantage stream A if dueling
        self.value = nn.Linear(out, 1) if dueling else None

    def streams(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Dueling streams (V [...], A [..., A]) before aggregation; dueling networks only."""
        if self.value is None:
            raise ValueError("streams() needs a dueling QNetwork")
        h = self.torso(obs)
        return self.value(h).squeeze(-1), self.head(h)

    def forward(self, obs: Tensor) -> Tensor:
        """Q(s, ·) for a batch ``[..., *obs_shape]`` → ``[..., num_actions]``."""
        if self.value is not None:
            return dueling(*self.streams(obs))
        return self.head(self.torso(obs))


def double_dqn_targets(q_online_next: Tensor, q_target_next: Tensor, ret: Tensor,
                       discount: Tensor) -> Tensor:
    """y = R + discount · Q_target(s', argmax_a Q_online(s', a)) (n-step double Q-learning,
    van Hasselt et al. 2016; ``discount`` is already γ^n, γ^k on truncation, or 0)."""
    a_star = q_online_next.argmax(-1, keepdim=True)
    return ret + discount * q_target_next.gather(-1, a_star).squeeze(-1)


def _as_tensors(batch: Mapping[str, np.ndarray | Tensor], device: torch.device
                ) -> dict[str, Tensor]:
    out = {}
    for k in _KEYS:
        t = torch.as_tensor(batch[k], device=device)
        if k == "action":
            t = t.long()
        elif k not in ("obs", "next_obs"):  # observations keep their dtype: the torso converts
            t = t.float()
        out[k] = t
    return out


def _q_and_targets(online: nn.Module, target: nn.Module, b: dict[str, Tensor]
                   ) -> tuple[Tensor, Tensor]:
    """Q(s, a) (with grad through ``online``) and the double-Q target y (no grad)."""
    q_sa = online(b["obs"]).gather(-1, b["action"].unsqueeze(-1)).squeeze(-1)
    # s' outside the graph: one forward of s and s' together would backpropagate through
    # both halves (the s' half's gradient is zero), about 15 % more per update on a CPU.
    with torch.no_grad():
        q_online_next = online(b["next_obs"])
        q_target_next = q_online_next if target is online else target(b["next_obs"])
        y = double_dqn_targets(q_online_next, q_target_next, b["ret"], b["discount"])
    return q_sa, y


def _td_loss(online: nn.Module, target: nn.Module, b: dict[str, Tensor],
             weights: np.ndarray | Tensor | None,
             huber_delta: float) -> tuple[Tensor, Tensor, Tensor]:
    """(loss = mean(w · Huber(y − Q(s, a))), Q(s, a), y)."""
    q_sa, y = _q_and_targets(online, target, b)
    per_item = F.huber_loss(q_sa, y, reduction="none", delta=huber_delta)
    if weights is not None:
        per_item = per_item * torch.as_tensor(weights, device=q_sa.device).float()
    return per_item.mean(), q_sa, y


def update_stats(loss: Tensor, q_sa: Tensor, td: np.ndarray, grad_norm: float,
                 weights: np.ndarray | Tensor | None = None) -> dict[str, float]:
    """What one double-DQN update reports (archzoo.runlog.LEARNER_STATS), for Ape-X's learner
    and Gorila's alike: the loss, mean Q(s, a), the gradient norm before clipping, the
    batch's mean and max TD error |δ| (the new priorities) and, given prioritized replay's
    importance-sampling ``weights``, their mean."""
    stats = {"loss": float(loss.detach()), "mean_q": float(q_sa.detach().mean()),
             "grad_norm": float(grad_norm),
             "td_abs_mean": float(td.mean()) if td.size else 0.0,
             "td_abs_max": float(td.max()) if td.size else 0.0}
    if weights is not None:
        w = weights.detach().cpu().numpy() if isinstance(weights, Tensor) else weights
        stats["is_weight_mean"] = float(np.asarray(w, np.float64).mean())
    return stats


def replay_lag_stats(version: int, data: Mapping[str, np.ndarray]) -> dict[str, float]:
    """A sampled batch's replay lag, in parameter versions: ``version`` (the learner's, as it
    trains on the batch) − the version that acted each item (its ``version`` field); the
    batch's mean and max. Items of unknown version (−1: a replay checkpoint written before
    items carried one) are left out; {} when none is known."""
    acted = np.asarray(data.get("version", ()), np.int64).reshape(-1)
    acted = acted[acted >= 0]
    if not acted.size:
        return {}
    lag = int(version) - acted
    return {"replay_lag_mean": float(lag.mean()), "replay_lag_max": float(lag.max())}


def dqn_gradient(online: nn.Module, target: nn.Module, batch: Mapping[str, np.ndarray | Tensor],
                 weights: np.ndarray | Tensor | None = None, huber_delta: float = 1.0,
                 max_grad_norm: float | None = 10.0) -> tuple[np.ndarray, np.ndarray, dict]:
    """The flat gradient of the double-DQN loss (not applied), for a parameter server.

    Gorila (Nair et al. 2015): a learner computes the gradient with its
    online network and a target network that follows the server, and pushes it. Returns
    (float32 gradient in ``parameters()`` order, clipped on the client; |δ| per item;
    :func:`update_stats`).
    """
    params = list(online.parameters())
    device = params[0].device
    loss, q_sa, y = _td_loss(online, target, _as_tensors(batch, device), weights, huber_delta)
    grads = torch.autograd.grad(loss, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    norm = float(flat.norm())
    if max_grad_norm is not None and norm > max_grad_norm:
        flat = flat * (max_grad_norm / norm)
    td = (y - q_sa.detach()).abs().cpu().numpy().astype(np.float32)
    return (flat.cpu().numpy().astype(np.float32), td,
            update_stats(loss, q_sa, td, norm, weights))


@dataclass
class DQNConfig:
    lr: float = 1e-3
    target_update_period: int = 100  # updates between online → target copies
    max_grad_norm: float = 10.0
    huber_delta: float = 1.0
    optimizer: str = "adam"  # "adam", "rmsprop" (Ape-X's centred RMSProp) or "sgd"
    adam_eps: float = 1e-5


class DQNLearner:
    """Owns the online and target Q-networks and the optimiser (Ape-X learner, Algorithm 2).

    ``schedule``: the learning rate of every update (learners/schedule.py; default
    ``cfg.lr``, constant); with ``--lr-decay`` it follows the run's budget, which the
    run's loop gives it (``learner.schedule.follow(monitor)``) once the Monitor exists."""

    def __init__(self, model: nn.Module, cfg: DQNConfig, device: torch.device, *,
                 schedule: Schedule | None = None) -> None:
        self.model = model.to(device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.cfg = cfg
        self.device = device
        params = self.model.parameters()
        if cfg.optimizer == "adam":
            self.opt = eager.optimizer(torch.optim.Adam, params, lr=cfg.lr,
                                       eps=cfg.adam_eps)
        elif cfg.optimizer == "rmsprop":  # Horgan et al. 2018, App. C: centred RMSProp
            self.opt = eager.optimizer(torch.optim.RMSprop, params, lr=cfg.lr, alpha=0.95,
                                       eps=1.5e-7, centered=True)
        elif cfg.optimizer == "sgd":
            self.opt = eager.optimizer(torch.optim.SGD, params, lr=cfg.lr)
        else:
            raise ValueError(f"unknown optimizer {cfg.optimizer!r}")
        self.version = 0  # number of updates applied: the parameters' version
        self.update_s = 0.0
        self.schedule = Schedule(cfg.lr) if schedule is None else schedule

    def state_dict(self) -> dict[str, Any]:
        """Online and target networks, optimiser and version, for a checkpoint."""
        return {"model": cpu_state_dict(self.model), "target": cpu_state_dict(self.target),
                "optimizer": cpu_optimizer_state(self.opt),
                "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state["version"])

    def update(self, batch: Mapping[str, np.ndarray | Tensor],
               weights: np.ndarray | Tensor | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """One step on a batch with keys obs, action, ret, next_obs, discount.

        loss = mean(w · Huber(y − Q(s, a))); clip the gradient norm; every
        ``target_update_period`` updates copy online → target. Returns |δ| per item (float32,
        computed before the step: the new priorities before ε) and stats (loss, mean_q,
        grad_norm — the norm before clipping —, lr, the batch's mean and max |δ| and, given
        ``weights``, their mean).
        """
        t0 = time.perf_counter()
        b = _as_tensors(batch, self.device)
        loss, q_sa, y = _td_loss(self.model, self.target, b, weights, self.cfg.huber_delta)
        grad_norm = self.step(loss)
        td = (y - q_sa.detach()).abs().cpu().numpy().astype(np.float32)
        stats = {**update_stats(loss, q_sa, td, float(grad_norm), weights),
                 "lr": self.opt.param_groups[0]["lr"]}
        self.schedule.after_update(self.opt)  # the next update's learning rate
        self.update_s += time.perf_counter() - t0
        return td, stats

    def step(self, loss: Tensor) -> float:
        """Backpropagate ``loss``, clip the gradient norm, one optimiser step, count the
        version; every ``target_update_period`` versions copy online → target. Returns
        the gradient norm before clipping."""
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        eager.step(self.opt)
        self.version += 1
        if self.version % self.cfg.target_update_period == 0:
            self.target.load_state_dict(self.model.state_dict())
        return float(grad_norm)

    @torch.no_grad()
    def td_abs(self, batch: Mapping[str, np.ndarray | Tensor]) -> np.ndarray:
        """|y − Q(s, a)| per item under the current online and target networks (no update)."""
        q_sa, y = _q_and_targets(self.model, self.target, _as_tensors(batch, self.device))
        return (y - q_sa).abs().cpu().numpy().astype(np.float32)
