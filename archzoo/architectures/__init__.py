"""The named architectures: each a role map plus its loops over the components.

Every architecture is declared once here, as an :class:`Architecture` record: its name,
its config class (archzoo/config.py), its roles, the modes and topologies it runs, and the
module whose ``run(ctx)`` plays a rank's role. Modules are imported lazily (they import
torch), so the CLI can list, parse and validate without paying for that.

:func:`get` also finds architectures outside archzoo (docs/tutorial.md builds one):

- ``package.module:NAME`` names a record in the user's own module (searched first in the
  current directory, as ``python -m`` would); the directory it was imported from is put on
  the child ranks' ``PYTHONPATH`` (:func:`user_paths`, archzoo/launcher.py);
- an installed package registers records under the entry-point group
  ``archzoo.architectures`` (the entry point's name is the architecture's name, its value
  ``package.module:NAME``); ``archzoo list`` shows them after the built-in ones.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
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
                 "0 learner; 1..K replay shards; then actors", ("async",),
                 ("star", "tree", "butterfly", "ring")),
    Architecture("a3c", "archzoo.architectures.a3c", C.A3CConfig,
                 "A3C (async) / A2C (--mode sync): actor-learners push gradients to a "
                 "sharded PS, or all-reduce (--mode sync --topology ring|tree|...)",
                 "0..K-1 parameter-server shards; then actor-learners (all-reduce: "
                 "0..W-1 actor-learners)", ("async", "sync"), _ALL),
    Architecture("gorila", "archzoo.architectures.gorila", C.GorilaConfig,
                 "Gorila: actors, a replay memory, L learners and a sharded parameter server",
                 "0..K-1 PS shards; K replay; then L learners; then actors", ("async",),
                 ("star", "tree", "butterfly", "ring")),
    Architecture("gala", "archzoo.architectures.gala", C.GalaConfig,
                 "GALA/PALA: A2C agents averaging their models by gossip over a ring",
                 "0..N-1 agents (0 also keeps the learning curve)", ("async",), ("ring",)),
    Architecture("seed", "archzoo.architectures.seed", C.SeedConfig,
                 "SEED RL: actors only step envs; the learner batches their inference and "
                 "trains", "0 learner + inference server; 1..N actors", ("async", "sync"),
                 ("star",)),
    Architecture("r2d2", "archzoo.architectures.r2d2", C.R2D2Config,
                 "R2D2: Ape-X's replay roles on sequences of a recurrent Q-network, stored "
                 "state and burn-in", "0 learner; 1..K replay shards; then actors",
                 ("async",), ("star", "tree", "butterfly", "ring")),
    Architecture("ga3c", "archzoo.architectures.ga3c", C.Ga3cConfig,
                 "GA3C: agents ask batched predictor threads; trainer threads update one "
                 "model", "0 server (predictor and trainer threads); 1..N agents",
                 ("async",), ("star",)),
)}


ENTRY_POINTS = "archzoo.architectures"  # the entry-point group of installed architectures

_USER_PATHS: list[str] = []  # where the user's architecture modules were imported from


def installed() -> dict[str, EntryPoint]:
    """The entry points of group ``archzoo.architectures``, by name (not loaded yet); a
    built-in name cannot be taken over."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)
            if ep.name not in ARCHITECTURES}


def names() -> list[str]:
    """Every name ``archzoo run`` takes: the built-in ones, then the installed ones."""
    return [*ARCHITECTURES, *sorted(installed())]


def get(name: str) -> Architecture:
    """The record called ``name``: built in, ``package.module:NAME``, or installed.

    Raises KeyError with a one-line message when there is none."""
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    if ":" in name:
        record = _checked(repr(name), _from_module(name))
        _remember_path(name.partition(":")[0])
        return record
    eps = installed()
    if name in eps:
        try:
            record = eps[name].load()
        except (ImportError, SyntaxError, AttributeError) as e:
            raise KeyError(f"architecture {name!r} (entry point {eps[name].value}): cannot "
                           f"load it: {type(e).__name__}: {e}") from None
        return _checked(f"{name!r} (entry point {eps[name].value})", record)
    known = ", ".join(sorted(ARCHITECTURES) + sorted(eps))
    raise KeyError(f"unknown architecture {name!r} (known: {known}; or "
                   "package.module:NAME for a record in your own module)")


def _from_module(ref: str) -> object:
    """``package.module:NAME`` (NAME may be dotted) imported from the user's module."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise KeyError(f"architecture {ref!r}: expected package.module:NAME")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like python -m: the current directory first
    try:
        obj = importlib.import_module(module)
    except (ImportError, SyntaxError) as e:
        missing = isinstance(e, ModuleNotFoundError) and f"{module}.".startswith(f"{e.name}.")
        hint = " (is its directory the current one or on PYTHONPATH?)" if missing else ""
        raise KeyError(f"architecture {ref!r}: cannot import module {module!r}: "
                       f"{type(e).__name__}: {e}{hint}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KeyError(f"architecture {ref!r}: module {module!r} has no attribute "
                           f"{attr!r}")
        obj = getattr(obj, part)
    return obj


def _checked(what: str, record: object) -> Architecture:
    if not isinstance(record, Architecture):
        kind = f"the class {record.__name__}" if isinstance(record, type) else \
            f"a {type(record).__name__}"
        raise KeyError(f"architecture {what} is {kind}, not an "
                       "archzoo.architectures.Architecture record")
    return record


def _remember_path(module: str) -> None:
    """Note the directory that ``module``'s top-level package was imported from."""
    top = sys.modules[module.split(".")[0]]
    if getattr(top, "__file__", None):
        path = Path(top.__file__).parent
        path = path.parent if Path(top.__file__).name == "__init__.py" else path
    else:  # a namespace package (a directory without __init__.py)
        path = Path(next(iter(top.__path__))).parent
    if str(path) not in _USER_PATHS:
        _USER_PATHS.append(str(path))


def user_paths() -> list[str]:
    """The directories the user's architecture modules came from: child ranks need them on
    their ``PYTHONPATH`` to import the same modules."""
    return list(_USER_PATHS)


def dir_name(name: str) -> str:
    """``name`` made safe for a directory name (``pkg.mod:ARCH`` -> ``pkg_mod_ARCH``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)


def load(name: str) -> ArchModule:
    return get(name).load()
