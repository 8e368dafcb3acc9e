"""A rank's tie to the processes that launched it: it learns at once when they die.

A rank started by a launcher must not outlive it: when ``archzoo run`` is killed (``kill
-9``, an OOM kill, a scheduler that signals only the parent), or the process between it and
the rank (archzoo's fork server, mpiexec and its proxy, torchrun's agent), the rank stops as
it would on SIGTERM. Two mechanisms, as the kernel offers them:

- ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (Linux): the kernel sends SIGTERM to the rank when
  its parent dies. It watches the parent *thread*, and only the parent: a forked rank's
  parent is the fork server (archzoo/forkstart.py), an MPI rank's is the shell hydra
  started, three processes below the launcher;
- a watch (:func:`watch`, a daemon thread): every :data:`POLL_S` it looks at each process of
  the rank's *lifeline*, its ancestors from its parent up to its launcher, each known by pid
  and start time (a pid the kernel gave to a new process is not the old one). The launcher
  is the process that ``ARCHZOO_LAUNCHER_PID`` names (archzoo.spawn sets it, as
  ``PID:START``), else the nearest mpiexec above the rank, else the parent itself.

A lost lifeline sends the rank SIGTERM (its handler, archzoo/worker.py, asks
:func:`lost` whether the launcher went), once. A rank that outlived its launcher removes the
launcher's temporary folders as it ends (:func:`clean_up`): the launcher would have.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from archzoo import envvars, procfs

PR_SET_PDEATHSIG = 1
POLL_S = 0.2
LAUNCHERS = ("mpiexec", "mpiexec.hydra", "mpirun", "hydra_pmi_proxy")  # /proc/PID/comm

Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def start_time(pid: int) -> int | None:
    """``pid``'s start time (field 22 of /proc/PID/stat), or None when it is gone or a
    zombie (or there is no /proc)."""
    fields = procfs.stat(pid)
    if fields is None or fields[procfs.STATE] in ("Z", "X"):
        return None
    return int(fields[procfs.STARTTIME])


def alive(proc: Process) -> bool:
    """Whether the process ``proc`` (pid, start time) still runs."""
    return start_time(proc[0]) == proc[1]


def this_process() -> str:
    """``PID:START`` of this process, for :data:`envvars.LAUNCHER_PID`."""
    return f"{os.getpid()}:{start_time(os.getpid()) or 0}"


def launcher() -> Process | None:
    """The launcher that :data:`envvars.LAUNCHER_PID` names, or None."""
    pid, _, start = os.environ.get(envvars.LAUNCHER_PID, "").partition(":")
    return (int(pid), int(start)) if pid.isdigit() and start.isdigit() else None


def ancestors() -> list[Process]:
    """This rank's lifeline: its ancestors from its parent up to its launcher (see the
    module's docstring), nearest first; empty where there is no /proc to watch it in."""
    if start_time(os.getpid()) is None:
        return []
    top = launcher()
    chain: list[Process] = []
    pid = os.getppid()
    while pid > 1 and len(chain) < 16:
        start = start_time(pid)
        if start is None:
            break
        chain.append((pid, start))
        if top is not None and pid == top[0]:
            return chain
        if top is None and procfs.comm(pid).startswith(LAUNCHERS[:3]):
            return chain
        pid = procfs.parent(pid) or 0
    # the launcher is not above us (gone already, or we were re-parented): the parent, and
    # the named launcher on its own
    lifeline = chain[:1]
    if top is not None and top not in lifeline:
        lifeline.append(top)
    return lifeline


def set_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel for ``signum`` when this process's parent dies (Linux; False
    elsewhere or where it failed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Watch:
    """This process's lifeline, watched from a daemon thread."""

    def __init__(self, lifeline: list[Process], on_lost: Callable[[str], None]) -> None:
        self.lifeline, self.on_lost = lifeline, on_lost
        self.why: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archzoo-lifeline",
                                        daemon=True)

    def check(self) -> str | None:
        """What of the lifeline is gone (one line), or None while all of it runs."""
        if self.why is not None:
            return self.why
        for pid, start in self.lifeline:
            if start_time(pid) != start:
                what = "launcher" if (pid, start) == self.lifeline[-1] else "parent"
                name = _comm_of(pid, start)
                self.why = f"its {what} (pid {pid}{name}) is gone"
                return self.why
        return None

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            if self.check() is not None:
                self.on_lost(self.why or "")
                return

    def start(self) -> Watch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()


_COMMS: dict[Process, str] = {}


def _comm_of(pid: int, start: int) -> str:
    name = _COMMS.get((pid, start), "")
    return f", {name}" if name else ""


_WATCH: list[Watch] = []


def watch(on_lost: Callable[[str], None] | None = None) -> Watch:
    """Watch this process's lifeline (:func:`ancestors`) from now on: the kernel's parent
    death signal (SIGTERM), and a thread that calls ``on_lost(why)`` once any of it is gone
    (default: SIGTERM to this process, whose handler asks :func:`lost`)."""
    set_parent_death_signal(signal.SIGTERM)
    lifeline = ancestors()
    for p in lifeline:
        _COMMS[p] = procfs.comm(p[0])
    w = Watch(lifeline, on_lost or (lambda why: os.kill(os.getpid(), signal.SIGTERM)))
    _WATCH[:] = [w]
    if w.check() is not None:  # gone before we looked (the parent died during start-up)
        w.on_lost(w.why or "")
        return w
    return w.start()


def lost() -> str | None:
    """Why this process's launcher is gone (one line), or None while it runs or nothing
    watches it."""
    return _WATCH[-1].check() if _WATCH else None


TMP_PREFIXES = ("archzoo-", "pymp-")  # archzoo.launcher's and spawn's; multiprocessing's


def clean_up() -> list[str]:
    """Remove the temporary folders of this process's launcher (:data:`envvars.LAUNCHER_TMP`)
    if that launcher is gone, for no one else is left to; the folders removed.

    Only the launcher reads what is in them (the ranks' marks, their death notes, their
    output files where it captured them, the fork server's socket): once it is gone by pid
    and start time, nothing will. A rank still writing there finds the folder gone
    (envvars' marks and archzoo.spawn's rank shell take that quietly); another rank may
    have removed it first. Only folders named as archzoo and multiprocessing name theirs
    (:data:`TMP_PREFIXES`) are removed."""
    folders = [f for f in os.environ.get(envvars.LAUNCHER_TMP, "").split(os.pathsep)
               if Path(f).name.startswith(TMP_PREFIXES)]
    top = launcher()
    if not folders or top is None or start_time(os.getpid()) is None or alive(top):
        return []  # (no /proc: no word on the launcher)
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)
    return folders


def unwatch() -> None:
    """Stop watching (the rank is ending)."""
    for w in _WATCH:
        w.close()
    _WATCH.clear()
