"""A replay memory of whole unrolls, for learners that mix replayed unrolls with fresh ones.

CLEAR (Rolnick et al. 2019) and LASER (Schmitt, Hessel & Simonyan 2020) train IMPALA's
V-trace learner on a mixture of the unrolls the actors just sent and unrolls sampled from a
replay memory; V-trace corrects for the replayed unrolls' older behaviour policies.
:class:`UnrollReplay` is that memory: a FIFO :class:`~archzoo.replay.memory.UniformReplay` with one
item per unroll, sampled uniformly.

It copies what it keeps. An unroll from an ``Inbox`` is a view into a posted receive buffer
that the next message overwrites once it is released, so keeping the message itself would
replay whatever arrived last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from archzoo.messages import Schema
from archzoo.replay.memory import UniformReplay


class UnrollReplay:
    """The last ``capacity`` unrolls of ``schema`` (its ``fields``, default all of them),
    evicted oldest first, sampled uniformly with replacement."""

    def __init__(self, schema: Schema, capacity: int, seed: int = 0,
                 fields: Iterable[str] | None = None) -> None:
        self.fields = list(schema.fields if fields is None else fields)
        unknown = [k for k in self.fields if k not in schema.fields]
        if unknown:
            raise ValueError(f"schema {schema.name!r} has no fields {unknown}")
        self.memory = UniformReplay(capacity, {k: (schema.fields[k].shape,
                                                   schema.fields[k].dtype)
                                               for k in self.fields}, seed=seed)
        self.added = 0  # unrolls ever added
        self.sampled = 0  # unrolls ever sampled

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, unrolls: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Copy ``unrolls`` (messages or dicts of arrays) into the memory."""
        if unrolls:
            self.memory.add({k: np.stack([u[k] for u in unrolls]) for k in self.fields})
            self.added += len(unrolls)

    def sample(self, n: int) -> list[dict[str, np.ndarray]]:
        """``n`` unrolls drawn uniformly with replacement, each a dict of its fields (copies:
        later adds do not change them); none while the memory is empty."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n == 0 or len(self.memory) == 0:
            return []
        data = self.memory.sample(n).data
        self.sampled += n
        return [{k: v[i] for k, v in data.items()} for i in range(n)]
