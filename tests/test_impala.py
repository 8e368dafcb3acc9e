"""IMPALA end to end on the real engines: every launch way, both backends, both modes.

Smoke runs assert that data flowed, the run directory is complete and the return beat a
random policy (CartPole-v1: a uniformly random policy averages about 22). The full solve
is in test_impala_solve.py (marked slow).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.mp import describe, run_gloo, run_mpi
from tests.runs import (
    ARCHZOO,
    RANDOM_RETURN,
    best_return,
    clean_env,
    cli,
    kill_tree,
    load_run,
    torchrun,
)

SMOKE = ["--total-steps", "250000", "--log-interval", "0.5", "--quiet", "--seed", "3",
         "--comm-timeout", "30"]
# The other launchers and modes run the same roles: a shorter run checks their plumbing,
# test_torchrun's (gloo async, the default) that the policy learns, and the slow tier that
# each solves CartPole (tests/test_impala_solve.py).
SHORT = ["--total-steps", "60000", *SMOKE[2:]]


def check_run_dir(d: Path, *, backend: str, world_size: int, mode: str = "async",
                  learns: bool = False) -> dict:
    """The run directory is complete and data flowed; ``learns``: the policy beat a random
    one within SMOKE's 250,000 agent steps."""
    s = load_run(d)
    assert (s["backend"], s["world_size"], s["mode"]) == (backend, world_size, mode)
    assert s["env_steps"] >= (250000 if learns else 60000)
    assert s["episodes"] > 100 and s["learner_updates"] > 10
    if learns:
        assert best_return(d) > RANDOM_RETURN + 10, s["final_mean_return"]
    for role in ("learner", *(f"actor{a}" for a in range(1, world_size))):
        assert role in s["time_breakdown_s"], role
    if world_size > 1:
        assert s["bytes_sent"] > 0 and set(s["per_rank_bytes"]) == {str(r) for r in
                                                                   range(world_size)}
    return s


def test_single_process_baseline_and_eval(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "impala", "--actors", "0", "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stderr
    s = check_run_dir(d, backend="none", world_size=1)
    assert s["topology"] == "none"
    ev = cli("eval", str(d), "--episodes", "3")
    assert ev.returncode == 0, ev.stderr
    res = json.loads(ev.stdout)
    assert res["episodes"] == 3 and res["mean_return"] > 0


# gloo async is test_torchrun's run (the launcher changes nothing else)
@pytest.mark.parametrize("backend,mode", [("mpi", "async"), ("gloo", "sync")])
def test_embedded(tmp_path: Path, backend: str, mode: str) -> None:
    d = tmp_path / "run"
    r = cli("run", "impala", "--actors", "2", "--backend", backend, "--mode", mode,
            "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stdout + r.stderr
    s = check_run_dir(d, backend=backend, world_size=3, mode=mode)
    assert s["launcher"] == ("mpiexec" if backend == "mpi" else "embedded")
    if mode == "sync":
        assert s["learner_updates"] * 2 * 16 * 20 >= s["env_steps"] * 0.9


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "impala", "--run-dir", str(d), *SMOKE)
    s = check_run_dir(d, backend="gloo", world_size=3, learns=True)
    assert s["launcher"] == "torchrun"


def test_mpiexec_sync(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "impala", "--mode", "sync", "--run-dir", str(d),
                      *SHORT], timeout_s=180)
    assert job.returncode == 0, describe(job)
    check_run_dir(d, backend="mpi", world_size=3, mode="sync")


def _policy_params(d: Path):
    import torch

    return torch.load(d / "policy.pt", weights_only=True)["state_dict"]


def _wait_for_rows(csv_path: Path, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if csv_path.exists() and len(csv_path.read_text().splitlines()) >= 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"no metrics row in {csv_path} after {timeout_s}s")


