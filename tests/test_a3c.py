"""A3C / A2C end to end on the parameter server: launch ways, modes, shards, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from archzoo.comm.control import control_schema
from archzoo.envs import env_spec
from archzoo.nets import ActorCritic, num_params
from archzoo.paramserver.shard import push_schema, reply_schema, request_schema, shard_bounds
from tests.mp import describe, run_mpi
from tests.runs import (
    RANDOM_RETURN,
    best_return,
    check_lag_columns,
    cli,
    filled,
    leaf_counters,
    load_run,
    solve_either_seed,
    torchrun,
)

SMOKE = ["--total-steps", "120000", "--quiet", "--seed", "4", "--log-interval", "0.5"]
# The other settings and launchers run the same roles: a shorter run checks their counts,
# test_torchrun's (gloo async, the default) that the policy learns, the slow tier that A2C
# solves CartPole (test_a2c_solves_cartpole) and that A3C learns MinAtar Breakout.
SHORT = ["--total-steps", "40000", *SMOKE[2:]]


def worker_pushes(s: dict, cfg: dict, worker: int) -> int:
    """How many gradients ``worker`` pushed (to every shard), from its own transport's
    counters: it received WELCOME, STOP and one reply from each shard to its first pull and
    to every push; it sent HELLO, some stats messages, a pull and a BYE to each shard, a push
    to each shard per gradient (the final parameters come from the shards). Both byte
    totals must agree with the message counts."""
    spec = env_spec(cfg["env"])
    n = num_params(ActorCritic(spec.obs_shape, spec.num_actions, cfg["hidden"]))
    sizes = [hi - lo for lo, hi in shard_bounds(n, cfg["ps_shards"])]
    k, control = len(sizes), control_schema().nbytes
    c = leaf_counters(s, worker)
    replies, rem = divmod(c["msgs_recv"] - 2, k)
    assert rem == 0, c
    pushes = replies - 1
    assert c["bytes_recv"] == 2 * control + replies * sum(reply_schema(m).nbytes for m in sizes)
    stats_msgs = c["msgs_sent"] - 1 - 2 * k - pushes * k
    assert stats_msgs >= 0, c
    assert c["bytes_sent"] == ((1 + stats_msgs) * control + 2 * k * request_schema().nbytes
                               + pushes * sum(push_schema(m).nbytes for m in sizes)), c
    return pushes


def check_reports(d: Path, s: dict) -> None:
    """metrics.csv: each gradient's staleness at shard 0 (versions and seconds), which is
    also the policy lag; the workers' A2C loss terms, grad norm and the server's lr."""
    cfg = json.loads((d / "config.json").read_text())
    staleness = check_lag_columns(d, "grad_staleness")
    assert check_lag_columns(d, "policy_lag") == staleness  # the same gradients
    if s["world_size"] == 1 or (s["mode"] == "sync" and not cfg["ps_drop"]):
        assert set(filled(d, "grad_staleness_max")) == {0.0}  # computed on the current θ
    assert s["grad_staleness"] == s["policy_lag"] and s["grad_staleness"]["versions"]
    for col in ("loss", "pg_loss", "entropy", "grad_norm", "lr"):
        assert filled(d, f"learner/{col}"), col
    assert all(0 <= h <= np.log(2) + 1e-6 for h in filled(d, "learner/entropy"))
    assert all(x >= 0 for x in filled(d, "learner/baseline_loss"))
    assert all(g > 0 for g in filled(d, "learner/grad_norm"))
    assert set(filled(d, "learner/lr")) == {round(float(np.float32(cfg["lr"])), 5)}


def check(d: Path, backend: str, world: int, shards: int, learns: bool = False) -> dict:
    """Counts that agree with the workers' own; ``learns``: it beat random within SMOKE's
    120,000 agent steps."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("a3c", backend, world)
    assert s["env_steps"] >= (120000 if learns else 40000)
    if learns:
        assert best_return(d) > RANDOM_RETURN + 10, s["final_mean_return"]
    check_reports(d, s)
    if world > 1:
        cfg = json.loads((d / "config.json").read_text())
        assert s["ps_shards"] == shards and set(s["ps"]) == {str(r) for r in range(shards)}
        workers = range(shards, world)
        pushes = [worker_pushes(s, cfg, w) for w in workers]
        # every gradient a worker pushed reached every shard and was counted there once
        for st in s["ps"].values():
            assert st["pushed"] == sum(pushes), (pushes, st)
            settled = st["applied"] + st["dropped_stale"] + st["dropped_late"] + st["abandoned"]
            assert settled == st["pushed"], st  # all answered by the end of the run
            if s["mode"] == "async":  # one update per applied gradient
                assert st["version"] == st["applied"] == st["pushed"] - st["dropped_stale"]
            else:  # one update per round of W - D gradients
                assert st["applied"] == (len(workers) - cfg["ps_drop"]) * st["version"], st
        assert s["learner_updates"] == s["ps"]["0"]["version"]
        assert {st["version"] for st in s["ps"].values()} == {s["learner_updates"]}
        # every valid env step reported came from a pushed segment of t_max steps of E envs
        assert s["env_steps"] <= sum(pushes) * cfg["t_max"] * cfg["envs_per_actor"]
    return s


# --actors 2 (world 3, async) is test_torchrun's run (the launcher changes nothing else)
@pytest.mark.parametrize("extra,world,shards", [
    (["--actors", "2", "--ps-shards", "2"], 4, 2),
    (["--actors", "2", "--mode", "sync"], 3, 1),
    (["--actors", "3", "--mode", "sync", "--ps-drop", "1"], 4, 1),
])
def test_embedded_gloo(tmp_path: Path, extra: list[str], world: int, shards: int) -> None:
    d = tmp_path / "run"
    r = cli("run", "a3c", *extra, "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stderr
    s = check(d, "gloo", world, shards)
    if "--ps-drop" in extra:
        assert s["ps"]["0"]["dropped_late"] > 0  # the W - D rule discarded late gradients


def test_single_process(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "a3c", "--actors", "0", "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stderr
    check(d, "none", 1, 0)


def test_mpiexec_sync(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "a3c", "--mode", "sync", "--run-dir", str(d),
                      *SHORT], timeout_s=180)
    assert job.returncode == 0, describe(job)
    check(d, "mpi", 3, 1)


@pytest.mark.parametrize("argv,needle", [
    (["--ps-drop", "2", "--actors", "2"], "--ps-drop 2 must be <"),
    (["--staleness", "-1"], "--staleness"),
    (["--ps-shards", "0"], "--ps-shards"),
    (["--topology", "tree"], "cannot use --topology tree"),
    (["--device", "cuda"], "a3c computes its gradients in CPU actor-learner processes"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "a3c", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow
def test_a2c_solves_cartpole(tmp_path: Path) -> None:
    """Sync (A2C); async A3C's learning is guarded on MinAtar (tests/test_learning_guard.py)."""
    s = solve_either_seed("a3c", ["--env", "CartPole-v1", "--target-return", "475",
                                  "--actors", "2", "--mode", "sync", "--total-steps", "3000000",
                                  "--time-limit", "240"], tmp_path)
    assert s["final_mean_return"] >= 475 and s["stop_reason"] == "target"


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "a3c", "--run-dir", str(d), *SMOKE)
    assert check(d, "gloo", 3, 1, learns=True)["launcher"] == "torchrun"
