"""The learning grid waits for a quiet machine: the CPU of other processes, read from /proc."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from archzoo.benchlearn import quiet

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")

SPIN = "import time\nt = time.time() + 60\nwhile time.time() < t: pass"


@pytest.fixture
def spinner():
    """A process that keeps one core busy for up to a minute."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    time.sleep(0.5)  # past its start-up
    yield proc
    proc.kill()
    proc.wait()


def test_a_busy_process_is_measured_and_named(spinner) -> None:
    """A spinning process shows as a share of a core in its own row and in the total; on a
    loaded machine it still gets over a tenth of a core."""
    used = quiet.cores_by_process(2.0)
    assert 0.1 < used[spinner.pid] <= 1.05, used
    cores, top = quiet.busy(2.0)
    assert cores > 0.1 and 1 <= len(top) <= 3


def test_the_wait_gives_up_while_the_machine_stays_busy(spinner) -> None:
    """With a spinner beside it, a bound of 0.05 cores is never met: the wait says why and
    gives up at its timeout; a bound above the machine's cores passes at once."""
    said: list[str] = []
    ok, cores = quiet.wait_until_quiet(0.05, timeout_s=3.0, say=said.append)
    assert not ok and cores > 0.05
    assert len(said) == 1 and said[0].startswith("waiting for a quiet machine: other "
                                                 "processes use ")
    ok, cores = quiet.wait_until_quiet(1000.0, timeout_s=0.0, say=said.append)
    assert ok and cores > 0.1 and len(said) == 1


def test_a_process_that_ended_is_not_counted() -> None:
    """The window counts the processes alive at its end: a spinner killed before it is
    absent."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    time.sleep(0.5)
    proc.kill()
    proc.wait()
    assert proc.pid not in quiet.cores_by_process(0.5)
