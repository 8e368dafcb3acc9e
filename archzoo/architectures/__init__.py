"""The named architectures: each a role map plus its loops over the components.

Every architecture is declared once here, as an :class:`Architecture` record: its name,
its config class (archzoo/config.py), its role map (archzoo/architectures/rolemap.py: the
roles in rank order and how many ranks each, from which the world size, each rank's role
and the registry's text follow), the modes and topologies it runs, the module whose
``run(ctx)`` plays a rank's role (a DQN-family config class names the builder of its
parts, archzoo/builders.py). Modules are imported lazily (they import torch), so the CLI can
list, parse and validate without paying for that.

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
from typing import TYPE_CHECKING, Protocol

from archzoo import config as C
from archzoo.architectures.rolemap import (
    ACTORS,
    STAR,
    Placement,
    Role,
    RoleMap,
    placement,
    play,
)

if TYPE_CHECKING:
    from archzoo.harness.protocol import RankContext
    from archzoo.records import Summary

__all__ = ["ACTORS", "ARCHITECTURES", "ArchModule", "Architecture", "Placement", "Role",
           "RoleMap", "STAR", "actors_for", "dir_name", "get", "installed", "load", "names",
           "placement", "play", "user_paths", "world_size"]


class ArchModule(Protocol):
    """What an architecture module provides: one entry point for every rank."""

    def run(self, ctx: RankContext[C.RunConfig]) -> Summary | None: ...


@dataclass(frozen=True)
class Architecture:
    """One architecture: ``roles`` is its role map (a DQN-family config class names the
    builder of its parts, ``builder``: archzoo/builders.py)."""

    name: str
    module: str
    config: type[C.RunConfig]
    description: str
    roles: RoleMap
    modes: tuple[str, ...]
    topologies: tuple[str, ...]

    def load(self) -> ArchModule:
        return importlib.import_module(self.module)



_ALL = ("star", "tree", "butterfly", "ring", "native")
_TREES = ("star", "tree", "butterfly", "ring")

_REPLAY = RoleMap(Role("learner"), Role("shard", "replay_shards", "replay shards", "K"),
                  Role("actor", ACTORS))  # Ape-X's and R2D2's


def _server_shards(cfg: C.A3CConfig) -> int:
    """A3C's parameter-server ranks: none when A2C all-reduces (--mode sync, not a star)."""
    return 0 if cfg.all_reduce else cfg.ps_shards


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("impala", "archzoo.architectures.impala", C.ImpalaConfig,
                 "IMPALA: actors send unrolls with behaviour logits; a central V-trace learner",
                 STAR, ("async", "sync"), _ALL),
    Architecture("apex", "archzoo.architectures.apex", C.ApexConfig,
                 "Ape-X: ε-ladder actors feed a prioritized replay; one double-DQN learner",
                 _REPLAY, ("async",), _TREES),
    Architecture("a3c", "archzoo.architectures.a3c", C.A3CConfig,
                 "A3C (async) / A2C (--mode sync): actor-learners push gradients to a "
                 "sharded PS, or all-reduce (--mode sync --topology ring|tree|...)",
                 RoleMap(Role("shard", _server_shards, "parameter-server shards (none when "
                              "all-reducing)", "K"),
                         Role("worker", ACTORS, "actor-learners")),
                 ("async", "sync"), _ALL),
    Architecture("gorila", "archzoo.architectures.gorila", C.GorilaConfig,
                 "Gorila: actors, a replay memory, L learners and a sharded parameter server",
                 RoleMap(Role("shard", "ps_shards", "PS shards", "K"), Role("replay"),
                         Role("learner", "learners", "learners", "L"), Role("actor", ACTORS)),
                 ("async",), _TREES),
    Architecture("gala", "archzoo.architectures.gala", C.GalaConfig,
                 "GALA/PALA: A2C agents averaging their models by gossip over a ring",
                 RoleMap(Role("agent", ACTORS, "agents (0 also keeps the learning curve)")),
                 ("async",), ("ring",)),
    Architecture("seed", "archzoo.architectures.seed", C.SeedConfig,
                 "SEED RL: actors only step envs; the learner batches their inference and "
                 "trains", RoleMap(Role("learner", what="learner + inference server"),
                                   Role("actor", ACTORS)),
                 ("async", "sync"), ("star",)),
    Architecture("r2d2", "archzoo.architectures.r2d2", C.R2D2Config,
                 "R2D2: Ape-X's replay roles on sequences of a recurrent Q-network, stored "
                 "state and burn-in", _REPLAY, ("async",), _TREES),
    Architecture("ga3c", "archzoo.architectures.ga3c", C.Ga3cConfig,
                 "GA3C: agents ask batched predictor threads; trainer threads update one "
                 "model", RoleMap(Role("server", what="server (predictor and trainer threads)"),
                                  Role("actor", ACTORS, "agents")),
                 ("async",), ("star",)),
)}

ENTRY_POINTS = "archzoo.architectures"  # the entry-point group of installed architectures

_USER_PATHS: list[str] = []  # where the user's architecture modules were imported from


def world_size(cfg: C.RunConfig, actors: int) -> int:
    """Processes for ``actors`` actors under ``cfg`` (one with 0), from the role map of its
    architecture's record."""
    return get(cfg.arch).roles.world_size(cfg, actors)


def actors_for(cfg: C.RunConfig, world: int) -> int:
    """Actors in a world of ``world`` processes under ``cfg`` (the inverse of world_size)."""
    return get(cfg.arch).roles.actors_for(cfg, world)


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
    file = getattr(top, "__file__", None)
    if file:
        path = Path(file).parent
        path = path.parent if Path(file).name == "__init__.py" else path
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
