"""A worker's side of a K-shard parameter server.

The client splits the flat gradient by :func:`~archzoo.paramserver.shard.shard_bounds`,
starts the push to every shard before waiting on any (the shards work concurrently, as in
Gorila's sharded server, Nair et al. 2015), then gathers the replies shard by shard into one
flat parameter vector plus one version per shard. An A3C actor-learner (Mnih et al. 2016,
Algorithm S3) pulls, computes the gradient of its loss over t_max steps, clips it here with
:func:`clip_grad_norm` and pushes; the reply to the push is the fresh parameters.

One request (push or pull) per client is in flight at a time: :meth:`PSClient.wait_params` must
take its reply before the next one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from archzoo.comm import CommError, Inbox, Request, Transport
from archzoo.paramserver.optim import as_f32
from archzoo.paramserver.shard import (
    BYE,
    PULL,
    STAT_FIELDS,
    Outcome,
    PSTags,
    push_schema,
    reply_schema,
    request_schema,
    shard_bounds,
)


def clip_grad_norm(grad: object, max_norm: float) -> float:
    """Scale ``grad`` (flat, in place) so its global L2 norm is at most ``max_norm``, like
    ``torch.nn.utils.clip_grad_norm_``; returns the norm before clipping. Clipping is the
    client's business: the norm is over the whole vector, which no shard sees."""
    g = as_f32(grad, "grad")
    norm = float(np.sqrt(np.dot(g.astype(np.float64), g.astype(np.float64))))
    if not math.isfinite(norm):
        raise FloatingPointError(f"gradient norm is {norm}")
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        np.multiply(g, np.float32(coef), out=g)
    return norm


