"""Tests for actors/unroll.py against naive step-by-step references.

Every unroll the actor emits is replayed on an independently built vector env with the
recorded actions, and checked field by field against a per-env python loop that applies
the rule of actors/base.py: the step after an episode end is gymnasium's autoreset step (reset
observation, reward 0, action ignored), is not a transition, and is marked valid=False; on
truncation the observation returned with truncated=True (obs[t+1]) is the final one.
CartPole observations are also checked against the single-env CartPole dynamics.
"""

from __future__ import annotations

import math
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archzoo.actors.base import vector_seed
from archzoo.actors.unroll import TIMING, UnrollActor, unroll_schema
from archzoo.envs import EnvSpec, env_spec, make_vector_env
from archzoo.nets import ActorCritic
from archzoo.seeding import env_seeds

CARTPOLE = "CartPole-v1"
RESET_BOUND = 0.05  # CartPole's reset draws every state component from U(-0.05, 0.05)


# ---------------------------------------------------------------------------------------------
# A toy env with short, random-length episodes and action-dependent rewards.
# ---------------------------------------------------------------------------------------------
class Countdown(gym.Env):
    """Episodes of 1..max_len steps (drawn at reset); reward 10*k + action + 1 at step k.

    Observation: [steps taken, episode length, last action].
    """

    def __init__(self, max_len: int = 3) -> None:
        self.max_len = max_len
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.k = self.length = 0

    def _obs(self, a: float) -> np.ndarray:
        return np.array([self.k, self.length, a], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        self.length = int(self.np_random.integers(1, self.max_len + 1))
        return self._obs(-1.0), {}

    def step(self, action):
        self.k += 1
        reward = float(10 * self.k + int(action) + 1)
        return self._obs(float(action)), reward, self.k >= self.length, False, {}


COUNTDOWN = "ArchzooTestCountdown-v0"   # episodes of 1..3 steps
ONE_STEP = "ArchzooTestOneStep-v0"      # every episode is a single step
for _id, _len in ((COUNTDOWN, 3), (ONE_STEP, 1)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=Countdown, kwargs={"max_len": _len})


# ---------------------------------------------------------------------------------------------
# Helpers and references
# ---------------------------------------------------------------------------------------------
def make_actor(env_id: str, E: int, T: int, seed: int, model: torch.nn.Module | None = None):
    spec = env_spec(env_id)
    if model is None:
        torch.manual_seed(1234)
        model = ActorCritic(spec.obs_shape, spec.num_actions)
    return UnrollActor(spec, E, T, model, seed), unroll_schema(spec, T, E)


def biased_model(spec: EnvSpec, logits: list[float]) -> ActorCritic:
    """A model whose policy logits are the constant ``logits`` for every observation."""
    torch.manual_seed(99)
    model = ActorCritic(spec.obs_shape, spec.num_actions)
    with torch.no_grad():
        model.policy.weight.zero_()
        model.policy.bias.copy_(torch.tensor(logits))
    return model


def run_unrolls(actor: UnrollActor, schema, n: int) -> list[dict[str, np.ndarray]]:
    """n unrolls collected into ONE reused message (as actors do); copies of each."""
    msg = schema.new()
    for v in msg.values():  # garbage, so a field the actor forgets to write shows up
        v[...] = 77
    out = []
    for _ in range(n):
        actor.collect(msg)
        out.append({k: np.array(v, copy=True) for k, v in msg.items()})
    return out


def naive_replay(envs, seed: int, unrolls: list[dict[str, np.ndarray]]):
    """Step a fresh vector env with the recorded actions, one env and one step at a time.

    Returns the expected per-unroll fields and the finished episodes (return, length, unroll
    index, step index, env) in the order they finish (ties within a step by env index).
    """
    obs, _ = envs.reset(seed=vector_seed(envs, env_seeds(seed, envs.num_envs)))
    E = obs.shape[0]
    after_end = [False] * E     # this env's next step is the autoreset step
    ret = [0.0] * E
    length = [0] * E
    episodes = []
    expected = []
    for u_idx, u in enumerate(unrolls):
        T = u["actions"].shape[0]
        exp = {
            "obs": [obs.copy()],
            "rewards": np.zeros((T, E), np.float32),
            "terminated": np.zeros((T, E), bool),
            "truncated": np.zeros((T, E), bool),
            "valid": np.zeros((T, E), bool),
        }
        for t in range(T):
            obs, r, term, trunc, _ = envs.step(u["actions"][t].copy())
            exp["obs"].append(obs.copy())
            for e in range(E):
                if after_end[e]:
                    # gymnasium's documented autoreset step: nothing happened here
                    assert float(r[e]) == 0.0 and not term[e] and not trunc[e]
                    after_end[e] = False
                    continue
                exp["valid"][t, e] = True
                exp["rewards"][t, e] = r[e]
                exp["terminated"][t, e] = term[e]
                exp["truncated"][t, e] = trunc[e]
                ret[e] += float(r[e])
                length[e] += 1
                if term[e] or trunc[e]:
                    episodes.append((ret[e], length[e], u_idx, t, e))
                    ret[e], length[e] = 0.0, 0
                    after_end[e] = True
        exp["obs"] = np.stack(exp["obs"])
        expected.append(exp)
    envs.close()
    return expected, episodes


def check_against_replay(unrolls, expected, episodes) -> None:
    T = unrolls[0]["actions"].shape[0]
    for k, (u, x) in enumerate(zip(unrolls, expected, strict=True)):
        np.testing.assert_array_equal(u["obs"], x["obs"], err_msg=f"obs, unroll {k}")
        for f in ("rewards", "terminated", "truncated", "valid"):
            np.testing.assert_array_equal(u[f], x[f], err_msg=f"{f}, unroll {k}")
        assert (u["rewards"][~u["valid"]] == 0).all()
        assert not (u["terminated"] | u["truncated"])[~u["valid"]].any()
        if k:
            np.testing.assert_array_equal(u["obs"][0], unrolls[k - 1]["obs"][T])
    got_ret = np.concatenate([u["ep_returns"][: int(u["ep_count"])] for u in unrolls])
    got_len = np.concatenate([u["ep_lengths"][: int(u["ep_count"])] for u in unrolls])
    np.testing.assert_allclose(got_ret, [ep[0] for ep in episodes], rtol=1e-6)
    np.testing.assert_array_equal(got_len, [ep[1] for ep in episodes])
    for k, u in enumerate(unrolls):
        assert int(u["ep_count"]) == sum(ep[2] == k for ep in episodes), f"ep_count, unroll {k}"


def flat_time(unrolls, field: str) -> np.ndarray:
    """[sum of T, E, ...]: a field over all unrolls' steps, in time order."""
    return np.concatenate([u[field] for u in unrolls])


def flat_obs(unrolls) -> np.ndarray:
    """[sum of T + 1, E, ...]: x_0 .. x_N over all unrolls (each unroll's x_T starts the next)."""
    T = unrolls[0]["actions"].shape[0]
    return np.concatenate([u["obs"][:T] for u in unrolls] + [unrolls[-1]["obs"][T:]])


_single_cartpole = gym.make(CARTPOLE).unwrapped
_single_cartpole.reset(seed=0)


def cartpole_successor(obs: np.ndarray, action: int) -> np.ndarray:
    """The single-env CartPole dynamics applied to ``obs``: what a real transition yields."""
    _single_cartpole.state = np.asarray(obs, dtype=np.float64).copy()
    _single_cartpole.steps_beyond_terminated = None
    nxt, *_ = _single_cartpole.step(int(action))
    return nxt


def check_cartpole_dynamics(unrolls) -> None:
    """Valid steps: obs[t+1] follows obs[t] under action[t]; autoreset steps: a reset obs."""
    obs, acts, valid = flat_obs(unrolls), flat_time(unrolls, "actions"), flat_time(unrolls, "valid")
    for s in range(acts.shape[0]):
        for e in range(acts.shape[1]):
            if valid[s, e]:
                np.testing.assert_allclose(obs[s + 1, e], cartpole_successor(obs[s, e], acts[s, e]),
                                           atol=1e-5, err_msg=f"step {s} env {e}")
            else:
                assert np.abs(obs[s + 1, e]).max() <= RESET_BOUND, (s, e, obs[s + 1, e])


# ---------------------------------------------------------------------------------------------
# 1. Reference replay on CartPole
# ---------------------------------------------------------------------------------------------
def test_replay_matches_naive_reference_cartpole():
    E, T, N, seed = 3, 7, 40, 11
    actor, schema = make_actor(CARTPOLE, E, T, seed)
    unrolls = run_unrolls(actor, schema, N)
    expected, episodes = naive_replay(make_vector_env(CARTPOLE, E), seed, unrolls)

    # the run exercises the cases that matter
    assert len(episodes) >= 10
    assert any(t == T - 1 for _, _, _, t, _ in episodes), "no episode ends on an unroll's last step"
    assert any(not x["valid"][0].all() for x in expected[1:]), "no invalid step 0"
    assert any(not x["valid"][1:].all() for x in expected), "no invalid step inside an unroll"
    assert max(ep[1] for ep in episodes) > T, "no episode spans an unroll boundary"

    check_against_replay(unrolls, expected, episodes)
    check_cartpole_dynamics(unrolls)
    # CartPole pays 1 per transition: returns equal lengths
    for u in unrolls:
        n = int(u["ep_count"])
        np.testing.assert_array_equal(u["ep_returns"][:n], u["ep_lengths"][:n])
    # valid is False exactly on the step after an episode end, and only there
    valid, ends = flat_time(unrolls, "valid"), flat_time(unrolls, "terminated")
    ends = ends | flat_time(unrolls, "truncated")
    np.testing.assert_array_equal(valid[1:], ~ends[:-1])
    assert valid[0].all()
    actor.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), E=st.integers(1, 4), T=st.integers(1, 6),
       n=st.integers(1, 6))
