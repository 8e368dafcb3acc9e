"""learners/ga3c.py A3CUnrollLearner against a hand-computed A3C loss on a tiny recorded unroll.

GA3C's trainer uses A3C's n-step advantage actor-critic loss (Mnih et al. 2016, Algorithm S3
with the entropy bonus of §4), uncorrected for the policy lag (no importance weights). For each
env column of an unroll, walking back from the bootstrap R = V(x_T):

    R_i = r_i                      if step i terminated the episode,
    R_i = r_i + γ V(x_{i+1})       if it was truncated (x_{i+1} is the final observation),
    R_i = r_i + γ R_{i+1}          otherwise,

autoreset steps (valid False) are no transitions, and with N valid steps

    loss = (1/N) Σ_valid [ −log π(a_i|x_i) (R_i − V(x_i)) + c_v ½ (R_i − V(x_i))² − β H(π(·|x_i)) ]

with (R_i − V(x_i)) held constant in the policy term and R_i constant everywhere. Below the
returns of a 3-env, 4-step unroll are written out by hand, term by term.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archzoo.actors.unroll import unroll_schema
from archzoo.envs import EnvSpec
from archzoo.learners.ga3c import A3CUnrollLearner
from archzoo.learners.vtrace import ImpalaLossConfig
from archzoo.nets import ActorCritic

T, E, A, OBS = 4, 3, 3, 5
GAMMA, VALUE_COEF, ENTROPY_COEF = 0.9, 0.7, 0.05

# The recorded unroll. env 0: two steps, the second terminates; step 2 is the autoreset
# step; step 3 starts the next episode (bootstrap V(x_4)). env 1: truncated at step 2
# (bootstrap V(x_3), the final observation); step 3 is the autoreset step. env 2: terminated
# on the last step (nothing to bootstrap).
REWARDS = np.array([[1.0, 1.0, 0.3],
                    [2.0, -1.0, 0.4],
                    [0.0, 3.0, 0.5],
                    [0.5, 0.0, 2.0]], np.float32)
TERMINATED = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]], bool)
TRUNCATED = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
VALID = np.array([[1, 1, 1], [1, 1, 1], [0, 1, 1], [1, 0, 1]], bool)
ACTIONS = np.array([[0, 2, 1], [1, 1, 2], [2, 0, 0], [1, 2, 1]], np.int64)


def hand_returns(V) -> list[list]:
    """R[i][e] by hand for the unroll above (None on the autoreset steps); V[t][e] = V(x_t).
    Works on floats and on (detached) tensors alike."""
    g = GAMMA
    r = REWARDS.tolist()
    R = [[None] * E for _ in range(T)]
    # env 0
    R[3][0] = r[3][0] + g * V[4][0]          # segment end: bootstrap V(x_4)
    R[1][0] = r[1][0]                        # terminated
    R[0][0] = r[0][0] + g * R[1][0]
    # env 1
    R[2][1] = r[2][1] + g * V[3][1]          # truncated: V(final observation x_3)
    R[1][1] = r[1][1] + g * R[2][1]
    R[0][1] = r[0][1] + g * R[1][1]
    # env 2
    R[3][2] = r[3][2]                        # terminated on the last step
    R[2][2] = r[2][2] + g * R[3][2]
    R[1][2] = r[1][2] + g * R[2][2]
    R[0][2] = r[0][2] + g * R[1][2]
    return R


def batch(behaviour_logits: np.ndarray | None = None, obs: np.ndarray | None = None) -> dict:
    rng = np.random.default_rng(5)
    if obs is None:
        obs = rng.standard_normal((T + 1, E, OBS)).astype(np.float32)
    if behaviour_logits is None:
        behaviour_logits = rng.standard_normal((T, E, A)).astype(np.float32)
    return {"obs": torch.as_tensor(obs), "actions": torch.as_tensor(ACTIONS),
            "behaviour_logits": torch.as_tensor(behaviour_logits),
            "rewards": torch.as_tensor(REWARDS), "terminated": torch.as_tensor(TERMINATED),
            "truncated": torch.as_tensor(TRUNCATED), "valid": torch.as_tensor(VALID)}


def learner(model: torch.nn.Module | None = None, max_grad_norm: float = 1e9):
    if model is None:
        torch.manual_seed(0)
        model = ActorCritic((OBS,), A, hidden=8)
    cfg = ImpalaLossConfig(gamma=GAMMA, baseline_coef=VALUE_COEF, entropy_coef=ENTROPY_COEF,
                           rho_bar=0.5, c_bar=0.5)  # V-trace's clips: unused by A3C's loss
    return A3CUnrollLearner(model, cfg, 1e-3, max_grad_norm, torch.device("cpu"), "adam")


def test_loss_and_its_gradient_equal_the_hand_computed_a3c_loss() -> None:
    torch.manual_seed(1)
    logits = torch.randn(T, E, A, requires_grad=True)
    values = torch.randn(T + 1, E, requires_grad=True)
    loss, stats = learner().loss(batch(), logits, values)

    lg, V = logits.detach().double().numpy(), values.detach().double().numpy()
    R = hand_returns(V.tolist())
    steps = [(i, e) for i in range(T) for e in range(E) if VALID[i, e]]
    N = len(steps)
    assert N == 10
    want = 0.0
    d_logits = np.zeros((T, E, A))
    d_values = np.zeros((T + 1, E))
    for i, e in steps:
        z = lg[i, e]
        logp = z - math.log(sum(math.exp(x) for x in z))
        p = np.exp(logp)
        H = -float((p * logp).sum())
        adv = R[i][e] - V[i, e]
        want += -logp[ACTIONS[i, e]] * adv + VALUE_COEF * 0.5 * adv ** 2 - ENTROPY_COEF * H
        # ∂/∂z of −log π(a)·adv is −(1[j=a] − π_j)·adv; of −βH it is βπ_j(log π_j + H)
        onehot = np.eye(A)[ACTIONS[i, e]]
        d_logits[i, e] = (-(onehot - p) * adv + ENTROPY_COEF * p * (logp + H)) / N
        d_values[i, e] = VALUE_COEF * (V[i, e] - R[i][e]) / N  # R is a constant
    want /= N
    assert loss.item() == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert stats["valid_steps"] == N
    loss.backward()
    np.testing.assert_allclose(logits.grad.numpy(), d_logits, rtol=1e-5, atol=1e-7)
    # no gradient through the bootstrap V(x_T), the truncation's V(x_{i+1}) or masked steps
    np.testing.assert_allclose(values.grad.numpy(), d_values, rtol=1e-5, atol=1e-7)


def test_behaviour_logits_do_not_enter_the_loss() -> None:
    """GA3C leaves the policy lag uncorrected: the predictor's logits change nothing."""
    torch.manual_seed(1)
    logits = torch.randn(T, E, A)
    values = torch.randn(T + 1, E)
    a, _ = learner().loss(batch(), logits, values)
    b, _ = learner().loss(batch(behaviour_logits=np.full((T, E, A), 9.0, np.float32)),
                          logits, values)
    assert a.item() == b.item()


