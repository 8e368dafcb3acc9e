"""actors/transitions.py: the Ape-X actor (Horgan et al. 2018, Algorithm 1) on a real
vector env that records every step it takes (tests/logged_env.py).

- ε-greedy: with probability ε an action uniform over all A actions, else argmax Q;
  so P(greedy action) = 1 − ε + ε/A and every other action ε/A (frequencies over thousands of
  recorded env steps, within 5 binomial standard deviations).
- n-step transitions equal a naive whole-episode reference built from the env's own records
  (Sutton & Barto §7.1: R_t = Σ_{i<k} γ^i r_{t+i}, k = min(n, L − t); discount γ^n, 0 on
  termination, γ^k on truncation; next observation x_{t+n} or the final one).
- initial priorities are |δ| = |R + discount · max_a Q(x', a) − Q(x, a)| under the actor's
  own network (Ape-X's actor computes them with its local copy, online = target).
- the exploration ladder ε_i = ε^(1 + α·i/(N−1)), worked out by hand.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from archzoo.actors.transitions import TransitionActor, epsilon
from archzoo.envs import env_spec
from archzoo.learners.dqn import QNetwork
from archzoo.replay.server import insert_schema, memory_fields
from tests import logged_env
from tests.logged_env import ENV_ID, NUM_ACTIONS


def make_actor(model: torch.nn.Module, eps: float, E: int = 4, n: int = 3, gamma: float = 0.9,
               seed: int = 17) -> tuple[TransitionActor, list]:
    """The actor and the E env instances it steps (its vector env's sub-envs, in order)."""
    spec = env_spec(ENV_ID)
    before = len(logged_env.INSTANCES)
    actor = TransitionActor(spec, E, n, gamma, model, eps, seed)
    envs = logged_env.INSTANCES[before:]
    assert len(envs) == E
    return actor, envs


def qnet(seed: int = 3) -> QNetwork:
    torch.manual_seed(seed)
    return QNetwork((3,), NUM_ACTIONS, hidden=16)


def constant_q(greedy: int) -> QNetwork:
    """Q(x, ·) the same for every x, with ``greedy`` the unique argmax."""
    net = qnet()
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.copy_(torch.tensor([0.0, 0.5, 1.0]).roll(greedy - 2))
    return net


def collect(actor: TransitionActor, rounds: int, min_count: int = 50, n: int = 3,
            E: int = 4) -> list[dict]:
    """``rounds`` collect() calls; every transition as a dict, plus the message's priority."""
    msg = insert_schema(memory_fields((3,)), min_count + E * n).new()
    out = []
    for _ in range(rounds):
        count = actor.collect(msg, min_count)
        assert count >= min_count and int(msg["count"]) == count
        for j in range(count):
            out.append({k: np.array(msg[k][j]) for k in ("obs", "action", "ret", "next_obs",
                                                         "discount", "priority")})
    return out


def env_actions(envs: list) -> np.ndarray:
    return np.array([step[1] for env in envs for step in env.log])


# ---------------------------------------------------------------------------------------------
# ε-greedy
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
def test_epsilon_greedy_action_frequencies(eps: float) -> None:
    greedy = 1
    actor, envs = make_actor(constant_q(greedy), eps, E=8)
    try:
        collect(actor, rounds=40, min_count=100, E=8)
    finally:
        actor.close()
    actions = env_actions(envs)
    n = len(actions)
    assert n >= 4000
    counts = Counter(actions.tolist())
    for a in range(NUM_ACTIONS):
        p = (1 - eps + eps / NUM_ACTIONS) if a == greedy else eps / NUM_ACTIONS
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(counts[a] / n - p) <= 5 * sd + 1e-12, (a, counts, p)


def test_greedy_is_argmax_q() -> None:
    net = qnet()
    actor, _ = make_actor(net, 0.5)
    try:
        obs = np.random.default_rng(0).standard_normal((500, 3)).astype(np.float32) * 5
        with torch.no_grad():
            q = net(torch.from_numpy(obs)).numpy()
        assert len(set(q.argmax(1).tolist())) > 1  # the network does prefer different actions
        np.testing.assert_array_equal(actor.greedy(obs), q.argmax(1))
    finally:
        actor.close()


# ---------------------------------------------------------------------------------------------
# n-step transitions and priorities
# ---------------------------------------------------------------------------------------------
def naive_transitions(envs: list, n: int, gamma: float) -> list[tuple]:
    """Every n-step transition the envs' records define (an unfinished episode's only once
    its n rewards are in), as (obs bytes, action, R, next_obs bytes, discount)."""
    out = []
    for env in envs:
        for steps, end in logged_env.episodes(env.log):
            L = len(steps)
            for t in range(L):
                if end is None and t + n > L:
                    break
                k = min(n, L - t)
                ret = sum(gamma ** i * steps[t + i][2] for i in range(k))
                if t + n < L or end is None:
                    disc = gamma ** n
                elif end == "terminated":
                    disc = 0.0
                else:
                    disc = gamma ** k
                out.append((steps[t][0].tobytes(), steps[t][1], np.float32(ret),
                            steps[t + k - 1][5].tobytes(), np.float32(disc)))
    return out


@pytest.mark.parametrize("n,gamma", [(1, 0.9), (3, 0.9), (5, 0.5)])
def test_nstep_transitions_equal_a_naive_reference(n: int, gamma: float) -> None:
    actor, envs = make_actor(qnet(), 0.5, E=3, n=n, gamma=gamma)
    try:
        got = collect(actor, rounds=6, min_count=40, n=n, E=3)
    finally:
        actor.close()
    ends = Counter(end for env in envs for _, end in logged_env.episodes(env.log))
    assert ends["terminated"] > 5 and ends["truncated"] > 5  # both kinds of episode end
    want = naive_transitions(envs, n, gamma)
    have = [(t["obs"].tobytes(), int(t["action"]), np.float32(t["ret"]),
             t["next_obs"].tobytes(), np.float32(t["discount"])) for t in got]
    assert len(have) == len(want)
    key = lambda x: (x[0], x[3])  # noqa: E731 - observations are distinct per step
    for h, w in zip(sorted(have, key=key), sorted(want, key=key), strict=True):
        assert h[:2] == w[:2] and h[3:] == w[3:], (h, w)
        assert h[2] == pytest.approx(w[2], rel=1e-6), (h, w)


def test_initial_priorities_are_td_errors_under_the_local_network() -> None:
    net = qnet(5)
    gamma = 0.9
    actor, _ = make_actor(net, 0.5, E=3, n=3, gamma=gamma)
    try:
        got = collect(actor, rounds=3, min_count=40, E=3)
    finally:
        actor.close()
    with torch.no_grad():
        for t in got:
            q = net(torch.from_numpy(t["obs"][None]))[0]
            q_next = net(torch.from_numpy(t["next_obs"][None]))[0]
            delta = float(t["ret"]) + float(t["discount"]) * q_next.max().item() \
                - q[int(t["action"])].item()
            assert float(t["priority"]) == pytest.approx(abs(delta), rel=1e-5, abs=1e-5)
    assert len({float(t["priority"]) for t in got}) > len(got) // 2


# ---------------------------------------------------------------------------------------------
# the ε ladder
# ---------------------------------------------------------------------------------------------
def test_epsilon_ladder_by_hand() -> None:
    # N = 8, α = 7: α·i/(N−1) = i, so ε_i = 0.4^(1+i)
    assert [epsilon(i, 8) for i in range(8)] == pytest.approx(
        [0.4, 0.16, 0.064, 0.0256, 0.01024, 0.004096, 0.0016384, 0.00065536], rel=1e-12)
    # N = 3, α = 7: ε = 0.4, 0.4^4.5, 0.4^8
    assert [epsilon(i, 3) for i in range(3)] == pytest.approx(
        [0.4, 0.4 ** 4.5, 0.4 ** 8], rel=1e-12)
    assert 0.4 ** 4.5 == pytest.approx(0.016190861620062, rel=1e-12)
    # other base and α: ε_i = 0.5^(1 + 2·i/4)
    assert [epsilon(i, 5, base=0.5, alpha=2.0) for i in range(5)] == pytest.approx(
        [0.5, 0.5 ** 1.5, 0.25, 0.5 ** 2.5, 0.125], rel=1e-12)
    assert epsilon(0, 1) == 0.4 and epsilon(0, 1, base=0.2) == 0.2  # a single actor


def test_every_transition_carries_the_version_that_acted() -> None:
    """The ``version`` field (the learner's replay lag counts from it) is the actor's
    parameters' version while it collected the batch, for every item of every batch."""
    actor, _ = make_actor(qnet(), 0.5, E=3)
    msg = insert_schema(memory_fields((3,)), 40 + 3 * 3).new()
    try:
        for version in (0, 7, 7, 12):
            actor.version = version
            count = actor.collect(msg, 40)
            assert (msg["version"][:count] == version).all(), msg["version"][:count]
    finally:
        actor.close()
