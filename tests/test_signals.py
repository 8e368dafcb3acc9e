"""A stop signal to ``archzoo run`` ends the whole run cleanly (archzoo/launcher.py,
archzoo/worker.py): the launcher sends it on to every rank, kills what is left after a
grace period and exits with 128 + the signal's number; no rank outlives it; once the run
has started, rank 0 keeps summary.json (stop_reason "signal: SIGTERM", or "interrupted"
for Ctrl-C), policy.pt and a checkpoint. On both engines, during start-up (while the
ranks import and join) and after the first metrics row."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from runs import ARCHZOO, clean_env, kill_tree

EXIT_WITHIN_S = 20.0  # the launcher's grace (10 s) and its kill, with room for a loaded CI
GONE_WITHIN_S = 10.0


def _start(run_dir: Path, backend: str, session: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [*ARCHZOO, "run", "impala", "--actors", "2", "--backend", backend, "--quiet",
         "--log-interval", "1", "--total-steps", "100000000", "--run-dir", str(run_dir)],
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=session)


def _wait_for_metrics(proc: subprocess.Popen, run_dir: Path, deadline_s: float = 90) -> None:
    end = time.time() + deadline_s
    f = run_dir / "metrics.csv"
    while time.time() < end:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()[0][-3000:]}"
        if f.is_file() and list(csv.DictReader(open(f))):
            return
        time.sleep(0.1)
    raise AssertionError(f"no metrics row within {deadline_s}s")


def _wait_for_handler(proc: subprocess.Popen, signum: int, deadline_s: float = 60) -> None:
    """Until the launcher catches ``signum`` (its SigCgt mask in /proc): a signal sent
    before it has installed its handlers would kill it, as any Python process."""
    end = time.time() + deadline_s
    while time.time() < end:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()[0][-3000:]}"
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(ln.split()[1] for ln in status.splitlines()
                          if ln.startswith("SigCgt:")), 16)
        if caught >> (signum - 1) & 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"the launcher caught no {signal.Signals(signum).name} "
                         f"within {deadline_s}s")


def _left(run_dir: Path) -> list[str]:
    """Command lines of live processes that name the run directory."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(run_dir).encode() in cmd and int(pid) != os.getpid() and state != "Z":
            out.append(pid + ": " + cmd.replace(b"\0", b" ").decode(errors="replace"))
    return out


def _assert_stopped(proc: subprocess.Popen, run_dir: Path, code: int) -> str:
    t0 = time.time()
    try:
        out, _ = proc.communicate(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the launcher did not exit within {EXIT_WITHIN_S}s") from None
    assert proc.returncode == code, (proc.returncode, out[-3000:])
    end = t0 + GONE_WITHIN_S
    while _left(run_dir) and time.time() < end:
        time.sleep(0.2)
    assert not _left(run_dir), f"left running: {_left(run_dir)}\n{out[-3000:]}"
    return out


def _assert_kept(run_dir: Path, reason: str) -> None:
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["stop_reason"] == reason, s["stop_reason"]
    assert (run_dir / "policy.pt").is_file()
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt")), "no checkpoint"


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
@pytest.mark.parametrize("moment", ["start-up", "after-metrics"])
def test_sigterm_stops_every_rank(tmp_path: Path, backend: str, moment: str) -> None:
    run_dir = tmp_path / "run"
    proc = _start(run_dir, backend)
    try:
        if moment == "start-up":  # the ranks still import and join
            _wait_for_handler(proc, signal.SIGTERM)
        else:
            _wait_for_metrics(proc, run_dir)
        proc.send_signal(signal.SIGTERM)
        out = _assert_stopped(proc, run_dir, 128 + signal.SIGTERM)
        assert "stopped by SIGTERM" in out, out[-3000:]
        if moment == "after-metrics":
            _assert_kept(run_dir, "signal: SIGTERM")
    finally:
        kill_tree(proc, str(run_dir))


def test_ctrl_c_is_interrupted_not_an_error(tmp_path: Path) -> None:
    """Ctrl-C reaches the launcher and every gloo rank at once (the terminal signals the
    foreground process group): exit 130, stop_reason "interrupted"."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "gloo", session=True)
    try:
        _wait_for_metrics(proc, run_dir)
        os.killpg(proc.pid, signal.SIGINT)
        _assert_stopped(proc, run_dir, 130)
        _assert_kept(run_dir, "interrupted")
    finally:
        kill_tree(proc, str(run_dir))