def test_replay_matches_naive_reference_short_episodes(seed, E, T, n):
    """Episodes of 1..3 steps with action-dependent rewards: every boundary placement."""
    actor, schema = make_actor(COUNTDOWN, E, T, seed)
    unrolls = run_unrolls(actor, schema, n)
    expected, episodes = naive_replay(make_vector_env(COUNTDOWN, E), seed, unrolls)
    check_against_replay(unrolls, expected, episodes)
    # each finished episode's return is sum_k (10k + a_k + 1) over its own actions
    obs, valid = flat_obs(unrolls), flat_time(unrolls, "valid")
    for e in range(E):
        done_eps = [ep for ep in episodes if ep[4] == e]
        # obs[..., 1] holds the episode length; last action lands in obs[t+1][2]
        i = 0
        acc = 0.0
        for s in range(valid.shape[0]):
            if not valid[s, e]:
                continue
            acc += 10 * obs[s + 1, e, 0] + obs[s + 1, e, 2] + 1
            if obs[s + 1, e, 0] == obs[s + 1, e, 1]:
                assert done_eps[i][0] == acc and done_eps[i][1] == obs[s + 1, e, 1]
                i, acc = i + 1, 0.0
        assert i == len(done_eps)
    actor.close()


class NoisyAutoreset(gym.vector.VectorWrapper):
    """Reports junk (reward 5, terminated, truncated) on the autoreset step that gymnasium
    marks with reward 0 and no flags: the actor must mask that step, not trust the env."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self._prev_end = np.zeros(env.num_envs, bool)

    def reset(self, **kw):
        self._prev_end[:] = False
        return self.env.reset(**kw)

    def step(self, actions):
        obs, r, term, trunc, info = self.env.step(actions)
        ended = term | trunc
        r = np.where(self._prev_end, 5.0, r).astype(np.float32)
        term, trunc = term | self._prev_end, trunc | self._prev_end
        self._prev_end = ended
        return obs, r, term, trunc, info


def test_autoreset_step_is_masked_whatever_the_env_reports():
    E, T, N, seed = 3, 4, 8, 3
    actor, schema = make_actor(COUNTDOWN, E, T, seed)
    actor.envs.close()
    actor.envs = NoisyAutoreset(make_vector_env(COUNTDOWN, E))
    actor.obs, _ = actor.envs.reset(seed=vector_seed(actor.envs.env, env_seeds(seed, E)))
    unrolls = run_unrolls(actor, schema, N)
    # the reference sees the honest env
    expected, episodes = naive_replay(make_vector_env(COUNTDOWN, E), seed, unrolls)
    assert any(not x["valid"].all() for x in expected)
    check_against_replay(unrolls, expected, episodes)
    actor.close()


# ---------------------------------------------------------------------------------------------
# 2. Truncation: the truncated step carries the final observation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vector_entry_point", "sync"])
def test_truncation_final_observation(mode):
    E, T, N, seed, limit = 2, 7, 6, 5, 5

    def short_envs():
        return gym.make_vec(CARTPOLE, num_envs=E, vectorization_mode=mode,
                            max_episode_steps=limit)

    actor, schema = make_actor(CARTPOLE, E, T, seed)
    actor.envs.close()
    actor.envs = short_envs()
    actor.obs, _ = actor.envs.reset(seed=vector_seed(actor.envs, env_seeds(seed, E)))
    unrolls = run_unrolls(actor, schema, N)
    expected, episodes = naive_replay(short_envs(), seed, unrolls)
    check_against_replay(unrolls, expected, episodes)

    # closed form: 5 transitions (the 5th truncated, none terminated), then one autoreset step
    S = N * T
    s = np.arange(S)[:, None]
    np.testing.assert_array_equal(flat_time(unrolls, "valid"), np.broadcast_to(s % 6 != 5, (S, E)))
    np.testing.assert_array_equal(flat_time(unrolls, "truncated"),
                                  np.broadcast_to(s % 6 == 4, (S, E)))
    assert not flat_time(unrolls, "terminated").any()
    assert len(episodes) == E * (S // 6)
    assert all(ep[:2] == (5.0, 5) for ep in episodes)
    # the truncation lands at several offsets within an unroll, including the last step
    trunc_t = {t for t in range(T) if any(u["truncated"][t].any() for u in unrolls)}
    assert T - 1 in trunc_t and len(trunc_t) >= 3

    obs, acts = flat_obs(unrolls), flat_time(unrolls, "actions")
    for st_ in np.flatnonzero(s[:, 0] % 6 == 4):
        for e in range(E):
            final = obs[st_ + 1, e]
            # the final observation is the dynamics' successor, not a reset observation
            np.testing.assert_allclose(final, cartpole_successor(obs[st_, e], acts[st_, e]),
                                       atol=1e-5)
            if st_ + 2 < obs.shape[0]:
                reset_obs = obs[st_ + 2, e]
                assert np.abs(reset_obs).max() <= RESET_BOUND
                assert not np.array_equal(final, reset_obs)
    check_cartpole_dynamics(unrolls)
    actor.close()


# ---------------------------------------------------------------------------------------------
# 3. Behaviour logits and sampling
# ---------------------------------------------------------------------------------------------
def test_behaviour_logits_are_models_logits_on_obs_t():
    actor, schema = make_actor(CARTPOLE, 3, 5, seed=2)
    with torch.no_grad():  # make the logits clearly observation-dependent
        actor.model.policy.weight.mul_(300.0)
    unrolls = run_unrolls(actor, schema, 6)
    for u in unrolls:
        with torch.no_grad():
            ref, _ = actor.model(torch.from_numpy(u["obs"][:-1].copy()))
        np.testing.assert_allclose(u["behaviour_logits"], ref.numpy(), rtol=1e-5, atol=1e-6)
        # ... and not the logits of the next observation
        with torch.no_grad():
            nxt, _ = actor.model(torch.from_numpy(u["obs"][1:].copy()))
        assert not np.allclose(u["behaviour_logits"], nxt.numpy(), atol=1e-4)
    actor.close()


def test_strongly_biased_policy_always_picks_that_action():
    spec = env_spec(CARTPOLE)
    for logits, action in (([-20.0, 20.0], 1), ([20.0, -20.0], 0)):
        actor, schema = make_actor(CARTPOLE, 3, 7, seed=4, model=biased_model(spec, logits))
        unrolls = run_unrolls(actor, schema, 5)
        for u in unrolls:
            assert u["actions"].dtype == np.int64
            assert (u["actions"] == action).all()
            np.testing.assert_allclose(u["behaviour_logits"],
                                       np.broadcast_to(logits, u["behaviour_logits"].shape))
        actor.close()


@pytest.mark.parametrize("p1", [0.75, 0.25])
def test_actions_are_samples_of_the_softmax(p1):
    """Constant logits [0, log(p1/(1-p1))]: the action-1 frequency is p1, not argmax's 0 or 1."""
    spec = env_spec(CARTPOLE)
    model = biased_model(spec, [0.0, math.log(p1 / (1 - p1))])
    actor, schema = make_actor(CARTPOLE, 4, 8, seed=6, model=model)
    acts = flat_time(run_unrolls(actor, schema, 40), "actions")
    n = acts.size  # 1280 samples: std of the frequency ~0.012
    assert set(np.unique(acts)) <= {0, 1}
    assert abs(acts.mean() - p1) < 0.05, (acts.mean(), p1, n)
    actor.close()


