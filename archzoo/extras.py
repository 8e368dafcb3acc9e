"""archzoo's optional parts, and the extra that installs each.

The core (torch, numpy, gymnasium, rich, matplotlib) runs every architecture on gymnasium's
own environments over gloo. The rest is optional (pyproject.toml's
``[project.optional-dependencies]``; ``archzoo[all]`` is all of them, and ``.[test]``
includes it):

- ``atari``: ALE ids (``ALE/Pong-v5``) — ale-py and OpenCV (gymnasium's Atari preprocessing);
- ``minatar``: MinAtar ids (``MinAtar/Breakout-v1``);
- ``mpi``: the MPI engine (``--backend mpi``, runs under ``mpiexec``) — mpi4py and MPICH;
- ``tensorboard``: TensorBoard event files in the run directory;
- ``video``: ``archzoo eval --video`` and ``--record-video`` — imageio, its ffmpeg and
  pygame (CartPole's renderer);
- ``wandb``: ``--wandb``, the run tracked in Weights & Biases (archzoo/tracking.py);
- ``bench``: the learning benchmark's statistics (``archzoo bench learning``) — rliable,
  with ``arch<8`` and ``pandas<3`` (arch 7 does not import under pandas 3).

:func:`require` imports what an extra provides, or raises :class:`MissingExtra` with one
line that names the extra and the command that installs it; :func:`problem` is that line
for a check before anything starts (it finds the modules without importing them).
"""

from __future__ import annotations

import importlib
import importlib.util

from archzoo.errors import UsageError

EXTRAS: dict[str, tuple[str, ...]] = {
    "atari": ("ale_py", "cv2"),
    "minatar": ("minatar",),
    "mpi": ("mpi4py",),
    "tensorboard": ("tensorboard",),
    "video": ("imageio", "imageio_ffmpeg"),
    "wandb": ("wandb",),
    "bench": ("rliable", "arch", "pandas"),
}


class MissingExtra(UsageError, ImportError):
    """An optional part that is not installed: one line, exit code 2."""


def missing(extra: str) -> str | None:
    """The first module of ``extra`` that cannot be imported (None: all can)."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            return module
    return None


def _line(extra: str, what: str, module: str) -> str:
    return (f"{what} needs archzoo's {extra} extra (no module {module!r}): "
            f"pip install 'archzoo[{extra}]'")


def problem(extra: str, what: str) -> str | None:
    """:func:`require`'s line if one of ``extra``'s modules is not installed, else None;
    nothing is imported."""
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return _line(extra, what, module)
    return None


def require(extra: str, what: str) -> None:
    """Import ``extra``'s modules; MissingExtra naming it if one is missing (``what``: what
    needs it, e.g. "--env ALE/Pong-v5")."""
    module = missing(extra)
    if module is not None:
        raise MissingExtra(_line(extra, what, module))
