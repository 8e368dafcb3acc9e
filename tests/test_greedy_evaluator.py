"""actors/evaluation.py GreedyEvaluator: one greedy episode per env, returns against manual
rollouts with the same seeds.

- On tests/logged_env.py's env (a SyncVectorEnv: sub-env i is reset with the i-th seed
  spawned from s, archzoo/seeding.py) the reference plays each episode alone in a plain
  ``gym.make`` env reset with that seed,
  acting by argmax Q, and sums its rewards until the episode terminates or is truncated.
  Rewards depend on the step and the action, and a finished env goes on (autoreset) while
  the others play: what it earns then must not count.
- On CartPole (its own vectorised env, one random generator for all envs) the reference steps
  an identical vector env with the first spawned seed and greedy actions and reads each env's first
  episode length off the step at which it first ended (reward 1 per step).
- Evaluation k (k = 0, 1, ...) starts from seed s + 7919·k: new start states each time.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from archzoo.actors.evaluation import GreedyEvaluator
from archzoo.actors.transitions import TransitionActor
from archzoo.envs import env_spec, make_vector_env
from archzoo.learners.dqn import QNetwork
from archzoo.seeding import env_seeds
from tests.logged_env import ENV_ID, NUM_ACTIONS


def greedy_of(net: torch.nn.Module):
    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
    return act


def rollout_alone(env_id: str, seed: int, act) -> float:
    env = gym.make(env_id)
    try:
        obs, _ = env.reset(seed=seed)
        ret, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(int(act(obs[None])[0]))
            ret += float(r)
            done = term or trunc
        return ret
    finally:
        env.close()


def first_episode_lengths(env_id: str, n: int, seed: int, act) -> np.ndarray:
    envs = make_vector_env(env_id, n)
    try:
        obs, _ = envs.reset(seed=env_seeds(seed, n)[0])
        length = np.zeros(n, np.int64)
        ended = np.zeros(n, bool)
        t = 0
        while not ended.all():
            obs, _, term, trunc, _ = envs.step(act(obs))
            t += 1
            newly = (term | trunc) & ~ended
            length[newly] = t
            ended |= newly
        return length
    finally:
        envs.close()


def test_returns_equal_single_env_rollouts_with_the_same_seeds() -> None:
    torch.manual_seed(4)
    net = QNetwork((3,), NUM_ACTIONS, hidden=16)
    act = greedy_of(net)
    ev = GreedyEvaluator(ENV_ID, episodes=6, seed=40)
    try:
        for k in range(3):
            got = ev.run(act)
            want = [rollout_alone(ENV_ID, s, act) for s in env_seeds(40 + 7919 * k, 6)]
            assert got.tolist() == pytest.approx(want, rel=1e-12), k
    finally:
        ev.close()
    assert len(set(want)) > 1  # episodes of different lengths and actions


def test_cartpole_returns_equal_first_episode_lengths() -> None:
    torch.manual_seed(2)
    spec = env_spec("CartPole-v1")
    net = QNetwork(spec.obs_shape, spec.num_actions, hidden=16)
    act = greedy_of(net)
    ev = GreedyEvaluator("CartPole-v1", episodes=5, seed=123)
    try:
        first = ev.run(act)
        second = ev.run(act)
    finally:
        ev.close()
    np.testing.assert_array_equal(first, first_episode_lengths("CartPole-v1", 5, 123, act))
    np.testing.assert_array_equal(second,
                                  first_episode_lengths("CartPole-v1", 5, 123 + 7919, act))
    assert not np.array_equal(first, second)


def test_an_apex_actors_greedy_is_argmax_q_in_the_evaluator() -> None:
    """What Ape-X and Gorila evaluate, ``actor.greedy`` in the evaluator, is argmax Q."""
    torch.manual_seed(9)
    net = QNetwork((3,), NUM_ACTIONS, hidden=16)
    actor = TransitionActor(env_spec(ENV_ID), 1, 3, 0.9, net, eps=1.0, seed=0)
    a, b = GreedyEvaluator(ENV_ID, 4, seed=7), GreedyEvaluator(ENV_ID, 4, seed=7)
    try:
        assert a.run(actor.greedy).tolist() == b.run(greedy_of(net)).tolist()
    finally:
        actor.close()
        a.close()
        b.close()


def test_an_episode_that_never_ends_is_cut_at_max_steps():
    """MinAtar's Seaquest sub that stays at the surface lives forever (the env has no time
    limit): the evaluation ends after ``max_steps`` steps, counting what each episode earned
    so far, and polls every 100 steps on the way."""
    steps, polls = [], []

    def stay(obs: np.ndarray) -> np.ndarray:  # 'n', no-op: never dives, never dies
        steps.append(1)
        return np.zeros(len(obs), np.int64)

    ev = GreedyEvaluator("MinAtar/Seaquest-v1", episodes=3, seed=0, max_steps=450)
    try:
        returns = ev.run(stay, on_poll=lambda: polls.append(1))
    finally:
        ev.close()
    assert len(steps) == 450 and len(polls) == 4
    assert returns.tolist() == [0.0, 0.0, 0.0]


def test_an_evaluation_in_slices_returns_what_one_in_one_go_returns():
    """An actor evaluates a slice at a time (``maybe_advance``), never more steps per slice
    than it is given; the returns, once the evaluation ends, are those of ``run`` with the
    same seeds, and nothing comes before."""
    torch.manual_seed(3)
    net = QNetwork((3,), NUM_ACTIONS, hidden=16)
    act = greedy_of(net)
    whole, sliced = GreedyEvaluator(ENV_ID, 4, seed=11), GreedyEvaluator(ENV_ID, 4, seed=11)
    calls = []

    def counted(obs: np.ndarray) -> np.ndarray:
        calls.append(1)
        return act(obs)

    try:
        expected = whole.run(act).tolist()
        got, slices = [], 0
        while not got:
            before = len(calls)
            got = sliced.maybe_advance(counted, interval_s=0.0, steps=3)
            assert len(calls) - before <= 3
            slices += 1
        assert got == expected and slices == -(-len(calls) // 3)
        assert not sliced.under_way
    finally:
        whole.close()
        sliced.close()


def test_a_slice_waits_for_the_interval_and_a_stuck_evaluation_ends_at_max_steps():
    """No evaluation starts before ``interval_s`` has passed since the last ended; on
    Seaquest a no-op policy never ends an episode, so slices of 100 steps end the
    evaluation at ``max_steps`` = 450, in the fifth slice."""
    steps = []

    def stay(obs: np.ndarray) -> np.ndarray:
        steps.append(1)
        return np.zeros(len(obs), np.int64)

    ev = GreedyEvaluator("MinAtar/Seaquest-v1", episodes=2, seed=0, max_steps=450)
    try:
        assert ev.maybe_advance(stay, interval_s=3600.0, steps=100) == [] and not steps
        outs = [ev.maybe_advance(stay, interval_s=0.0, steps=100) for _ in range(5)]
        assert outs[:4] == [[]] * 4 and outs[4] == [0.0, 0.0] and len(steps) == 450
        assert ev.maybe_advance(stay, interval_s=3600.0, steps=100) == [] and len(steps) == 450
    finally:
        ev.close()


def test_each_sliced_evaluation_resets_a_recurrent_policy_once_and_feeds_it_rewards():
    """A recurrent policy (R2D2's, an archzoo.policy.Policy) is reset once per evaluation, not per
    slice, and after every step is given that step's rewards (its core's previous reward);
    evaluation k + 1 starts from new seeds."""
    torch.manual_seed(5)
    greedy = greedy_of(QNetwork((3,), NUM_ACTIONS, hidden=16))

    class Recurrent:
        def __init__(self) -> None:
            self.resets, self.firsts, self.acts, self.rewards = 0, [], 0, []
            self.fresh = False

        def reset(self, num_envs: int) -> None:
            self.resets, self.fresh = self.resets + 1, True

        def observe(self, rewards: np.ndarray) -> None:
            assert rewards.shape == (4,)
            self.rewards.append(np.array(rewards))

        def __call__(self, obs: np.ndarray) -> np.ndarray:
            if self.fresh:
                self.firsts.append(np.array(obs))
                self.fresh = False
            self.acts += 1
            return greedy(obs)

    act = Recurrent()
    ev = GreedyEvaluator(ENV_ID, 4, seed=11)
    try:
        ends = 0
        while ends < 2:
            ends += bool(ev.maybe_advance(act, interval_s=0.0, steps=2))
    finally:
        ev.close()
    assert act.resets == 2 and len(act.rewards) == act.acts > 2
    assert not np.array_equal(act.firsts[0], act.firsts[1])
