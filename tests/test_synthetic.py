"""archzoo/Synthetic-v0: registration, spaces, truncation, reward rule, vector env, step cost."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

from archzoo.synthetic import (
    ENV_ID,
    SyntheticEnv,
    SyntheticVectorEnv,
    optimal_action,
    register_synthetic,
)


def make_vec(num_envs: int = 4, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(ENV_ID, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        **kwargs)


def run_episode(env: gym.Env, policy, seed: int) -> tuple[float, int, bool]:
    obs, _ = env.reset(seed=seed)
    ret, steps = 0.0, 0
    while True:
        obs, r, term, trunc, _ = env.step(policy(obs))
        ret += r
        steps += 1
        if term or trunc:
            return ret, steps, bool(trunc)


def test_registration_idempotent():
    for _ in range(3):
        register_synthetic()
    spec = gym.spec(ENV_ID)
    assert spec.vector_entry_point is not None
    assert sum(1 for k in gym.registry if k == ENV_ID) == 1


def test_spaces_and_obs_bytes():
    env = gym.make(ENV_ID, obs_bytes=256)
    assert env.observation_space == gym.spaces.Box(-1.0, 1.0, (64,), np.float32)
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (64,) and obs.dtype == np.float32
    assert gym.make(ENV_ID).observation_space.shape == (16,)  # default 64 bytes
    assert gym.make(ENV_ID, obs_bytes=2).observation_space.shape == (1,)  # at least one float
    assert gym.make(ENV_ID, num_actions=7).action_space.n == 7


@pytest.mark.parametrize("length", [1, 5, 100])
def test_episode_length_truncates(length):
    env = gym.make(ENV_ID, episode_length=length)
    _, steps, truncated = run_episode(env, lambda o: 0, seed=1)
    assert (steps, truncated) == (length, True)
    assert env.spec.max_episode_steps == length


def test_random_vs_oracle_returns():
    L, A = 100, 4
    env = gym.make(ENV_ID, episode_length=L, num_actions=A)
    rng = np.random.default_rng(0)
    rand = [run_episode(env, lambda o: int(rng.integers(A)), seed=i)[0] for i in range(40)]
    assert abs(np.mean(rand) - L / A) < 4  # std of the mean ~0.7
    oracle = [run_episode(env, lambda o: int(optimal_action(o, A)), seed=i)[0] for i in range(3)]
    assert oracle == [float(L)] * 3
    # env.unwrapped.optimal_action agrees with the module function
    obs, _ = env.reset(seed=3)
    assert env.unwrapped.optimal_action(obs) == optimal_action(obs, A)


def test_hidden_map_depends_on_task_seed_not_reset_seed():
    obs = np.random.default_rng(0).uniform(-1, 1, (2000, 16)).astype(np.float32)
    a0 = optimal_action(obs, 4, task_seed=0)
    assert np.array_equal(a0, SyntheticEnv(task_seed=0).optimal_action(obs))
    assert np.mean(a0 != optimal_action(obs, 4, task_seed=1)) > 0.3
    # not degenerate: every action is optimal for a fair share of contexts
    assert np.bincount(a0, minlength=4).min() > 0.05 * len(a0)
    # linearly learnable from the observation: least squares on one-hot targets
    x = np.c_[obs, np.ones(len(obs))]
    coef, *_ = np.linalg.lstsq(x, np.eye(4)[a0], rcond=None)
    assert np.mean(np.argmax(x @ coef, axis=1) == a0) > 0.8


def test_vector_env_spaces_match_single():
    envs = make_vec(4, obs_bytes=256, num_actions=5)
    assert isinstance(envs.unwrapped, SyntheticVectorEnv)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    single = gym.make(ENV_ID, obs_bytes=256, num_actions=5)
    assert envs.single_observation_space == single.observation_space
    assert envs.single_action_space == single.action_space
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (4, 64) and obs.dtype == np.float32
    assert envs.observation_space.contains(obs)


def test_vector_env_next_step_autoreset_and_reward_rule():
    E, L, A = 4, 3, 4
    envs = make_vec(E, episode_length=L, num_actions=A)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(3):
        for t in range(L):
            best = optimal_action(obs, A)
            actions = np.where(np.arange(E) % 2 == 0, best, (best + 1) % A)  # odd envs wrong
            new_obs, r, term, trunc, _ = envs.step(actions)
            assert np.array_equal(r, (np.arange(E) % 2 == 0).astype(np.float32))
            assert not term.any()
            assert np.array_equal(trunc, np.full(E, t == L - 1))
            assert envs.observation_space.contains(new_obs)
            obs = new_obs
        # autoreset step: action ignored, reward 0, flags False, fresh (reset) observation
        reset_obs, r, term, trunc, _ = envs.step(rng.integers(A, size=E))
        assert np.array_equal(r, np.zeros(E)) and not term.any() and not trunc.any()
        assert not np.any(np.all(reset_obs == obs, axis=1))
        assert not np.any(np.all(reset_obs[:, 8:] == obs[:, 8:], axis=1))  # new padding too
        obs = reset_obs


def test_vector_env_oracle_and_random_returns():
    E, L, A = 8, 20, 4
    envs = make_vec(E, episode_length=L, num_actions=A)
    obs, _ = envs.reset(seed=0)
    total = np.zeros(E)
    for _ in range(L):
        obs, r, _, trunc, _ = envs.step(optimal_action(obs, A))
        total += r
    assert np.array_equal(total, np.full(E, L)) and trunc.all()
    envs.reset(seed=1)
    rng = np.random.default_rng(0)
    rewards = [envs.step(rng.integers(A, size=E))[1] for _ in range(500)]
    assert abs(np.mean(rewards) - 1 / A) < 0.05


def test_vector_env_truncation_cycle():
    """Episodes of L steps separated by one autoreset step: period L + 1."""
    E, L, A = 3, 4, 4
    envs = make_vec(E, episode_length=L, num_actions=A)
    envs.reset(seed=0)
    flags = [envs.step(np.zeros(E, np.int64))[3] for _ in range(2 * (L + 1))]
    # all envs started together: truncated at steps L and 2L+1, autoreset after each
    assert [bool(f[0]) for f in flags] == [t in (L - 1, 2 * L) for t in range(2 * (L + 1))]


def test_step_cost_lower_bound():
    envs = make_vec(4, step_cost_us=200.0)
    envs.reset(seed=0)
    actions = np.zeros(4, np.int64)
    n = 20
    t0 = time.perf_counter()
    for _ in range(n):
        envs.step(actions)
    per_step = (time.perf_counter() - t0) / n
    assert per_step >= 0.78e-3  # 4 envs x 200 us, spun (lower bound only)
    env = gym.make(ENV_ID, step_cost_us=200.0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(n):
        env.step(0)
    assert (time.perf_counter() - t0) / n >= 0.195e-3


def test_invalid_kwargs():
    with pytest.raises(ValueError):
        gym.make(ENV_ID, episode_length=0)
    with pytest.raises(ValueError):
        make_vec(2, step_cost_us=-1.0)


def test_archzoo_envs_accepts_it():
    from archzoo.envs import env_spec, make_vector_env

    spec = env_spec(ENV_ID)
    assert (spec.obs_shape, spec.num_actions) == ((16,), 4)
    envs = make_vector_env(ENV_ID, 2)
    assert isinstance(envs.unwrapped, SyntheticVectorEnv)
