"""How fast the machine is just before a cell: a fixed workload, timed.

The CPU's model name does not tell this workplace's machines apart. With the same config and
"AMD EPYC" in every record, IMPALA's 2 actors made 13,044 learner updates in 5 minutes on
4 December and 7,045 on 7 December; a run at equal wall time learns less on the slower day.
So every cell records two rates, each the best of :data:`REPEATS` short timings on one
thread (the best, since a timing can only be slowed by other work):

- ``env_steps_per_s``: MinAtar Breakout steps with random actions (an actor's env work);
- ``updates_per_s``: forward and backward passes of the MinAtar presets' torso
  (``impala-cnn``) on :data:`BATCH` observations (IMPALA's 20-step unroll of 16 envs: one
  learner update).

The page states them per day, so that a reader sees which cells ran on a slower machine.
"""

from __future__ import annotations

import time

import numpy as np

GAME = "MinAtar/Breakout-v1"
BATCH = 20 * 16
REPEATS = 3
ENV_STEPS = 20_000
UPDATES = 5


def env_steps_per_s() -> float:
    """MinAtar Breakout steps per second, one env, random actions."""
    from archzoo.envs import _gym

    env = _gym(GAME).make(GAME)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=ENV_STEPS)
    best = 0.0
    for _ in range(REPEATS):
        t = time.perf_counter()
        for a in actions:
            _, _, term, trunc, _ = env.step(int(a))
            if term or trunc:
                env.reset()
        best = max(best, ENV_STEPS / (time.perf_counter() - t))
    env.close()
    return best


def updates_per_s() -> float:
    """Forward and backward passes of the ``impala-cnn`` torso on :data:`BATCH` MinAtar
    observations per second, on one torch thread."""
    import torch

    from archzoo.nets import make_torso

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        torso = make_torso("impala-cnn", (10, 10, 4), "|b1")
        obs = torch.rand(BATCH, 10, 10, 4) < 0.1
        best = 0.0
        for _ in range(REPEATS):
            t = time.perf_counter()
            for _ in range(UPDATES):
                torso.zero_grad()
                torso(obs).square().mean().backward()
            best = max(best, UPDATES / (time.perf_counter() - t))
        return best
    finally:
        torch.set_num_threads(threads)


def calibrate() -> dict[str, float]:
    """Both rates, rounded (about 1.5 s on an idle core)."""
    return {"env_steps_per_s": round(env_steps_per_s()), "updates_per_s":
            round(updates_per_s(), 1)}
