"""``--checkpoint-replay``: a replay memory's own checkpoint, written where the memory lives.

Reverb checkpoints a replay server apart from the learner (Cassirer et al. 2021); so does
archzoo. Every rank that holds a replay memory (an Ape-X shard, Gorila's replay, or the
learner itself with ``--replay-shards 0`` or ``--actors 0``) writes
``RUN_DIR/checkpoints/replay-rank<r>.pt`` (:class:`archzoo.checkpoint.OwnCheckpoint`)
every ``--checkpoint-interval`` seconds and when the run stops: the stored items, their
priorities (the sum and min trees), the rate limiter's counts and the sampling generator.
On ``--resume`` the rank loads its file, so the learner samples the old experience at once
instead of refilling up to ``--learning-starts``. The file is the memory as it was at its
own last save, not in lockstep with the learner's checkpoint (nor is Reverb's): at most
one interval of inserts and priority updates differs.
"""

from __future__ import annotations

import sys
from typing import Any

from archzoo.checkpoint import CheckpointError, OwnCheckpoint


class ReplayKeeper:
    """Saves and restores one rank's replay memory and rate limiter (a no-op unless
    ``--checkpoint-replay``)."""

    def __init__(self, cfg: Any, rank: int, memory: Any, limiter: Any) -> None:
        """``memory`` None: this rank holds no replay (nothing to keep)."""
        self.enabled = bool(getattr(cfg, "checkpoint_replay", False)) and memory is not None
        self.file = OwnCheckpoint(cfg.run_dir, f"replay-rank{rank}", "replay",
                                  cfg.checkpoint_interval)
        self.memory, self.limiter, self.rank = memory, limiter, rank
        if self.enabled and cfg.resume is not None and self.file.path.is_file():
            self.load()

    def maybe_save(self) -> None:
        if self.enabled and self.file.due():
            self.save()

    def save(self) -> None:
        if self.enabled:
            self.file.save({"memory": self.memory.state_dict(),
                            "limiter": {"inserted": self.limiter.inserted,
                                        "sampled": self.limiter.sampled}})

    def load(self) -> None:
        state = self.file.load()
        try:
            self.memory.load_state_dict(state["memory"])
        except (KeyError, ValueError) as e:
            raise CheckpointError(f"replay checkpoint {self.file.path}: {e}") from None
        self.limiter.inserted = int(state["limiter"]["inserted"])
        self.limiter.sampled = int(state["limiter"]["sampled"])
        print(f"archzoo: rank {self.rank}: replay restored from {self.file.path} "
              f"({len(self.memory):,} items)", file=sys.stderr, flush=True)
