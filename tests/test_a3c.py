"""A3C / A2C end to end on the parameter server: launch ways, modes, shards, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mp import describe, run_mpi
from tests.runs import RANDOM_RETURN, cli, load_run, solve_either_seed, torchrun

SMOKE = ["--total-steps", "120000", "--quiet", "--seed", "4", "--log-interval", "0.5"]


def check(d: Path, backend: str, world: int, shards: int) -> dict:
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("a3c", backend, world)
    assert s["env_steps"] >= 120000 and s["final_mean_return"] > RANDOM_RETURN + 10
    if world > 1:
        assert s["ps_shards"] == shards and set(s["ps"]) == {str(r) for r in range(shards)}
        for st in s["ps"].values():
            settled = st["applied"] + st["dropped_stale"] + st["dropped_late"] + st["abandoned"]
            if s["mode"] == "async":  # every push is applied or dropped on arrival
                assert st["applied"] == st["pushed"] - st["dropped_stale"]
            else:  # at most one sync round (one push per worker) still open at the stop
                assert 0 <= st["pushed"] - settled <= world - shards, st
        versions = {st["version"] for st in s["ps"].values()}
        assert s["learner_updates"] in versions
    return s


@pytest.mark.parametrize("extra,world,shards", [
    (["--actors", "2"], 3, 1),
    (["--actors", "2", "--ps-shards", "2"], 4, 2),
    (["--actors", "2", "--mode", "sync"], 3, 1),
    (["--actors", "3", "--mode", "sync", "--ps-drop", "1"], 4, 1),
])
def test_embedded_gloo(tmp_path: Path, extra: list[str], world: int, shards: int) -> None:
    d = tmp_path / "run"
    r = cli("run", "a3c", *extra, "--run-dir", str(d), *SMOKE)
    assert r.returncode == 0, r.stderr
    s = check(d, "gloo", world, shards)
    if "--ps-drop" in extra:
        assert s["ps"]["0"]["dropped_late"] > 0  # the W - D rule discarded late gradients


def test_single_process(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "a3c", "--actors", "0", "--run-dir", str(d), *SMOKE)
    assert r.returncode == 0, r.stderr
    check(d, "none", 1, 0)


def test_mpiexec_sync(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "a3c", "--mode", "sync", "--run-dir", str(d),
                      *SMOKE], timeout_s=180)
    assert job.returncode == 0, describe(job)
    check(d, "mpi", 3, 1)


@pytest.mark.parametrize("argv,needle", [
    (["--ps-drop", "2", "--actors", "2"], "--ps-drop 2 must be <"),
    (["--staleness", "-1"], "--staleness"),
    (["--ps-shards", "0"], "--ps-shards"),
    (["--topology", "tree"], "cannot use --topology tree"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "a3c", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a3c_and_a2c_solve_cartpole(tmp_path: Path, mode: str) -> None:
    s = solve_either_seed("a3c", ["--env", "CartPole-v1", "--target-return", "475",
                                  "--actors", "2", "--mode", mode, "--total-steps", "3000000",
                                  "--time-limit", "240"], tmp_path)
    assert s["final_mean_return"] >= 475 and s["stop_reason"] == "target"


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "a3c", "--run-dir", str(d), *SMOKE)
    assert check(d, "gloo", 3, 1)["launcher"] == "torchrun"
