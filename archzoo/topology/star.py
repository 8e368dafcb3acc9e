"""Star topology: the root exchanges with every other rank directly (docs/topologies.md).

Used for the central learner's parameter broadcast: the root sends N−1 messages per
version, one per leaf, and the root's load grows with N (what tree and butterfly spread).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from archzoo.comm.base import Request, Transport
from archzoo.messages import Message, Schema


def params_schema(num_params: int, ranks: int = 0) -> Schema:
    """Flat float32 parameters plus the version (number of learner updates); with ``ranks``,
    also ``used``: per rank, how many of its messages the learner has used (the credit of
    :class:`~archzoo.comm.sender.SendWindow`)."""
    fields = [("params", np.float32, (num_params,)), ("version", np.int64, ())]
    return Schema("params", fields + ([("used", np.int64, (ranks,))] if ranks else []))


class StarPublisher:
    """Non-blocking broadcast of the latest parameters from the root to each leaf.

    Each leaf has its own send buffer. :meth:`publish` copies the newest version into
    a leaf's buffer and sends it if the leaf took the previous one; otherwise that leaf
    is marked stale and :meth:`pump` sends it the newest version as soon as it can, so
    a slow leaf skips versions instead of queueing them (IMPALA's actors fetch the
    latest parameters; the gap is the policy lag).
    """

    def __init__(self, transport: Transport, schema: Schema, leaves: Iterable[int],
                 tag: int) -> None:
        self.transport, self.tag = transport, tag
        self.latest: Message = schema.new()
        self.leaves = list(leaves)
        self._buf = {leaf: schema.new() for leaf in self.leaves}
        self._req: dict[int, Request | None] = dict.fromkeys(self.leaves)
        self._stale: set[int] = set()
        self.messages = 0

    def drop(self, leaf: int) -> None:
        """Stop sending to ``leaf`` (its process died)."""
        if leaf in self.leaves:
            self.leaves.remove(leaf)
            self._req.pop(leaf, None)
            self._buf.pop(leaf, None)
            self._stale.discard(leaf)

    def publish(self, params: np.ndarray | None = None, version: int | None = None) -> None:
        """Make (``params``, ``version``) the latest, or re-send ``self.latest`` as filled."""
        if params is not None:
            self.latest["params"][:] = params
        if version is not None:
            self.latest["version"][...] = version
        self._stale = set(self.leaves)
        self.pump()

    def pump(self) -> None:
        """Send the latest version to every stale leaf whose previous send completed."""
        for leaf in list(self._stale):
            req = self._req[leaf]
            if req is not None and not req.test():
                continue
            self._buf[leaf].copy_from(self.latest)
            self._req[leaf] = self.transport.isend(self._buf[leaf].buffer, leaf, self.tag,
                                                   "parameters", synchronous=True)
            self.messages += 1
            self._stale.discard(leaf)

    def wait_all(self, timeout_s: float | None = None, on_poll=None) -> None:
        """Wait until every leaf has taken the latest version (sync mode, and at stop)."""
        while True:
            self.pump()
            pending = [r for r in self._req.values() if r is not None and not r.test()]
            if not pending and not self._stale:
                return
            if pending:  # else a send completed after pump's test: pump again
                self.transport.wait(pending[0], timeout_s, on_poll)
