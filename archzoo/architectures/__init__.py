"""The named architectures: each a role map plus a loop over the components.

Modules are imported lazily (they import torch); this registry lets the CLI list and
validate without paying for that.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ARCHITECTURES: dict[str, tuple[str, str]] = {
    "impala": ("archzoo.architectures.impala",
               "IMPALA: actors send unrolls with behaviour logits; a central V-trace learner"),
    "apex": ("archzoo.architectures.apex",
             "Ape-X: ε-ladder actors feed a prioritized replay; one double-DQN learner"),
    "a3c": ("archzoo.architectures.a3c",
            "A3C (async) / A2C (--mode sync): actor-learners push gradients to a sharded PS"),
    "gorila": ("archzoo.architectures.gorila",
               "Gorila: actors, a replay memory, L learners and a sharded parameter server"),
    "gala": ("archzoo.architectures.gala",
             "GALA/PALA: A2C agents averaging their models by gossip over a ring"),
    "seed": ("archzoo.architectures.seed",
             "SEED RL: actors only step envs; the learner batches their inference and trains"),
    "ga3c": ("archzoo.architectures.ga3c",
             "GA3C: agents ask batched predictor threads; trainer threads update one model"),
}


def load(name: str) -> ModuleType:
    if name not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise KeyError(f"unknown architecture {name!r} (known: {known})")
    return importlib.import_module(ARCHITECTURES[name][0])
