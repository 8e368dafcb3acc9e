"""``archzoo study`` runs the grid as separate runs and tabulates them."""

from __future__ import annotations

import csv
from pathlib import Path

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