# ---------------------------------------------------------------------------------------------
# 4. Bookkeeping: version, first_step_time, timing, episode capacity, env_steps
# ---------------------------------------------------------------------------------------------
def test_version_first_step_time_timing_and_env_steps():
    E, T, seed = 3, 6, 8
    actor, schema = make_actor(CARTPOLE, E, T, seed)
    assert actor.env_steps == 0
    msg = schema.new()
    unrolls = []
    t_before = time.time()
    for k in range(12):
        actor.version = 100 + 3 * k
        actor.collect(msg)
        if k == 0:
            t_after = time.time()
        unrolls.append({f: np.array(v, copy=True) for f, v in msg.items()})
    fst = [float(u["first_step_time"]) for u in unrolls]
    assert fst[0] > 0 and t_before <= fst[0] <= t_after
    assert all(f == fst[0] for f in fst) and actor.first_step_time == fst[0]
    assert [int(u["version"]) for u in unrolls] == [100 + 3 * k for k in range(12)]
    timing = np.stack([u["timing"] for u in unrolls])
    assert timing.shape == (12, len(TIMING)) and (timing >= 0).all()
    assert (np.diff(timing, axis=0) >= 0).all() and (timing[-1] > 0).all()

    _, episodes = naive_replay(make_vector_env(CARTPOLE, E), seed, unrolls)
    n_valid_naive = sum(int(x) for u in unrolls for x in u["valid"].ravel())
    assert actor.env_steps == n_valid_naive
    # every valid step belongs to a finished episode or to one still running
    assert actor.env_steps == sum(ep[1] for ep in episodes) + int(actor.tracker.length.sum())
    assert actor.episodes == len(episodes) == sum(int(u["ep_count"]) for u in unrolls)
    actor.close()


