"""Tests for learners/a2c.py and actors/segment.py against plain references.

The references follow A3C's Algorithm S3 (Mnih et al. 2016; see learners/a2c.py)
literally: each env's column of a segment is split into A3C pieces ("until a terminal
state or t_max"), each piece starts its backward recursion from R = 0 (terminated),
V(final observation) (truncated) or V(s_T) (segment end), and then walks i = end .. start
with R ← r_i + γR. Autoreset steps (valid False) belong to no piece.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archzoo.actors.segment import Segment, SegmentActor
from archzoo.envs import env_spec
from archzoo.learners.a2c import A2CConfig, a2c_gradient, a2c_loss, n_step_returns
from archzoo.nets import ActorCritic, get_flat, num_params
from archzoo.seeding import env_seeds


# ---------------------------------------------------------------------------------------------
# A toy env: episodes of 1..4 steps, truncated at 3 by TimeLimit (so some end truncated, some
# terminated, some both); the reward depends on the step and the action.
# ---------------------------------------------------------------------------------------------
class Steps(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.k = self.length = 0

    def _obs(self, a: float) -> np.ndarray:
        return np.array([self.k, self.length, a, self.np_random.random()], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        self.length = int(self.np_random.integers(1, 5))
        return self._obs(-1.0), {}

    def step(self, action):
        self.k += 1
        reward = float(self.k + 0.25 * int(action))
        return self._obs(float(action)), reward, self.k >= self.length, False, {}


STEPS = "ArchzooTestA2CSteps-v0"
if STEPS not in gym.registry:
    gym.register(id=STEPS, entry_point=Steps, max_episode_steps=3)


# ---------------------------------------------------------------------------------------------
# References: A3C's Algorithm S3 (Mnih et al. 2016), one env and one step at a time
# ---------------------------------------------------------------------------------------------
def a3c_pieces(term, trunc, valid):
    """One env's column -> [(start, end, kind)], kind in terminated/truncated/end/cut.

    A piece is a maximal run of valid steps; it ends at an episode end, at the segment's
    last step ("end": bootstrap V(s_T)), or before a masked step that no episode end
    precedes ("cut": malformed input, bootstrap 0).
    """
    T = len(valid)
    pieces, start = [], None
    for i in range(T):
        if not valid[i]:
            continue
        if start is None:
            start = i
        if term[i]:
            kind = "terminated"
        elif trunc[i]:
            kind = "truncated"
        elif i == T - 1:
            kind = "end"
        elif not valid[i + 1]:
            kind = "cut"
        else:
            continue
        pieces.append((start, i, kind))
        start = None
    return pieces


def reference_returns(rewards, values, term, trunc, valid, gamma):
    """R_i per env, walking each A3C piece backwards; 0 on masked steps."""
    T, E = rewards.shape
    out = np.zeros((T, E))
    for e in range(E):
        for start, end, kind in a3c_pieces(term[:, e], trunc[:, e], valid[:, e]):
            R = {"terminated": 0.0, "cut": 0.0,
                 "truncated": float(values[end + 1, e]), "end": float(values[T, e])}[kind]
            for i in range(end, start - 1, -1):
                R = float(rewards[i, e]) + gamma * R
                out[i, e] = R
    return out


def reference_gradient(model, seg: Segment, cfg: A2CConfig) -> np.ndarray:
    """The A3C accumulators dθ, dθ_v (and the entropy bonus), with autograd per step.

    Scaling to match a2c_loss: with N valid steps and Σ over them,
      loss = −(1/N) Σ log π·(R−V) + value_coef (1/N) Σ 0.5 (R−V)² − entropy_coef (1/N) Σ H,
    so ∇loss = (−dθ + value_coef · 0.5 · dθ_v − entropy_coef · dθ_H) / N, where dθ is the
    algorithm's ascent accumulator Σ ∇log π(a_i|s_i)(R − V(s_i)), dθ_v = Σ ∂(R − V)²/∂θ′_v
    and dθ_H = Σ ∇H(π(·|s_i)). The shared torso means θ and θ_v overlap: both accumulators
    are over all parameters (zero where a term doesn't reach).
    """
    params = list(model.parameters())
    d_theta = [torch.zeros_like(p) for p in params]
    d_theta_v = [torch.zeros_like(p) for p in params]
    d_theta_h = [torch.zeros_like(p) for p in params]
    obs = torch.as_tensor(seg.obs, dtype=torch.float64)
    T, E = seg.actions.shape

    def V(o) -> float:
        with torch.no_grad():
            return float(model(o[None])[1][0])

    def acc(total, y):
        for s, g in zip(total, torch.autograd.grad(y, params, retain_graph=True,
                                                        allow_unused=True), strict=True):
            if g is not None:
                s += g

    for e in range(E):
        for start, end, kind in a3c_pieces(seg.terminated[:, e], seg.truncated[:, e],
                                           seg.valid[:, e]):
            if kind in ("terminated", "cut"):
                R = 0.0
            elif kind == "truncated":
                R = V(obs[end + 1, e])
            else:
                R = V(obs[T, e])
            for i in range(end, start - 1, -1):
                R = float(seg.rewards[i, e]) + cfg.gamma * R
                logits, v = model(obs[i, e][None])
                log_probs = F.log_softmax(logits[0], -1)
                adv = R - v[0].item()  # (R − V) held constant
                acc(d_theta, log_probs[int(seg.actions[i, e])] * adv)
                acc(d_theta_v, (R - v[0]) ** 2)
                acc(d_theta_h, -(log_probs.exp() * log_probs).sum())
    n = max(1, int(seg.valid.sum()))
    flat = [(-a + cfg.value_coef * 0.5 * b - cfg.entropy_coef * c) / n
            for a, b, c in zip(d_theta, d_theta_v, d_theta_h, strict=True)]
    return torch.cat([f.reshape(-1) for f in flat]).numpy()


def random_flags(rng, T, E, well_formed=True):
    """Random episode flags; well-formed: each episode end is followed by a masked step."""
    term = rng.random((T, E)) < 0.2
    trunc = rng.random((T, E)) < 0.15
    valid = rng.random((T, E)) < 0.85
    if well_formed:
        valid[0] = rng.random(E) < 0.7
        for t in range(T):
            if t:
                valid[t] = ~(term[t - 1] | trunc[t - 1])
            term[t] &= valid[t]
            trunc[t] &= valid[t]
    return term, trunc, valid


def random_segment(rng, T, E, obs_dim, num_actions) -> Segment:
    term, trunc, valid = random_flags(rng, T, E)
    # Episode ends inside the segment and at its last step, of every kind.
    term[:, 0] = trunc[:, 0] = False
    valid[:, 0] = True
    term[2, 0], valid[3, 0], term[T - 1, 0] = True, False, True
    term[:, 1] = trunc[:, 1] = False
    valid[:, 1] = True
    trunc[1, 1], valid[2, 1] = True, False  # truncation inside; bootstrap at the end
    term[:, 2] = trunc[:, 2] = False
    valid[:, 2] = True
    valid[0, 2], trunc[T - 1, 2] = False, True  # previous segment ended; truncated at the end
    rewards = np.where(valid, rng.normal(size=(T, E)), 0.0).astype(np.float32)
    return Segment(
        obs=rng.normal(size=(T + 1, E, obs_dim)).astype(np.float32),
        actions=rng.integers(0, num_actions, size=(T, E)),
        rewards=rewards, terminated=term, truncated=trunc, valid=valid,
        ep_returns=np.zeros(0, np.float32), ep_lengths=np.zeros(0, np.int32),
    )


def tiny_model(obs_dim=4, num_actions=3, seed=0) -> ActorCritic:
    torch.manual_seed(seed)
    model = ActorCritic((obs_dim,), num_actions, hidden=5).double()
    with torch.no_grad():  # a policy far from uniform, so every term has a visible gradient
        model.policy.weight.normal_(0.0, 1.0)
    return model


# ---------------------------------------------------------------------------------------------
# n_step_returns
# ---------------------------------------------------------------------------------------------
def test_n_step_returns_literal_example():
    # gamma = 0.5, rewards 1, 2, 3, 4, V(obs_0..obs_4) = 10, 20, 30, 40, 50.
    # env 0: no episode end        R = 6.375, 10.75, 17.5, 29   (R_4 = V(obs_4) = 50)
    # env 1: terminated at step 1  R = 1 + 0.5 * 2 = 2, 2, masked 0, 29
    # env 2: truncated at step 1   R_1 = 2 + 0.5 * V(obs_2) = 17, R_0 = 9.5, masked 0, 29
    # env 3: terminated at step 3  R = 3.25, 4.5, 5, 4 (R_3 = r_3: no bootstrap)
    # env 4: masked at step 3      R_3 = 0; step 2 truncated: R = 7.75, 13.5, 3 + 0.5 * 40 = 23
    rewards = torch.tensor([[1.0, 1, 1, 1, 1], [2, 2, 2, 2, 2], [3, 0, 0, 3, 3], [4, 4, 4, 4, 0]])
    values = torch.tensor([10.0, 20, 30, 40, 50])[:, None].repeat(1, 5)
    term = torch.zeros(4, 5, dtype=torch.bool)
    trunc = torch.zeros_like(term)
    valid = torch.ones_like(term)
    term[1, 1], valid[2, 1] = True, False
    trunc[1, 2], valid[2, 2] = True, False
    term[3, 3] = True
    trunc[2, 4], valid[3, 4] = True, False
    R = n_step_returns(rewards, values, term, trunc, valid, gamma=0.5)
    expected = torch.tensor([
        [6.375, 2.0, 9.5, 3.25, 7.75],
        [10.75, 2.0, 17.0, 4.5, 13.5],
        [17.5, 0.0, 0.0, 5.0, 23.0],
        [29.0, 29.0, 29.0, 4.0, 0.0],
    ])
    torch.testing.assert_close(R, expected)


@pytest.mark.parametrize("well_formed", [True, False])
def test_n_step_returns_matches_algorithm_loop(well_formed):
    rng = np.random.default_rng(7)
    for trial in range(40):
        T, E = int(rng.integers(1, 9)), int(rng.integers(1, 6))
        term, trunc, valid = random_flags(rng, T, E, well_formed)
        if trial % 4 == 0:  # episode ends of each kind at the segment's last step
            term[T - 1, 0] = valid[T - 1, 0] = True
            if E > 1:
                trunc[T - 1, 1], term[T - 1, 1], valid[T - 1, 1] = True, False, True
            if E > 2:
                valid[T - 1, 2] = False
        rewards = np.where(valid, rng.normal(size=(T, E)), 0.0)
        values = rng.normal(size=(T + 1, E))
        got = n_step_returns(torch.tensor(rewards), torch.tensor(values), torch.tensor(term),
                             torch.tensor(trunc), torch.tensor(valid), gamma=0.9)
        want = reference_returns(rewards, values, term, trunc, valid, 0.9)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"trial {trial}")


def test_n_step_returns_no_gradient():
    values = torch.randn(4, 2, requires_grad=True)
    flags = torch.zeros(3, 2, dtype=torch.bool)
    R = n_step_returns(torch.ones(3, 2), values, flags, flags, ~flags, 0.99)
    assert not R.requires_grad


# ---------------------------------------------------------------------------------------------
# a2c_loss / a2c_gradient
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_matches_a3c_accumulation(seed):
    rng = np.random.default_rng(seed)
    model = tiny_model(seed=seed)
    seg = random_segment(rng, T=6, E=4, obs_dim=4, num_actions=3)
    cfg = A2CConfig(gamma=0.9, value_coef=0.7, entropy_coef=0.05, max_grad_norm=None)
    before = np.zeros(num_params(model), np.float32)
    get_flat(model, before)
    flat, stats = a2c_gradient(model, seg, cfg)
    want = reference_gradient(model, seg, cfg)
    assert flat.dtype == np.float32 and flat.shape == (num_params(model),)
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(flat, want, rtol=1e-6, atol=1e-6)
    # Nothing applied: parameters unchanged, no .grad left behind.
    after = np.zeros_like(before)
    get_flat(model, after)
    np.testing.assert_array_equal(before, after)
    assert all(p.grad is None for p in model.parameters())
    assert stats["valid_steps"] == seg.valid.sum()


def test_gradient_on_actor_segment_matches_reference():
    spec = env_spec(STEPS)
    model = tiny_model(obs_dim=4, num_actions=3, seed=3)
    actor = SegmentActor(spec, num_envs=3, t_max=7, model=model, seed=11)
    cfg = A2CConfig(max_grad_norm=None)
    for _ in range(3):
        seg = actor.collect()
        np.testing.assert_allclose(a2c_gradient(model, seg, cfg)[0],
                                   reference_gradient(model, seg, cfg), rtol=1e-6, atol=1e-6)
    actor.close()


def test_gradient_zero_on_all_masked_segment():
    rng = np.random.default_rng(5)
    model = tiny_model()
    seg = random_segment(rng, T=5, E=3, obs_dim=4, num_actions=3)
    seg.valid[:] = False
    seg.rewards[:] = rng.normal(size=seg.rewards.shape)  # garbage that must not leak
    flat, stats = a2c_gradient(model, seg, A2CConfig())
    assert np.all(flat == 0) and np.isfinite(flat).all()
    assert stats["loss"] == 0.0 and stats["grad_norm"] == 0.0


def test_gradient_clipping():
    rng = np.random.default_rng(2)
    model = tiny_model()
    seg = random_segment(rng, T=6, E=3, obs_dim=4, num_actions=3)
    full, stats = a2c_gradient(model, seg, A2CConfig(max_grad_norm=None))
    assert stats["grad_norm"] > 1e-2
    clipped, stats2 = a2c_gradient(model, seg, A2CConfig(max_grad_norm=1e-2))
    np.testing.assert_allclose(np.linalg.norm(clipped), 1e-2, rtol=1e-5)
    np.testing.assert_allclose(clipped, full * (1e-2 / np.linalg.norm(full)), rtol=1e-4,
                               atol=1e-9)
    assert stats2["grad_norm"] == pytest.approx(stats["grad_norm"])


def test_a2c_loss_terms():
    """The loss's value: pg, value and entropy means over the valid steps only."""
    logits = torch.tensor([[[0.0, 0.0]], [[1.0, -1.0]], [[3.0, 0.0]]])
    values = torch.tensor([[1.0], [2.0], [5.0]])
    actions = torch.tensor([[0], [1], [0]])
    returns = torch.tensor([[3.0], [1.0], [0.0]])
    valid = torch.tensor([[True], [True], [False]])
    loss, stats = a2c_loss(logits, values, actions, returns, valid, value_coef=0.5,
                           entropy_coef=0.1)
    lp0, lp1 = np.log(0.5), -np.log1p(np.exp(2.0))  # log π(a_0|s_0), log π(a_1|s_1)
    p = 1 / (1 + np.exp(-2.0))
    h1 = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    pg = -(lp0 * 2.0 + lp1 * -1.0) / 2
    vl = (0.5 * 4.0 + 0.5 * 1.0) / 2
    ent = (np.log(2) + h1) / 2
    assert stats["pg_loss"] == pytest.approx(pg, rel=1e-6)
    assert stats["value_loss"] == pytest.approx(vl, rel=1e-6)
    assert stats["baseline_loss"] == stats["value_loss"]  # metrics.csv's learner/baseline_loss
    assert stats["entropy"] == pytest.approx(ent, rel=1e-6)
    assert float(loss) == pytest.approx(pg + 0.5 * vl - 0.1 * ent, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# SegmentActor
# ---------------------------------------------------------------------------------------------
def test_segment_actor_masks_autoreset_and_reports_returns():
    spec = env_spec(STEPS)
    seed, E, T = 3, 3, 5
    actor = SegmentActor(spec, E, T, tiny_model(seed=1).float(), seed)
    segs = [actor.collect() for _ in range(6)]
    actor.close()
    for k, s in enumerate(segs):
        assert s.obs.shape == (T + 1, E, 4) and s.obs.dtype == np.float32
        assert s.actions.shape == s.valid.shape == s.rewards.shape == (T, E)
        assert (s.rewards[~s.valid] == 0).all()
        assert not (s.terminated | s.truncated)[~s.valid].any()
        if k:
            np.testing.assert_array_equal(s.obs[0], segs[k - 1].obs[T])
    # valid is False exactly on the step after an episode end (across segment boundaries).
    done = np.concatenate([s.terminated | s.truncated for s in segs])
    valid = np.concatenate([s.valid for s in segs])
    assert valid[0].all()
    np.testing.assert_array_equal(valid[1:], ~done[:-1])
    assert done.sum() >= 10 and np.concatenate([s.truncated for s in segs]).any()

    # Naive replay on single envs, seeded as the actor seeds them (archzoo/seeding.py).
    obs = np.concatenate([s.obs[:T] for s in segs] + [segs[-1].obs[T:]])
    actions = np.concatenate([s.actions for s in segs])
    finished = []  # (step, env, return, length)
    for e in range(E):
        env = gym.make(STEPS)
        o, _ = env.reset(seed=env_seeds(seed, E)[e])
        np.testing.assert_array_equal(obs[0, e], o)
        ret, length, after_end = 0.0, 0, False
        for t in range(actions.shape[0]):
            if after_end:  # the autoreset step: the vector env reset here
                o, _ = env.reset()
                after_end = False
            else:
                o, r, term, trunc, _ = env.step(int(actions[t, e]))
                ret, length = ret + r, length + 1
                if term or trunc:
                    finished.append((t, e, ret, length))
                    ret, length, after_end = 0.0, 0, True
            np.testing.assert_array_equal(obs[t + 1, e], o, err_msg=f"step {t} env {e}")
        env.close()
    finished.sort()
    np.testing.assert_allclose(np.concatenate([s.ep_returns for s in segs]),
                               [f[2] for f in finished], rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([s.ep_lengths for s in segs]),
                                  [f[3] for f in finished])
    assert [len(s.ep_returns) for s in segs] == [
        sum(k * T <= f[0] < (k + 1) * T for f in finished) for k in range(len(segs))]
