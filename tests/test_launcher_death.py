"""A run dies with its launcher (archzoo/lifeline.py, archzoo/spawn.py, archzoo/worker.py):
``kill -9`` of ``archzoo run`` (gloo with forked and with fresh ranks, MPI), of the fork
server, of torchrun's agent and of mpiexec leaves no process whose command line names the
run directory 10 s after ``--comm-timeout``; where rank 0 survived it kept summary.json
(stop_reason "launcher lost"), policy.pt and a checkpoint; and no temporary folder of
archzoo's or of its fork server is left (the run's TMPDIR is the test's own). The run is the issue's
reproduction: a CartPole IMPALA run that would otherwise go on for minutes."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runs import ARCHZOO, clean_env, kill_tree

from archzoo import checkpoint, envvars, lifeline

COMM_TIMEOUT = 5.0
GONE_WITHIN_S = COMM_TIMEOUT + 10.0
LONG = ["--time-limit", "120", "--target-return", "1e9", "--total-steps", "1000000000000",
        "--quiet", "--log-interval", "0.5", "--checkpoint-interval", "1",
        "--comm-timeout", str(COMM_TIMEOUT)]


def _left(d: Path) -> list[str]:
    """Live processes whose command line names ``d`` (what ``pgrep -f D`` finds), but this
    one."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(d).encode() in cmd and int(pid) != os.getpid() and state not in "ZX":
            out.append(f"{pid}: " + cmd.replace(b"\0", b" ").decode(errors="replace")[:200])
    return out


def _start(cmd: list[str], d: Path, **env: str) -> tuple[subprocess.Popen, Path]:
    """Start ``cmd`` with its output in a file and ``_tmp(d)`` for its TMPDIR."""
    log = d.parent / "output.txt"
    _tmp(d).mkdir()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=dict(clean_env(), TMPDIR=str(_tmp(d)), **env),
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def _tmp(d: Path) -> Path:
    """The run's own TMPDIR, short: the fork server's socket lives in it, and an AF_UNIX
    path has at most 107 bytes (a pytest-xdist worker's tmp_path left too few)."""
    return Path("/tmp") / f"azk-{hashlib.sha1(str(d).encode()).hexdigest()[:10]}"


@pytest.fixture(autouse=True)
def _remove_short_tmp(tmp_path: Path):
    yield
    shutil.rmtree(_tmp(tmp_path / "run"), ignore_errors=True)


def _wait_learning(proc: subprocess.Popen, d: Path, log: Path, deadline_s: float = 90) -> None:
    """Until the run wrote a metrics row and its first checkpoint."""
    end = time.time() + deadline_s
    while time.time() < end:
        assert proc.poll() is None, f"the run ended early:\n{log.read_text()[-3000:]}"
        f = d / "metrics.csv"
        if f.is_file() and list(csv.DictReader(open(f))) and checkpoint.latest(d):
            return
        time.sleep(0.1)
    raise AssertionError(f"no metrics row within {deadline_s}s:\n{log.read_text()[-3000:]}")


def _children(pid: int) -> list[tuple[int, str]]:
    from archzoo.spawn import descendants

    out = []
    for c in descendants(pid):
        try:
            out.append((c, Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ")
                        .decode(errors="replace")))
        except OSError:
            pass
    return out


def _find(pid: int, needle: str, deadline_s: float = 30) -> int:
    """The first process below ``pid`` whose command line holds ``needle``."""
    end = time.time() + deadline_s
    while time.time() < end:
        for c, cmd in _children(pid):
            if needle in cmd:
                return c
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} below {pid}: {_children(pid)}")


def _assert_gone(d: Path, killed: float, log: Path) -> None:
    while _left(d) and time.time() < killed + GONE_WITHIN_S:
        time.sleep(0.2)
    left = _left(d)
    assert not left, f"left running {GONE_WITHIN_S:.0f}s after the kill: {left}\n" \
                     f"{log.read_text()[-4000:]}"
    # the launcher's folder (its files and archzoo.spawn's): the launcher removed it or, where
    # the launcher died, the ranks that outlived it did
    folders = sorted(p.name for p in _tmp(d).iterdir() if p.name.startswith(("archzoo-",
                                                                              "pymp-")))
    assert not folders, (folders, log.read_text()[-3000:])


def _assert_kept(d: Path, log: Path) -> None:
    """Rank 0 survived: it kept the run as a stopped one."""
    s = json.loads((d / "summary.json").read_text())
    assert s["stop_reason"] == "launcher lost", (s["stop_reason"], log.read_text()[-3000:])
    assert (d / "policy.pt").is_file() and checkpoint.latest(d) is not None
    assert s["env_steps"] > 0
    assert "the rank stops (stop_reason: launcher lost)" in log.read_text()


def _kill(pid: int) -> float:
    os.kill(pid, signal.SIGKILL)
    return time.time()


@pytest.mark.parametrize("backend,fork", [("gloo", "1"), ("gloo", "0"), ("mpi", "1")],
                         ids=["gloo-forked", "gloo-fresh", "mpi"])