@pytest.mark.parametrize("T", [1, 2, 5, 7, 8])
def test_episode_capacity_with_one_step_episodes(T):
    """One-step episodes: the densest possible ending pattern fills, never exceeds, capacity."""
    E, seed = 3, 1
    actor, schema = make_actor(ONE_STEP, E, T, seed)
    cap = schema.fields["ep_returns"].shape[0]
    assert cap == E * (T // 2 + 1) == schema.fields["ep_lengths"].shape[0]
    unrolls = run_unrolls(actor, schema, 6)
    expected, episodes = naive_replay(make_vector_env(ONE_STEP, E), seed, unrolls)
    check_against_replay(unrolls, expected, episodes)
    counts = [int(u["ep_count"]) for u in unrolls]
    # transitions on global steps 0, 2, 4, ...: unroll k holds those in [kT, (k+1)T)
    naive = [E * sum(1 for s in range(k * T, (k + 1) * T) if s % 2 == 0) for k in range(6)]
    assert counts == naive
    assert max(counts) <= cap
    for u in unrolls:
        n = int(u["ep_count"])
        assert (u["ep_lengths"][:n] == 1).all()
        assert set(u["ep_returns"][:n].tolist()) <= {11.0, 12.0}  # 10 * 1 + action + 1
    assert actor.env_steps == sum(naive)
    actor.close()


# ---------------------------------------------------------------------------------------------
# 5. Schema digest
# ---------------------------------------------------------------------------------------------
def test_schema_digest_depends_on_layout():
    base = EnvSpec(CARTPOLE, (4,), np.dtype(np.float32).str, 2)
    assert env_spec(CARTPOLE) == base
    d = unroll_schema(base, 20, 4).digest()
    assert unroll_schema(EnvSpec(CARTPOLE, (4,), "<f4", 2), 20, 4).digest() == d
    variants = {
        "T": unroll_schema(base, 21, 4),
        "E": unroll_schema(base, 20, 5),
        "obs": unroll_schema(EnvSpec(CARTPOLE, (5,), "<f4", 2), 20, 4),
        "obs rank": unroll_schema(EnvSpec(CARTPOLE, (4, 1), "<f4", 2), 20, 4),
        "actions": unroll_schema(EnvSpec(CARTPOLE, (4,), "<f4", 3), 20, 4),
    }
    digests = {k: s.digest() for k, s in variants.items()}
    for k, dk in digests.items():
        assert dk != d, k
    assert len(set(digests.values())) == len(digests)
    s = unroll_schema(base, 20, 4)
    assert s.fields["obs"].shape == (21, 4, 4)
    assert s.fields["behaviour_logits"].shape == (20, 4, 2)
    assert s.fields["ep_returns"].shape == (4 * 11,)
