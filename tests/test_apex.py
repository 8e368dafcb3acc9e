"""Ape-X end to end: every launch way, both backends, 0/1/2 replay shards, bad input.

Smoke runs assert data flowed through actors, replay and learner, the run directory is
complete and the policy beat a random one (greedy evaluation or training returns).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mp import describe, run_gloo, run_mpi
from tests.runs import (
    RANDOM_RETURN,
    check_lag_columns,
    check_replay_lag,
    cli,
    filled,
    load_run,
    torchrun,
)

SMOKE = ["--total-steps", "40000", "--log-interval", "0.5", "--quiet", "--seed", "1",
         "--comm-timeout", "30", "--learning-starts", "1000"]


def check(d: Path, *, backend: str, world_size: int, shards: int) -> dict:
    s = load_run(d)
    assert s["arch"] == "apex"
    assert (s["backend"], s["world_size"]) == (backend, world_size)
    assert s["env_steps"] >= 40000 and s["learner_updates"] > 50
    assert s["replay_inserted"] > 0
    best = max(s["eval_mean_return"] or 0.0, s["final_mean_return"] or 0.0)
    assert best > RANDOM_RETURN + 10, (s["eval_mean_return"], s["final_mean_return"])
    if world_size > 1:
        assert s["replay_shards"] == shards
        roles = set(s["time_breakdown_s"])
        assert {f"shard{r}" for r in range(1, 1 + shards)} <= roles
        assert len([r for r in roles if r.startswith("actor")]) == world_size - 1 - shards
        # Ape-X Algorithm 2, line 12: every sampled item's new priority |δ| reaches its shard,
        # except those of the (at most) two batches in flight at the stop: the one training
        # and the prefetched one.
        batch = json.loads((d / "config.json").read_text())["batch_size"]
        assert len(s["replay"]) == shards
        for st in s["replay"].values():
            assert st["sampled"] - 2 * batch <= st["priority_updates"] <= st["sampled"], st
            assert 0 < st["priorities_applied"] <= st["priority_updates"], st
        # the actors' policy lag: the learner's version at their report − the version they
        # act with, and how long ago the learner published that version
        check_lag_columns(d, "policy_lag")
        assert s["policy_lag"]["seconds"]
    else:
        assert not filled(d, "policy_lag")  # one process: the actor acts with the learner's
    # the learner's double-DQN statistics (learners/dqn.py's update_stats)
    mean, top = filled(d, "learner/td_abs_mean"), filled(d, "learner/td_abs_max")
    assert mean and len(mean) == len(top)
    assert all(t >= m >= 0 for m, t in zip(mean, top, strict=True))
    assert all(0 < w <= 1 for w in filled(d, "learner/is_weight_mean"))  # w / max w
    assert filled(d, "learner/mean_q") and all(g >= 0 for g in filled(d, "learner/grad_norm"))
    assert not filled(d, "grad_staleness")  # no parameter server
    check_replay_lag(d, s)  # how old, in versions, the data it trains on is
    return s


def test_single_process_and_eval(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "apex", "--actors", "0", "--run-dir", str(d), *SMOKE)
    assert r.returncode == 0, r.stderr
    check(d, backend="none", world_size=1, shards=0)
    ev = cli("eval", str(d), "--episodes", "3")
    assert ev.returncode == 0, ev.stderr
    res = json.loads(ev.stdout)
    assert res["policy"] == "greedy" and res["episodes"] == 3


# gloo with one shard (world 4) is test_torchrun's run (the launcher changes nothing else)
@pytest.mark.parametrize("backend,shards", [("gloo", 0), ("mpi", 2)])
def test_embedded(tmp_path: Path, backend: str, shards: int) -> None:
    d = tmp_path / "run"
    r = cli("run", "apex", "--actors", "2", "--replay-shards", str(shards), "--backend",
            backend, "--run-dir", str(d), *SMOKE)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    check(d, backend=backend, world_size=3 + shards, shards=shards)


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(4, "run", "apex", "--run-dir", str(d), *SMOKE)
    check(d, backend="gloo", world_size=4, shards=1)


def test_mpiexec(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(4, ["-m", "archzoo", "run", "apex", "--run-dir", str(d), *SMOKE],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    check(d, backend="mpi", world_size=4, shards=1)


BAD = [
    (["--replay-capacity", "0"], "--replay-capacity"),
    (["--batch-size", "0"], "--batch-size"),
    (["--alpha", "-0.1"], "--alpha"),
    (["--beta", "1.5"], "--beta"),
    (["--n-step", "0"], "--n-step"),
    (["--replay-shards", "3", "--actors", "2"], "every shard needs an actor"),
    (["--eps-base", "0"], "--eps-base"),
    (["--mode", "sync"], "no --mode sync"),
    (["--topology", "native"], "cannot use --topology native"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_one_line_exit_2(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "apex", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("archzoo: error:") and needle in err[0], err


def test_too_many_shards_for_the_launchers_world() -> None:
    """3 processes cannot hold a learner, 2 shards and an actor: every rank refuses."""
    ranks = run_gloo(3, ["-m", "archzoo", "run", "apex", "--replay-shards", "2"], timeout_s=60)
    assert all(r.returncode == 2 for r in ranks), describe(ranks)
    assert "needs at least 4 processes" in ranks[0].output
    assert all(r.output.strip() == "" for r in ranks[1:]), describe(ranks)
