"""Gorila end to end: PS shards, one replay, learners and actors as separate ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mp import describe, run_mpi
from tests.runs import (
    RANDOM_RETURN,
    check_lag_columns,
    check_replay_lag,
    cli,
    filled,
    load_run,
    torchrun,
)

SMOKE = ["--total-steps", "60000", "--quiet", "--seed", "1", "--log-interval", "0.5",
         "--learning-starts", "1000"]


def check(d: Path, backend: str, world: int, shards: int, learners: int,
          learned: bool = True) -> dict:
    """A SMOKE run; ``learned``: it ran its 60,000 agent steps and beat a random policy
    (a run bounded by time instead sees as many steps as the machine gives it)."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("gorila", backend, world)
    assert s["env_steps"] >= (60000 if learned else 1) and s["learner_updates"] > 20
    if learned:
        best = max(s["eval_mean_return"] or 0.0, s["final_mean_return"] or 0.0)
        assert best > RANDOM_RETURN + 10
    if world > 1:
        assert s["ps_shards"] == shards and s["learners"] == learners
        assert s["replay"]["inserted"] > 0 and s["replay"]["sampled"] > 0
        for st in s["ps"].values():  # async server: applied = pushed - dropped
            assert st["applied"] == st["pushed"] - st["dropped_stale"]
        assert len([r for r in s["time_breakdown_s"] if r.startswith("learner")]) == learners
        check_reports(d, s, learners)
    return s


def check_reports(d: Path, s: dict, learners: int) -> None:
    """metrics.csv: the learners' gradients' staleness at shard 0, the actors' policy lag
    (versions and seconds), and the learners' double-DQN statistics as Ape-X's."""
    staleness = check_lag_columns(d, "grad_staleness")
    if learners == 1:  # one learner: every gradient is computed on the current version
        assert set(staleness) == {0.0}
    check_lag_columns(d, "policy_lag")
    assert s["grad_staleness"]["versions"] and s["policy_lag"]["seconds"]
    mean, top = filled(d, "learner/td_abs_mean"), filled(d, "learner/td_abs_max")
    assert mean and len(mean) == len(top)
    assert all(t >= m >= 0 for m, t in zip(mean, top, strict=True))
    assert all(g > 0 for g in filled(d, "learner/grad_norm")) and filled(d, "learner/mean_q")
    lr = json.loads((d / "config.json").read_text())["lr"]  # the shards' Adam's
    assert filled(d, "learner/loss") and set(filled(d, "learner/lr")) == {round(lr, 5)}
    assert not filled(d, "learner/is_weight_mean")  # uniform replay: no weights
    check_replay_lag(d, s)  # from shard 0's version the learners compute on


# --actors 2 (world 5) is test_torchrun's run (the launcher changes nothing else)
@pytest.mark.parametrize("extra,world,shards,learners", [
    (["--actors", "1", "--ps-shards", "2", "--learners", "2"], 6, 2, 2),
])
def test_embedded_gloo(tmp_path: Path, extra: list[str], world: int, shards: int,
                       learners: int) -> None:
    d = tmp_path / "run"
    # loud and longer than the progress line's 10-s window, which names the silent ranks;
    # bounded by time, not steps, so that a slower machine does not make it longer
    loud = [a for a in SMOKE if a != "--quiet"] + ["--total-steps", str(10**9),
                                                   "--time-limit", "13"]
    r = cli("run", "gorila", *extra, "--run-dir", str(d), *loud, timeout=240)
    assert r.returncode == 0, r.stderr
    assert check(d, "gloo", world, shards, learners, learned=False)["wall_s"] > 11
    rows = [ln for ln in r.stdout.splitlines() if "ranks=" in ln]
    assert rows and not [ln for ln in rows if "silent" in ln], rows  # the replay too


def test_mpiexec(tmp_path: Path) -> None:
    """The roles of test_torchrun's run, which checks that it learns, under mpiexec."""
    d = tmp_path / "run"
    job = run_mpi(5, ["-m", "archzoo", "run", "gorila", "--run-dir", str(d), *SMOKE,
                      "--total-steps", "20000"], timeout_s=240)
    assert job.returncode == 0, describe(job)
    check(d, "mpi", 5, 1, 1, learned=False)


@pytest.mark.parametrize("argv,needle", [
    (["--staleness", "-2"], "--staleness"),
    (["--learners", "0"], "--learners"),
    (["--topology", "ring", "--ps-shards", "2"], "--ps-shards 1"),
    (["--topology", "native"], "cannot use --topology native"),
    (["--device", "cuda"], "gorila's learner ranks compute on the CPU"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "gorila", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(5, "run", "gorila", "--run-dir", str(d), *SMOKE)
    assert check(d, "gloo", 5, 1, 1)["launcher"] == "torchrun"
