"""``archzoo study`` runs the grid as separate runs and tabulates them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.runs import cli


def test_study_grid_writes_csv_and_png(tmp_path: Path) -> None:
    out = tmp_path / "study"
    r = cli("study", "--arch", "impala", "--mode", "sync", "--topology", "star,tree",
            "--actors", "0,2", "--out", str(out), "--", "--total-steps", "4000",
            timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert [(x["topology"], x["actors"]) for x in rows] == [
        ("star", "0"), ("star", "2"), ("tree", "0"), ("tree", "2")]
    assert all(x["exit_code"] == "0" and int(x["env_steps"]) >= 4000 for x in rows)
    tree2 = rows[3]
    assert int(tree2["topology_rounds"]) > 0 and int(tree2["total_bytes_sent"]) > 0
    assert (out / "study.png").stat().st_size > 1000


def test_study_records_a_failing_point(tmp_path: Path) -> None:
    """An invalid combination (native in async IMPALA) fails that point, not the study."""
    out = tmp_path / "study"
    r = cli("study", "--arch", "impala", "--topology", "native", "--actors", "1",
            "--out", str(out), "--", "--total-steps", "2000", timeout=120)
    assert r.returncode == 1
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert rows[0]["exit_code"] == "2" and "needs --mode sync" in r.stdout


def test_study_straggler_and_model_size(tmp_path: Path) -> None:
    """--straggler 1:8 makes rank 1's envs step 8x slower (its env time grows, its peer's
    does not); --params picks the MLP width whose model is closest to the size asked."""
    import json

    from archzoo.study import hidden_for_params

    out = tmp_path / "study"
    r = cli("study", "--arch", "impala", "--actors", "2", "--straggler", "none,1:8",
            "--params", "20000", "--out", str(out), "--", "--env", "archzoo/Synthetic-v0",
            "--env-kwargs", '{"step_cost_us": 20}', "--total-steps", "30000",
            "--envs-per-actor", "4", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert [x["straggler"] for x in rows] == ["none", "1:8"]
    hidden = hidden_for_params(20000, ["--env", "archzoo/Synthetic-v0"])
    assert all(x["hidden"] == str(hidden) and x["params"] == "20000" for x in rows)
    env_s_per_step = []
    for x in rows:
        s = json.loads((Path(x["run_dir"]) / "summary.json").read_text())
        assert json.loads((Path(x["run_dir"]) / "config.json").read_text())["hidden"] == hidden
        t = s["time_breakdown_s"]
        env_s_per_step.append(t["actor1"]["env"] / t["actor2"]["env"])
        assert float(x["root_bytes_per_update"]) > 0
    # rank 1 spends far longer per step in its envs than rank 2 (8x the busy-wait)
    assert env_s_per_step[1] > 2 * env_s_per_step[0], env_s_per_step


def test_a_bad_grid_value_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    """One line naming the value and the allowed ones, exit code 2, no directory written."""
    from archzoo.cli import main

    out = tmp_path / "study"
    for flags, needle in ((["--arch", "impala", "--topology", "star,moon"],
                           "--topology moon: not one of star, tree"),
                          (["--arch", "apex", "--mode", "sync"], "--mode sync: not one of async"),
                          (["--arch", "impala", "--backend", "nccl"], "gloo, mpi"),
                          (["--arch", "impala", "--straggler", "1x4"], "RANK:FACTOR"),
                          (["--arch", "impala", "--link", "wan"], "--link wan"),
                          (["--arch", "impala", "--actors", "2,-1"], "--actors -1")):
        assert main(["study", *flags, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (flags, err)
        assert not out.exists()


def test_every_study_option_has_a_help_text() -> None:
    from archzoo.study import build_parser

    for action in build_parser()._actions:  # noqa: SLF001
        assert action.help, action.option_strings


def test_study_with_latency_records_scaling_points_and_resumes(tmp_path: Path) -> None:
    """--env-latency-ms 5 --store: each point is one record with its commit, config, threads
    and machine, and the scaling read-outs (agent steps and updates per second, the
    learner's busy fraction, SEED RL's inference batch and latency, policy lag, bytes at the
    root); the actors' env time holds a 5 ms wait per vector step; a second study over the
    same points runs none. The model fitted on the points gives them back."""
    import json

    from archzoo import scaling

    out, store = tmp_path / "study", tmp_path / "scaling.jsonl"
    argv = ("study", "--arch", "seed", "--actors", "1,2", "--env-latency-ms", "5", "--store",
            str(store), "--out", str(out), "--", "--total-steps", "3000", "--envs-per-actor",
            "4", "--no-tensorboard")
    r = cli(*argv, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert [x["point"]["actors"] for x in records] == [1, 2]
    for x in records:
        assert x["kind"] == "scaling-point" and x["exit_code"] == 0
        assert len(x["commit"]) == 40 and isinstance(x["dirty"], bool)
        assert x["versions"]["torch"] and x["cpu_count"] >= 1 and x["cpu_model"]
        assert x["hostname"] and x["start_time"]
        assert x["config"]["env_latency_ms"] == 5.0 and x["threads"]["threads"] == 1
        m, s = x["metrics"], x["summary"]
        assert m["agent_steps_per_s"] == s["env_steps"] / s["wall_s"]
        assert m["learner_updates_per_s"] > 0 and 0 < m["learner_busy"] <= 1.5
        assert m["infer_batch_mean"] >= 1 and m["infer_latency_ms"] > 0
        assert m["policy_lag_s_mean"] is not None and m["root_bytes"] > 0
        env_s = sum(t["env"] for role, t in s["time_breakdown_s"].items()
                    if role.startswith("actor"))
        assert env_s >= 0.005 * s["env_steps"] / 4  # at least one wait per vector step
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert [x["env_latency_ms"] for x in rows] == ["5.0", "5.0"]

    again = cli(*argv, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("skipped") == 2
    assert len(store.read_text().splitlines()) == 2
    assert list(csv.DictReader(open(out / "study.csv")))[0]["agent_steps_per_s"] == \
        rows[0]["agent_steps_per_s"]

    # the model calibrated on the first point gives it back; the cores fitted to the second
    # give back the second where they bound it (load on the machine decides whether they do)
    measured = [x["metrics"]["agent_steps_per_s"] for x in records]
    one = scaling.fit(records[0], None)
    assert scaling.predict(one, 1, 0.005).steps_per_s == pytest.approx(measured[0], rel=1e-6)
    two = scaling.fit(records[0], records[1])
    at_two = scaling.predict(two, 2, 0.005).steps_per_s
    assert two.cores <= one.cores
    if two.cores < one.cores:
        assert at_two == pytest.approx(measured[1], rel=1e-3)
    else:
        assert at_two <= measured[1]


def test_a_bad_latency_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    from archzoo.cli import main

    out = tmp_path / "study"
    for value, needle in (("5,-1", "--env-latency-ms -1: must be a finite number >= 0"),
                          ("nan", "--env-latency-ms nan: must be a finite number"),
                          ("5,x", "expected a comma-separated list")):
        assert main(["study", "--arch", "impala", "--env-latency-ms", value, "--out",
                     str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (value, err)
        assert not out.exists()
