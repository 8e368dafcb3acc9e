"""V-trace off-policy targets and the IMPALA loss.

Reference: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures", eq. 1 (V-trace target) and §4.2 (actor-critic
update).

Notation:
  * pi is the learner's CURRENT policy (the logits the learner computes now) and mu is the
    behaviour policy that actually acted (the actor's possibly stale copy). pi is not a mean
    of the actors' policies: the ratios are pi(a|x) / mu(a|x) with pi the policy being
    learned.
  * Tensors are time-major: per-step quantities are [T, B]; ``values`` is [T+1, B] and holds
    V(x_0) .. V(x_T), with V(x_T) the bootstrap at the end of the unroll.

Episode boundaries follow gymnasium 1.x "next-step" autoreset. If step s ends an episode
(terminated or truncated; x_{s+1} is the final observation), step s+1 is an autoreset step
that is not a transition and is marked ``valid[s+1] = False``. With

    d_s = gamma * (1 - terminated_s) * valid_s                      (bootstrap discount)
    e_s = gamma * (1 - terminated_s) * (1 - truncated_s) * valid_s  (trace discount)

termination bootstraps nothing, truncation bootstraps from V(x_{s+1}) but stops the trace,
and masked steps contribute nothing:

    delta_s       = valid_s * rho_s * (r_s + d_s * V(x_{s+1}) - V(x_s))
    v_s - V(x_s)  = delta_s + e_s * c_s * (v_{s+1} - V(x_{s+1})),     v_T = V(x_T)
    A_s           = valid_s * rho_s * (r_s + d_s * v_{s+1} - V(x_s))

which is the recursive form of eq. 1,
v_s = V(x_s) + sum_t gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t, cut at episode ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ImpalaLossConfig", "VTraceTargets", "impala_loss", "loss_targets", "normalized",
           "step_loss", "vtrace_targets"]


@dataclass(frozen=True)
class VTraceTargets:
    """Outputs of :func:`vtrace_targets`; all [T, B], float32, without gradient."""

    vs: Tensor  # v_s, the V-trace value targets
    pg_advantages: Tensor  # A_s, already multiplied by valid_s
    rhos: Tensor  # rho_s = min(rho_bar, pi/mu) (meaningful on valid steps only)
    log_ratios: Tensor  # log pi(a_s|x_s) - log mu(a_s|x_s), unclipped
    advantages: Tensor  # r_s + gamma_s v_{s+1} - V(x_s): A_s before its rho_s factor


def vtrace_targets(
    *,
    target_logp: Tensor,
    behaviour_logp: Tensor,
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    valid: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> VTraceTargets:
    """V-trace targets v_s and policy-gradient advantages (IMPALA eq. 1).

    Args:
        target_logp: [T, B] log pi(a_s|x_s) under the learner's current policy pi.
        behaviour_logp: [T, B] log mu(a_s|x_s) under the behaviour policy mu that acted.
        rewards: [T, B] r_s.
        values: [T+1, B] V(x_0) .. V(x_T) from the learner's current value net.
        terminated, truncated, valid: [T, B] bool step flags (see the module docstring).
        gamma: discount factor.
        rho_bar: truncation level of rho_s (controls the fixed point, IMPALA §4.1).
        c_bar: truncation level of the trace coefficients c_s (controls contraction speed).

    All inputs are detached: no gradient flows through the returned targets.
    """
    T, B = rewards.shape
    for name, x in [
        ("target_logp", target_logp),
        ("behaviour_logp", behaviour_logp),
        ("terminated", terminated),
        ("truncated", truncated),
        ("valid", valid),
    ]:
        if x.shape != (T, B):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {(T, B)}")
    if values.shape != (T + 1, B):
        raise ValueError(f"values has shape {tuple(values.shape)}, expected {(T + 1, B)}")

    with torch.no_grad():
        valid = valid.detach().bool()
        validf = valid.float()
        not_term = 1.0 - terminated.detach().float()
        not_trunc = 1.0 - truncated.detach().float()
        rewards = rewards.detach().float()
        values = values.detach().float()
        v_s, v_next = values[:-1], values[1:]  # V(x_s), V(x_{s+1})

        bootstrap_disc = gamma * not_term * validf  # d_s
        trace_disc = bootstrap_disc * not_trunc  # e_s

        log_ratios = target_logp.detach().float() - behaviour_logp.detach().float()
        ratios = torch.exp(log_ratios)
        rhos = torch.clamp(ratios, max=rho_bar)
        cs = torch.clamp(ratios, max=c_bar)

        # torch.where (not a multiply) so that garbage on masked steps cannot leak as inf/nan.
        deltas = torch.where(valid, rhos * (rewards + bootstrap_disc * v_next - v_s), 0.0)

        # Backward recursion: (v_s - V(x_s)) = delta_s + e_s c_s (v_{s+1} - V(x_{s+1})).
        diffs = torch.zeros_like(v_s)
        acc = torch.zeros(B, dtype=v_s.dtype, device=v_s.device)  # v_T - V(x_T) = 0
        for s in reversed(range(T)):
            acc = deltas[s] + torch.where(valid[s], trace_disc[s] * cs[s] * acc, 0.0)
            diffs[s] = acc
        vs = v_s + diffs

        vs_next = torch.cat([vs[1:], values[-1:]], dim=0)  # v_{s+1}, with v_T = V(x_T)
        advantages = torch.where(valid, rewards + bootstrap_disc * vs_next - v_s, 0.0)
        pg_advantages = rhos * advantages

    return VTraceTargets(vs=vs, pg_advantages=pg_advantages, rhos=rhos, log_ratios=log_ratios,
                         advantages=advantages)


@dataclass(frozen=True)
class ImpalaLossConfig:
    """Hyper-parameters of :func:`impala_loss` (IMPALA §4.2)."""

    gamma: float = 0.99
    rho_bar: float = 1.0
    c_bar: float = 1.0
    baseline_coef: float = 0.5
    entropy_coef: float = 0.01
    clip_ratio: float = 0.0  # > 0: PPO's clipped surrogate on the V-trace advantages (APPO)
    normalize_advantages: bool = False  # the policy term's advantages to mean 0, std 1


def _mean_valid(x: Tensor, valid: Tensor) -> Tensor:
    """Sum of ``x`` over valid steps divided by max(1, number of valid steps)."""
    n = valid.sum().clamp(min=1)
    return torch.where(valid, x, 0.0).sum() / n


def normalized(x: Tensor, valid: Tensor, eps: float = 1e-8) -> Tensor:
    """``x`` shifted and scaled to mean 0 and standard deviation 1 over the valid steps (the
    advantage normalisation of PPO's and APPO's implementations); invalid steps keep 0."""
    mean = _mean_valid(x, valid)
    std = _mean_valid((x - mean) ** 2, valid).sqrt()
    return torch.where(valid, (x - mean) / (std + eps), 0.0)


def impala_loss(
    *,
    logits: Tensor,
    values: Tensor,
    actions: Tensor,
    behaviour_logits: Tensor,
    rewards: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    valid: Tensor,
    cfg: ImpalaLossConfig,
) -> tuple[Tensor, dict[str, float]]:
    """IMPALA actor-critic loss with V-trace targets (Espeholt et al. 2018, §4.2).

    loss = pg_loss + baseline_coef * baseline_loss - entropy_coef * entropy, with
      pg_loss       = -mean_valid(log pi(a_s|x_s) * A_s)
      baseline_loss =  mean_valid(0.5 * (v_s - V(x_s))^2)
      entropy       =  mean_valid(H(pi(.|x_s)))
    where v_s, A_s come from :func:`vtrace_targets` and carry no gradient. With
    ``cfg.clip_ratio`` = ε > 0 the policy term is PPO's clipped surrogate instead (APPO):
      pg_loss = -mean_valid(min(r_s a_s, clip(r_s, 1-ε, 1+ε) a_s)),  r_s = pi/mu,
    a_s = r_s + γ v_{s+1} - V(x_s) (A_s without its ρ_s): one update cannot move π far from
    the behaviour policy, whatever the policy lag. ``cfg.normalize_advantages``: the policy
    term's advantages (A_s, or a_s with the clip) are first normalised over the batch's valid
    steps (:func:`normalized`), so their scale no longer depends on the rewards' and the
    entropy bonus keeps the same weight against them on every game.

    Args:
        logits: [T, B, A] logits of the learner's current policy pi (with grad).
        values: [T+1, B] V(x_0) .. V(x_T) (with grad; V(x_T) only enters the targets).
        actions: [T, B] int64 actions taken by the behaviour policy.
        behaviour_logits: [T, B, A] logits of the behaviour policy mu.
        rewards, terminated, truncated, valid: [T, B] (see the module docstring).
        cfg: loss hyper-parameters.

    Returns:
        The scalar loss and a dict of float statistics.
    """
    targets = loss_targets(logits=logits, values=values, actions=actions,
                           behaviour_logits=behaviour_logits, rewards=rewards,
                           terminated=terminated, truncated=truncated, valid=valid, cfg=cfg)
    return step_loss(logits=logits, values=values[:-1], actions=actions,
                     behaviour_logits=behaviour_logits, vs=targets.vs,
                     advantages=targets.advantages, valid=valid, cfg=cfg)


def _action_logp(logits: Tensor, actions: Tensor) -> Tensor:
    """log softmax(logits)[a], without gradient."""
    return F.log_softmax(logits.detach(), dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def loss_targets(*, logits: Tensor, values: Tensor, actions: Tensor, behaviour_logits: Tensor,
                 rewards: Tensor, terminated: Tensor, truncated: Tensor, valid: Tensor,
                 cfg: ImpalaLossConfig) -> VTraceTargets:
    """:func:`vtrace_targets` of a batch, π from ``logits`` [T, B, A], μ from
    ``behaviour_logits`` and V from ``values`` [T+1, B]; no gradient."""
    return vtrace_targets(target_logp=_action_logp(logits, actions),
                          behaviour_logp=_action_logp(behaviour_logits, actions),
                          rewards=rewards, values=values, terminated=terminated,
                          truncated=truncated, valid=valid, gamma=cfg.gamma,
                          rho_bar=cfg.rho_bar, c_bar=cfg.c_bar)


def step_loss(
    *,
    logits: Tensor,
    values: Tensor,
    actions: Tensor,
    behaviour_logits: Tensor,
    vs: Tensor,
    advantages: Tensor,
    valid: Tensor,
    cfg: ImpalaLossConfig,
) -> tuple[Tensor, dict[str, float]]:
    """The loss's three terms at each step, given its V-trace target v_s and advantage
    a_s = r_s + γ v_{s+1} - V(x_s) (no gradient; from :func:`vtrace_targets`). Any shape of
    steps ([T, B] or [N]): the terms are means over the valid steps, with ρ_s = min(ρ̄, π/μ)
    from the current π. :func:`impala_loss` is this on the targets of its batch; sample reuse
    (learners/vtrace_learner.py) calls it on minibatches of steps with targets fixed at the
    start of an epoch, as PPO does with its advantages.

    Args:
        logits: [..., A] logits of π at x_s (with grad).
        values: [...] V(x_s) (with grad).
        actions, valid: [...] the action taken and the step's validity.
        behaviour_logits: [..., A] logits of μ at x_s.
        vs, advantages: [...] v_s and a_s.
        cfg: loss hyper-parameters.
    """
    valid = valid.bool()
    log_probs = F.log_softmax(logits, dim=-1)
    target_logp = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    behaviour_logp = _action_logp(behaviour_logits, actions)
    log_ratios = target_logp.detach() - behaviour_logp
    rhos = torch.clamp(torch.exp(log_ratios), max=cfg.rho_bar)  # ρ_s, no gradient
    advantages = advantages.detach()

    if cfg.clip_ratio > 0:  # APPO: PPO's clip (Schulman et al. 2017) with mu as the old policy
        ratio = torch.exp(target_logp - behaviour_logp)  # pi/mu, with grad through pi
        adv = normalized(advantages, valid) if cfg.normalize_advantages else advantages
        surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - cfg.clip_ratio,
                                                           1.0 + cfg.clip_ratio) * adv)
        pg_loss = -_mean_valid(surrogate, valid)
    else:  # IMPALA: rho_s A_s
        adv = rhos * advantages
        if cfg.normalize_advantages:
            adv = normalized(adv, valid)
        pg_loss = -_mean_valid(target_logp * adv, valid)
    baseline_loss = _mean_valid(0.5 * (vs.detach() - values) ** 2, valid)
    entropy = _mean_valid(-(log_probs.exp() * log_probs).sum(dim=-1), valid)
    loss = pg_loss + cfg.baseline_coef * baseline_loss - cfg.entropy_coef * entropy

    stats = {
        "loss": loss.item(),
        "pg_loss": pg_loss.item(),
        "baseline_loss": baseline_loss.item(),
        "entropy": entropy.item(),
        "mean_rho": _mean_valid(rhos, valid).item(),
        "rho_clip_frac": _mean_valid((log_ratios.exp() > cfg.rho_bar).float(),
                                     valid).item(),
        "mean_log_ratio_abs": _mean_valid(log_ratios.abs(), valid).item(),
    }
    return loss, stats