def test_dead_actor_ends_the_run_naming_it_gloo(tmp_path: Path) -> None:
    """SIGKILL an actor mid-run with --min-actors 2 (async IMPALA would go on with one):
    the learner and the other actor end with errors naming it, ended by the death, not by
    the deadline of a wait (--comm-timeout)."""
    from archzoo.spawn import free_port

    d = tmp_path / "run"
    port = str(free_port())
    procs = []
    for rank in range(3):
        env = dict(clean_env(), RANK=str(rank), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        procs.append(subprocess.Popen(
            [*ARCHZOO, "run", "impala", "--run-dir", str(d), "--time-limit", "120",
             "--total-steps", "100000000", "--comm-timeout", "20", "--log-interval", "0.2",
             "--min-actors", "2", "--quiet"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    try:
        _wait_for_rows(d / "metrics.csv", 60)
        procs[2].send_signal(signal.SIGKILL)
        outs = [p.communicate(timeout=40)[0] for p in procs[:2]]
    finally:
        for p in procs:
            kill_tree(p, str(d))
    assert procs[0].returncode == 1, outs[0]
    assert "rank 2" in outs[0] and "error" in outs[0], outs[0]
    assert procs[1].returncode != 0, outs[1]
    assert "timed out" not in outs[0] + outs[1], outs


def _find_rank_pid(marker: str, rank: int) -> int | None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd and b"python" in cmd and f"PMI_RANK={rank}\0".encode() in env:
            return int(pid)
    return None


def test_dead_actor_ends_the_job_mpi(tmp_path: Path) -> None:
    """SIGKILL an MPI actor mid-run: mpiexec ends the whole job with a non-zero code, before
    any wait reaches its deadline."""
    d = tmp_path / "run"
    from tests.mp import mpiexec_path

    p = subprocess.Popen([mpiexec_path(), "-n", "3", *ARCHZOO, "run", "impala",
                          "--run-dir", str(d), "--time-limit", "120", "--quiet",
                          "--total-steps", "100000000", "--comm-timeout", "20",
                          "--log-interval", "0.2"],
                         env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        _wait_for_rows(d / "metrics.csv", 60)
        pid = _find_rank_pid(str(d), 2)
        assert pid is not None, "rank 2 process not found"
        os.kill(pid, signal.SIGKILL)
        out = p.communicate(timeout=40)[0]
    finally:
        kill_tree(p, str(d))
    assert p.returncode != 0, out
    assert "timed out" not in out, out


# -- bad input: one line, exit code 2, on rank 0 only ---------------------------------

BAD = [
    (["run", "nosucharch"], "unknown architecture"),
    (["run", "impala", "--env", "NoSuchEnv-v9"], "unknown environment"),
    (["run", "impala", "--actors", "-1"], "--actors"),
    (["run", "impala", "--lr", "0"], "--lr"),
    (["run", "impala", "--mode", "sometimes"], "invalid choice"),
    (["run", "impala", "--envs-per-actor", "0"], "--envs-per-actor"),
    (["run", "impala", "--unroll-length", "0"], "--unroll-length"),
    (["run", "impala", "--total-steps", "abc"], "invalid int"),
    (["run", "impala", "--env", "Pendulum-v1"], "Discrete"),
    (["run", "impala", "--config", "/nonexistent.json"], "--config"),
    (["eval", "/nonexistent-run-dir"], "policy.pt"),
    # more actors required alive than the run has (the default --actors 2 too)
    (["run", "impala", "--min-actors", "3", "--actors", "2"], "--min-actors 3 exceeds --actors 2"),
    (["run", "apex", "--min-actors", "3"], "--min-actors 3 exceeds --actors 2"),
    # a default that no longer fits names the flag the user set and the default
    (["run", "r2d2", "--sequence-length", "20", "--burn-in", "20"],
     "--sequence-length 20 leaves --sequence-overlap at its default 40"),
    (["run", "r2d2", "--sequence-length", "20", "--sequence-overlap", "10"],
     "--sequence-length 20 leaves --burn-in at its default 40"),
    (["run", "r2d2", "--sequence-length", "20", "--sequence-overlap", "10", "--burn-in", "20"],
     "--burn-in must be in [0, --sequence-length 20): a sequence needs a step to learn from, "
     "got 20"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_one_line_exit_2(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("archzoo: error:") and needle in err[0], err


def test_bad_config_key(tmp_path: Path, capsys) -> None:
    from archzoo.cli import main

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"lr": 0.001, "no_such_flag": 1}))
    assert main(["run", "impala", "--config", str(f)]) == 2
    assert "no_such_flag" in capsys.readouterr().err


def test_config_file_sets_defaults(tmp_path: Path) -> None:
    from archzoo.cli import parse

    f = tmp_path / "c.toml"
    f.write_text('lr = 0.0042\nunroll-length = 7\n')
    args = parse(["run", "impala", "--config", str(f), "--unroll-length", "9"])
    assert args.lr == 0.0042 and args.unroll_length == 9  # explicit flags win


def test_device_cuda_without_gpu(capsys) -> None:
    import torch

    from archzoo.cli import main

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["run", "impala", "--device", "cuda", "--actors", "0"]) == 2
    assert "cuda" in capsys.readouterr().err


def test_launcher_contradiction_rank0_only_prints() -> None:
    """Under a 3-process launcher, --actors 5 is refused on every rank; only rank 0 says so."""
    ranks = run_gloo(3, ["-m", "archzoo", "run", "impala", "--actors", "5"], timeout_s=60)
    assert all(r.returncode == 2 for r in ranks), describe(ranks)
    assert "contradicts the launcher's world size 3" in ranks[0].output
    assert all(r.output.strip() == "" for r in ranks[1:]), describe(ranks)


def test_mpi_backend_under_torchrun_is_refused() -> None:
    ranks = run_gloo(2, ["-m", "archzoo", "run", "impala", "--backend", "mpi"], timeout_s=60)
    assert all(r.returncode == 2 for r in ranks), describe(ranks)
    assert "mpiexec" in ranks[0].output


def test_list_names_architectures() -> None:
    r = cli("list")
    assert r.returncode == 0 and "impala" in r.stdout


def test_help_shows_hyperparameters() -> None:
    r = cli("run", "impala", "--help")
    assert r.returncode == 0
    for flag in ("--unroll-length", "--rho-bar", "--c-bar", "--entropy-coef", "--backend",
                 "--mode", "--target-return"):
        assert flag in r.stdout, flag


SYNC_TOPOLOGY_RUN = ["--actors", "3", "--mode", "sync", "--total-steps", "20000", "--seed", "5",
                     "--quiet"]


@pytest.fixture(scope="module")
def sync_star_policy(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Sync IMPALA over the star, run once for every topology to be compared with."""
    star = tmp_path_factory.mktemp("star") / "run"
    r = cli("run", "impala", *SYNC_TOPOLOGY_RUN, "--run-dir", str(star))
    assert r.returncode == 0, r.stderr
    return _policy_params(star)


@pytest.mark.parametrize("topology", ["tree", "butterfly", "ring", "native"])
def test_sync_parameter_broadcast_over_each_topology(tmp_path: Path, topology: str,
                                                     sync_star_policy: dict) -> None:
    """Sync IMPALA with 3 actors: the broadcast runs as the topology's collective, every
    actor relays its part, and the learning is bit-for-bit the star's (same data, same
    order)."""
    d = tmp_path / "run"
    r = cli("run", "impala", *SYNC_TOPOLOGY_RUN, "--topology", topology, "--fanout", "2",
            "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    s = load_run(d)
    assert s["topology"] == topology and topology in s["topology_applied"]
    assert s["topology_rounds"] >= s["learner_updates"]
    a, b = _policy_params(d), sync_star_policy
    assert all(a[k].equal(b[k]) for k in a)


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "native"], "needs --mode sync"),
    (["--mode", "sync", "--topology", "tree", "--fanout", "1"], "--fanout"),
    (["--topology", "hypercube"], "invalid choice"),
])
def test_bad_topology_flags(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "impala", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
