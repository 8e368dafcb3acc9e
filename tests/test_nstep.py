"""Tests for actors/nstep.py against a naive whole-episode reference.

The reference collects each env's full episode trajectory and its end kind, then for every t
computes R_t = Σ_{i=0}^{min(n, L−t)−1} γ^i r_{t+i} (Sutton & Barto §7.1) with discount γ^n if
t+n < L, else 0 (terminated) or γ^{L−t} (truncated), and next_obs = obs_{t+n} or the final
observation. Autoreset steps (valid=False, see actors/base.py) are not transitions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from archzoo.actors.nstep import NStepAssembler, NStepBatch
from archzoo.envs import make_vector_env

Transition = tuple  # (obs bytes, action, ret, next_obs bytes, discount)


def naive_transitions(stream: list[dict], n: int, gamma: float) -> list[Transition]:
    """Every n-step transition a stream of vector-env steps defines, episode by episode."""
    E = stream[0]["valid"].shape[0]
    out: list[Transition] = []
    for e in range(E):
        episode: list[tuple] = []  # (obs, action, reward, next_obs) of valid steps

        def flush(episode: list[tuple], end: str | None) -> None:
            L = len(episode)
            for t in range(L):
                if end is None and t + n > L:
                    break  # still waiting for rewards that never came within the stream
                ret = 0.0
                for i in range(min(n, L - t)):
                    ret = ret + gamma ** i * float(episode[t + i][2])
                if t + n < L or end is None:
                    disc = gamma ** n
                elif end == "terminated":
                    disc = 0.0
                else:
                    disc = gamma ** (L - t)
                next_obs = episode[min(t + n, L) - 1][3]  # obs_{t+n}, or the final obs
                out.append((episode[t][0].tobytes(), int(episode[t][1]), np.float32(ret),
                            next_obs.tobytes(), np.float32(disc)))

        for s in stream:
            if not s["valid"][e]:
                continue
            episode.append((s["obs"][e], s["actions"][e], s["rewards"][e], s["next_obs"][e]))
            if s["terminated"][e] or s["truncated"][e]:
                flush(episode, "terminated" if s["terminated"][e] else "truncated")
                episode = []
        flush(episode, None)
    return out


def as_tuples(batches: list[NStepBatch]) -> list[Transition]:
    out = []
    for b in batches:
        for i in range(len(b)):
            out.append((b.obs[i].tobytes(), int(b.action[i]), b.ret[i], b.next_obs[i].tobytes(),
                        b.discount[i]))
    return out


def run_assembler(stream: list[dict], n: int, gamma: float, obs_shape: tuple[int, ...]
                  ) -> list[NStepBatch]:
    asm = NStepAssembler(stream[0]["valid"].shape[0], n, gamma, obs_shape)
    return [asm.step(s["obs"], s["actions"], s["rewards"], s["terminated"], s["truncated"],
                     s["next_obs"], s["valid"]) for s in stream]


def random_stream(rng: np.random.Generator, E: int, T: int, max_len: int) -> list[dict]:
    """T steps of E fake envs: random episode lengths and end kinds, with the autoreset step
    (valid=False, reward 0, reset obs) after each end, as gymnasium 1.x vector envs do."""
    obs_shape = (2,)
    cur = rng.normal(size=(E, *obs_shape)).astype(np.float32)
    ep_left = rng.integers(1, max_len + 1, size=E)
    autoreset = np.zeros(E, bool)
    stream = []
    for _ in range(T):
        nxt = rng.normal(size=(E, *obs_shape)).astype(np.float32)
        rewards = np.where(autoreset, 0.0, rng.normal(size=E)).astype(np.float32)
        ends = ~autoreset & (ep_left == 1)
        kind_term = rng.random(E) < 0.5
        stream.append(dict(
            obs=cur.copy(), actions=rng.integers(0, 4, size=E), rewards=rewards,
            terminated=ends & kind_term, truncated=ends & ~kind_term, next_obs=nxt,
            valid=~autoreset,
        ))
        ep_left = np.where(autoreset, rng.integers(1, max_len + 1, size=E),
                           ep_left - (~autoreset))
        autoreset = ends
        cur = nxt
    return stream


@pytest.mark.parametrize("E", [1, 3])
@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_naive_on_random_streams(E: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    gamma = 0.9
    stream = random_stream(rng, E, T=300, max_len=2 * n + 2)  # episodes shorter and longer than n
    ends = sum(int((s["terminated"] | s["truncated"]).sum()) for s in stream)
    terms = sum(int(s["terminated"].sum()) for s in stream)
    assert 0 < terms < ends  # both end kinds occur
    got = as_tuples(run_assembler(stream, n, gamma, (2,)))
    want = naive_transitions(stream, n, gamma)
    assert len(got) == len(want)
    assert sorted(got, key=repr) == sorted(want, key=repr)


@pytest.mark.parametrize("n", [1, 3])
def test_acting_values_ride_with_their_observations(n: int) -> None:
    """Q(s_t, a_t) given at step t comes out with the transition that starts at s_t, and
    max_a Q(s', a) given with the step that returned s' with every transition whose next
    observation s' is, whatever the episode ends in between."""
    rng = np.random.default_rng(7)
    stream = random_stream(rng, 3, T=200, max_len=2 * n + 2)
    taken = lambda x: np.float32(x.sum() + 100.0)  # noqa: E731 - a value per observation
    bootstrap = lambda x: np.float32(3.0 * x.sum() - 50.0)  # noqa: E731
    asm = NStepAssembler(3, n, 0.9, (2,))
    count = 0
    for s in stream:
        b = asm.step(s["obs"], s["actions"], s["rewards"], s["terminated"], s["truncated"],
                     s["next_obs"], s["valid"], np.array([taken(x) for x in s["obs"]]),
                     np.array([bootstrap(x) for x in s["next_obs"]]))
        assert b.q_taken.dtype == np.float32 and b.next_value.dtype == np.float32
        for i in range(len(b)):
            assert b.q_taken[i] == taken(b.obs[i]) and b.next_value[i] == bootstrap(b.next_obs[i])
        count += len(b)
    assert count > 100
    assert run_assembler(stream, n, 0.9, (2,))[-1].q_taken is None  # values not given
    with pytest.raises(ValueError, match="together"):
        s = stream[0]
        asm.step(s["obs"], s["actions"], s["rewards"], s["terminated"], s["truncated"],
                 s["next_obs"], s["valid"], np.zeros(3))


def test_hand_example_values_and_order() -> None:
    """E=2, n=2, γ=0.5: env 0 runs r=1,2,4 then terminates; env 1 runs r=1 then truncates."""
    g = 0.5
    asm = NStepAssembler(2, 2, g, (1,))
    F, T = np.array([False, False]), np.array([True, True])

    def o(a: float, b: float) -> np.ndarray:
        return np.array([[a], [b]], np.float32)

    b = asm.step(o(0, 10), np.array([0, 1]), np.array([1.0, 1.0]), F,
                 np.array([False, True]), o(1, 11), T)
    # env 0 has 1 pending; env 1 truncated: emit (10, R=1, next=11, γ^1).
    assert b.obs.ravel().tolist() == [10] and b.next_obs.ravel().tolist() == [11]
    assert b.ret.tolist() == [1.0] and b.discount.tolist() == [g]
    b = asm.step(o(1, 11), np.array([1, 9]), np.array([2.0, 0.0]), F, F, o(2, 20),
                 np.array([True, False]))  # env 1 autoreset step: skipped
    assert b.obs.ravel().tolist() == [0] and b.ret.tolist() == [1 + g * 2]
    assert b.next_obs.ravel().tolist() == [2] and b.discount.tolist() == [g ** 2]
    assert b.action.dtype == np.int64 and b.ret.dtype == np.float32
    b = asm.step(o(2, 20), np.array([2, 3]), np.array([4.0, 8.0]), np.array([True, False]), F,
                 o(3, 21), T)
    # env 0 terminates: emit obs 1 (2 + g·4) and obs 2 (4), discount 0, oldest first, then
    # nothing from env 1 (1 pending of n=2).
    assert b.obs.ravel().tolist() == [1, 2]
    assert b.ret.tolist() == [2 + g * 4, 4.0] and b.discount.tolist() == [0.0, 0.0]
    assert b.next_obs.ravel().tolist() == [3, 3] and b.action.tolist() == [1, 2]
    assert asm.pending().tolist() == [0, 1]
    b = asm.step(o(3, 21), np.array([0, 0]), np.array([0.0, 16.0]), F, F, o(4, 22),
                 np.array([False, True]))
    assert len(b) == 1 and b.obs.ravel().tolist() == [20] and b.ret.tolist() == [8 + g * 16]


def test_emission_order_by_env_then_oldest() -> None:
    """A step where env 0 truncates (2 items), env 1 emits mid-episode, env 2 terminates."""
    asm = NStepAssembler(3, 3, 0.9, (1,))
    V = np.ones(3, bool)
    for t in range(2):
        b = asm.step(np.array([[0 + t], [10 + t], [20 + t]], np.float32), np.zeros(3, int),
                     np.ones(3), ~V, ~V, np.array([[1 + t], [11 + t], [21 + t]], np.float32), V)
        assert len(b) == 0
    b = asm.step(np.array([[9], [12], [22]], np.float32), np.zeros(3, int), np.ones(3),
                 np.array([False, False, True]), np.array([True, False, False]),
                 np.array([[99], [13], [23]], np.float32), np.array([False, True, True]))
    # env 0's step is invalid (ignored, so no truncation); env 1 emits its oldest; env 2 all 3.
    assert b.obs.ravel().tolist() == [10, 20, 21, 22]
    assert b.discount.tolist() == pytest.approx([0.9 ** 3, 0, 0, 0])


def test_empty_batch_shapes() -> None:
    asm = NStepAssembler(2, 3, 0.99, (4,))
    z = np.zeros((2, 4), np.float32)
    b = asm.step(z, np.zeros(2, int), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), z,
                 np.ones(2, bool))
    assert len(b) == 0 and b.obs.shape == (0, 4) and b.next_obs.shape == (0, 4)
    assert b.action.dtype == np.int64 and b.discount.dtype == np.float32


