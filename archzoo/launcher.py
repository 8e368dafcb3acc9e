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
gives them ``STOP_GRACE_S`` to keep what rank 0 learnt (archzoo/worker.py), then kills what
is left, mpiexec's job included, and exits with 128 + the signal's number.

A ``kill -9`` cannot be passed on, so the ranks learn of this process's death themselves
(archzoo/lifeline.py: the kernel's parent-death signal, and a watch of this process's pid,
which the ranks' environment names): they stop as on SIGTERM, rank 0 keeping what it learnt
with ``stop_reason`` "launcher lost", and remove this process's temporary folder (its files
and archzoo.spawn's are in one, ``ARCHZOO_LAUNCHER_TMP``). The launcher in turn watches the
ranks that are not its children: forked ranks whose fork server died (they stop: it was
their parent) and the processes below an mpiexec that died (hydra's proxy kills the ranks
when it loses mpiexec).
docs/reliability.md has the table of what each ``kill -9`` does.

Starting, watching, passing a signal on and killing are :func:`archzoo.spawn.run_ranks`'s
(the spawner ``archzoo bench comm`` and the tests use too); this module says what a run
needs of it: the ``ARCHZOO_*`` variables, which death ends the run, the exit code.

Either way the children see the directories of architectures and environments imported from
the user's own modules (``archzoo run package.module:NAME``, ``--env module:Id``,
``--env-import``) on their ``PYTHONPATH`` (:func:`child_env`).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from archzoo import envvars
from archzoo.spawn import Group, run_ranks

GRACE_S = 15.0
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


def run_mpiexec(argv: list[str], world_size: int) -> int:
    with tempfile.TemporaryDirectory(prefix="archzoo-") as tmp:
        done = Path(tmp) / "done"  # rank 0 creates it when it finished the stop protocol
        started = Path(tmp) / "started"
        env = child_env(**{envvars.LAUNCH_TIME: str(time.time()), envvars.DONE_FILE: str(done),
                           envvars.STARTED_FILE: str(started)})
        job = run_ranks(world_size, child_argv(argv)[1:], "mpi", env=env, survive=True,
                        on_death=_rank0_decides(started), stop=stop_requested,
                        workdir=Path(tmp))
        mpiexec = job.launcher_codes[0]
        if not job.stopped and mpiexec is not None and mpiexec < 0:
            print(f"archzoo: mpiexec {_how(mpiexec)}; its proxy ended every rank with it",
                  file=sys.stderr, flush=True)
            return 128 - mpiexec
        if job.returncode != 0 and not job.stopped and done.exists():
            print(f"archzoo: mpiexec exited with code {job.returncode} (a rank died); rank 0 "
                  "finished the run without it", file=sys.stderr, flush=True)
            return 0
        return job.returncode


def run_gloo(argv: list[str], world_size: int) -> int:
    with tempfile.TemporaryDirectory(prefix="archzoo-") as tmp:
        started = Path(tmp) / "started"  # rank 0 creates it once every rank has joined
        env = child_env(OMP_NUM_THREADS="1",
                        **{envvars.EMBEDDED: "1", envvars.LAUNCH_TIME: str(time.time()),
                           envvars.STARTED_FILE: str(started)})
        job = run_ranks(world_size, child_argv(argv)[1:], "gloo", env=env,
                        on_death=_rank0_decides(started), stop=stop_requested,
                        workdir=Path(tmp))
        return _exit_code(job)


def run_one(argv: list[str]) -> int:
    """The only rank of a one-process run as a child; its exit code."""
    job = run_ranks(1, child_argv(argv)[1:], "none", env=child_env(), stop=stop_requested)
    return job.returncode if job.stopped else job.launcher_codes[0]


def _rank0_decides(started: Path):
    """What a rank's death does. Before the run has started (``started`` does not exist yet)
    any death ends it at once: nothing has been learnt, and the others would wait for the
    dead rank (an MPI rank waits in ``MPI_Init`` without a deadline). Afterwards rank 0
    decides: when it fails, the others get GRACE_S to notice and end, then are killed; when
    another rank fails, rank 0 either carries on without it (an actor of an asynchronous
    architecture) or ends the run itself, naming it, within ``--comm-timeout``."""
    def on_death(rank: int, rc: int) -> float | None:
        if not started.exists():
            print(f"archzoo: rank {rank} {_how(rc)} during start-up, before every "
                  "rank had joined: the run ends", file=sys.stderr, flush=True)
            return 0.0  # nothing learnt yet: end it now
        if rank == 0:
            return GRACE_S
        print(f"archzoo: rank {rank} {_how(rc)}; rank 0 decides whether the run "
              "goes on without it", file=sys.stderr, flush=True)
        return None

    return on_death


def _exit_code(job: Group) -> int:
    """Rank 0's if it finished (it finished the stop protocol: the run went on without the
    dead), else the first failure's."""
    if not job.stopped and len(job.ranks) > 1 and job.ranks[0].returncode == 0:
        return 0
    return job.returncode


def _how(rc: int) -> str:
    """An exit code in words: a negative code (Popen) or one above 128 (a shell) is a signal."""
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    try:
        return f"was killed by {signal.Signals(sig).name}" if sig else f"exited with code {rc}"
    except ValueError:
        return f"exited with code {rc}"
