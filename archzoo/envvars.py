"""The ``ARCHZOO_*`` environment variables: how archzoo's launchers talk to the ranks they
start.

archzoo's embedded launcher (archzoo/launcher.py) sets them in each child rank's
environment, and the ranks read them (archzoo/worker.py, archzoo/comm/factory.py, the
harness); the scripts in launch/ set or read some of them too. Every module that reads or
sets one uses the names below, and the few helpers here, rather than spelling it. This
module imports only the standard library, so every layer may use it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

EMBEDDED = "ARCHZOO_EMBEDDED"
"""``1`` in the ranks of archzoo's embedded gloo launch (``launcher.run_gloo``): with
``RANK`` and ``WORLD_SIZE`` also set, it tells that launch from torchrun's
(``archzoo.comm.factory.detect_launch``); ``archzoo bench comm`` drops it from its jobs."""

LAUNCH_TIME = "ARCHZOO_LAUNCH_TIME"
"""The launcher's ``time.time()`` when it started the ranks: a run's start-up time
(``startup_s``) counts from it (:func:`launch_time`); without it, from the rank's own start."""

STARTED_FILE = "ARCHZOO_STARTED_FILE"
"""A file rank 0 creates once every rank has joined (:func:`mark_started`): from then on
rank 0, not the embedded launcher, decides whether a rank's death ends the run."""

DONE_FILE = "ARCHZOO_DONE_FILE"
"""MPI: a file rank 0 creates once it finished the stop protocol (:func:`mark_done`), so that
the launcher reports success although mpiexec exits with a dead actor's code."""

DEATHS_FILE = "ARCHZOO_DEATHS_FILE"
"""MPI: the file each rank's shell (``spawn.RANK_SHELL``) appends ``RANK CODE`` to when its
rank fails, for the launcher to name the dead ranks."""

MPI_SURVIVE = "ARCHZOO_MPI_SURVIVE"
"""MPI: set when the job outlives a dead rank (archzoo's launcher, launch/mpirun.sh): then a
failing rank other than 0 exits rather than aborting the job (:func:`mpi_survive`)."""

RDZV_TIMEOUT = "ARCHZOO_RDZV_TIMEOUT"
"""launch/torchrun.sh across nodes: the seconds every node waits for the rendezvous
(default 300) before it gives up with one line saying what to check."""

FORK = "ARCHZOO_FORK"
"""``0``: archzoo.spawn starts every gloo rank as a fresh interpreter rather than as a fork of
a process that imported torch once (archzoo.forkstart, :func:`fork_ranks`)."""

LAUNCHER_PID = "ARCHZOO_LAUNCHER_PID"
"""``PID:START`` of the process that started the ranks (archzoo.spawn: ``archzoo run``'s
launcher, a test's spawner) with its start time, so that a rank stops when it dies, also
where that process is not its parent (archzoo.lifeline)."""

LAUNCHER_TMP = "ARCHZOO_LAUNCHER_TMP"
"""The temporary folder of the process that :data:`LAUNCHER_PID` names (archzoo.spawn's,
which also holds the files above): a rank that outlives that process removes it
(archzoo.lifeline.clean_up), since no one else is left to."""

FORK_SERVER = "ARCHZOO_FORK_SERVER"
"""The pid of the process that starts archzoo.forkstart's server, set while it does so from
its main thread: the server then asks for a signal when that process dies (a parent-death
signal follows the parent *thread*, which only the main thread outlives)."""

ALL = (EMBEDDED, LAUNCH_TIME, STARTED_FILE, DONE_FILE, DEATHS_FILE, MPI_SURVIVE, RDZV_TIMEOUT,
       FORK, LAUNCHER_PID, LAUNCHER_TMP, FORK_SERVER)


def launch_time() -> float:
    """When the launch began: :data:`LAUNCH_TIME` if the launcher set it, else now."""
    return float(os.environ.get(LAUNCH_TIME, time.time()))


def mpi_survive() -> bool:
    """Whether this rank's MPI job outlives a dead rank (:data:`MPI_SURVIVE`)."""
    return bool(os.environ.get(MPI_SURVIVE))


def mark_started() -> None:
    """Rank 0, once every rank has joined: tell the embedded launcher that from now on
    rank 0 decides whether a rank's death ends the run (:data:`STARTED_FILE`)."""
    _mark(os.environ.get(STARTED_FILE))


def mark_done() -> None:
    """Rank 0 finished the stop protocol: the embedded MPI launcher then reports success
    although mpiexec exits with a dead actor's code (:data:`DONE_FILE`)."""
    _mark(os.environ.get(DONE_FILE))


def _mark(path: str | None) -> None:
    """Create ``path``, unless its folder is gone: the launcher that would read it died,
    and a rank removed its folder (:data:`LAUNCHER_TMP`)."""
    if path:
        try:
            Path(path).touch()
        except FileNotFoundError:
            pass


def fork_ranks() -> bool:
    """Whether gloo ranks start as forks (unless ``ARCHZOO_FORK=0``)."""
    return os.environ.get(FORK, "1") != "0"
