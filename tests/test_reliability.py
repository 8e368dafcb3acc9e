"""Ranks that die: an asynchronous run goes on without a dead actor; too few actors, a dead
learner or a dead parameter server end the run with the rank named, nothing left running,
and what was learnt kept (summary.json, policy.pt, a checkpoint)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from archzoo import checkpoint
from tests.runs import ARCHZOO, clean_env, communicate_or_dump, kill_tree, naming, rank_pid

COMMON = ["--envs-per-actor", "4", "--log-interval", "0.3", "--quiet", "--seed", "1",
          "--comm-timeout", "10", "--checkpoint-interval", "1"]


def run_and_kill(d: Path, args: list[str], rank: int, deadline_s: float = 90,
                 delay_s: float = 0.0) -> tuple[subprocess.CompletedProcess, float]:
    """Start ``archzoo run ARGS`` embedded, SIGKILL ``rank`` ``delay_s`` after the run is
    learning (a metrics row is written), wait for the end; returns the result and the
    seconds from the kill to the end."""
    proc = subprocess.Popen([*ARCHZOO, "run", *args, "--run-dir", str(d), *COMMON],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        victim = rank_pid(d, rank)
        end = time.time() + 60
        while time.time() < end and len((d / "metrics.csv").read_text().splitlines()
                                        if (d / "metrics.csv").is_file() else []) < 2:
            time.sleep(0.1)
        time.sleep(delay_s)
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:  # the run ended first (a test may skip)
            pass
        killed = time.time()
        out, err = communicate_or_dump(proc, str(d), deadline_s)
    finally:
        kill_tree(proc, str(d))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.time() - killed


def no_process_left(d: Path) -> bool:
    return not naming(str(d))


def summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def moment(name: str) -> float:
    """A random moment to kill at, 0-1.5 s after the first metrics row; seeded by the test's
    name, so a failure can be run again at the same moment."""
    return round(random.Random(name).uniform(0.0, 1.5), 2)


# (architecture and flags, the rank of an actor to kill): each run has 5 s, and must go on
# with the others after the kill to its time limit
TIMED = ["--time-limit", "5", "--total-steps", "100000000"]
ASYNC = {
    "impala": (["impala", "--actors", "3", *TIMED], 2),
    "seed": (["seed", "--actors", "3", *TIMED], 2),
    "apex": (["apex", "--actors", "3", "--replay-shards", "1", *TIMED], 3),
    "a3c": (["a3c", "--actors", "3", "--ps-shards", "2", *TIMED], 3),
    "gorila": (["gorila", "--actors", "2", *TIMED], 4),
}


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
@pytest.mark.parametrize("arch", list(ASYNC))
def test_an_async_run_goes_on_without_a_dead_actor(tmp_path: Path, arch: str,
                                                   backend: str) -> None:
    """On both engines (MPI: the job outlives the dead rank, archzoo/launcher.py), the
    run goes on with the others and ends as it would have, at its time limit."""
    args, victim = ASYNC[arch]
    d = tmp_path / "run"
    at = moment(f"{arch}-{backend}")
    r, _ = run_and_kill(d, [*args, "--backend", backend], victim, deadline_s=120, delay_s=at)
    assert r.returncode == 0, f"killed {at}s after the first row: {r.stderr}"
    s = summary(d)
    assert f"actor rank {victim} is gone" in r.stderr
    assert s["stop_reason"] == "time", s["stop_reason"]
    assert list(s["dead_actors"]) == [str(victim)] and s["live_actors"] == 2 - (arch == "gorila")
    assert s["dead_actors"][str(victim)]["time_s"] > 0
    assert no_process_left(d)


def test_too_few_actors_end_the_run_and_keep_what_was_learnt(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r, after = run_and_kill(d, ["impala", "--actors", "2", "--min-actors", "2",
                                "--time-limit", "60"], 2)
    assert r.returncode == 1 and "1 actors left (--min-actors 2)" in r.stderr, r.stderr
    s = summary(d)
    assert s["stop_reason"].startswith("error:") and "min-actors" in s["stop_reason"]
    assert (d / "policy.pt").is_file() and checkpoint.latest(d) is not None
    assert after < 10 + 15 and no_process_left(d)  # --comm-timeout + the launcher's grace



@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_an_actor_that_dies_during_the_drain_is_dropped(tmp_path: Path, backend: str) -> None:
    """The stop-and-drain waits for every actor's BYE. An actor frozen (SIGSTOP) before the
    stop sends none; it is killed 2 s into the learner's wait (--comm-timeout 10). The
    learner drops it, logs the loss as during the drain, and the run ends at its time
    limit with its summary, well before --comm-timeout."""
    d = tmp_path / "run"
    limit = 3.0
    proc = subprocess.Popen([*ARCHZOO, "run", "impala", "--actors", "2", "--backend", backend,
                             "--time-limit", str(limit), "--run-dir", str(d), *COMMON],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        victim = rank_pid(d, 2)
        metrics = d / "metrics.csv"
        end = time.time() + 60
        while time.time() < end and len(metrics.read_text().splitlines()
                                        if metrics.is_file() else []) < 2:
            time.sleep(0.05)
        seen = time.time()
        first_row_s = float(metrics.read_text().splitlines()[1].split(",")[0])
        os.kill(victim, signal.SIGSTOP)  # alive and silent: no BYE will come from it
        time.sleep(max(0.0, seen + (limit - first_row_s) + 2.0 - time.time()))
        os.kill(victim, signal.SIGKILL)
        killed = time.time()
        _, err = proc.communicate(timeout=60)
        after = time.time() - killed
    finally:
        kill_tree(proc, str(d))
    assert proc.returncode == 0, err
    assert "actor rank 2 is gone" in err, err
    s = summary(d)
    assert s["stop_reason"] == "time" and s["live_actors"] == 1
    assert s["dead_actors"]["2"]["during"] == "the stop's drain", s["dead_actors"]
    assert after < 10, after  # noticed by the engine, not by waiting out --comm-timeout
    assert (d / "policy.pt").is_file() and no_process_left(d)



@pytest.mark.parametrize("victim", [0, 1])
@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_a_death_during_start_up_ends_the_run_at_once(tmp_path: Path, backend: str,
                                                       victim: int) -> None:
    """A rank killed before every rank has joined (it is still importing): nothing has
    been learnt, and the others would wait for it (under MPI in MPI_Init, which has no
    deadline), so the launcher names it and ends the run at once, leaving nothing running.
    The gloo ranks start afresh (``ARCHZOO_FORK=0``): a forked rank imports nothing and may
    have joined before the test finds it, and then the kill would not be during start-up."""
    d = tmp_path / "run"
    env = {**clean_env(), "ARCHZOO_FORK": "0"}
    proc = subprocess.Popen([*ARCHZOO, "run", "impala", "--actors", "2", "--backend", backend,
                             "--run-dir", str(d), *COMMON], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        os.kill(rank_pid(d, victim), signal.SIGKILL)
        killed = time.time()
        _, err = proc.communicate(timeout=60)
        after = time.time() - killed
    finally:
        kill_tree(proc, str(d))
    assert proc.returncode != 0
    assert f"rank {victim} was killed by SIGKILL during start-up" in err, err
    assert after < 30, after  # at once: the others would wait in start-up for 120 s or forever
    assert no_process_left(d)


# (name, architecture and flags, the rank the run cannot do without)
NEEDED = [
    ("impala", ["impala", "--actors", "2"], 0),           # the learner
    ("apex", ["apex", "--actors", "2", "--replay-shards", "1"], 1),  # a replay shard
    ("a3c", ["a3c", "--actors", "2", "--ps-shards", "2"], 1),        # a parameter-server shard
    ("gorila", ["gorila", "--actors", "2"], 1),                     # the replay memory
    ("gala", ["gala", "--actors", "3"], 1),                         # an agent of the ring
    ("seed-sync", ["seed", "--actors", "2", "--mode", "sync"], 2),    # an actor in lockstep
    # a relay of the async tree broadcast (rank 3 gets its parameters through rank 2)
    ("impala-tree", ["impala", "--actors", "3", "--topology", "tree", "--fanout", "2"], 2),
]


# the learner's death on both engines; each server's or peer's on one, the two taking turns
# (each engine's death notice is the same for every role: tests/test_comm.py)
NEEDED_ON = [(*NEEDED[0], "gloo"), (*NEEDED[0], "mpi")] + [
    (*c, ("mpi", "gloo")[i % 2]) for i, c in enumerate(NEEDED[1:])]


@pytest.mark.parametrize("arch,args,victim,backend", NEEDED_ON,
                         ids=[f"{c[3]}-{c[0]}" for c in NEEDED_ON])
def test_a_rank_the_run_needs_ends_it_without_hanging(tmp_path: Path, arch: str,
                                                       args: list[str], victim: int,
                                                       backend: str) -> None:
    d = tmp_path / "run"
    r, after = run_and_kill(d, [*args, "--time-limit", "60", "--backend", backend], victim,
                            delay_s=moment(f"{arch}-{backend}"))
    assert r.returncode != 0
    assert after < 10 + 15 + 5, after  # --comm-timeout + the launcher's grace + exit
    assert no_process_left(d)
    if victim != 0:  # rank 0 survived: it names the dead rank and keeps what it has
        assert f"rank {victim}" in r.stderr, r.stderr
        s = summary(d)
        assert s["stop_reason"].startswith("error:")
        if arch == "impala-tree":
            assert "--topology star survives dead actors" in s["stop_reason"]
        # a3c's shard 0 holds half the parameters (--ps-shards 2): no policy to keep
        assert (d / "policy.pt").is_file() == (arch != "a3c")
        # a3c: shard 0's checkpoint holds its half of the server (--ps-shards 2)
        assert checkpoint.latest(d) is not None


# -- restarts -------------------------------------------------------------------------------

def _wait_for_checkpoint(d: Path, deadline_s: float = 60) -> None:
    end = time.time() + deadline_s
    while checkpoint.latest(d) is None and time.time() < end:
        time.sleep(0.1)
    assert checkpoint.latest(d) is not None, "no checkpoint was written"


def test_an_embedded_run_restarts_from_its_checkpoint(tmp_path: Path) -> None:
    """--max-restarts: the learner is killed; the launcher restarts the run from the
    latest checkpoint, and the run ends as if it had not been interrupted."""
    d = tmp_path / "run"
    proc = subprocess.Popen([*ARCHZOO, "run", "impala", "--actors", "2", "--max-restarts", "1",
                             "--total-steps", "50000", "--time-limit", "120",
                             "--run-dir", str(d), *COMMON],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        victim = rank_pid(d, 0)
        _wait_for_checkpoint(d)
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        kill_tree(proc, str(d))
    assert proc.returncode == 0, err
    assert "restart 1 of 1" in err
    s = summary(d)
    assert s["checkpoints"]["resumed_from"] is not None and s["env_steps"] >= 50000
    assert no_process_left(d)


def test_torchrun_restarts_resume_from_the_checkpoint(tmp_path: Path) -> None:
    """torchrun --max-restarts restarts the worker group; every rank finds the run's
    checkpoint and goes on from it."""
    import shutil
    import sys

    d = tmp_path / "run"
    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    proc = subprocess.Popen([exe, "--standalone", "--nproc_per_node", "3", "--max-restarts", "1",
                             "-m", "archzoo", "run", "impala", "--total-steps", "50000",
                             "--time-limit", "120", "--run-dir", str(d), *COMMON],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        victim = rank_pid(d, 1)  # an actor: torchrun restarts the whole group
        _wait_for_checkpoint(d)
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        kill_tree(proc, str(d))
    assert proc.returncode == 0, err[-3000:]
    s = summary(d)
    assert s["launcher"] == "torchrun" and s["checkpoints"]["resumed_from"] is not None
    assert s["env_steps"] >= 50000