def reference_loss(model: torch.nn.Module, b: dict) -> torch.Tensor:
    """The A3C loss of ``model`` on the unroll, step by step with the hand-written returns."""
    T1 = T + 1
    logits, values = model(b["obs"].reshape(T1 * E, OBS))
    logits, values = logits.reshape(T1, E, A), values.reshape(T1, E)
    R = hand_returns(values.detach())
    terms = []
    for i in range(T):
        for e in range(E):
            if not VALID[i, e]:
                continue
            logp = F.log_softmax(logits[i, e], -1)
            adv = R[i][e] - values[i, e]
            H = -(logp.exp() * logp).sum()
            terms.append(-logp[ACTIONS[i, e]] * adv.detach() + VALUE_COEF * 0.5 * adv ** 2
                         - ENTROPY_COEF * H)
    return torch.stack(terms).mean()


def _message(obs: np.ndarray):
    spec = EnvSpec("none", (OBS,), np.dtype(np.float32).str, A)
    msg = unroll_schema(spec, T, E).new()
    msg["obs"][:] = obs
    msg["actions"][:], msg["rewards"][:] = ACTIONS, REWARDS
    msg["terminated"][:], msg["truncated"][:], msg["valid"][:] = TERMINATED, TRUNCATED, VALID
    msg["behaviour_logits"][:] = np.random.default_rng(3).standard_normal((T, E, A))
    return msg


@pytest.mark.parametrize("max_grad_norm", [1e9, 0.05])
def test_update_takes_the_gradient_of_the_a3c_loss_on_the_model(max_grad_norm: float) -> None:
    """update() on an unroll message: the model's gradient is the reference loss's (clipped
    to ``max_grad_norm``), one optimiser step is taken and the version counts it."""
    obs = np.random.default_rng(7).standard_normal((T + 1, E, OBS)).astype(np.float32)
    lrn = learner(max_grad_norm=max_grad_norm)
    ref = copy.deepcopy(lrn.model)
    before = [p.detach().clone() for p in lrn.model.parameters()]

    stats = lrn.update([_message(obs)])

    ref_loss = reference_loss(ref, batch(obs=obs))
    grads = torch.autograd.grad(ref_loss, list(ref.parameters()))
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
    assert stats["loss"] == pytest.approx(ref_loss.item(), rel=1e-5)
    assert stats["grad_norm"] == pytest.approx(norm, rel=1e-5)
    scale = min(1.0, max_grad_norm / norm)
    assert (scale < 1.0) == (max_grad_norm < 1.0)  # the second case really clips
    for p, g in zip(lrn.model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g * scale, rtol=1e-4, atol=1e-7)
    assert lrn.version == 1
    assert all(not torch.equal(p, q) for p, q in zip(lrn.model.parameters(), before,
                                                     strict=True))
