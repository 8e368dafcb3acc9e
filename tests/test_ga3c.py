"""GA3C end to end on the real engines: every launch way, both backends, several threads.

Smoke runs assert that data flowed, the run directory is complete, the return beat a random
policy, predictions were batched and the queue lengths were recorded within their bounds;
the bounded solve is marked slow.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.mp import describe, run_mpi
from tests.runs import RANDOM_RETURN, cli, load_run, solve_either_seed, torchrun

SMOKE = ["--total-steps", "150000", "--log-interval", "0.5", "--quiet", "--seed", "3",
         "--comm-timeout", "30"]


def check(d: Path, backend: str, world: int) -> dict:
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("ga3c", backend, world)
    assert s["env_steps"] >= 150000 and s["learner_updates"] > 10
    assert s["final_mean_return"] > RANDOM_RETURN + 10, s["final_mean_return"]
    inf = s["inference"]
    assert inf["requests"] * s["envs_per_actor"] >= s["env_steps"]
    assert 1.0 <= inf["mean_batch_size"] <= max(1, world - 1)
    if world > 1:
        q = s["queues"]
        assert 0 <= q["prediction_mean"] <= q["prediction_bound"]
        assert 0 <= q["training_mean"] <= q["training_bound"]
        rows = list(csv.DictReader(open(d / "metrics.csv")))
        assert any(r["prediction_queue"] for r in rows) and any(r["training_queue"]
                                                                for r in rows)
        assert any(r["infer_latency_ms"] for r in rows)
        assert {"server", *(f"actor{a}" for a in range(1, world))} <= set(s["time_breakdown_s"])
    return s


def test_single_process(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "ga3c", "--actors", "0", "--run-dir", str(d), *SMOKE)
    assert r.returncode == 0, r.stderr
    check(d, "none", 1)


@pytest.mark.parametrize("backend,extra", [
    ("gloo", []),
    ("mpi", []),
    ("gloo", ["--predictors", "2", "--trainers", "2", "--training-queue", "2",
              "--loss", "vtrace"]),
])
def test_embedded(tmp_path: Path, backend: str, extra: list[str]) -> None:
    d = tmp_path / "run"
    r = cli("run", "ga3c", "--actors", "2", "--backend", backend, "--run-dir", str(d),
            *extra, *SMOKE)
    assert r.returncode == 0, r.stdout + r.stderr
    s = check(d, backend, 3)
    if extra:
        assert s["inference"]["predictors"] == 2 and s["inference"]["trainers"] == 2
        assert s["queues"]["training_bound"] == 2


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "ga3c", "--run-dir", str(d), *SMOKE)
    assert check(d, "gloo", 3)["launcher"] == "torchrun"


def test_mpiexec(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "ga3c", "--run-dir", str(d), *SMOKE],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    assert check(d, "mpi", 3)["launcher"] == "mpiexec"


@pytest.mark.parametrize("argv,needle", [
    (["--mode", "sync"], "--mode sync"),
    (["--predictors", "0"], "--predictors"),
    (["--trainers", "0"], "--trainers"),
    (["--prediction-queue", "0"], "--prediction-queue"),
    (["--training-queue", "0"], "--training-queue"),
    (["--topology", "ring"], "--topology ring"),
    (["--loss", "ppo"], "invalid choice"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "ga3c", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow
def test_ga3c_solves_cartpole(tmp_path: Path) -> None:
    s = solve_either_seed("ga3c", ["--env", "CartPole-v1", "--target-return", "475",
                                   "--actors", "2", "--total-steps", "3000000",
                                   "--time-limit", "240"], tmp_path)
    assert s["final_mean_return"] >= 475 and s["stop_reason"] == "target"
