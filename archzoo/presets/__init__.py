"""Bundled presets: flag files that ship inside the package, ``NAME/ARCH.toml``.

``--config minatar`` (a bare name: no path separator, no extension, not an existing file)
is the architecture's preset ``archzoo/presets/minatar/ARCH.toml``; ``archzoo list
--configs`` lists them. A run on an id of a family (:data:`FAMILIES`: ``MinAtar/``,
``ALE/``) without ``--config`` takes that family's preset for its architecture, less the
env and the limits (:data:`AUTO_SKIPS`); ``--config none`` takes none. The files are
package data, read through :mod:`importlib.resources`, so an installed archzoo (editable or
not) finds them from any directory.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from importlib.resources.abc import Traversable

SUFFIX = ".toml"

FAMILIES = {"MinAtar/": "minatar", "ALE/": "atari"}
"""Env-id prefixes whose runs take a bundled preset when no ``--config`` is given."""
AUTO_SKIPS = ("env", "total-steps", "time-limit")
"""What a family's preset does not set when it applies by itself: the run's env and limits."""
NONE = "none"
"""``--config none``: no preset, not even the env family's."""


def _root() -> Traversable:
    return resources.files(__name__)


def names() -> list[str]:
    """The bundled presets, sorted: every folder here that holds ``ARCH.toml`` files."""
    return sorted(d.name for d in _root().iterdir()
                  if d.is_dir() and any(f.name.endswith(SUFFIX) for f in d.iterdir()))


def archs(name: str) -> list[str]:
    """The architectures that preset ``name`` has a file for, sorted."""
    return sorted(f.name[:-len(SUFFIX)] for f in (_root() / name).iterdir()
                  if f.name.endswith(SUFFIX))


def is_preset_name(value: str) -> bool:
    """``value`` is meant as a preset's name: no path separator and no extension."""
    return "/" not in value and "\\" not in value and "." not in value and value != ""


def find(name: str, arch: str) -> Traversable | None:
    """Preset ``name``'s file for ``arch``, or None when it has none."""
    f = _root() / name / f"{arch}{SUFFIX}"
    return f if name in names() and f.is_file() else None


def read(name: str, arch: str) -> str:
    f = find(name, arch)
    if f is None:
        raise KeyError(f"no preset {name!r} for {arch!r}")
    return f.read_text(encoding="utf-8")


def envs(name: str) -> list[str]:
    """The environment ids that preset ``name``'s files set (in practice one)."""
    seen: list[str] = []
    for arch in archs(name):
        env = tomllib.loads(read(name, arch)).get("env")
        if env is not None and env not in seen:
            seen.append(str(env))
    return seen


def family(env: str) -> str | None:
    """The bundled preset of ``env``'s family (``MinAtar/Breakout-v1`` -> ``minatar``), or
    None for an env outside the families."""
    return next((name for prefix, name in FAMILIES.items() if env.startswith(prefix)), None)


def describe() -> list[str]:
    """One line per preset: its name, the env it sets, the architectures it has."""
    rows = [(n, ", ".join(envs(n)) or "-", ", ".join(archs(n))) for n in names()]
    w_name = max((len(r[0]) for r in rows), default=0)
    w_env = max((len(r[1]) for r in rows), default=0)
    return [f"{n:{w_name}s}  env {e:{w_env}s}  archs: {a}" for n, e, a in rows]
