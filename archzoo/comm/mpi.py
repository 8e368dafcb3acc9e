"""MPI engine over mpi4py's buffer API (capitalised ``Isend/Irecv``; never pickle).

MPICH has no timeouts and a blocked rank spins a core, so nothing here blocks:
every operation is non-blocking and :class:`~archzoo.comm.base.Transport` polls it
with ``Test`` and a backoff under its own deadline.

MPICH does not tell the survivors when a process dies (its fault-tolerance mode is not
built into the wheel), so the engine watches on its own: at start every rank shares its
kernel's boot id, pid namespace and pid, and a pending operation with a peer on the same
kernel raises :class:`PeerFailure` once that process is gone, as gloo does. Under ``mpiexec
-disable-auto-cleanup`` (which ``archzoo run --backend mpi`` passes) the job outlives the
dead rank, so an asynchronous run goes on without a dead actor; a peer on another host is
noticed only by the deadline of a wait on it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import zlib
from typing import NoReturn

import numpy as np

from archzoo.comm.base import DEFAULT_TIMEOUT_S, Request, Transport, as_bytes
from archzoo.comm.errors import PeerFailure


def _mpi():
    from archzoo.extras import require

    require("mpi", "the MPI engine (--backend mpi, a run under mpiexec)")
    import mpi4py

    mpi4py.rc.thread_level = "funneled"
    from mpi4py import MPI

    return MPI


class MPIRequest(Request):
    """One pending MPI operation with ``peer``.

    An error that ``Test`` raises is not always this operation's: MPICH's progress engine
    moves every transfer in flight on any call, and returns the error of whichever failed.
    A peer that dies in the middle of a message it sends fails the copy out of its memory
    (``process_vm_readv`` of a gone process, ESRCH) during the ``Test`` of any other request.
    MPICH tells the two apart: an error of the request's own completion frees it (the
    handle becomes ``MPI_REQUEST_NULL``), an error met in the progress engine leaves it
    pending. So an error is this request's when it freed the request or when its peer is
    gone; a pending request that met an error while another peer is gone (``lost``: the dead
    process's copy) is simply not done yet, and is tested again, at most
    :data:`FOREIGN_ERRORS` times in a row (then its peer is named, as before)."""

    __slots__ = ("peer", "what", "direction", "nbytes", "_req", "_done", "_on_done", "_buf",
                 "_rank", "_gone", "_lost", "_foreign")
    FOREIGN_ERRORS = 1000

    def __init__(self, req, buf: np.ndarray, peer, what: str, rank: int, on_done=None,
                 direction: str = "from", gone=None, lost=None) -> None:
        self._req = req
        self._buf: np.ndarray | None = buf  # kept alive until the request completes
        self.peer, self.what, self._rank, self.direction = peer, what, rank, direction
        self.nbytes = buf.nbytes
        self._done = False
        self._on_done = on_done
        self._gone = gone  # peer -> why it is gone, or None while it lives
        self._lost = lost  # the peers whose process is gone (refreshed by gone(now=True))
        self._foreign = 0  # errors in a row that were a dead peer's, not this request's

    def test(self) -> bool:
        if self._done:
            return True
        try:
            done = self._req.Test()
        except Exception as e:  # mpi4py raises MPI.Exception with ERRORS_RETURN
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            pending = bool(self._req)  # not freed: the error was not this request's own
            why = None
            for _ in range(50):  # a process being killed may still be listed for a moment
                if self._gone is None or (why := self._gone(self.peer, now=True)):
                    break
                if pending and self._lost is not None and set(self._lost) - {self.peer} and \
                        self._foreign < self.FOREIGN_ERRORS:
                    self._foreign += 1  # another peer's death, met in this Test: not ours
                    return False
                time.sleep(0.01)
            raise PeerFailure(self._rank, self.peer, self.what,
                              why or (lines[-1] if lines else repr(e))) from e
        self._foreign = 0
        if done:
            self._done = True
            self._buf = None
            if self._on_done is not None:
                self._on_done(self)
        elif self._gone is not None and (why := self._gone(self.peer)):
            raise PeerFailure(self._rank, self.peer, self.what, why)
        return done

    def cancel(self) -> None:
        if not self._done:
            self._req.Cancel()
            self._req.Wait()
            self._done = True
            self._buf = None


class MPITransport(Transport):
    """Point-to-point and collectives over MPI.COMM_WORLD (a dup of it; with ``rank``, a
    split of it in which this process has that rank)."""

    backend = "mpi"
    # MPICH moves a large message through shared memory in chunks, and only while some
    # MPI call runs on both sides: a waiter that sleeps stalls the copy. So poll longer.
    spin_s = 1e-3

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, rank: int | None = None) -> None:
        super().__init__(timeout_s)
        self.MPI = MPI = _mpi()
        self.comm = MPI.COMM_WORLD.Dup() if rank is None else MPI.COMM_WORLD.Split(0, rank)
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        self._pending: set[MPIRequest] = set()  # posted receives, withdrawn at shutdown
        self.lost: set[int] = set()  # peers whose process is gone
        self._places = self._share_places()
        self._checked = 0.0

    def _share_places(self) -> np.ndarray:
        """(kernel, pid namespace, pid) of every rank, for :meth:`gone` (a non-blocking
        all-gather): two ranks see each other's pids when they run on the same kernel (the
        same boot id; the host name where there is none) in the same pid namespace."""
        try:
            pidns = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            pidns = 0
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                kernel = f.read().strip()
        except OSError:
            kernel = socket.gethostname()
        mine = np.array([zlib.crc32(kernel.encode()), pidns, os.getpid()], np.int64)
        places = np.zeros((self.world_size, 3), np.int64)
        self.wait(MPIRequest(self.comm.Iallgather(mine, places), places, "any",
                             "every rank's host and pid", self.rank))
        return places

    def gone(self, peer, now: bool = False) -> str | None:
        """Why ``peer``'s process is gone, or None if it runs (or runs on another host,
        where it cannot be seen). Looked at every 0.2 s at most, unless ``now``."""
        if not isinstance(peer, int | np.integer):
            return None
        if peer in self.lost:
            return f"its process {int(self._places[peer, 2])} is gone"
        t = time.monotonic()
        if t - self._checked < 0.2 and not now:
            return None
        self._checked = t
        me = tuple(self._places[self.rank, :2])
        for r, (h, ns, pid) in enumerate(self._places):
            if r != self.rank and (h, ns) == me and r not in self.lost and not _alive(int(pid)):
                self.lost.add(r)
        return self.gone(peer) if peer in self.lost else None

    def isend(self, buf: np.ndarray, dst: int, tag: int, what: str = "message",
              synchronous: bool = False) -> MPIRequest:
        self._check_peer(dst)
        b = as_bytes(buf)
        send = self.comm.Issend if synchronous else self.comm.Isend
        req = MPIRequest(send([b, self.MPI.BYTE], dst, tag), b, dst, what,
                         self.rank, direction="to", gone=self.gone, lost=self.lost)
        self.counters.sent(dst, b.nbytes)
        return req

    def irecv(self, buf: np.ndarray, src: int, tag: int, what: str = "message") -> MPIRequest:
        self._check_peer(src)
        b = as_bytes(buf)
        req = MPIRequest(self.comm.Irecv([b, self.MPI.BYTE], src, tag), b, src, what, self.rank,
                         on_done=self._received, gone=self.gone, lost=self.lost)
        self._pending.add(req)
        return req

    def _received(self, req: MPIRequest) -> None:
        self.counters.received(req.peer, req.nbytes)
        self._pending.discard(req)

    def _ibarrier(self) -> MPIRequest:
        return MPIRequest(self.comm.Ibarrier(), np.zeros(0, np.uint8), "any", "barrier", self.rank)

    def _iallreduce(self, array: np.ndarray, op: str) -> MPIRequest:
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self._ops[op])
        return MPIRequest(req, array, "any", "all-reduce", self.rank)

    def _ibroadcast(self, array: np.ndarray, root: int) -> MPIRequest:
        return MPIRequest(self.comm.Ibcast(array, root=root), array, root, "broadcast", self.rank)

    def shutdown(self) -> None:
        """Withdraw receives that will never be matched, then leave MPI cleanly."""
        for r in list(self._pending):
            try:
                r.cancel()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        self._pending.clear()
        self.comm.Free()

    def finalize_and_exit(self, deadline_s: float, code: int = 0) -> NoReturn:
        """:meth:`shutdown`, ``MPI_Finalize``, then end the process with ``code`` through the C
        library's ``exit``. If that has not happened within ``deadline_s`` (``MPI_Finalize``
        waits for every rank of the job, and a dead one never comes) the process exits with
        ``code`` from a watchdog thread.

        Not ``os._exit``: hydra (MPICH 5) takes a rank that leaves by ``_exit``, even after
        ``MPI_Finalize``, for a failed one and SIGKILLs every rank still running, so the
        last rank to finish its own finalize was killed now and then (measured: 2 runs in
        20 of a 4-rank job). ``exit`` runs the C handlers that tell hydra the rank is done;
        Python's own teardown is still skipped (gloo and MPI receives may be posted)."""
        import ctypes
        import threading

        watchdog = threading.Timer(deadline_s, os._exit, args=(code,))
        watchdog.daemon = True
        watchdog.start()
        self.shutdown()
        _finalize_without_gil()
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).exit(code)  # releases the GIL: the watchdog still runs
        os._exit(code)  # not reached

    def abort(self, code: int = 1) -> None:
        """End the whole job (an uncaught error in one rank would otherwise hang MPICH)."""
        self.MPI.COMM_WORLD.Abort(code)


def _finalize_without_gil() -> None:
    """``MPI_Finalize`` through ctypes, which releases the GIL during the call (mpi4py's
    holds it, so no watchdog thread could run while it waits). The caller exits right after,
    without Python's teardown, so mpi4py's own finalize at exit never runs."""
    import ctypes

    from mpi4py import MPI

    lib = ctypes.CDLL(MPI.__file__, mode=ctypes.RTLD_GLOBAL)  # resolves libmpi's symbols
    lib.MPI_Finalize()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet reaped by
    mpiexec's proxy, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