def gym_stream(envs, E: int, steps: int, seed: int) -> list[dict]:
    """Random-action steps of a vector env; ``valid`` as in actors/unroll.py."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    prev_done = np.zeros(E, bool)
    stream = []
    for _ in range(steps):
        actions = rng.integers(0, 2, size=E)
        next_obs, reward, term, trunc, _ = envs.step(actions)
        ok = ~prev_done
        stream.append(dict(obs=obs.copy(), actions=actions, rewards=np.where(ok, reward, 0.0),
                           terminated=term & ok, truncated=trunc & ok, next_obs=next_obs.copy(),
                           valid=ok))
        prev_done = (term | trunc) & ok
        obs = next_obs
    envs.close()
    return stream


@pytest.mark.parametrize("n", [1, 3, 5])
def test_matches_naive_on_cartpole(n: int) -> None:
    stream = gym_stream(make_vector_env("CartPole-v1", 4), 4, 300, seed=n)
    assert sum(int(s["terminated"].sum()) for s in stream) > 0
    got = as_tuples(run_assembler(stream, n, 0.99, (4,)))
    want = naive_transitions(stream, n, 0.99)
    assert len(got) == len(want)
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_matches_naive_on_cartpole_with_truncation() -> None:
    """CartPole capped at 12 steps, so both terminations and truncations occur."""
    envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point",
                        max_episode_steps=12)
    stream = gym_stream(envs, 4, 300, seed=7)
    assert sum(int(s["truncated"].sum()) for s in stream) > 0
    assert sum(int(s["terminated"].sum()) for s in stream) > 0
    got = as_tuples(run_assembler(stream, 3, 0.99, (4,)))
    want = naive_transitions(stream, 3, 0.99)
    assert sorted(got, key=repr) == sorted(want, key=repr)
