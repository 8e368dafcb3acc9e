"""Tests for learners/vtrace.py against a step-by-step reference of IMPALA eq. 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from archzoo.learners.vtrace import ImpalaLossConfig, impala_loss, vtrace_targets

INF = float("inf")
CLIPS = [(1.0, 1.0), (0.5, 0.9), (2.0, 1.5), (INF, INF)]


# ---------------------------------------------------------------------------------------------
# Reference: the explicit sum form of eq. 1, one (s, b) element at a time, in python floats.
# ---------------------------------------------------------------------------------------------
def reference_vtrace(
    target_logp: np.ndarray,
    behaviour_logp: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    rho_bar: float,
    c_bar: float,
) -> tuple[np.ndarray, np.ndarray]:
    """v_s = V(x_s) + sum_{t=s}^{n} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t, and A_s."""
    T, B = rewards.shape
    vs = np.zeros((T, B))
    adv = np.zeros((T, B))
    for b in range(B):

        def rho(t: int, b: int = b) -> float:
            return min(rho_bar, math.exp(target_logp[t, b] - behaviour_logp[t, b]))

        def c(t: int, b: int = b) -> float:
            return min(c_bar, math.exp(target_logp[t, b] - behaviour_logp[t, b]))

        def bootstrap(t: int, nxt: float, b: int = b) -> float:
            # Termination: no bootstrap. Truncation or no end: bootstrap from nxt.
            return 0.0 if terminated[t, b] else gamma * nxt

        for s in range(T):
            v = float(values[s, b])
            c_prod = 1.0
            for t in range(s, T):
                if not valid[t, b]:
                    break  # masked step: no delta, and the trace does not cross it
                delta = rho(t) * (rewards[t, b] + bootstrap(t, values[t + 1, b]) - values[t, b])
                v += gamma ** (t - s) * c_prod * delta
                if terminated[t, b] or truncated[t, b]:
                    break  # episode ends: the trace stops here
                c_prod *= c(t)
            vs[s, b] = v
        for s in range(T):
            if not valid[s, b]:
                continue
            v_next = vs[s + 1, b] if s + 1 < T else values[T, b]
            adv[s, b] = rho(s) * (rewards[s, b] + bootstrap(s, v_next) - values[s, b])
    return vs, adv


def random_unroll(T: int, B: int, A: int, seed: int) -> dict[str, torch.Tensor]:
    """Random unroll with episode ends (next step masked), an invalid first step in column 0
    and an episode end at the last step in column B-1."""
    rng = np.random.default_rng(seed)
    terminated = np.zeros((T, B), dtype=bool)
    truncated = np.zeros((T, B), dtype=bool)
    valid = np.ones((T, B), dtype=bool)
    valid[0, 0] = False  # previous unroll ended an episode at its last step
    for b in range(B):
        for t in range(T):
            if not valid[t, b]:
                continue
            u = rng.random()
            if u < 0.15 or (b == B - 1 and t == T - 1):
                if rng.random() < 0.5:
                    terminated[t, b] = True
                else:
                    truncated[t, b] = True
                if t + 1 < T:
                    valid[t + 1, b] = False
    logits = rng.normal(size=(T, B, A))
    behaviour_logits = logits + 0.7 * rng.normal(size=(T, B, A))
    actions = rng.integers(0, A, size=(T, B))
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T + 1, B))

    def f32(x: np.ndarray) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.float32)

    return dict(
        logits=f32(logits),
        behaviour_logits=f32(behaviour_logits),
        actions=torch.tensor(actions, dtype=torch.int64),
        rewards=f32(rewards),
        values=f32(values),
        terminated=torch.tensor(terminated),
        truncated=torch.tensor(truncated),
        valid=torch.tensor(valid),
    )


def action_logp(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def run_both(
    d: dict[str, torch.Tensor], gamma: float, rho_bar: float, c_bar: float
) -> tuple[object, np.ndarray, np.ndarray]:
    tlp = action_logp(d["logits"], d["actions"])
    blp = action_logp(d["behaviour_logits"], d["actions"])
    out = vtrace_targets(
        target_logp=tlp,
        behaviour_logp=blp,
        rewards=d["rewards"],
        values=d["values"],
        terminated=d["terminated"],
        truncated=d["truncated"],
        valid=d["valid"],
        gamma=gamma,
        rho_bar=rho_bar,
        c_bar=c_bar,
    )
    ref_vs, ref_adv = reference_vtrace(
        tlp.double().numpy(),
        blp.double().numpy(),
        d["rewards"].double().numpy(),
        d["values"].double().numpy(),
        d["terminated"].numpy(),
        d["truncated"].numpy(),
        d["valid"].numpy(),
        gamma,
        rho_bar,
        c_bar,
    )
    return out, ref_vs, ref_adv


# ---------------------------------------------------------------------------------------------
# vtrace_targets vs the reference loop
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("T", [1, 5, 17])
@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("rho_bar,c_bar", CLIPS)
def test_matches_reference_loop(seed: int, T: int, B: int, rho_bar: float, c_bar: float) -> None:
    d = random_unroll(T, B, A=4, seed=1000 * seed + 10 * T + B)
    # Masked steps carry garbage rewards: they must be ignored.
    d["rewards"] = torch.where(d["valid"], d["rewards"], torch.full_like(d["rewards"], 1e3))
    out, ref_vs, ref_adv = run_both(d, gamma=0.9, rho_bar=rho_bar, c_bar=c_bar)

    for x in (out.vs, out.pg_advantages, out.rhos, out.log_ratios):
        assert x.shape == (T, B) and x.dtype == torch.float32
    torch.testing.assert_close(
        out.vs, torch.tensor(ref_vs, dtype=torch.float32), rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(
        out.pg_advantages, torch.tensor(ref_adv, dtype=torch.float32), rtol=1e-4, atol=1e-4
    )
    # Masked steps: v_s = V(x_s), A_s = 0.
    inv = ~d["valid"]
    assert torch.equal(out.vs[inv], d["values"][:-1][inv])
    assert torch.all(out.pg_advantages[inv] == 0)
    # rhos / log_ratios definitions.
    tlp = action_logp(d["logits"], d["actions"])
    blp = action_logp(d["behaviour_logits"], d["actions"])
    torch.testing.assert_close(out.log_ratios, tlp - blp)
    torch.testing.assert_close(out.rhos, torch.clamp(torch.exp(tlp - blp), max=rho_bar))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("rho_bar,c_bar", CLIPS)
def test_episode_end_cuts_trace_even_if_next_step_valid(
    seed: int, rho_bar: float, c_bar: float
) -> None:
    # Defensive: the trace must stop at a terminated/truncated step by itself (e_s = 0),
    # not only because the following autoreset step is masked.
    d = random_unroll(9, 4, A=3, seed=seed + 50)
    d["valid"] = torch.ones_like(d["valid"])
    out, ref_vs, ref_adv = run_both(d, gamma=0.9, rho_bar=rho_bar, c_bar=c_bar)
    torch.testing.assert_close(
        out.vs, torch.tensor(ref_vs, dtype=torch.float32), rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(
        out.pg_advantages, torch.tensor(ref_adv, dtype=torch.float32), rtol=1e-4, atol=1e-4
    )


def test_no_gradient_through_targets() -> None:
    d = random_unroll(5, 3, A=3, seed=7)
    tlp = action_logp(d["logits"].requires_grad_(), d["actions"])
    values = d["values"].requires_grad_()
    out = vtrace_targets(
        target_logp=tlp,
        behaviour_logp=action_logp(d["behaviour_logits"], d["actions"]),
        rewards=d["rewards"],
        values=values,
        terminated=d["terminated"],
        truncated=d["truncated"],
        valid=d["valid"],
        gamma=0.99,
    )
    for x in (out.vs, out.pg_advantages, out.rhos, out.log_ratios):
        assert not x.requires_grad


# ---------------------------------------------------------------------------------------------
# On-policy: V-trace reduces to n-step returns
# ---------------------------------------------------------------------------------------------
def on_policy_inputs(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    gamma: float,
    bar: float,
) -> object:
    logp = torch.log(torch.rand(rewards.shape) * 0.9 + 0.05)
    return vtrace_targets(
        target_logp=logp,
        behaviour_logp=logp.clone(),
        rewards=rewards,
        values=values,
        terminated=terminated,
        truncated=truncated,
        valid=valid,
        gamma=gamma,
        rho_bar=bar,
        c_bar=bar,
    )


@pytest.mark.parametrize("bar", [1.0, 1.5, INF])
def test_on_policy_is_n_step_return(bar: float) -> None:
    torch.manual_seed(0)
    T, B, gamma = 6, 4, 0.95
    rewards = torch.randn(T, B)
    values = torch.randn(T + 1, B)
    false = torch.zeros(T, B, dtype=torch.bool)
    out = on_policy_inputs(rewards, values, false, false, ~false, gamma, bar)
    for b in range(B):
        for s in range(T):
            ret = sum(gamma ** (t - s) * rewards[t, b].item() for t in range(s, T))
            ret += gamma ** (T - s) * values[T, b].item()
            assert out.vs[s, b].item() == pytest.approx(ret, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("bar", [1.0, 2.0])
@pytest.mark.parametrize("kind", ["terminated", "truncated"])
def test_on_policy_with_episode_end(bar: float, kind: str) -> None:
    torch.manual_seed(1)
    T, B, gamma, k = 8, 2, 0.9, 3  # episode ends at step k; step k+1 is the autoreset step
    rewards = torch.randn(T, B)
    values = torch.randn(T + 1, B)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    (terminated if kind == "terminated" else truncated)[k] = True
    valid = torch.ones(T, B, dtype=torch.bool)
    valid[k + 1] = False
    out = on_policy_inputs(rewards, values, terminated, truncated, valid, gamma, bar)
    for b in range(B):
        for s in range(T):
            if s <= k:  # old episode: discounted return up to its end
                ret = sum(gamma ** (t - s) * rewards[t, b].item() for t in range(s, k + 1))
                if kind == "truncated":  # bootstrap from the final observation x_{k+1}
                    ret += gamma ** (k + 1 - s) * values[k + 1, b].item()
            elif s == k + 1:  # autoreset step: not a transition
                ret = values[s, b].item()
            else:  # new episode: n-step return to the unroll's end
                ret = sum(gamma ** (t - s) * rewards[t, b].item() for t in range(s, T))
                ret += gamma ** (T - s) * values[T, b].item()
            assert out.vs[s, b].item() == pytest.approx(ret, rel=1e-5, abs=1e-5), (s, b)


# ---------------------------------------------------------------------------------------------
# Hand-computed example, T=3, B=1, gamma=0.9, rho_bar=c_bar=1.
# ratios pi/mu = 2, 0.5, 1  ->  rho = c = 1, 0.5, 1; r = 1, 2, 3; V = 0.5, 1, 1.5, 2.
# No end:   delta = 1.4, 1.175, 3.3;  v_2 = 4.8, v_1 = 1 + 1.175 + 0.9*0.5*3.3 = 3.66,
#           v_0 = 0.5 + 1.4 + 0.9*2.66 = 4.294;  A = 1 + 0.9*3.66 - 0.5, 0.5*(2 + 0.9*4.8 - 1),
#           3.3 = 3.794, 2.66, 3.3.
# Terminated at step 1 (step 2 masked): delta_1 = 0.5*(2 - 1) = 0.5, v_1 = 1.5, v_2 = V_2 = 1.5,
#           v_0 = 0.5 + 1.4 + 0.9*0.5 = 2.35;  A = 1 + 0.9*1.5 - 0.5, 0.5, 0 = 1.85, 0.5, 0.
# Truncated at step 1 (step 2 masked): delta_1 = 1.175, v_1 = 2.175, v_2 = 1.5,
#           v_0 = 0.5 + 1.4 + 0.9*1.175 = 2.9575;  A = 1 + 0.9*2.175 - 0.5, 0.5*(2 + 0.9*1.5 - 1),
#           0 = 2.4575, 1.175, 0.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "end,expected_vs,expected_adv",
    [
        (None, [4.294, 3.66, 4.8], [3.794, 2.66, 3.3]),
        ("terminated", [2.35, 1.5, 1.5], [1.85, 0.5, 0.0]),
        ("truncated", [2.9575, 2.175, 1.5], [2.4575, 1.175, 0.0]),
    ],
)
def test_hand_computed(
    end: str | None, expected_vs: list[float], expected_adv: list[float]
) -> None:
    behaviour_logp = torch.log(torch.tensor([[0.25], [0.25], [0.25]]))
    target_logp = torch.log(torch.tensor([[0.5], [0.125], [0.25]]))
    terminated = torch.zeros(3, 1, dtype=torch.bool)
    truncated = torch.zeros(3, 1, dtype=torch.bool)
    valid = torch.ones(3, 1, dtype=torch.bool)
    if end is not None:
        (terminated if end == "terminated" else truncated)[1] = True
        valid[2] = False
    out = vtrace_targets(
        target_logp=target_logp,
        behaviour_logp=behaviour_logp,
        rewards=torch.tensor([[1.0], [2.0], [3.0]]),
        values=torch.tensor([[0.5], [1.0], [1.5], [2.0]]),
        terminated=terminated,
        truncated=truncated,
        valid=valid,
        gamma=0.9,
    )
    torch.testing.assert_close(out.vs[:, 0], torch.tensor(expected_vs))
    torch.testing.assert_close(out.pg_advantages[:, 0], torch.tensor(expected_adv))
    torch.testing.assert_close(out.rhos[:, 0], torch.tensor([1.0, 0.5, 1.0]))


# ---------------------------------------------------------------------------------------------
# impala_loss
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 1.5)])
def test_impala_loss_gradients_and_stats(seed: int, rho_bar: float, c_bar: float) -> None:
    T, B, A = 7, 3, 4
    d = random_unroll(T, B, A, seed=seed + 100)
    cfg = ImpalaLossConfig(
        gamma=0.9, rho_bar=rho_bar, c_bar=c_bar, baseline_coef=0.5, entropy_coef=0.01
    )
    logits = d["logits"].clone().requires_grad_()
    values = d["values"].clone().requires_grad_()
    loss, stats = impala_loss(
        logits=logits,
        values=values,
        actions=d["actions"],
        behaviour_logits=d["behaviour_logits"],
        rewards=d["rewards"],
        terminated=d["terminated"],
        truncated=d["truncated"],
        valid=d["valid"],
        cfg=cfg,
    )
    loss.backward()

    # Independent computation in float64 numpy, with targets from the reference loop.
    _, ref_vs, ref_adv = run_both(d, cfg.gamma, rho_bar, c_bar)
    valid = d["valid"].numpy()
    n = max(1, int(valid.sum()))
    lg = d["logits"].double().numpy()
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    p = np.exp(logp)
    onehot = np.eye(A)[d["actions"].numpy()]
    ent = -(p * logp).sum(-1)  # [T, B]
    V = d["values"].double().numpy()
    logp_a = (logp * onehot).sum(-1)

    exp_pg = -(logp_a * ref_adv)[valid].sum() / n
    exp_bl = (0.5 * (ref_vs - V[:-1]) ** 2)[valid].sum() / n
    exp_ent = ent[valid].sum() / n
    exp_loss = exp_pg + cfg.baseline_coef * exp_bl - cfg.entropy_coef * exp_ent
    assert stats["pg_loss"] == pytest.approx(exp_pg, rel=1e-4, abs=1e-5)
    assert stats["baseline_loss"] == pytest.approx(exp_bl, rel=1e-4, abs=1e-5)
    assert stats["entropy"] == pytest.approx(exp_ent, rel=1e-4, abs=1e-5)
    assert stats["loss"] == pytest.approx(exp_loss, rel=1e-4, abs=1e-5)
    assert loss.item() == pytest.approx(exp_loss, rel=1e-4, abs=1e-5)

    # d loss / d V(x_s) = baseline_coef * (V(x_s) - v_s) / n on valid steps; 0 elsewhere and
    # 0 for the bootstrap V(x_T) (targets carry no gradient).
    exp_gv = np.zeros((T + 1, B))
    exp_gv[:-1] = np.where(valid, cfg.baseline_coef * (V[:-1] - ref_vs) / n, 0.0)
    np.testing.assert_allclose(values.grad.numpy(), exp_gv, rtol=1e-4, atol=1e-6)

    # d loss / d logits = [-A_s (onehot - p) + entropy_coef * p (log p + H)] / n on valid steps.
    exp_gl = -ref_adv[..., None] * (onehot - p) + cfg.entropy_coef * p * (logp + ent[..., None])
    exp_gl = np.where(valid[..., None], exp_gl / n, 0.0)
    np.testing.assert_allclose(logits.grad.numpy(), exp_gl, rtol=1e-4, atol=1e-6)
    assert torch.all(logits.grad[~d["valid"]] == 0)
    assert torch.all(values.grad[:-1][~d["valid"]] == 0)

    # Stats.
    keys = {"loss", "pg_loss", "baseline_loss", "entropy", "mean_rho", "mean_log_ratio_abs",
            "rho_clip_frac"}
    assert set(stats) == keys
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    ratio = np.exp(logp_a - action_logp(d["behaviour_logits"], d["actions"]).double().numpy())
    assert stats["rho_clip_frac"] == pytest.approx((ratio > rho_bar)[valid].sum() / n, rel=1e-4)
    assert stats["mean_rho"] == pytest.approx(np.minimum(rho_bar, ratio)[valid].sum() / n, rel=1e-4)
    assert stats["mean_log_ratio_abs"] == pytest.approx(
        np.abs(np.log(ratio))[valid].sum() / n, rel=1e-4
    )


def test_impala_loss_all_masked_is_zero_and_finite() -> None:
    T, B, A = 3, 2, 3
    d = random_unroll(T, B, A, seed=5)
    logits = d["logits"].clone().requires_grad_()
    values = d["values"].clone().requires_grad_()
    loss, stats = impala_loss(
        logits=logits,
        values=values,
        actions=d["actions"],
        behaviour_logits=d["behaviour_logits"],
        rewards=d["rewards"],
        terminated=torch.zeros(T, B, dtype=torch.bool),
        truncated=torch.zeros(T, B, dtype=torch.bool),
        valid=torch.zeros(T, B, dtype=torch.bool),
        cfg=ImpalaLossConfig(),
    )
    loss.backward()
    assert loss.item() == 0.0
    assert all(math.isfinite(v) for v in stats.values())
    assert torch.all(logits.grad == 0) and torch.all(values.grad == 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_clipped_surrogate_against_a_numpy_reference(seed: int) -> None:
    """--clip-ratio ε (APPO): pg_loss = -mean_valid(min(r a, clip(r, 1-ε, 1+ε) a)) with
    r = π/μ and a the V-trace advantage before its ρ factor; its gradient flows through r
    where the unclipped term is the smaller, and not at all where the clip binds."""
    T, B, A, eps = 9, 4, 3, 0.2
    d = random_unroll(T, B, A, seed=seed + 300)
    cfg = ImpalaLossConfig(gamma=0.9, rho_bar=1.0, c_bar=1.0, baseline_coef=0.5,
                           entropy_coef=0.0, clip_ratio=eps)
    logits = d["logits"].clone().requires_grad_()
    _, stats = impala_loss(logits=logits, values=d["values"], actions=d["actions"],
                           behaviour_logits=d["behaviour_logits"], rewards=d["rewards"],
                           terminated=d["terminated"], truncated=d["truncated"],
                           valid=d["valid"], cfg=cfg)
    pg = -torch.tensor(stats["pg_loss"])  # the surrogate's mean, recomputed below
    _, _, ref_adv = run_both(d, cfg.gamma, cfg.rho_bar, cfg.c_bar)
    valid = d["valid"].numpy()
    n = max(1, int(valid.sum()))
    lg = d["logits"].double().numpy()
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    onehot = np.eye(A)[d["actions"].numpy()]
    logp_a = (logp * onehot).sum(-1)
    r = np.exp(logp_a - action_logp(d["behaviour_logits"], d["actions"]).double().numpy())
    a = ref_adv / np.minimum(cfg.rho_bar, r)  # the advantage without its ρ factor
    unclipped, clipped = r * a, np.clip(r, 1 - eps, 1 + eps) * a
    assert float(pg) == pytest.approx(np.minimum(unclipped, clipped)[valid].sum() / n,
                                      rel=1e-4, abs=1e-6)
    # gradient: d(-r a)/dlogits = -a r (onehot - p) where the unclipped term is the min
    impala_loss(logits=logits, values=d["values"], actions=d["actions"],
                behaviour_logits=d["behaviour_logits"], rewards=d["rewards"],
                terminated=d["terminated"], truncated=d["truncated"], valid=d["valid"],
                cfg=cfg)[0].backward()
    active = valid & (unclipped <= clipped)
    assert active.any() and (valid & ~active).any()  # both cases occur
    p = np.exp(logp)
    want = np.where(active[..., None], -(a * r)[..., None] * (onehot - p) / n, 0.0)
    np.testing.assert_allclose(logits.grad.numpy(), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("clip", [0.0, 0.2])
def test_normalized_advantages_against_a_numpy_reference(clip: float) -> None:
    """--normalize-advantages: the policy term's advantages (ρ_s-weighted A_s without the
    clip, a_s with it) take mean 0 and std 1 over the valid steps before the policy term."""
    T, B, A = 9, 4, 3
    d = random_unroll(T, B, A, seed=500)
    d["rewards"] = d["rewards"] * 40.0  # a scale the normalisation removes
    cfg = ImpalaLossConfig(gamma=0.9, entropy_coef=0.0, clip_ratio=clip,
                           normalize_advantages=True)
    _, stats = impala_loss(logits=d["logits"], values=d["values"], actions=d["actions"],
                           behaviour_logits=d["behaviour_logits"], rewards=d["rewards"],
                           terminated=d["terminated"], truncated=d["truncated"],
                           valid=d["valid"], cfg=cfg)
    _, _, ref_adv = run_both(d, cfg.gamma, cfg.rho_bar, cfg.c_bar)  # ρ_s-weighted A_s
    valid = d["valid"].numpy()
    lg = d["logits"].double().numpy()
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    logp_a = (logp * np.eye(A)[d["actions"].numpy()]).sum(-1)
    r = np.exp(logp_a - action_logp(d["behaviour_logits"], d["actions"]).double().numpy())
    adv = ref_adv / np.minimum(cfg.rho_bar, r) if clip else ref_adv
    z = (adv - adv[valid].mean()) / adv[valid].std()
    assert abs(z[valid].mean()) < 1e-9 and z[valid].std() == pytest.approx(1.0)
    if clip:
        want = np.minimum(r * z, np.clip(r, 1 - clip, 1 + clip) * z)[valid].mean()
    else:
        want = (logp_a * z)[valid].mean()
    assert -stats["pg_loss"] == pytest.approx(want, rel=1e-4, abs=1e-6)
