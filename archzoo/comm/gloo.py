"""torch.distributed (gloo) engine.

Two facts about gloo shape this module:
``Work.is_completed()`` of a point-to-point op stays False until someone calls
``wait()``, and ``wait(timeout)`` that expires closes the connection. So each
(peer, tag, direction) gets a daemon *waiter thread* that calls the blocking
``wait()`` (which releases the GIL) in posting order and flags completion; the
main thread polls the flag and enforces its own deadline. A dead peer makes the
pending ``wait()`` raise at once, which surfaces as PeerFailure naming it.
Gloo cannot withdraw a posted receive, so a finished rank leaves with
``os._exit`` after the final barrier (see archzoo.worker).
"""

from __future__ import annotations

import datetime
import os
import queue
import threading

import numpy as np
import torch
import torch.distributed as dist

from archzoo.comm.base import DEFAULT_TIMEOUT_S, Request, Transport, as_bytes
from archzoo.comm.errors import CommError, PeerFailure

# Our own deadlines govern every wait; the group's timeout only bounds gloo's internal waits,
# and a posted receive may legitimately sit idle for a whole run.
_GROUP_TIMEOUT = datetime.timedelta(days=7)
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class GlooRequest(Request):
    __slots__ = ("peer", "what", "direction", "nbytes", "_work", "_done", "_error", "_on_done",
                 "_tensor")

    def __init__(self, work: dist.Work, tensor: torch.Tensor, peer: int, what: str,
                 on_done=None) -> None:
        self._work, self._tensor = work, tensor
        self.peer, self.what = peer, what
        self.direction = "from"
        self.nbytes = tensor.numel() * tensor.element_size()
        self._done = False
        self._error: BaseException | None = None
        self._on_done = on_done

    def test(self) -> bool:
        if not self._done:
            return False
        if self._error is not None:
            raise PeerFailure(self._rank(), self.peer, self.what, self._error)
        if self._on_done is not None:
            cb, self._on_done = self._on_done, None
            cb(self)
        return True

    @staticmethod
    def _rank() -> int:
        return dist.get_rank() if dist.is_initialized() else -1


class _Waiter(threading.Thread):
    """Waits on gloo works in posting order, flags each one done and signals progress."""

    def __init__(self, name: str, progress: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.queue: queue.SimpleQueue[GlooRequest] = queue.SimpleQueue()
        self.progress = progress
        self.start()

    def run(self) -> None:
        while True:
            req = self.queue.get()
            try:
                req._work.wait()
            except BaseException as e:  # noqa: BLE001 - the error is re-raised by test()
                req._error = e
            req._done = True
            self.progress.set()


class GlooTransport(Transport):
    """Point-to-point and collectives over a gloo process group on TCP."""

    backend = "gloo"

    def __init__(self, rank: int, world_size: int, master_addr: str, master_port: int,
                 timeout_s: float = DEFAULT_TIMEOUT_S, startup_timeout_s: float = 120.0,
                 agent_store: bool = False, store_host: bool | None = None) -> None:
        """``store_host``: this process hosts the TCPStore (default: rank 0; the launcher's
        first process when archzoo's ranks are rotated, ``--servers-on last``)."""
        super().__init__(timeout_s)
        self.rank, self.world_size = rank, world_size
        store = dist.TCPStore(
            master_addr, master_port, world_size,
            is_master=((rank == 0 if store_host is None else store_host) and not agent_store),
            timeout=datetime.timedelta(seconds=startup_timeout_s),
            wait_for_workers=False,
        )
        # torchrun's store outlives a restarted worker group: a generation prefix keeps the
        # new group from reading the addresses of the dead one
        generation = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        prefixed = dist.PrefixStore(f"archzoo/generation-{generation}", store)
        try:
            dist.init_process_group("gloo", store=prefixed, rank=rank, world_size=world_size,
                                    timeout=_GROUP_TIMEOUT)
        except RuntimeError as e:  # a rank died or is unreachable while the group forms
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else repr(e)
            raise CommError(f"rank {rank}: could not form the gloo group of {world_size} "
                            f"ranks at {master_addr}:{master_port}: {first}") from None
        self._waiters: dict[tuple, _Waiter] = {}
        self._progress = threading.Event()  # set by a waiter thread whenever a work completes

    def _waiter(self, key: tuple) -> _Waiter:
        w = self._waiters.get(key)
        if w is None:
            w = self._waiters[key] = _Waiter(f"gloo-wait-{key}", self._progress)
        return w

    def idle(self, seconds: float) -> None:
        """Sleep until a waiter thread reports a completion, or ``seconds`` pass.

        Polling loops re-test their requests after this returns, and a request's done
        flag is set before the event, so clearing here can't lose a completion."""
        self._progress.wait(seconds)
        self._progress.clear()

    def isend(self, buf: np.ndarray, dst: int, tag: int, what: str = "message",
              synchronous: bool = True) -> GlooRequest:  # gloo's sends are rendezvous
        self._check_peer(dst)
        t = torch.from_numpy(as_bytes(buf))
        try:
            work = dist.isend(t, dst=dst, tag=tag)
        except RuntimeError as e:
            raise PeerFailure(self.rank, dst, f"sending {what}", e) from e
        if work is None:  # torch returns None only to a rank outside the group
            raise PeerFailure(self.rank, dst, f"sending {what}", "this rank is in no group")
        req = GlooRequest(work, t, dst, what)
        req.direction = "to"
        self.counters.sent(dst, req.nbytes)
        self._waiter(("send", dst, tag)).queue.put(req)
        return req

    def irecv(self, buf: np.ndarray, src: int, tag: int, what: str = "message") -> GlooRequest:
        self._check_peer(src)
        t = torch.from_numpy(as_bytes(buf))
        try:
            work = dist.irecv(t, src=src, tag=tag)
        except RuntimeError as e:
            raise PeerFailure(self.rank, src, f"receiving {what}", e) from e
        if work is None:  # torch returns None only to a rank outside the group
            raise PeerFailure(self.rank, src, f"receiving {what}", "this rank is in no group")
        req = GlooRequest(work, t, src, what,
                          on_done=lambda r: self.counters.received(r.peer, r.nbytes))
        self._waiter(("recv", src, tag)).queue.put(req)
        return req

    def _collective(self, work: dist.Work, t: torch.Tensor, what: str) -> GlooRequest:
        req = GlooRequest(work, t, -1, what)
        req.peer = "any"  # type: ignore[assignment]
        self._waiter(("collective",)).queue.put(req)
        return req

    def _ibarrier(self) -> GlooRequest:
        t = torch.zeros(1)
        return self._collective(dist.all_reduce(t, async_op=True), t, "barrier")

    def _iallreduce(self, array: np.ndarray, op: str) -> GlooRequest:
        t = torch.from_numpy(array)
        return self._collective(dist.all_reduce(t, op=_OPS[op], async_op=True), t, "all-reduce")

    def _ibroadcast(self, array: np.ndarray, root: int) -> GlooRequest:
        t = torch.from_numpy(array)
        return self._collective(dist.broadcast(t, src=root, async_op=True), t, "broadcast")

    def shutdown(self) -> None:
        """Nothing to withdraw: gloo cannot cancel posted receives, so the caller ends the
        process with ``os._exit`` (archzoo.worker) and the pending receives die with it."""
