"""A slow or remote simulator, modelled honestly: every vector step of an actor waits.

``--env-latency-ms L`` makes each ``step`` of an actor's vector env wait L ms after the
envs have stepped, as if the simulator ran elsewhere (a game engine behind an RPC, a robot,
a physics engine on other cores): one wait per vector step, however many envs it holds,
since the envs of one actor wait side by side as a remote simulator's would. The wait is a
sleep, so it costs no CPU, and N actor processes on 2 cores behave, as far as the env is
concerned, like N actors on N machines; inference and learning still cost real CPU.

- ``--env-latency-jitter-ms J``: each wait is drawn uniformly from [L − J, L + J] (J <= L,
  so the mean stays L), from a generator seeded by the actor's seed.
- ``--env-latency-spin S``: a fraction S of each wait is CPU work instead (a busy loop
  that runs until this thread has used S·wait seconds of CPU), then the rest is slept: a
  mixed env whose step is partly local computation. Under contention that part takes
  longer in wall time, as real computation would.

:class:`Latency` is a ``gymnasium.vector.VectorWrapper``, for any gymnasium vector env
(``Latency(envs, ms=5)``); archzoo wraps every actor's training envs with it
(actors/base.py), in every architecture and in ``--actors 0``'s one process. Greedy
evaluation envs are not wrapped: they measure the policy, not the simulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

from archzoo.config import latency_problem


@dataclass(frozen=True)
class EnvLatency:
    """The wait of one vector step: ``ms`` on average, ± ``jitter_ms`` (uniform), of which
    the fraction ``spin`` is CPU work."""

    ms: float = 0.0
    jitter_ms: float = 0.0
    spin: float = 0.0

    def __bool__(self) -> bool:
        return self.ms > 0

    def problem(self) -> str | None:
        """The first broken rule, as one line naming the flag, or None."""
        return latency_problem(self.ms, self.jitter_ms, self.spin)


def spin_cpu(seconds: float) -> None:
    """Busy-loop until this thread has used ``seconds`` of CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Latency(VectorWrapper):
    """A vector env whose every ``step`` waits ``ms`` ms (± ``jitter_ms``, a fraction
    ``spin`` of it as CPU work) after the envs have stepped; ``reset`` does not wait.

    ``waits`` counts the waits and ``waited_s`` sums the waits asked for (seconds), for
    whoever measures the env's time against the simulator's."""

    def __init__(self, env: VectorEnv, ms: float, jitter_ms: float = 0.0, spin: float = 0.0,
                 seed: int | None = None) -> None:
        super().__init__(env)
        self.latency = EnvLatency(float(ms), float(jitter_ms), float(spin))
        problem = self.latency.problem()
        if problem:
            raise ValueError(problem)
        self.rng = np.random.default_rng(seed)
        self.waits = 0
        self.waited_s = 0.0

    def step(self, actions: Any) -> Any:
        out = self.env.step(actions)
        self.wait()
        return out

    def wait(self) -> None:
        """One wait: the spun part first, then the slept rest (a sleep to a deadline)."""
        lat = self.latency
        ms = lat.ms if not lat.jitter_ms else \
            lat.ms + lat.jitter_ms * (2.0 * self.rng.random() - 1.0)
        s = max(0.0, ms) * 1e-3
        start = time.perf_counter()
        if lat.spin:
            spin_cpu(lat.spin * s)
        rest = start + s - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        self.waits += 1
        self.waited_s += s


def with_latency(envs: VectorEnv, latency: EnvLatency | None,
                 seed: int | None = None) -> VectorEnv:
    """``envs`` wrapped in :class:`Latency` when ``latency`` asks for a wait, else as is."""
    if not latency:
        return envs
    return Latency(envs, latency.ms, latency.jitter_ms, latency.spin, seed)
