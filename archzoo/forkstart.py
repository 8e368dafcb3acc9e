"""Start ranks on this machine as forks of one process that has imported torch already.

Every rank of an embedded run used to be a fresh interpreter, and each one imported torch
on its own: about 2.5 s of CPU, most of a short run's start-up on a small machine. Here a
server process (Python's :mod:`multiprocessing` *forkserver*) imports torch and archzoo's
rank modules once, and every rank is a fork of it. A fork imports nothing again, shares
those pages with the server, and starts before the server has done anything with torch but
import it: no thread pool, no process group and no CUDA context exist yet to be copied.

A forked rank is what ``python -m MODULE ARGS`` or ``python SCRIPT ARGS`` would be: it takes
the environment, working directory and ``sys.argv`` it is given, runs the module or script as
``__main__``, and exits with its code (a signal's as ``-signum``). What it does not do is an
interpreter's own shutdown: like every :mod:`multiprocessing` child it ends with
``os._exit`` after its non-daemon threads and flushing stdout and stderr, so ``atexit``
functions do not run (archzoo registers none). Its title, what ``ps`` and /proc/PID/cmdline
show, is that command line and ``[rank R of N]`` (:func:`title`); its /proc/PID/environ is
the server's, as a fork cannot change it.

The launcher hands each rank to the server through multiprocessing's own local socket (a
pickled :class:`multiprocessing.Process`); nothing crosses a network that way.

:class:`ForkedRank` has the parts of :class:`subprocess.Popen` that archzoo.spawn uses.
"""

from __future__ import annotations

import importlib.machinery
import multiprocessing
import os
import runpy
import shlex
import signal
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import setproctitle

__all__ = ["PRELOAD", "ForkedRank", "forkable", "start"]

PRELOAD = ["torch", "torch.distributed", "numpy", "gymnasium", "archzoo.cli",
           "archzoo.worker"]
"""What the server imports before it forks a rank (what every rank would import)."""

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CTX = (multiprocessing.get_context("forkserver")
        if "forkserver" in multiprocessing.get_all_start_methods() else None)  # not Windows


def forkable(argv: Sequence[str]) -> bool:
    """``argv`` (what follows the interpreter) is ``-m MODULE ...`` or ``SCRIPT.py ...``, and
    this platform has a fork server."""
    return _CTX is not None and (
        (len(argv) >= 2 and argv[0] == "-m") or (bool(argv) and argv[0].endswith(".py")))


def title(argv: Sequence[str], env: dict[str, str]) -> str:
    """What ``ps`` and /proc/PID/cmdline show for a forked rank: the command line it stands
    for, then ``[rank R of N]``. (Its /proc/PID/environ stays the server's.)"""
    where = f" [rank {env['RANK']} of {env.get('WORLD_SIZE', '?')}]" if "RANK" in env else ""
    return shlex.join([sys.executable, *argv]) + where


def _rank(argv: list[str], env: dict[str, str], cwd: str | None, out: str | None,
          session: bool) -> None:
    """The forked rank: become ``python argv...`` and run it."""
    setproctitle.setproctitle(title(argv, env))  # first: it needs the environment in place
    os.environ.clear()
    os.environ.update(env)
    if session:
        os.setsid()
    if cwd is not None:
        os.chdir(cwd)
    first = os.getcwd() if argv[0] == "-m" else str(Path(argv[0]).resolve().parent)
    mine = [first, *(q for q in env.get("PYTHONPATH", "").split(os.pathsep) if q)]
    sys.path[:] = [*dict.fromkeys(mine), *(q for q in sys.path if q and q not in mine)]
    if out is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # run_module puts the module's file first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


class ForkedRank:
    """A forked rank, seen as much like a :class:`subprocess.Popen` as archzoo.spawn needs."""

    def __init__(self, process: Any) -> None:
        self._p = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._p.exitcode

    def poll(self) -> int | None:
        return self._p.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._p.join(timeout)
        if self._p.exitcode is None:
            raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
        return self._p.exitcode

    def send_signal(self, signum: int) -> None:
        if self._p.exitcode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(argv: Sequence[str], env: dict[str, str], cwd: Any, out: Path | None,
          session: bool) -> ForkedRank:
    """Fork ``python argv...`` from the server (started on the first call); ``out``: the file
    its stdout and stderr go to; ``session``: it leads a session of its own."""
    if not forkable(argv):
        raise ValueError(f"cannot fork {list(argv)}: -m MODULE or SCRIPT.py")
    assert _CTX is not None
    _CTX.set_forkserver_preload(PRELOAD)
    p = _CTX.Process(target=_rank, args=(list(argv), dict(env),
                                         None if cwd is None else str(cwd),
                                         None if out is None else str(out), session),
                     name="archzoo-rank")
    # the server reads the thread counts once, as it loads torch's and numpy's libraries,
    # so it takes the ranks' (the first ranks' it starts for: archzoo's are all 1)
    before = {k: os.environ.get(k) for k in THREAD_VARS}
    os.environ.update({k: env[k] for k in THREAD_VARS if k in env})
    main = sys.modules["__main__"]
    # multiprocessing would import the caller's __main__ into the rank (a user's script that
    # calls archzoo.api would run again there); a name ending in ".__main__" it skips
    stub = types.ModuleType("__main__")
    stub.__spec__ = importlib.machinery.ModuleSpec("archzoo.__main__", None)
    sys.modules["__main__"] = stub
    try:
        p.start()
    finally:
        sys.modules["__main__"] = main
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ForkedRank(p)
