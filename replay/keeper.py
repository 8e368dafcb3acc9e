"""``--checkpoint-replay``: a replay memory's own checkpoint, written where the memory lives.

Reverb checkpoints a replay server apart from the learner (Cassirer et al. 2021);
so does archzoo. Every rank that holds a replay memory (an Ape-X shard, Gorila's replay,
or the learner itself with ``--replay-shards 0`` or ``--actors 0``) writes
``RUN_DIR/checkpoints/replay-rank<r>.pt`` every ``--checkpoint-interval`` seconds and when
the run stops: the stored items, their priorities (the sum and min trees), the rate
limiter's counts and the sampling generator, atomically (a temporary name, then rename),
readable with ``torch.load(weights_only=True)``. On ``--resume`` the rank loads its file,
so the learner samples the old experience at once instead of refilling up to
``--learning-starts``. The file is the memory as it was at its own last save, not in
lockstep with the learner's checkpoint (nor is Reverb's): at most one interval of
inserts and priority updates differs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from archzoo.checkpoint import CheckpointError, checkpoint_dir

FORMAT = "archzoo-replay"
FORMAT_VERSION = 1


class ReplayKeeper:
    """Saves and restores one rank's replay memory and rate limiter (a no-op unless
    ``--checkpoint-replay``)."""

    def __init__(self, cfg: Any, rank: int, memory: Any, limiter: Any) -> None:
        """``memory`` None: this rank holds no replay (nothing to keep)."""
        self.enabled = bool(getattr(cfg, "checkpoint_replay", False)) and memory is not None
        self.path = checkpoint_dir(cfg.run_dir) / f"replay-rank{rank}.pt"
        self.memory, self.limiter, self.rank = memory, limiter, rank
        self.interval_s = cfg.checkpoint_interval
        self.last = time.monotonic()
        self.saved = 0
        if self.enabled and cfg.resume is not None and self.path.is_file():
            self.load()

    def maybe_save(self) -> None:
        if self.enabled and time.monotonic() - self.last >= self.interval_s:
            self.save()

    def save(self) -> Path | None:
        """Write the memory now (atomically); None when not enabled."""
        if not self.enabled:
            return None
        import torch

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        state = {"format": FORMAT, "format_version": FORMAT_VERSION,
                 "memory": self.memory.state_dict(),
                 "limiter": {"inserted": self.limiter.inserted,
                             "sampled": self.limiter.sampled}}
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.last = time.monotonic()
        self.saved += 1
        return self.path

    def load(self) -> None:
        import torch

        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - truncated, not a torch file
            raise CheckpointError(f"replay checkpoint {self.path}: cannot read it: {e}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT \
                or state.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"replay checkpoint {self.path}: not an archzoo replay "
                                  f"checkpoint of version {FORMAT_VERSION}")
        try:
            self.memory.load_state_dict(state["memory"])
        except (KeyError, ValueError) as e:
            raise CheckpointError(f"replay checkpoint {self.path}: {e}") from None
        self.limiter.inserted = int(state["limiter"]["inserted"])
        self.limiter.sampled = int(state["limiter"]["sampled"])
        print(f"archzoo: rank {self.rank}: replay restored from {self.path} "
              f"({len(self.memory):,} items)", file=sys.stderr, flush=True)
