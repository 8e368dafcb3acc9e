"""A2C without a parameter server (archzoo/architectures/a2c_allreduce.py): the all-reduce
round equals the server's sync round bit for bit on both engines; every topology ends a
run with the same parameters; bad flag combinations are one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.mp import describe, run_gloo, run_mpi
from tests.runs import cli, filled, load_run, solve_either_seed

HERE = Path(__file__).resolve().parent
CASES = str(HERE / "allreduce_cases.py")


@pytest.mark.parametrize("topology", ["ring", "tree", "butterfly", "native"])
def test_allreduce_round_is_the_servers_round_gloo(topology: str) -> None:
    ranks = run_gloo(3, [CASES, "gloo", topology], timeout_s=120)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)


@pytest.mark.parametrize("topology", ["ring", "butterfly"])
def test_allreduce_round_is_the_servers_round_mpi(topology: str) -> None:
    job = run_mpi(3, [CASES, "mpi", topology], timeout_s=120)
    assert job.returncode == 0, describe(job)


def _params(d: Path) -> torch.Tensor:
    sd = torch.load(d / "policy.pt", weights_only=False)["state_dict"]
    return torch.cat([v.flatten() for v in sd.values()])


def test_every_topology_ends_where_the_others_do(tmp_path: Path) -> None:
    """The same seed over ring, tree and native: the same rounds, the same parameters bit
    for bit (the topology changes only the communication)."""
    got = {}
    for topology in ("ring", "tree", "native"):
        d = tmp_path / topology
        r = cli("run", "a3c", "--mode", "sync", "--topology", topology, "--fanout", "2",
                "--actors", "3", "--total-steps", "10000", "--seed", "1", "--quiet",
                "--log-interval", "0.5", "--run-dir", str(d))
        assert r.returncode == 0, r.stderr[-3000:]
        s = load_run(d)
        assert (s["world_size"], s["topology"], s["mode"]) == (3, topology, "sync")
        assert "all-reduce" in s["topology_applied"] and s["all_reduce_rounds"] > 0
        assert set(s["time_breakdown_s"]) == {"worker0", "worker1", "worker2"}
        assert s["learner_updates"] > 20
        for col in ("loss", "pg_loss", "baseline_loss", "entropy", "grad_norm", "lr"):
            assert filled(d, f"learner/{col}"), col  # every worker's A2C loss terms
        assert not filled(d, "grad_staleness")  # no parameter server
        got[topology] = (s["learner_updates"], _params(d))
    (n, ring), *others = got.values()
    for m, p in others:
        assert m == n and torch.equal(p, ring)


def test_mpiexec_allreduce(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "a3c", "--mode", "sync", "--topology", "ring",
                      "--total-steps", "8000", "--quiet", "--run-dir", str(d)],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    s = load_run(d)
    assert (s["backend"], s["world_size"], s["launcher"]) == ("mpi", 3, "mpiexec")


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "ring"], "--mode sync"),
    (["--mode", "sync", "--topology", "ring", "--ps-drop", "1"], "--ps-drop 1"),
    (["--mode", "sync", "--topology", "tree", "--ps-shards", "2"], "no parameter server"),
])
def test_bad_flags_one_line_exit_2(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "a3c", "--actors", "3", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["ring"])  # the others end bit for bit where ring does
def test_allreduce_a2c_solves_cartpole(tmp_path: Path, topology: str) -> None:
    s = solve_either_seed("a3c", ["--env", "CartPole-v1", "--target-return", "475",
                                  "--actors", "2", "--mode", "sync", "--topology", topology,
                                  "--total-steps", "3000000", "--time-limit", "240"], tmp_path)
    assert s["final_mean_return"] >= 475 and s["stop_reason"] == "target"
    assert s["parameter_server"] is None and s["workers"] == 2
