"""Checkpoint files: what the deciding rank writes to resume a run from.

A checkpoint is one ``torch.save`` of nested dicts and lists holding only tensors and
plain Python types, so ``torch.load(path, weights_only=True)`` reads it without archzoo.
It is written atomically (to a temporary name in the same directory, flushed to disk,
then renamed) as ``RUN_DIR/checkpoints/ckpt-<env steps>.pt``; the last ``keep`` are kept.
Its ``format_version`` lets a later archzoo refuse or migrate an older file with a clear
error instead of a KeyError deep inside a load.

Contents (top level): ``format`` and ``format_version``; ``arch``; ``saved_at`` (Unix
time); ``monitor`` (the learning curve's counters, :meth:`Monitor.state_dict`); ``rng``
(the deciding rank's torch, numpy and Python generators); and one entry per part the
architecture registered (for example ``learner``: model, optimizer, version).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

if TYPE_CHECKING:
    import torch

FORMAT = "archzoo-checkpoint"
FORMAT_VERSION = 1
DIRNAME = "checkpoints"
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class NumpyRng(TypedDict):
    """numpy's legacy generator (``np.random.get_state()``), its keys as a tensor."""
    kind: str
    keys: torch.Tensor
    pos: int
    has_gauss: int
    gauss: float


class PythonRng(TypedDict):
    """Python's generator (``random.getstate()``), its state as a list."""
    version: int
    state: list[int]
    gauss: float | None


class RngState(TypedDict):
    """A process's random generators, as a checkpoint holds them (:func:`rng_state`)."""
    torch: torch.Tensor
    numpy: NumpyRng
    python: PythonRng


class CheckpointError(Exception):
    """A checkpoint that cannot be used: missing, unreadable, or of another format."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / DIRNAME


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoints, oldest first (by the env steps in their names)."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save(run_dir: str | Path, state: Mapping[str, object], step: int, keep: int) -> Path:
    """Write ``state`` atomically as the checkpoint of ``step``; keep the last ``keep``."""

    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"ckpt-{step:012d}.pt"
    write_atomic(final, state)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def write_atomic(path: Path, state: Mapping[str, object]) -> None:
    """``torch.save`` ``state`` with the format fields to a temporary name in the same
    directory, flush it to disk, then rename: a reader sees the old file or the new one."""
    import torch

    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` and check its format version."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, not a torch file, unsafe types
        raise CheckpointError(f"checkpoint {path}: cannot read it: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: not an archzoo checkpoint")
    version = state.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path}: format version {version}, this archzoo reads version "
            f"{FORMAT_VERSION} (use the archzoo that wrote it, or start a new run)")
    return state


def rng_state() -> RngState:
    """This process's torch, numpy and Python random generators, as tensors and lists."""
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                      "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": {"version": py_version, "state": list(py_state), "gauss": py_gauss}}


def set_rng_state(state: RngState) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


class Checkpointer:
    """Writes ``state()`` every ``interval_s`` seconds (checked when :meth:`maybe_save`
    is called) and on :meth:`save`."""

    def __init__(self, run_dir: str | Path, interval_s: float, keep: int,
                 state: Callable[[], Mapping[str, object]], step: Callable[[], int],
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.run_dir, self.interval_s, self.keep = Path(run_dir), interval_s, keep
        self.state, self.step = state, step
        self.clock = clock or time.monotonic
        self.last = self.clock()
        self.saved = 0
        self.save_s = 0.0

    def maybe_save(self) -> Path | None:
        if self.clock() - self.last < self.interval_s:
            return None
        return self.save()

    def save(self) -> Path:
        import time

        t0 = time.perf_counter()
        path = save(self.run_dir, self.state(), self.step(), self.keep)
        self.saved += 1
        self.save_s += time.perf_counter() - t0
        self.last = self.clock()
        return path


class OwnCheckpoint:
    """A rank's own checkpoint file, ``RUN_DIR/checkpoints/<name>.pt``, for state that lives
    on a rank other than the deciding one (a replay memory, a parameter-server slice): one
    file, replaced atomically, with ``format`` and ``kind`` checked on load."""

    def __init__(self, run_dir: str | Path, name: str, kind: str, interval_s: float) -> None:
        import time

        self.path = checkpoint_dir(run_dir) / f"{name}.pt"
        self.kind, self.interval_s = kind, interval_s
        self._clock = time.monotonic
        self.last = self._clock()
        self.saved = 0

    def due(self) -> bool:
        """At least ``interval_s`` since the last save."""
        return self._clock() - self.last >= self.interval_s

    def save(self, state: Mapping[str, object]) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, {"kind": self.kind, **state})
        self.last = self._clock()
        self.saved += 1
        return self.path

    def load(self) -> dict[str, Any]:
        """The file's contents; :class:`CheckpointError` if it is missing, unreadable, of
        another format version or of another kind."""
        if not self.path.is_file():
            raise CheckpointError(f"--resume: no {self.kind} checkpoint {self.path} (the run "
                                  "did not write one before it ended)")
        state = load(self.path)
        if state.get("kind") != self.kind:
            raise CheckpointError(f"checkpoint {self.path}: holds {state.get('kind')!r}, "
                                  f"not {self.kind!r}")
        return state
