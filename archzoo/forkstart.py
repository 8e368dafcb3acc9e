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

Neither the server nor a rank outlives its parent. The server ends when the launcher does
(multiprocessing's own pipe from the launcher reaches its end of file) and, started from the
launcher's main thread, also asks the kernel for SIGTERM on its parent's death
(archzoo.lifeline); each rank asks for SIGTERM on the server's death, at its first line, and
ends at once if the server is gone already. Once it runs archzoo's worker, a rank takes that
SIGTERM as the launcher lost (archzoo/worker.py). The launcher learns of a rank's end from
the server; where the server died, it watches the rank's pid (:class:`ForkedRank`). The
server's socket lives in the launcher's multiprocessing folder (``pymp-*``), which the
launcher removes at its exit; a rank's ``ARCHZOO_LAUNCHER_TMP`` names it too, so that a rank
that outlived a killed launcher removes it (archzoo.lifeline.clean_up). Where that socket's
path would be too long for AF_UNIX (a long TMPDIR), nothing is forked: :func:`forkable` says
no, and the ranks start afresh, as with ``ARCHZOO_FORK=0``.

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
import tempfile
import threading
import time
import types
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path

import setproctitle

from archzoo import envvars, lifeline

__all__ = ["PRELOAD", "ForkedRank", "forkable", "server_folder", "server_pid", "socket_fits",
           "start"]

PRELOAD = ["torch", "torch.distributed", "numpy", "gymnasium", "archzoo.cli",
           "archzoo.worker", "archzoo.forkstart"]
"""What the server imports before it forks a rank (what every rank would import)."""
UNKNOWN_CODE = 1  # a rank's exit code once its server died (the server would have told it)

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_CTX = (multiprocessing.get_context("forkserver")
        if "forkserver" in multiprocessing.get_all_start_methods() else None)  # not Windows


# an AF_UNIX socket's path: sun_path's 108 bytes, less the terminating NUL
SOCKET_PATH_MAX = 107
# what multiprocessing puts below the temporary folder for the server's socket
SOCKET_NAME = "/pymp-XXXXXXXX/listener-XXXXXXXX"


def forkable(argv: Sequence[str]) -> bool:
    """``argv`` (what follows the interpreter) is ``-m MODULE ...`` or ``SCRIPT.py ...``, this
    platform has a fork server, and its socket's path fits (:func:`socket_fits`)."""
    return _CTX is not None and socket_fits() and (
        (len(argv) >= 2 and argv[0] == "-m") or (bool(argv) and argv[0].endswith(".py")))


def socket_fits() -> bool:
    """The server's socket, ``TMPDIR/pymp-*/listener-*``, has a path AF_UNIX can bind. Under
    a long TMPDIR (a CI job's or a scheduler's) it has not, and ranks start afresh."""
    return len(os.fsencode(tempfile.gettempdir() + SOCKET_NAME)) <= SOCKET_PATH_MAX


def title(argv: Sequence[str], env: dict[str, str]) -> str:
    """What ``ps`` and /proc/PID/cmdline show for a forked rank: the command line it stands
    for, then ``[rank R of N]``. (Its /proc/PID/environ stays the server's.)"""
    where = f" [rank {env['RANK']} of {env.get('WORLD_SIZE', '?')}]" if "RANK" in env else ""
    return shlex.join([sys.executable, *argv]) + where


def _guard_server() -> None:
    """In the fork server (it imports this module, :data:`PRELOAD`), started by the main
    thread of process :data:`envvars.FORK_SERVER`: SIGTERM when that process dies."""
    parent = os.environ.pop(envvars.FORK_SERVER, None)
    if parent is not None and parent == str(os.getppid()):
        lifeline.set_parent_death_signal(signal.SIGTERM)
        if str(os.getppid()) != parent:  # it died before the signal was asked for
            os._exit(128 + signal.SIGTERM)


def _rank(argv: list[str], env: dict[str, str], cwd: str | None, out: str | None,
          session: bool, server: int) -> None:
    """The forked rank: become ``python argv...`` and run it (``server``: the fork server's
    pid; the rank ends at once if the server is gone)."""
    lifeline.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != server:  # the server died before the signal was asked for
        os._exit(128 + signal.SIGTERM)
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
    """A forked rank, seen as much like a :class:`subprocess.Popen` as archzoo.spawn needs.

    Its exit code comes from the fork server. Should the server die, multiprocessing
    reports every rank ended (with 255) although they run on; then the rank is watched by
    its pid and start time, and once it ended its code is :data:`UNKNOWN_CODE`."""

    def __init__(self, process: BaseProcess, server: int) -> None:
        assert process.pid is not None  # a started process
        self._p = process
        self.pid: int = process.pid
        self.server = server
        self.started = lifeline.start_time(self.pid)
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        if self._code is None and (code := self._p.exitcode) is not None:
            if not self.orphaned():
                self._code = code
            elif not self.running():
                self._code = UNKNOWN_CODE
        return self._code

    def orphaned(self) -> bool:
        """Whether the fork server that started this rank died (its word on the rank with
        it)."""
        return lifeline.start_time(self.server) is None

    def running(self) -> bool:
        return self.started is not None and lifeline.alive((self.pid, self.started))

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        self._p.join(timeout)
        while self.poll() is None and (end is None or time.monotonic() < end):
            time.sleep(0.02)  # an orphan: no server to wait on
        if self._code is None:
            raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
        return self._code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(argv: Sequence[str], env: dict[str, str], cwd: str | os.PathLike[str] | None,
          out: Path | None,
          session: bool) -> ForkedRank:
    """Fork ``python argv...`` from the server (started on the first call); ``out``: the file
    its stdout and stderr go to; ``session``: it leads a session of its own."""
    if not forkable(argv):
        raise ValueError(f"cannot fork {list(argv)}: -m MODULE or SCRIPT.py")
    assert _CTX is not None
    _CTX.set_forkserver_preload(PRELOAD)
    # the server reads the thread counts once, as it loads torch's and numpy's libraries,
    # so it takes the ranks' (the first ranks' it starts for: archzoo's are all 1)
    before = {k: os.environ.get(k) for k in (*THREAD_VARS, envvars.FORK_SERVER)}
    os.environ.update({k: env[k] for k in THREAD_VARS if k in env})
    if threading.current_thread() is threading.main_thread():
        os.environ[envvars.FORK_SERVER] = str(os.getpid())  # see _guard_server
    main = sys.modules["__main__"]
    # multiprocessing would import the caller's __main__ into the rank (a user's script that
    # calls archzoo.api would run again there); a name ending in ".__main__" it skips
    stub = types.ModuleType("__main__")
    stub.__spec__ = importlib.machinery.ModuleSpec("archzoo.__main__", None)
    sys.modules["__main__"] = stub
    try:
        server = server_pid()
        env = dict(env)
        if env.get(envvars.LAUNCHER_TMP) and (folder := server_folder()) is not None:
            # the server's socket folder is the launcher's too (archzoo.lifeline.clean_up)
            env[envvars.LAUNCHER_TMP] += os.pathsep + folder
        p = _CTX.Process(target=_rank, args=(list(argv), env,
                                             None if cwd is None else str(cwd),
                                             None if out is None else str(out), session,
                                             server), name="archzoo-rank")
        p.start()
    finally:
        sys.modules["__main__"] = main
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ForkedRank(p, server)


def server_pid() -> int:
    """The fork server's pid (started now if it is not running)."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
    # multiprocessing's own private state, absent from typeshed's stubs
    return forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]  # noqa: SLF001


def server_folder() -> str | None:
    """The folder of the running server's socket (multiprocessing's temporary folder of this
    process, ``pymp-*``, which it removes at exit), or None where the socket has no file."""
    from multiprocessing import forkserver, util

    address = forkserver._forkserver._forkserver_address  # type: ignore[attr-defined]  # noqa: SLF001
    if not address or util.is_abstract_socket_namespace(address):
        return None
    return os.path.dirname(address)


if "multiprocessing.forkserver" in sys.modules and sys.argv[:1] == ["-c"]:
    _guard_server()  # imported by the fork server (PRELOAD)
