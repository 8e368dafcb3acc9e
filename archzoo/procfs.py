"""One process's line of Linux's ``/proc/PID/stat`` (proc(5)), read in one place.

The launcher finds the processes below a rank by their parents
(:func:`archzoo.spawn.descendants`), a rank knows its launcher by pid and start time
(:mod:`archzoo.lifeline`), and the learning grid measures every process's CPU before a cell
(:mod:`archzoo.benchlearn.quiet`). The second field, the command's name, is in brackets and
may hold spaces and brackets itself, so the fields are split after its last ``)``.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
# proc(5) numbers the fields from 1 (pid, then comm); :func:`stat` returns them from
# field 3 (state), so field n is at index n - 3
STATE, PPID, UTIME, STIME, STARTTIME = 0, 1, 11, 12, 19


def pids() -> list[int]:
    """Every process /proc lists now (none where there is no /proc)."""
    try:
        return [int(e) for e in os.listdir(PROC) if e.isdigit()]
    except OSError:
        return []


def stat(pid: int) -> list[str] | None:
    """Fields 3 onwards of ``/proc/PID/stat`` (:data:`STATE` first), or None when the
    process is gone (or there is no /proc)."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > STARTTIME else None


def parent(pid: int) -> int | None:
    """``pid``'s parent, or None when it is gone."""
    fields = stat(pid)
    return None if fields is None else int(fields[PPID])


def comm(pid: int) -> str:
    """``pid``'s command name (``/proc/PID/comm``), or "" when it is gone."""
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[bytes] | None:
    """``pid``'s arguments (``/proc/PID/cmdline``; empty for a kernel thread), or None when
    it is gone."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return raw.rstrip(b"\0").split(b"\0") if raw else []
