"""Starting the processes of a run when no launcher did (docs/index.md, Launching).

- gloo: spawn ``world_size`` copies of this command on loopback, each with ``RANK``,
  ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (what torchrun would set), and watch
  them: if one fails, the others get a grace period to notice and end, then are killed.
- mpi: re-execute this command under the venv's ``mpiexec -disable-auto-cleanup -n
  world_size`` (the job outlives a dead rank; rank 0 decides whether the run goes on).
  Each rank's shell writes its rank and exit code to a file if it fails, so the launcher
  sees every death as it does gloo's children.

Before every rank has joined (rank 0 marks the run started), any death ends the run at
once: nothing has been learnt, and the others would wait for the dead rank (an MPI rank
waits in ``MPI_Init`` without a deadline).

SIGINT, SIGTERM and SIGHUP stop the run the same way (:func:`stop_signals`, installed
before the first child starts): the launcher sends the signal on to every rank (under MPI to
the ranks themselves: mpiexec's proxy and each rank's shell run in sessions of their own),
gives them STOP_GRACE_S to keep what rank 0 learnt (archzoo/worker.py), then kills what is
left, mpiexec's job included, and exits with 128 + the signal's number.

Either way the children see the directories of architectures and environments imported from
the user's own modules (``archzoo run package.module:NAME``, ``--env module:Id``,
``--env-import``) on their ``PYTHONPATH`` (:func:`child_env`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from archzoo import envvars
from archzoo.comm.factory import free_port

GRACE_S = 15.0
STOP_GRACE_S = 5.0  # after a stop signal: time for the ranks to save and end
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_STOPS: list[int] = []  # the stop signals this process received while launching


@contextmanager
def stop_signals() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP are only noted (:func:`stop_requested`)
    for the launch to stop its ranks; the handlers before are restored after it. (Only the
    main thread can install handlers; elsewhere the block changes nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _STOPS.clear()
    for s in STOP_SIGNALS:
        signal.signal(s, lambda signum, frame: _STOPS.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def stop_requested() -> int | None:
    """The first stop signal received inside :func:`stop_signals`, else None."""
    return _STOPS[0] if _STOPS else None


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def child_argv(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "archzoo", *argv]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``, for a child rank: ``PYTHONPATH`` starts
    with the directories the user's architecture modules were imported from, so the child
    imports the same ones."""
    from archzoo.architectures import user_paths
    from archzoo.envs import user_paths as env_paths

    env = dict(os.environ, **extra)
    mine = [*user_paths(), *env_paths()]
    paths = [*mine, *env.get("PYTHONPATH", "").split(os.pathsep)]
    if mine:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return env


# The MPI job outlives a dead rank, so that rank 0 decides whether the run goes on without
# it. -disable-auto-cleanup alone is not enough: hydra still kills the job when a rank dies
# by a signal, and tells the others with SIGUSR1. So every rank runs under a shell that
# turns its death into an exit code and takes that notice (launch/mpirun.sh does the same),
# and ARCHZOO_MPI_SURVIVE tells a failing rank other than 0 to exit rather than abort.
MPI_SURVIVE = ["-disable-auto-cleanup"]
_DEATHS = "$" + envvars.DEATHS_FILE
RANK_SHELL = ["sh", "-c", f'trap : USR1; "$@"; c=$?; [ "$c" = 0 ] || [ -z "{_DEATHS}" ]'
              f' || echo "$PMI_RANK $c" >> "{_DEATHS}"; exit $c', "archzoo-rank"]


def run_mpiexec(argv: list[str], world_size: int) -> int:
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError("mpiexec not found (pip install mpich)")
    with tempfile.TemporaryDirectory(prefix="archzoo-") as tmp:
        done = Path(tmp) / "done"  # rank 0 creates it when it finished the stop protocol
        started, deaths = Path(tmp) / "started", Path(tmp) / "deaths"
        env = child_env(**{envvars.LAUNCH_TIME: str(time.time()), envvars.DONE_FILE: str(done),
                           envvars.MPI_SURVIVE: "1", envvars.STARTED_FILE: str(started),
                           envvars.DEATHS_FILE: str(deaths)})
        cmd = [mpiexec, *MPI_SURVIVE, "-n", str(world_size), *RANK_SHELL, *child_argv(argv)]
        if stop_requested():
            return 128 + stop_requested()
        job = subprocess.Popen(cmd, env=env, start_new_session=True)  # killed as a group
        code = _supervise([job], started, lambda: _deaths_from(deaths))
        if code != 0 and not stop_requested() and done.exists():
            print(f"archzoo: mpiexec exited with code {code} (a rank died); rank 0 finished "
                  "the run without it", file=sys.stderr, flush=True)
            return 0
        return code


def run_gloo(argv: list[str], world_size: int) -> int:
    port = free_port()
    procs = []
    with tempfile.TemporaryDirectory(prefix="archzoo-") as tmp:
        started = Path(tmp) / "started"  # rank 0 creates it once every rank has joined
        for rank in range(world_size):
            env = child_env(RANK=str(rank), WORLD_SIZE=str(world_size),
                            LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                            OMP_NUM_THREADS="1",
                            **{envvars.EMBEDDED: "1", envvars.LAUNCH_TIME: str(time.time()),
                               envvars.STARTED_FILE: str(started)})
            if stop_requested():
                break
            procs.append(subprocess.Popen(child_argv(argv), env=env))
        return _supervise(procs, started, lambda: _deaths_of(procs))


