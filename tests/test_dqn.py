"""Tests for learners/dqn.py: n-step double-DQN targets (van Hasselt et al. 2016), the dueling
head (Wang et al. 2016, eq. 9), and the Ape-X learner step (Horgan et al. 2018, Algorithm 2)."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from archzoo.learners.dqn import (
    DQNConfig,
    DQNLearner,
    QNetwork,
    double_dqn_targets,
    dqn_gradient,
    replay_lag_stats,
)

CPU = torch.device("cpu")


def test_double_dqn_targets_hand_example() -> None:
    q_online_next = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.2, 0.1], [0.0, 1.0, 0.0]])
    q_target_next = torch.tensor([[4.0, 1.0, 2.0], [1.0, 5.0, 0.0], [7.0, 7.0, 7.0]])
    ret = torch.tensor([1.0, 2.0, 3.0])
    discount = torch.tensor([0.9, 0.81, 0.0])
    # online argmax: [1, 0, 1] → target values [1, 1, 7]
    y = double_dqn_targets(q_online_next, q_target_next, ret, discount)
    assert y.tolist() == pytest.approx([1.0 + 0.9 * 1.0, 2.0 + 0.81 * 1.0, 3.0])
    # plain DQN (max over the target network) would give something else
    plain = ret + discount * q_target_next.max(-1).values
    assert plain.tolist() == pytest.approx([1.0 + 0.9 * 4.0, 2.0 + 0.81 * 5.0, 3.0])
    assert not torch.allclose(y[:2], plain[:2])


def test_dueling_head_identity() -> None:
    torch.manual_seed(0)
    net = QNetwork((3, 2), 5, hidden=16, dueling=True)
    obs = torch.randn(7, 3, 2)
    q = net(obs)
    v, a = net.streams(obs)
    assert q.shape == (7, 5) and v.shape == (7,)
    torch.testing.assert_close((q - v[:, None]).mean(-1), torch.zeros(7), atol=1e-6, rtol=0)
    torch.testing.assert_close(q - v[:, None], a - a.mean(-1, keepdim=True))
    assert torch.equal(q.argmax(-1), a.argmax(-1))
    assert QNetwork((4,), 2)(torch.randn(3, 4)).shape == (3, 2)


def random_batch(rng: np.random.Generator, B: int = 6, obs_dim: int = 3, A: int = 3) -> dict:
    return dict(
        obs=rng.normal(size=(B, obs_dim)).astype(np.float32),
        action=rng.integers(0, A, size=B),
        ret=rng.normal(size=B).astype(np.float32) * 2,
        next_obs=rng.normal(size=(B, obs_dim)).astype(np.float32),
        discount=np.array([0.9 ** 3, 0.0, 0.9, 0.9 ** 3, 0.9 ** 3, 0.0][:B], np.float32),
    )


def hand_td(online: torch.nn.Module, target: torch.nn.Module, b: dict) -> torch.Tensor:
    """δ = y − Q(s, a), item by item (y without gradient)."""
    deltas = []
    for i in range(len(b["action"])):
        q = online(torch.from_numpy(b["obs"][i]))
        with torch.no_grad():
            a_star = int(torch.argmax(online(torch.from_numpy(b["next_obs"][i]))))
            y = float(b["ret"][i]) + float(b["discount"][i]) * float(
                target(torch.from_numpy(b["next_obs"][i]))[a_star])
        deltas.append(y - q[int(b["action"][i])])
    return torch.stack(deltas)


def hand_huber(d: torch.Tensor, k: float) -> torch.Tensor:
    return torch.where(d.abs() <= k, 0.5 * d * d, k * (d.abs() - 0.5 * k))


@pytest.mark.parametrize("dueling", [False, True])
def test_loss_gradient_and_priorities_match_hand_computation(dueling: bool) -> None:
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    model = QNetwork((3,), 3, hidden=8, dueling=dueling)
    cfg = DQNConfig(lr=0.1, optimizer="sgd", max_grad_norm=1e9, huber_delta=0.5,
                    target_update_period=1000)
    learner = DQNLearner(model, cfg, CPU)
    with torch.no_grad():  # make the target network differ from the online one
        for p in learner.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    b = random_batch(rng)
    w = rng.uniform(0.2, 1.0, size=6).astype(np.float32)

    ref = copy.deepcopy(learner.model)
    delta = hand_td(ref, learner.target, b)
    loss = (torch.from_numpy(w) * hand_huber(delta, 0.5)).mean()
    assert (delta.abs() > 0.5).any() and (delta.abs() < 0.5).any()  # both Huber branches
    loss.backward()
    before = [p.detach().clone() for p in learner.model.parameters()]

    np.testing.assert_allclose(learner.td_abs(b), delta.abs().detach().numpy(), rtol=1e-5)
    # Gorila's learner: the same gradient, not applied, and the same statistics (one
    # function, archzoo.learners.dqn.update_stats, makes both)
    _, td_g, stats_g = dqn_gradient(copy.deepcopy(learner.model), learner.target, b, w,
                                    huber_delta=0.5, max_grad_norm=1e9)
    td, stats = learner.update(b, w)
    assert set(stats) == {*stats_g, "lr"} and stats["lr"] == 0.1
    for k, v in stats_g.items():
        assert stats[k] == pytest.approx(v, rel=1e-5), k
    np.testing.assert_allclose(td_g, td, rtol=1e-6)
    d = delta.abs().detach().numpy()
    assert stats["td_abs_mean"] == pytest.approx(float(d.mean()), rel=1e-5)
    assert stats["td_abs_max"] == pytest.approx(float(d.max()), rel=1e-5)
    assert stats["is_weight_mean"] == pytest.approx(float(w.mean()), rel=1e-6)
    assert td.dtype == np.float32 and td.shape == (6,)
    np.testing.assert_allclose(td, delta.abs().detach().numpy(), rtol=1e-5, atol=1e-6)
    assert stats["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    with torch.no_grad():
        q_sa = ref(torch.from_numpy(b["obs"])).gather(1, torch.from_numpy(b["action"])[:, None])
    assert stats["mean_q"] == pytest.approx(float(q_sa.mean()), rel=1e-5)
    gnorm = torch.sqrt(sum((p.grad ** 2).sum() for p in ref.parameters()))
    assert stats["grad_norm"] == pytest.approx(float(gnorm), rel=1e-5)
    for p0, p1, g in zip(before, learner.model.parameters(), (p.grad for p in ref.parameters()),
                         strict=True):
        torch.testing.assert_close(p1.detach(), p0 - 0.1 * g, rtol=1e-5, atol=1e-6)
    assert learner.version == 1


def test_unweighted_loss_and_grad_clipping() -> None:
    torch.manual_seed(2)
    b = random_batch(np.random.default_rng(2))
    learner = DQNLearner(QNetwork((3,), 3, hidden=8), DQNConfig(lr=1.0, optimizer="sgd",
                                                                max_grad_norm=1e-3), CPU)
    ref = copy.deepcopy(learner.model)
    loss = hand_huber(hand_td(ref, ref, b), 1.0).mean()
    before = torch.cat([p.detach().flatten().clone() for p in learner.model.parameters()])
    _, stats = learner.update(b)
    assert stats["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    after = torch.cat([p.detach().flatten() for p in learner.model.parameters()])
    assert stats["grad_norm"] > 1e-3
    assert float((after - before).norm()) == pytest.approx(1e-3, rel=1e-3)  # clipped step


def test_target_refresh_every_k_updates() -> None:
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    K = 3
    learner = DQNLearner(QNetwork((3,), 3, hidden=8), DQNConfig(lr=1e-2, target_update_period=K),
                         CPU)

    def flat(m: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().flatten().clone() for p in m.parameters()])

    expected_target = flat(learner.model)
    assert torch.equal(flat(learner.target), expected_target)
    for u in range(1, 3 * K + 2):
        learner.update(random_batch(rng))
        online = flat(learner.model)
        if u % K == 0:
            expected_target = online
            assert torch.equal(flat(learner.target), online)
        else:
            assert not torch.equal(flat(learner.target), online)
        assert torch.equal(flat(learner.target), expected_target)
    assert learner.version == 3 * K + 1
    assert all(not p.requires_grad for p in learner.target.parameters())


# A 2-state, 2-action deterministic MDP: NEXT[s][a], REWARD[s][a].
NEXT = [[1, 0], [0, 1]]
REWARD = [[1.0, 0.0], [0.0, 2.0]]


def nstep_fixed_point(n: int, gamma: float) -> np.ndarray:
    """Fixed point of the n-step Q operator with uniform-random intermediate actions:
    Q(s,a) = E_{a_1..a_{n-1}}[Σ_{i<n} γ^i r_i + γ^n max_a' Q(s_n, a')]."""
    q = np.zeros((2, 2))
    for _ in range(2000):
        new = np.zeros((2, 2))
        for s, a in itertools.product(range(2), range(2)):
            for cont in itertools.product(range(2), repeat=n - 1):
                ret, st, act = 0.0, s, a
                for i, nxt_a in enumerate((*cont, None)):
                    ret += gamma ** i * REWARD[st][act]
                    st = NEXT[st][act]
                    act = nxt_a
                new[s, a] += (ret + gamma ** n * q[st].max()) / 2 ** (n - 1)
        q = new
    return q


def test_learns_two_state_mdp_with_nstep_targets() -> None:
    n, gamma = 2, 0.8
    rows = []  # every (s, a, continuation) once: the batch's mean target is the expectation
    for s, a in itertools.product(range(2), range(2)):
        for cont in itertools.product(range(2), repeat=n - 1):
            ret, st, act = 0.0, s, a
            for i, nxt_a in enumerate((*cont, None)):
                ret += gamma ** i * REWARD[st][act]
                st = NEXT[st][act]
                act = nxt_a
            rows.append((s, a, ret, st))
    eye = np.eye(2, dtype=np.float32)
    batch = dict(obs=eye[[r[0] for r in rows]], action=np.array([r[1] for r in rows]),
                 ret=np.array([r[2] for r in rows], np.float32), next_obs=eye[[r[3] for r in rows]],
                 discount=np.full(len(rows), gamma ** n, np.float32))
    torch.manual_seed(5)
    learner = DQNLearner(QNetwork((2,), 2, hidden=32, dueling=True),
                         DQNConfig(lr=2e-2, target_update_period=10, huber_delta=100.0), CPU)
    for _ in range(200):
        learner.update(batch)
    with torch.no_grad():
        q = learner.model(torch.from_numpy(eye)).numpy()
    want = nstep_fixed_point(n, gamma)  # ≈ [[5.89, 4.49], [4.49, 6.89]]
    np.testing.assert_allclose(q, want, atol=0.01 * np.abs(want).max())


def test_replay_lag_is_the_learner_version_minus_each_items_acting_version() -> None:
    """learners/dqn.py replay_lag_stats against a loop: mean and max of version − acted over
    the items whose version is known (−1, from a replay checkpoint older than the field,
    is left out)."""
    rng = np.random.default_rng(4)
    acted = rng.integers(-1, 50, size=200)
    acted[:3] = -1
    lags = [60 - int(v) for v in acted if v >= 0]
    got = replay_lag_stats(60, {"version": acted, "obs": np.zeros((200, 2))})
    assert got == {"replay_lag_mean": pytest.approx(sum(lags) / len(lags)),
                   "replay_lag_max": float(max(lags))}
    assert replay_lag_stats(5, {"version": np.full(4, -1)}) == {}
    assert replay_lag_stats(5, {"obs": np.zeros((4, 2))}) == {}  # no version field
