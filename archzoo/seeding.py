"""Seeds for every env and sampler of a run, from one ``numpy.random.SeedSequence``.

A run's ``--seed`` is spawned by role and rank (:func:`actor_seed`, :func:`evaluator_seed`),
and each rank's seed by env (:func:`env_seeds`), so no two envs of a run share a seed or a
stretch of episodes: the old ``seed + i`` scheme gave env i+1 of one actor the seed of env i
of the next. Every architecture uses the same scheme.
"""

from __future__ import annotations

import numpy as np

ACTOR, EVALUATOR = 0, 1  # roles: training envs, greedy-evaluation envs


MASK = 0x7FFFFFFF  # seeds fit a C int: ale-py's vector env takes no larger one


def _derive(*key: int) -> int:
    """A 31-bit seed from the SeedSequence of ``key`` (independent for distinct keys)."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0]) & MASK


def actor_seed(seed: int, rank: int) -> int:
    """The seed of the actor on ``rank`` (rank 0 in one process): its envs and sampling."""
    return _derive(seed, ACTOR, rank)


def evaluator_seed(seed: int, rank: int) -> int:
    """The seed of ``rank``'s greedy-evaluation envs, apart from its training envs."""
    return _derive(seed, EVALUATOR, rank)


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """One seed per env of a rank whose seed is ``seed``: the spawned children's states."""
    return [int(c.generate_state(1)[0]) & MASK
            for c in np.random.SeedSequence(seed).spawn(num_envs)]


def sampler(seed: int) -> np.random.Generator:
    """A rank's own random generator (action sampling), apart from its envs' seeds."""
    return np.random.default_rng(np.random.SeedSequence([seed, 1 << 20]))
