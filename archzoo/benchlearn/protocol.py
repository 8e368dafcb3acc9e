"""The protocol of the learning benchmark: what runs, in what order, at equal resources.

- **Setups.** Each architecture runs twice: with ``--actors 2`` and its preset, and as one
  process (``--actors 0``) of the same preset given what the two actors had: the cores the
  distributed run uses (``--learner-threads``), the same total envs (``--envs-per-actor``
  twice the preset's), and for the ε-greedy architectures the same ε ladder over its envs
  (``--eps-ladder 2``: half of them at actor 0's ε, half at actor 1's).
- **Seeds.** Seeds 0–99 are reported; seeds 100 and up choose presets (tuning) and are never
  reported. Neither kind of run accepts the other's seeds.
- **Order.** Setups alternate within a seed (A s0, B s0, A s1, B s1, ...), so a noisy
  machine loads both alike.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from archzoo.errors import UsageError

ARCHS = ("impala", "seed", "ga3c", "a3c", "gala", "apex", "gorila", "r2d2")
EPSILON_ARCHS = frozenset({"apex", "gorila", "r2d2"})
"""The architectures that act ε-greedily (an ε ladder over their actors)."""
GAMES = ("MinAtar/Breakout-v1", "MinAtar/Asterix-v1", "MinAtar/Freeway-v1",
         "MinAtar/Seaquest-v1", "MinAtar/SpaceInvaders-v1")
SEEDS_PER_GAME = {"MinAtar/Breakout-v1": 5}
"""Reported seeds per game (the others: :data:`DEFAULT_SEEDS`)."""
DEFAULT_SEEDS = 3
ACTORS = 2
TUNING_SEEDS = 100
"""The first tuning seed: seeds below it are reported, seeds from it on choose presets."""
MINUTES = 5.0
LOG_INTERVAL = 5.0
EVAL_EPISODES = 30
EVAL_SEED = 1_000_000
"""The frozen evaluation of a run of seed s plays its episodes from seed EVAL_SEED + 1000 s."""
REFERENCE_SCORES = {"MinAtar/Breakout-v1": 150.0, "MinAtar/Asterix-v1": 50.0,
                    "MinAtar/Freeway-v1": 65.0, "MinAtar/Seaquest-v1": 40.0,
                    "MinAtar/SpaceInvaders-v1": 190.0}
"""The fixed per-game scores that normalize the aggregate (with the random policy's as 0):
the best 5-minute return window of any setup in the records before this protocol
(benchmarks/results/ in git before December 2026), rounded up. Fixed; not refit."""


@dataclass(frozen=True)
class Setup:
    """One architecture in one setup: ``distributed`` (``--actors 2``) or ``one process``."""

    arch: str
    kind: str
    flags: tuple[str, ...]
    threads: int  # torch threads of the learner's process
    candidate: str = ""  # a tuning candidate's name (its flags are in ``flags``)

    @property
    def name(self) -> str:
        name = f"{self.arch}, {ACTORS} actors" if self.kind == "distributed" else \
            f"{self.arch}, one process"
        return f"{name} [{self.candidate}]" if self.candidate else name


def preset_values(arch: str, preset: str | None) -> dict:
    """The flag values of ``arch``'s bundled preset ``preset`` (none: {})."""
    if preset is None:
        return {}
    from archzoo.architectures import get
    from archzoo.resolve import load_config_file

    return load_config_file(preset, get(arch).config, arch)


def digest(values: dict) -> str:
    """A digest of flag values (a preset's: its text's comments do not count)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def preset_digest(arch: str, preset: str | None) -> str:
    """The :func:`digest` of ``arch``'s bundled preset ``preset``."""
    return digest(preset_values(arch, preset))


def setups(arch: str, preset: str | None, cores: int | None = None,
           extra: tuple[str, ...] = (), candidate: str = "") -> tuple[Setup, Setup]:
    """``arch``'s two setups at equal resources (see the module's docstring); ``extra``
    flags go to both (those of tuning candidate ``candidate``)."""
    from archzoo.architectures import get, world_size

    cls = get(arch).config
    values = preset_values(arch, preset)
    cfg = cls(arch=arch, **{k: v for k, v in values.items() if k != "config"})
    processes = world_size(cfg, ACTORS)
    cores = min(cores or os.cpu_count() or 1, processes)
    threads = cfg.learner_threads or cfg.threads
    dist = Setup(arch, "distributed", (*extra, "--actors", str(ACTORS)), threads, candidate)
    one = ["--actors", "0", "--envs-per-actor", str(ACTORS * cfg.envs_per_actor),
           "--learner-threads", str(cores)]
    if arch in EPSILON_ARCHS:
        one += ["--eps-ladder", str(ACTORS)]
    return dist, Setup(arch, "one process", (*extra, *one), cores, candidate)


def seeds_for(game: str) -> list[int]:
    """The reported seeds of ``game``."""
    return list(range(SEEDS_PER_GAME.get(game, DEFAULT_SEEDS)))


def check_seeds(seeds: Iterable[int], purpose: str) -> None:
    """Reported runs take seeds below :data:`TUNING_SEEDS`, tuning runs seeds from it on;
    anything else is a UsageError naming the seed."""
    for s in seeds:
        if s < 0:
            raise UsageError(f"--seeds: seed {s} is negative")
        if purpose == "tune" and s < TUNING_SEEDS:
            raise UsageError(f"seed {s} is a reported seed (0-{TUNING_SEEDS - 1}): tuning "
                             f"uses seeds {TUNING_SEEDS} and up, so that no reported seed "
                             "chooses a preset")
        if purpose == "report" and s >= TUNING_SEEDS:
            raise UsageError(f"seed {s} is a tuning seed ({TUNING_SEEDS} and up): reported "
                             f"runs use seeds 0-{TUNING_SEEDS - 1}")


def cells(archs: Iterable[str], games: Iterable[str], seeds: dict[str, list[int]],
          setups_of: Mapping[str, Sequence[Setup]]) -> Iterator[tuple[Setup, str, int]]:
    """Seeds outermost, then games, then architectures, each architecture's setups one
    after the other within its seed: A s0, B s0, then the next architecture, ..., A s1."""
    archs, games = list(archs), list(games)
    for seed in sorted({s for g in games for s in seeds[g]}):
        for game in games:
            if seed not in seeds[game]:
                continue
            for arch in archs:
                for setup in setups_of[arch]:
                    yield setup, game, seed


def units(cells: Iterable[tuple[Setup, str, int]]) -> list[list[tuple[Setup, str, int]]]:
    """Consecutive cells of one architecture, game and seed: the setups that run back to
    back (a pair, for a reported grid), so that no pause or other job comes between them."""
    return [list(unit) for _, unit in
            itertools.groupby(cells, key=lambda cell: (cell[0].arch, cell[1], cell[2]))]
