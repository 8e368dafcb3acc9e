"""A quiet machine before each cell: every run of the grid runs alone.

A run's budget is wall time, so anything else on the machine takes from it. A run given
``--learner-threads 2`` on 2 cores is hit hardest: with one stray busy process beside it,
it saw 30k agent steps in 5 minutes instead of about 2M. Before a cell the grid measures
the CPU that every process uses over a short window (``/proc``, Linux) and waits while
that exceeds a bound, naming the busiest processes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from archzoo import procfs

MAX_BUSY_CORES = 0.25
WINDOW_S = 2.0
POLL_S = 10.0
SAY_EVERY_S = 60.0


def _cpu_ticks() -> dict[int, int]:
    """utime + stime, in clock ticks, of every process that can be read now."""
    out: dict[int, int] = {}
    for pid in procfs.pids():
        fields = procfs.stat(pid)
        if fields is not None:  # (None: it ended)
            out[pid] = int(fields[procfs.UTIME]) + int(fields[procfs.STIME])
    return out


def _name(pid: int) -> str:
    """A process's command line (its name in brackets for a kernel thread)."""
    cmd, comm = procfs.cmdline(pid), procfs.comm(pid)
    if cmd is None or not comm:
        return "?"
    return b" ".join(cmd).decode(errors="replace")[:80] or f"[{comm}]"


def cores_by_process(window_s: float = WINDOW_S) -> dict[int, float]:
    """The cores each process used over the next ``window_s`` seconds (this process left
    out; those that started or ended within the window count from what can be read)."""
    tick = os.sysconf("SC_CLK_TCK")
    before = _cpu_ticks()
    t0 = time.monotonic()
    time.sleep(window_s)
    after = _cpu_ticks()
    dt = time.monotonic() - t0
    me = os.getpid()
    used = {pid: (t - before.get(pid, t)) / tick / dt for pid, t in after.items() if pid != me}
    return {pid: c for pid, c in used.items() if c > 0}


def busy(window_s: float = WINDOW_S) -> tuple[float, list[str]]:
    """The cores all other processes used over ``window_s``, and the busiest three as
    'cores pid command'. (0, []) where there is no ``/proc``."""
    if procfs.stat(os.getpid()) is None:
        return 0.0, []
    used = cores_by_process(window_s)
    top = sorted(used, key=used.__getitem__, reverse=True)[:3]
    return sum(used.values()), [f"{used[p]:.2f} {p} {_name(p)}" for p in top]


def wait_until_quiet(max_cores: float = MAX_BUSY_CORES, timeout_s: float | None = None,
                     say: Callable[[str], None] | None = None) -> tuple[bool, float]:
    """Wait until the other processes use at most ``max_cores`` over a window; (quiet,
    cores last measured). Says once a minute what keeps the machine busy; gives up with
    quiet False after ``timeout_s`` (None: waits as long as it takes)."""
    say = say or (lambda s: print(s, file=sys.stderr, flush=True))
    start = time.monotonic()
    said = -SAY_EVERY_S
    while True:
        cores, top = busy()
        if cores <= max_cores:
            return True, cores
        waited = time.monotonic() - start
        if timeout_s is not None and waited >= timeout_s:
            return False, cores
        if waited - said >= SAY_EVERY_S:
            said = waited
            say(f"waiting for a quiet machine: other processes use {cores:.2f} cores "
                f"(more than {max_cores:g}; --max-busy raises it): " + "; ".join(top))
        time.sleep(POLL_S if timeout_s is None else min(POLL_S, max(0.0, timeout_s - waited)))