def run_one(argv: list[str]) -> int:
    """The only rank of a one-process run as a child; its exit code."""
    proc = subprocess.Popen(child_argv(argv), env=child_env())
    while proc.poll() is None:
        if stop_requested():
            return _stop([proc], stop_requested())
        time.sleep(0.05)
    return proc.returncode


def _deaths_of(procs: list[subprocess.Popen]) -> dict[int, int]:
    """rank -> exit code of every child rank that failed so far (gloo: one child a rank)."""
    return {r: p.returncode for r, p in enumerate(procs) if p.poll() not in (None, 0)}


def _deaths_from(path: Path) -> dict[int, int]:
    """rank -> exit code, from the lines the ranks' shells wrote (MPI: see RANK_SHELL)."""
    out: dict[int, int] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    for rank, _, rc in (line.partition(" ") for line in lines):
        if rank.isdigit() and rc.isdigit():
            out.setdefault(int(rank), int(rc))
    return out


def _how(rc: int) -> str:
    """An exit code in words: a negative code (Popen) or one above 128 (a shell) is a signal."""
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    try:
        return f"was killed by {signal.Signals(sig).name}" if sig else f"exited with code {rc}"
    except ValueError:
        return f"exited with code {rc}"


def _kill(procs: list[subprocess.Popen]) -> None:
    """Kill what is left: each child, and a child's process group if it leads one (mpiexec;
    its proxy then kills the ranks)."""
    for p in procs:
        if p.poll() is None:
            try:
                if os.getpgid(p.pid) == p.pid:
                    os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.kill()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for e in entries:
        try:
            stat = Path(f"/proc/{e}/stat").read_text()
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(e))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _is_rank(pid: int) -> bool:
    """``pid`` runs archzoo in this Python (a rank, not mpiexec, its proxy or a shell)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return cmd[:3] == [os.fsencode(sys.executable), b"-m", b"archzoo"]


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(procs: list[subprocess.Popen], signum: int) -> int:
    """The launcher got stop signal ``signum``: send it on to every rank (the gloo children
    themselves; under MPI the ranks below mpiexec, which run in sessions of their own), wait
    STOP_GRACE_S for them to end, then kill what is left. Returns 128 + ``signum``."""
    below = {p.pid: descendants(p.pid) for p in procs}
    for p in procs:
        if p.poll() is None:
            ranks = [d for d in below[p.pid] if _is_rank(d)]
            if ranks:  # mpiexec: the ranks, not hydra (which would kill them at once)
                _signal(ranks, signum)
            else:
                p.send_signal(signum)
    deadline = time.time() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    _kill(procs)
    left = [d for pids in below.values() for d in pids]
    for p in procs:  # what started since, and what outlived mpiexec
        left += descendants(p.pid)
    _signal(left, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    print(f"archzoo: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    return 128 + signum


def _supervise(procs: list[subprocess.Popen], started: Path,
               deaths: Callable[[], dict[int, int]]) -> int:
    """Wait for all. Before the run has started (``started`` does not exist yet) any death
    ends it at once. Afterwards rank 0 decides: when it fails, the others get GRACE_S to
    notice and end, then are killed; when another rank fails, rank 0 either carries on
    without it (an actor of an asynchronous architecture) or ends the run itself, naming
    it, within ``--comm-timeout``. ``deaths``: rank -> exit code of the ranks that failed.
    The exit code is rank 0's if it finished, else the first failure's."""
    failed_at: float | None = None
    code = 0
    noted: set[int] = set()
    try:
        while any(p.poll() is None for p in procs):
            if stop_requested():
                return _stop(procs, stop_requested())
            for rank, rc in deaths().items():
                if rank in noted:
                    continue
                noted.add(rank)
                code = code or rc
                if not started.exists():
                    print(f"archzoo: rank {rank} {_how(rc)} during start-up, before every "
                          "rank had joined: the run ends", file=sys.stderr, flush=True)
                    failed_at = time.time() - GRACE_S  # nothing learnt yet: end it now
                elif rank == 0:
                    failed_at = failed_at if failed_at is not None else time.time()
                else:
                    print(f"archzoo: rank {rank} {_how(rc)}; rank 0 decides whether the run "
                          "goes on without it", file=sys.stderr, flush=True)
            if failed_at is not None and time.time() - failed_at > GRACE_S:
                _kill(procs)
            time.sleep(0.05)
    except KeyboardInterrupt:  # outside stop_signals (another thread's launch)
        return _stop(procs, signal.SIGINT)
    if stop_requested():
        return _stop(procs, stop_requested())
    for p in procs:
        rc = p.wait()
        if rc != 0 and code == 0:
            code = rc
    if len(procs) > 1 and procs[0].returncode == 0:
        return 0  # rank 0 finished the stop protocol: the run went on without the dead
    return 1 if code < 0 else code
