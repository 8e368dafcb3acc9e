"""``--env-latency-ms``: a vector step waits in a sleep (no CPU), once per actor, not per env."""

from __future__ import annotations

import time

import numpy as np
import pytest

from archzoo import latency as latency_module
from archzoo.envs import make_vector_env
from archzoo.latency import EnvLatency, Latency

E = 16


def _steps(envs, n: int) -> None:
    envs.reset(seed=0)
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    for _ in range(n):
        envs.step(actions)


def test_a_waiting_env_costs_no_cpu() -> None:
    """50 vector steps at 20 ms wait at least 1 s in wall time, and the process spends a
    small part of that in CPU (the wait is a sleep; 16 CartPoles step in microseconds).
    The bound is a property of a sleep, not a speed: the CPU of a spin would be the wait
    itself, on any machine."""
    envs = Latency(make_vector_env("CartPole-v1", E), ms=20)
    _steps(envs, 1)
    w0, c0 = time.perf_counter(), time.process_time()
    _steps(envs, 50)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert wall >= 50 * 0.020
    assert cpu < 0.25 * 50 * 0.020, (cpu, wall)
    envs.close()


def test_the_spun_fraction_is_cpu_work() -> None:
    """--env-latency-spin 0.5: half of each wait is a busy loop that runs until this thread
    has used that much CPU (so under load it takes longer, as a computation would)."""
    envs = Latency(make_vector_env("CartPole-v1", 4), ms=10, spin=0.5)
    envs.reset(seed=0)
    w0, c0 = time.perf_counter(), time.thread_time()
    _steps(envs, 20)
    assert time.thread_time() - c0 >= 20 * 0.005
    assert time.perf_counter() - w0 >= 20 * 0.010
    envs.close()


def test_one_wait_per_vector_step_of_an_actor(monkeypatch) -> None:
    """An actor of 16 envs, built from a config as every architecture builds it: each of its
    vector steps sleeps once (not once per env), and its env time holds the waits."""
    from archzoo import builders
    from archzoo.actors.base import EnvActor
    from archzoo.resolve import parse_run

    sleeps: list[float] = []
    real_sleep = time.sleep

    def counted(s: float) -> None:
        sleeps.append(s)
        real_sleep(s)

    cfg = parse_run(["run", "impala", "--env", "CartPole-v1", "--envs-per-actor", str(E),
                     "--env-latency-ms", "10"])[0]
    actor = EnvActor(builders.env_spec(cfg), E, seed=3)
    monkeypatch.setattr(latency_module.time, "sleep", counted)
    for _ in range(12):
        actor.step_envs(np.zeros(E, dtype=np.int64))
    assert len(sleeps) == 12 and actor.envs.waits == 12
    assert actor.envs.waited_s == pytest.approx(12 * 0.010)
    assert actor.env_s >= 12 * 0.010
    actor.close()


def test_the_wrapped_envs_take_the_seeds_of_the_unwrapped() -> None:
    """A SyncVectorEnv (MinAtar) gets one seed per env through the wrapper too: the same
    observations with and without the latency."""
    from archzoo.actors.base import EnvActor
    from archzoo.envs import env_spec

    plain = env_spec("MinAtar/Breakout-v1")
    slow = env_spec("MinAtar/Breakout-v1", latency=EnvLatency(1.0))
    a, b = EnvActor(plain, 4, seed=7), EnvActor(slow, 4, seed=7)
    assert isinstance(b.envs, Latency) and not isinstance(a.envs, Latency)
    np.testing.assert_array_equal(a.obs, b.obs)
    for _ in range(5):
        act = np.array([1, 2, 0, 1])
        np.testing.assert_array_equal(a.step_envs(act).obs, b.step_envs(act).obs)
    a.close()
    b.close()


def test_jitter_draws_around_the_mean() -> None:
    """Waits drawn from [L - J, L + J] with the actor's seed: the same draws for the same
    seed, each inside the interval, their mean near L."""
    def draws(seed: int) -> list[float]:
        envs = Latency(make_vector_env("CartPole-v1", 2), ms=2, jitter_ms=1, seed=seed)
        envs.reset(seed=0)
        out = []
        for _ in range(100):
            before = envs.waited_s
            envs.step(np.zeros(2, dtype=np.int64))
            out.append(envs.waited_s - before)
        return out

    d = draws(5)
    assert d == draws(5) and d != draws(6)
    assert all(0.001 - 1e-12 <= w <= 0.003 + 1e-12 for w in d)
    assert abs(np.mean(d) - 0.002) < 0.0002


@pytest.mark.parametrize("flags, needle", [
    (["--env-latency-ms", "-1"], "--env-latency-ms must be a finite number >= 0, got -1"),
    (["--env-latency-ms", "nan"], "--env-latency-ms must be a finite number >= 0, got nan"),
    (["--env-latency-ms", "inf"], "--env-latency-ms must be a finite number >= 0, got inf"),
    (["--env-latency-ms", "five"], "argument --env-latency-ms: invalid float value: 'five'"),
    (["--env-latency-ms", "2", "--env-latency-jitter-ms", "3"],
     "--env-latency-jitter-ms 3 must be <= --env-latency-ms 2"),
    (["--env-latency-ms", "2", "--env-latency-spin", "1.5"], "--env-latency-spin must be in"),
])
def test_bad_values_give_one_line_and_exit_code_2(flags, needle, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "impala", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_the_wrapper_refuses_bad_values() -> None:
    envs = make_vector_env("CartPole-v1", 2)
    with pytest.raises(ValueError, match="--env-latency-ms must be a finite number"):
        Latency(envs, ms=-1)
    envs.close()


def test_every_architecture_gives_its_actors_the_latency() -> None:
    """The one place every architecture's actors get their envs' spec from (builders) carries
    the knob, in every architecture and with --actors 0."""
    from archzoo import builders
    from archzoo.architectures import names
    from archzoo.resolve import parse_run

    for arch in names():
        for actors in ("0", "2"):
            cfg = parse_run(["run", arch, "--actors", actors, "--env-latency-ms", "5",
                             "--env-latency-jitter-ms", "1"])[0]
            assert builders.env_spec(cfg).latency == EnvLatency(5.0, 1.0, 0.0), arch
    cfg = parse_run(["run", "impala"])[0]
    assert builders.env_spec(cfg).latency is None