def test_kill_9_of_the_launcher_ends_the_run(tmp_path: Path, backend: str, fork: str) -> None:
    """The issue's reproduction: ``kill -9`` of ``archzoo run`` itself. gloo's forked ranks
    lose their parent with the fork server (which ends with the launcher), fresh ranks lose
    it directly; MPI's ranks, three processes below it, by watching its pid."""
    d = tmp_path / "run"
    proc, log = _start([*ARCHZOO, "run", "impala", "--actors", "2", "--backend", backend,
                        *LONG, "--run-dir", str(d)], d, ARCHZOO_FORK=fork)
    try:
        _wait_learning(proc, d, log)
        killed = _kill(proc.pid)
        proc.wait(10)
        _assert_gone(d, killed, log)
        _assert_kept(d, log)
    finally:
        kill_tree(proc, str(d))


def test_kill_9_of_the_fork_server_ends_the_run(tmp_path: Path) -> None:
    """The ranks lose their parent; the launcher, whose ranks they are although not its
    children, says so, sees them end and exits non-zero."""
    d = tmp_path / "run"
    proc, log = _start([*ARCHZOO, "run", "impala", "--actors", "2", *LONG, "--run-dir", str(d)],
                       d)
    try:
        _wait_learning(proc, d, log)
        server = _find(proc.pid, "multiprocessing.forkserver")
        killed = _kill(server)
        code = proc.wait(GONE_WITHIN_S)
        assert code not in (0, None), log.read_text()[-3000:]
        assert "the fork server (pid " in log.read_text()
        _assert_gone(d, killed, log)
        _assert_kept(d, log)
    finally:
        kill_tree(proc, str(d))


def test_kill_9_of_torchruns_agent_ends_the_run(tmp_path: Path) -> None:
    """torchrun's workers are its children: the kernel's parent-death signal tells them."""
    d = tmp_path / "run"
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert exe, "torchrun ships with torch"
    proc, log = _start([exe, "--standalone", "--nproc_per_node", "3", "-m", "archzoo", "run",
                        "impala", *LONG, "--run-dir", str(d)], d)
    try:
        _wait_learning(proc, d, log)
        killed = _kill(proc.pid)
        proc.wait(10)
        _assert_gone(d, killed, log)
        _assert_kept(d, log)
    finally:
        kill_tree(proc, str(d))


@pytest.mark.parametrize("launch", ["archzoo", "mpiexec"])
def test_kill_9_of_mpiexec_ends_the_run(tmp_path: Path, launch: str) -> None:
    """hydra's proxy ends every rank (SIGKILL) when it loses mpiexec, so no rank is left to
    keep anything; the checkpoints already written stay. Under ``archzoo run --backend
    mpi`` the launcher says so and exits non-zero; under a plain mpiexec nothing is left."""
    d = tmp_path / "run"
    args = ["run", "impala", "--backend", "mpi", *LONG, "--run-dir", str(d)]
    if launch == "archzoo":
        cmd = [*ARCHZOO, *args[:2], "--actors", "2", *args[2:]]
    else:
        from archzoo.spawn import find_mpiexec

        cmd = [find_mpiexec() or "mpiexec", "-n", "3", *ARCHZOO, *args]
    proc, log = _start(cmd, d)
    try:
        _wait_learning(proc, d, log)
        mpiexec = proc.pid if launch == "mpiexec" else _find(proc.pid, "mpiexec")
        killed = _kill(mpiexec)
        code = proc.wait(GONE_WITHIN_S)
        assert code != 0
        if launch == "archzoo":
            assert "mpiexec was killed by SIGKILL" in log.read_text(), log.read_text()[-3000:]
        _assert_gone(d, killed, log)
        assert checkpoint.latest(d) is not None
    finally:
        kill_tree(proc, str(d))


def test_a_rank_removes_the_folders_of_a_launcher_that_is_gone(tmp_path: Path,
                                                               monkeypatch) -> None:
    """lifeline.clean_up: the folders that ARCHZOO_LAUNCHER_TMP names go once the process
    that ARCHZOO_LAUNCHER_PID names is gone (by pid and start time), not before; and only
    folders named as archzoo and multiprocessing name theirs."""
    folder, other = tmp_path / "archzoo-x", tmp_path / "mine"
    for f in (folder, other):
        (f / "out").mkdir(parents=True)
        (f / "out" / "rank.0").write_text("kept while the launcher lives")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = lifeline.start_time(child.pid)
        monkeypatch.setenv(envvars.LAUNCHER_PID, f"{child.pid}:{start}")
        monkeypatch.setenv(envvars.LAUNCHER_TMP, str(folder))
        assert lifeline.clean_up() == [] and (folder / "out" / "rank.0").is_file()
        monkeypatch.setenv(envvars.LAUNCHER_PID, f"{child.pid}:{start + 1}")  # a pid reused
        assert lifeline.clean_up() == [str(folder)] and not folder.exists()
        monkeypatch.setenv(envvars.LAUNCHER_PID, f"{child.pid}:{start}")
    finally:
        child.kill()
        child.wait()
    server = tmp_path / "pymp-y"  # multiprocessing's, where the fork server's socket is
    server.mkdir()
    monkeypatch.setenv(envvars.LAUNCHER_TMP, os.pathsep.join(map(str, (other, server))))
    assert lifeline.clean_up() == [str(server)] and other.is_dir()  # not archzoo's: kept
    monkeypatch.setenv(envvars.LAUNCHER_TMP, str(folder))
    assert lifeline.clean_up() == [str(folder)]  # gone already (another rank): no error