class PSClient:
    """Pushes gradients to and pulls parameters from the shards at ranks ``shards``.

    After :meth:`wait_params`: ``params`` (the client's own flat buffer, overwritten by the
    next reply), ``versions`` (one per shard), ``outcomes`` (:class:`Outcome` per shard) and
    ``stats`` (each shard's counters, rows of :data:`STAT_FIELDS`).
    """

    def __init__(self, transport: Transport, shards: Sequence[int], n_params: int,
                 tags: PSTags, timeout_s: float | None = None) -> None:
        self.t, self.shards, self.n, self.tags = transport, list(shards), int(n_params), tags
        self.timeout_s = transport.timeout_s if timeout_s is None else timeout_s
        k = len(self.shards)
        self.bounds = shard_bounds(self.n, k)
        self.params = np.zeros(self.n, np.float32)
        self.versions = np.full(k, -1, np.int64)  # -1: never heard from the shard
        self.outcomes = np.zeros(k, np.int64)
        self.stats = np.zeros((k, len(STAT_FIELDS)), np.int64)
        sizes = [hi - lo for lo, hi in self.bounds]
        self._push = [push_schema(m).new() for m in sizes]
        self._req = [request_schema().new() for _ in sizes]
        self._replies = [Inbox(transport, reply_schema(m), [s], tags.reply, depth=1,
                               what=f"parameters of shard {i}")
                         for i, (s, m) in enumerate(zip(self.shards, sizes, strict=True))]
        self._sends: list[list[Request]] = [[] for _ in self.shards]
        self._seq = 0
        self._awaiting = False
        self.closed = False
        self.pushes = 0
        self.pulls = 0

    # -- requests ----------------------------------------------------------------------------
    def pull(self) -> None:
        """Ask every shard for its parameters; take them with :meth:`wait_params`."""
        self._start()
        for i, s in enumerate(self.shards):
            m = self._req[i]
            self._settle_sends(i)
            m["seq"][...], m["kind"][...] = self._seq, PULL
            lo, hi = self.bounds[i]
            m["size"][...] = hi - lo
            self._sends[i].append(self.t.isend(m.buffer, s, self.tags.request,
                                               f"parameter request to shard {i}"))
        self.pulls += 1
        self._awaiting = True

    def push(self, grad: object, versions: Sequence[int] | np.ndarray | None = None) -> None:
        """Send the gradient of the loss, split by shard, to every shard at once.

        ``versions``: per shard, the version the gradient was computed on; by default the
        versions of the last parameters received (so :meth:`pull` must have come first)."""
        g = as_f32(grad, "grad").reshape(-1)
        if g.size != self.n:
            raise ValueError(f"gradient of {g.size} values, the parameters have {self.n}")
        v = self.versions if versions is None else np.asarray(versions, np.int64)
        if v.shape != self.versions.shape or (v < 0).any():
            raise ValueError(f"versions {v.tolist()}: pull() first, or give one version "
                             f"(>= 0) per shard")
        self._start()
        for i, s in enumerate(self.shards):
            m = self._push[i]
            self._settle_sends(i)
            lo, hi = self.bounds[i]
            m["seq"][...], m["version"][...] = self._seq, v[i]
            np.copyto(m["grad"], g[lo:hi])
            self._sends[i].append(self.t.isend(m.buffer, s, self.tags.push,
                                               f"gradient push to shard {i}"))
        self.pushes += 1
        self._awaiting = True

    def wait_params(self, timeout_s: float | None = None,
                    on_poll: Callable[[], object] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Take every shard's reply to the last request: ``(params, versions)``.

        One deadline for all shards; a PeerTimeout names the shard that did not answer."""
        if not self._awaiting:
            raise RuntimeError("no request in flight: pull() or push() first")
        t0 = time.monotonic()
        budget = self.timeout_s if timeout_s is None else timeout_s
        for i, s in enumerate(self.shards):
            left = max(0.0, budget - (time.monotonic() - t0))
            msg = self._replies[i].recv_from(s, left, on_poll)
            seq = int(msg["seq"])
            if seq != self._seq:
                raise CommError(f"rank {self.t.rank}: shard {i} (rank {s}) answered request "
                                f"{seq}, expected {self._seq}")
            lo, hi = self.bounds[i]
            np.copyto(self.params[lo:hi], msg["params"])
            self.versions[i] = int(msg["version"])
            self.outcomes[i] = int(msg["outcome"])
            self.stats[i] = msg["stats"]
            self._replies[i].release(s)
        self._awaiting = False
        return self.params, self.versions.copy()

    def sync(self, timeout_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pull and wait: the current parameters and versions."""
        self.pull()
        return self.wait_params(timeout_s)

    def exchange(self, grad: object,
                 timeout_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Push a gradient computed on the last parameters received and wait for the reply."""
        self.push(grad)
        return self.wait_params(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Take a reply still due, then say BYE to every shard and wait until it was taken."""
        if self.closed:
            return
        if self._awaiting:
            self.wait_params(timeout_s)
        self._seq += 1
        for i, s in enumerate(self.shards):
            self._settle_sends(i)
            m = self._req[i]
            m["seq"][...], m["kind"][...], m["size"][...] = self._seq, BYE, 0
            self._sends[i].append(self.t.isend(m.buffer, s, self.tags.request,
                                               f"BYE to shard {i}"))
        for i in range(len(self.shards)):
            self._settle_sends(i, timeout_s)
        self.closed = True

    # -- views -------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        """The number of the last request (pull, push and BYE alike are numbered 1, 2, ...);
        the shard's record names a push by it."""
        return self._seq

    def shard_stats(self) -> list[dict[str, int]]:
        """Each shard's counters as of its last reply."""
        return [dict(zip(STAT_FIELDS, map(int, row), strict=True)) for row in self.stats]

    def outcome(self, i: int) -> Outcome:
        return Outcome(int(self.outcomes[i]))

    # -- internals ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self.closed:
            raise RuntimeError("this client said BYE")
        if self._awaiting:
            raise RuntimeError("a reply is still due: wait_params() before the next request")
        self._seq += 1

    def _settle_sends(self, i: int, timeout_s: float | None = None) -> None:
        """Wait for earlier sends to shard i (their buffers are about to be reused; the shard
        has answered them, so they complete at once)."""
        for r in self._sends[i]:
            self.t.wait(r, timeout_s)
        self._sends[i].clear()
