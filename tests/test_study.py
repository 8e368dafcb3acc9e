"""``archzoo study`` runs the grid as separate runs and tabulates them."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.runs import cli


def test_study_grid_writes_csv_and_png(tmp_path: Path) -> None:
    out = tmp_path / "study"
    r = cli("study", "--arch", "impala", "--mode", "sync", "--topology", "star,tree",
            "--actors", "1,2", "--out", str(out), "--", "--total-steps", "4000",
            timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert [(x["topology"], x["actors"]) for x in rows] == [
        ("star", "1"), ("star", "2"), ("tree", "1"), ("tree", "2")]
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
