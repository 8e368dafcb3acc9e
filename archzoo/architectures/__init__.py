"""The named architectures: each a role map plus its loops over the components.

Every architecture is declared once here, as an :class:`Architecture` record: its name,
its config class (archzoo/config.py), its roles, the modes and topologies it runs, and the
module whose ``run(ctx)`` plays a rank's role. Modules are imported lazily (they import
torch), so the CLI can list, parse and validate without paying for that.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from archzoo import config as C


class ArchModule(Protocol):
    """What an architecture module provides: one entry point for every rank."""

    def run(self, ctx: Any) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Architecture:
    name: str
    module: str
    config: type[C.RunConfig]
    description: str
    roles: str
    modes: tuple[str, ...]
    topologies: tuple[str, ...]

    def load(self) -> ArchModule:
        return importlib.import_module(self.module)


_ALL = ("star", "tree", "butterfly", "ring", "native")

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("impala", "archzoo.architectures.impala", C.ImpalaConfig,
                 "IMPALA: actors send unrolls with behaviour logits; a central V-trace learner",
                 "0 learner; 1..N actors", ("async", "sync"), _ALL),
    Architecture("apex", "archzoo.architectures.apex", C.ApexConfig,
                 "Ape-X: ε-ladder actors feed a prioritized replay; one double-DQN learner",
                 "0 learner; 1..K replay shards; then actors", ("async",), ("star",)),
    Architecture("a3c", "archzoo.architectures.a3c", C.A3CConfig,
                 "A3C (async) / A2C (--mode sync): actor-learners push gradients to a "
                 "sharded PS", "0..K-1 parameter-server shards; then actor-learners",
                 ("async", "sync"), ("star",)),
    Architecture("gorila", "archzoo.architectures.gorila", C.GorilaConfig,
                 "Gorila: actors, a replay memory, L learners and a sharded parameter server",
                 "0..K-1 PS shards; K replay; then L learners; then actors", ("async",),
                 ("star",)),
    Architecture("gala", "archzoo.architectures.gala", C.GalaConfig,
                 "GALA/PALA: A2C agents averaging their models by gossip over a ring",
                 "0..N-1 agents (0 also keeps the learning curve)", ("async",), ("ring",)),
    Architecture("seed", "archzoo.architectures.seed", C.SeedConfig,
                 "SEED RL: actors only step envs; the learner batches their inference and "
                 "trains", "0 learner + inference server; 1..N actors", ("async", "sync"),
                 ("star",)),
    Architecture("ga3c", "archzoo.architectures.ga3c", C.Ga3cConfig,
                 "GA3C: agents ask batched predictor threads; trainer threads update one "
                 "model", "0 server (predictor and trainer threads); 1..N agents",
                 ("async",), ("star",)),
)}


def get(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise KeyError(f"unknown architecture {name!r} (known: {known})")
    return ARCHITECTURES[name]


def load(name: str) -> ArchModule:
    return get(name).load()
