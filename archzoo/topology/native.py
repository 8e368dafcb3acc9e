"""The engine's own collectives (gloo's or MPI's algorithms): the baseline the explicit
topologies are measured against (docs/topologies.md).

- broadcast: ``Transport.broadcast`` of the array's bytes (any dtype).
- all_reduce: ``Transport.all_reduce(op="sum")``, then one division by N for the mean.
- reduce: the all-reduce, after which the non-roots discard the result (they reduce a copy).
- gather: an all-reduce (sum) of a zero-padded ``[N, nbytes]`` uint8 block in which each rank
  filled its own row — exact for any dtype, since each byte has one non-zero contributor.

The engine's schedule is opaque, so no message counts are predicted; :attr:`rounds` counts one
per engine call.
"""

from __future__ import annotations

import numpy as np

from archzoo.comm.base import as_bytes
from archzoo.topology.base import Topology, divide


class NativeTopology(Topology):
    """Thin wrapper over the transport's native collectives. ``fanout``/``tag`` unused."""

    name = "native"

    def _broadcast(self, flat: np.ndarray, root: int) -> None:
        self.transport.broadcast(as_bytes(flat), root)
        self.rounds += 1

    def _all_reduce(self, flat: np.ndarray, mean: bool) -> None:
        self.transport.all_reduce(flat, "sum")
        self.rounds += 1
        if mean:
            divide(flat, self.size)

    def _reduce(self, flat: np.ndarray, root: int, mean: bool) -> None:
        self._all_reduce(flat if self.rank == root else flat.copy(), mean)

    def _gather(self, flat: np.ndarray, root: int) -> np.ndarray | None:
        raw = as_bytes(flat)
        block = np.zeros((self.size, raw.size), np.uint8)
        block[self.rank] = raw
        self.transport.all_reduce(block, "sum")
        self.rounds += 1
        if self.rank != root:
            return None
        return block.view(flat.dtype).reshape(self.size, flat.size)
