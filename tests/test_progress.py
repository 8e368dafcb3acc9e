"""The progress display: plain lines off a terminal, a live panel on one, ranks heard."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from archzoo.progress import Progress, fmt_duration, ranks_heard, time_left

ROW = {"time_s": 12.5, "env_steps": 40_000, "episodes": 321, "mean_return_100": 87.25,
       "eval_mean_return": None, "fps": 3200.0, "learner_updates": 77, "policy_lag": 1.5}


def test_ranks_heard_names_the_silent_peers() -> None:
    r = ranks_heard({1: 100.0, 2: 95.0, 3: 80.0}, window_s=10.0, now=100.0)
    assert r.peers == (1, 2, 3) and r.silent == (3,)
    assert str(r) == "2/3 (silent >10s: 3)"
    assert str(ranks_heard({1: 100.0}, 10.0, now=100.0)) == "1/1"


def test_time_left_is_the_nearest_limit() -> None:
    assert time_left(10.0, 60.0, 1000, None, 100.0) == (50.0, "time")
    assert time_left(10.0, 60.0, 1000, 2000, 100.0) == (10.0, "steps")
    assert time_left(10.0, None, 1000, 2000, 0.0) is None  # no rate yet: steps unknown
    assert time_left(70.0, 60.0, 0, None, 0.0) == (0.0, "time")
    assert [fmt_duration(s) for s in (5, 65, 3700)] == ["5s", "1m05s", "1h01m"]


def test_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    p = Progress("impala/gloo", stream=out)
    assert not p.live  # a StringIO is not a terminal
    p.row(ROW, {"infer_batch_mean": 3.0}, (50.0, "time"), ranks_heard({1: 0.0}, 10, 1.0))
    p.tick(ROW, None, None)  # between rows: nothing off a terminal
    line = out.getvalue()
    assert line.count("\n") == 1 and line.startswith("[impala/gloo] t=12.5s steps=40,000")
    for part in ("fps=3,200", "return100=87.2", "lag=1.50", "left=50s (time)", "ranks=1/1",
                 "infer_batch_mean=3.0"):
        assert part in line, part


def test_quiet_prints_nothing() -> None:
    out = io.StringIO()
    p = Progress("x", quiet=True, stream=out, live=True)
    p.row(ROW, {}, None, None)
    p.tick(ROW, None, None)
    p.close()
    assert out.getvalue() == ""


def test_live_panel_shows_the_fields() -> None:
    out = io.StringIO()
    p = Progress("seed/mpi", stream=out, live=True)
    p.row(ROW, {}, (5.0, "steps"), None)
    p.close()
    text = out.getvalue()
    for part in ("seed/mpi", "40,000", "3,200", "87.2", "5s (steps)"):
        assert part in text, part


def test_a_run_prints_progress_lines_with_ranks(tmp_path: Path) -> None:
    """Not on a terminal (a pipe): one line per metrics row, with the ranks rank 0 hears."""
    r = subprocess.run([sys.executable, "-m", "archzoo", "run", "impala", "--actors", "2",
                        "--time-limit", "4", "--log-interval", "1", "--run-dir",
                        str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[impala/gloo] t=")]
    assert len(lines) >= 2, r.stdout
    assert all("ranks=2/2" in ln and "left=" in ln for ln in lines), lines
