"""archzoo.procfs against what the OS says of the same processes: os.getppid, a child we
started (its parent, its arguments, a command name holding ``) (``, which the stat line
puts in brackets), and a process that has ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from archzoo import procfs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="no /proc")


def test_this_process() -> None:
    assert os.getpid() in procfs.pids()
    assert procfs.parent(os.getpid()) == os.getppid()
    fields = procfs.stat(os.getpid())
    assert fields is not None and fields[procfs.STATE] in "RS"
    assert int(fields[procfs.STARTTIME]) > 0


def test_a_child_whose_name_holds_brackets_and_spaces(tmp_path) -> None:
    name = "x) y (z"  # the stat line reads "PID (x) y (z) S PPID ..."
    (tmp_path / name).symlink_to(sys.executable)
    child = subprocess.Popen([str(tmp_path / name), "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while procfs.comm(child.pid) != name and time.monotonic() < deadline:
            time.sleep(0.05)  # (the fork shows the parent's name until the exec)
        assert procfs.comm(child.pid) == name
        assert procfs.parent(child.pid) == os.getpid()
        assert procfs.cmdline(child.pid) == [os.fsencode(tmp_path / name), b"-c",
                                              b"import time; time.sleep(30)"]
        assert child.pid in procfs.pids()
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ended() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid is gone from /proc
    assert procfs.stat(child.pid) is None and procfs.parent(child.pid) is None
    assert procfs.comm(child.pid) == "" and procfs.cmdline(child.pid) is None
