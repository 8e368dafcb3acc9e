"""n-step advantage actor-critic (A3C/A2C): returns, loss, and the gradient a client pushes.

References: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning",
Algorithm S3 of the supplementary material (A3C, per actor-learner) and §4 (entropy
regularisation). In the notation of Algorithm S3:

  * act with θ′ *until* a terminal state or t − t_start = t_max;
  * R = 0 if s_t is terminal, else V(s_t; θ′_v); for i = t−1 .. t_start: R ← r_i + γR,
    dθ  ← dθ  + ∇_θ′ log π(a_i|s_i; θ′) · (R − V(s_i; θ′_v))   with (R − V) held constant,
    dθ_v ← dθ_v + ∂(R − V(s_i; θ′_v))² / ∂θ′_v;
  * plus Mnih et al.'s entropy bonus β ∇_θ′ H(π(·|s_i; θ′));
  * the gradient is pushed after every t_max segment (T_max bounds the whole run), and clients
    push gradients of the *loss* (descent direction is −gradient), see :func:`a2c_gradient`.

Segments (actors/segment.py) are [T, E] time-major, with gymnasium 1.x next-step autoreset
(actors/base.py): a step that ends an episode is followed by an autoreset step with
``valid = False``; on truncation the bootstrap is V(final observation) = V(obs[i+1]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from archzoo.actors.unroll import core_inputs
from archzoo.nets import RecurrentActorCritic

__all__ = ["A2CConfig", "a2c_gradient", "a2c_loss", "n_step_returns"]


@dataclass(frozen=True)
class A2CConfig:
    """A3C/A2C hyper-parameters; defaults are CartPole-friendly.

    gamma 0.99 and t_max 5 as in Mnih et al. 2016; value_coef 0.5, entropy_coef 0.01 and
    max_grad_norm 0.5 as in OpenAI baselines' A2C, which learns CartPole-v1 with them.
    ``max_grad_norm`` clips the pushed gradient on the client (None: no clipping).
    """

    gamma: float = 0.99
    t_max: int = 5
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float | None = 0.5


def _check_shape(name: str, x: Tensor, shape: tuple[int, ...]) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape}")


def n_step_returns(rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Tensor,
                   valid: Tensor, gamma: float) -> Tensor:
    """R_i of Algorithm S3 (Mnih et al. 2016), computed backwards over a segment; [T, E].

    Args:
        rewards, terminated, truncated, valid: [T, E] step i's reward and flags.
        values: [T+1, E] V(obs[0]) .. V(obs[T]); V(obs[T]) bootstraps the segment's end and
            V(obs[i+1]) a truncation at step i.
        gamma: discount.

    Walking i = T−1 .. 0 with carry R = V(obs[T]):
      * invalid step (autoreset, not a transition): R_i = 0 and the recursion is cut (carry
        0; in a well-formed segment the step before is an episode end, which ignores it);
      * terminated: R_i = r_i (no bootstrap; also when truncated too);
      * truncated: R_i = r_i + γ V(obs[i+1]) (V of the final observation);
      * otherwise R_i = r_i + γ R_{i+1}.
    So a segment whose last step is terminal bootstraps nothing. No gradient flows through R.
    """
    T, E = rewards.shape
    for name, x in (("terminated", terminated), ("truncated", truncated), ("valid", valid)):
        _check_shape(name, x, (T, E))
    _check_shape("values", values, (T + 1, E))
    with torch.no_grad():
        rewards = rewards.detach()
        values = values.detach().to(rewards.dtype)
        valid, term, trunc = valid.bool(), terminated.bool(), truncated.bool()
        out = torch.zeros_like(rewards)
        R = values[T]
        for i in reversed(range(T)):
            nxt = torch.where(term[i], 0.0, torch.where(trunc[i], values[i + 1], R))
            R = torch.where(valid[i], rewards[i] + gamma * nxt, 0.0)
            out[i] = R
    return out


def _mean_valid(x: Tensor, valid: Tensor) -> Tensor:
    """Sum of ``x`` over valid steps / max(1, number of valid steps); 0 if none are valid."""
    return torch.where(valid, x, 0.0).sum() / valid.sum().clamp(min=1)


def a2c_loss(logits: Tensor, values: Tensor, actions: Tensor, returns: Tensor, valid: Tensor,
             value_coef: float = 0.5, entropy_coef: float = 0.01
             ) -> tuple[Tensor, dict[str, float]]:
    """A3C/A2C loss (Mnih et al. 2016, Algorithm S3 plus the entropy bonus of §4).

    loss = pg_loss + value_coef * value_loss − entropy_coef * entropy, with N valid steps,
      pg_loss    = −(1/N) Σ_valid log π(a_i|s_i) · (R_i − V(s_i)),  (R_i − V(s_i)) detached
      value_loss =  (1/N) Σ_valid 0.5 (R_i − V(s_i))²
      entropy    =  (1/N) Σ_valid H(π(·|s_i))
    Invalid steps contribute nothing (an all-invalid segment gives loss 0 and zero gradient).

    Args:
        logits: [T, E, A] policy logits at s_0 .. s_{T-1} (with grad).
        values: [T, E] V(s_0) .. V(s_{T-1}) (with grad).
        actions: [T, E] int64.
        returns: [T, E] R_i from :func:`n_step_returns` (treated as constants).
        valid: [T, E] bool.
    """
    T, E = actions.shape
    _check_shape("values", values, (T, E))
    _check_shape("returns", returns, (T, E))
    _check_shape("valid", valid, (T, E))
    if logits.shape[:2] != (T, E):
        raise ValueError(f"logits has shape {tuple(logits.shape)}, expected {(T, E, -1)}")
    valid = valid.bool()
    log_probs = F.log_softmax(logits, dim=-1)
    logp = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    diff = returns.detach().to(values.dtype) - values  # R_i − V(s_i)
    adv = diff.detach()
    pg_loss = -_mean_valid(logp * adv, valid)
    value_loss = _mean_valid(0.5 * diff**2, valid)
    entropy = _mean_valid(-(log_probs.exp() * log_probs).sum(-1), valid)
    loss = pg_loss + value_coef * value_loss - entropy_coef * entropy
    stats = {
        "loss": loss.item(),
        "pg_loss": pg_loss.item(),
        "value_loss": value_loss.item(),
        "baseline_loss": value_loss.item(),  # the value term, under V-trace's name (runlog)
        "entropy": entropy.item(),
        "mean_advantage": _mean_valid(adv, valid).item(),
        "valid_steps": float(valid.sum().item()),
    }
    return loss, stats


def a2c_gradient(model: nn.Module, segment, cfg: A2CConfig) -> tuple[np.ndarray, dict[str, float]]:
    """The flat gradient of :func:`a2c_loss` on ``segment`` w.r.t. ``model``'s parameters.

    ``model`` holds θ′ (the parameters the segment was collected with); nothing is applied to
    it. The vector follows ``model.parameters()`` order, as archzoo.nets.get_flat/set_flat,
    and is float32 [P]; the parameter server *descends* along it (θ ← θ − lr · g). If
    ``cfg.max_grad_norm`` is set the vector is clipped to that L2 norm; ``stats["grad_norm"]``
    is the norm before clipping.

    ``segment``: an archzoo.actors.segment.Segment (or anything with its fields).
    """
    params = list(model.parameters())
    dtype = params[0].dtype
    obs = torch.as_tensor(np.asarray(segment.obs))  # in its own dtype: the torso converts
    T1, E = obs.shape[:2]

    def t(x) -> Tensor:
        return torch.as_tensor(np.asarray(x))

    valid = t(segment.valid).bool()
    if isinstance(model, RecurrentActorCritic):  # the core from the segment's initial state
        b = {**{k: t(v) for k, v in segment.core.items()}, "valid": valid,
             "actions": t(segment.actions), "rewards": t(segment.rewards)}
        x = core_inputs(b)
        logits, values, _ = model.unroll(obs, (b["core_h0"], b["core_c0"]), x["first"],
                                         x["prev_action"], x["prev_reward"])
        logits = logits[:-1]
    else:
        logits, values = model(obs.reshape(T1 * E, *obs.shape[2:]))
        logits = logits.reshape(T1, E, -1)[:-1]
        values = values.reshape(T1, E)
    returns = n_step_returns(t(segment.rewards).to(dtype), values.detach(),
                             t(segment.terminated), t(segment.truncated), valid, cfg.gamma)
    loss, stats = a2c_loss(logits, values[:-1], t(segment.actions), returns, valid,
                           cfg.value_coef, cfg.entropy_coef)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for p, g in zip(params, grads, strict=True)]).double()
    norm = float(flat.norm())
    if cfg.max_grad_norm is not None and norm > cfg.max_grad_norm:
        flat = flat * (cfg.max_grad_norm / norm)
    stats["grad_norm"] = norm
    return flat.numpy().astype(np.float32), stats
