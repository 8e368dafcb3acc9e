"""The Monitor's metrics rows (archzoo/runlog.py): the learner's statistics as means over
updates, from this rank and from the leaves' reports alike; the policy lag and the gradients'
staleness as distributions per row and over the run; summary.json's twins of them."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from archzoo.harness.stats import absorb_stats, stats_message
from archzoo.runlog import METRIC_COLUMNS, Monitor, RunDir


def _monitor(tmp_path: Path) -> tuple[Monitor, RunDir]:
    run_dir = RunDir(tmp_path, {"tensorboard": False})
    return Monitor(run_dir, None, None, None, 60.0, "x", quiet=True), run_dir


def _rows(tmp_path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(tmp_path / "metrics.csv")))


def test_learner_statistics_are_means_over_every_update(tmp_path: Path) -> None:
    """A row's learner/* column is the mean over the updates since the last row, whether
    the Monitor took them one by one or as a leaf's (sum, count) report; names outside
    LEARNER_STATS are left out; the next row starts afresh."""
    mon, run_dir = _monitor(tmp_path)
    mon.add_learner_stats({"loss": 1.0, "grad_norm": 4.0, "value_loss": 9.0})
    mon.add_learner_stats({"loss": 2.0})
    leaf = stats_message(0, [], None, None, learner={"loss": [9.0, 3], "lr": [0.02, 2],
                                                     "unknown": [1.0, 1]})
    assert absorb_stats(mon, json.loads(json.dumps(leaf)), version=5)  # through JSON
    mon.maybe_log(force=True)
    mon.add_learner_stats({"entropy": 0.5})
    mon.maybe_log(force=True)
    run_dir.close()
    first, second = _rows(tmp_path)
    assert float(first["learner/loss"]) == pytest.approx((1 + 2 + 9) / 5)
    assert float(first["learner/grad_norm"]) == 4.0 and float(first["learner/lr"]) == 0.01
    assert first["learner/entropy"] == "" and "learner/value_loss" not in first
    assert first["policy_lag"] == ""  # the leaf acts with no parameters (version None)
    assert second["learner/loss"] == "" and float(second["learner/entropy"]) == 0.5


def test_lag_and_staleness_are_distributions_per_row_and_per_run(tmp_path: Path) -> None:
    mon, run_dir = _monitor(tmp_path)
    for v in (0, 1, 1, 2, 6):
        mon.add_staleness(v, v / 10)
    mon.add_lag(3, 0.25)
    leaf = stats_message(10, [1.0], version=4, first_step_time=None)
    absorb_stats(mon, leaf, version=7, age=lambda v: {4: 0.5}.get(v))  # lag 3, 0.5 s
    absorb_stats(mon, leaf, version=7, lag=False)  # the root measures the lag itself
    mon.maybe_log(force=True)
    mon.maybe_log(force=True)
    run_dir.close()
    first, second = _rows(tmp_path)
    assert {k: float(first[f"grad_staleness{k}"]) for k in ("", "_p50", "_p90", "_max")} == \
        {"": 2.0, "_p50": 1.0, "_p90": 6.0, "_max": 6.0}
    assert float(first["grad_staleness_s"]) == pytest.approx(0.2)
    assert float(first["policy_lag"]) == 3.0 and float(first["policy_lag_s"]) == 0.375
    assert all(second[c] == "" for c in METRIC_COLUMNS if c.startswith(("grad_", "policy_")))
    assert mon.staleness_summary()["versions"] == {"mean": 2.0, "p50": 1, "p90": 6, "max": 6}
    assert mon.lag_summary()["seconds"]["max"] == 0.5 and mon.lag_mean == 3.0
    assert mon.episodes == 2 and mon.env_steps == 20


def test_monitor_state_keeps_both_distributions() -> None:
    a = Monitor(None, None, None, None, 1.0, "x", quiet=True)
    a.add_lag(2, 0.5)
    a.add_staleness(1, 0.01)
    a.add_staleness(3)
    b = Monitor(None, None, None, None, 1.0, "x", quiet=True)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.lag_summary() == a.lag_summary()
    assert b.staleness_summary() == a.staleness_summary()
    assert b.staleness_summary()["versions"]["max"] == 3
    old = {k: v for k, v in a.state_dict().items() if not k.startswith("staleness")}
    c = Monitor(None, None, None, None, 1.0, "x", quiet=True)
    c.load_state_dict(old)  # a checkpoint from before grad_staleness
    assert c.staleness_summary() == {"versions": {}, "seconds": {}} and c.lag_mean == 2.0


def test_every_new_column_reaches_tensorboard(tmp_path: Path) -> None:
    """TensorBoard takes metrics.csv's columns through one path (RunDir.metrics_row): the
    staleness distribution, an A2C learner's terms and GALA's consensus distance too."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = RunDir(tmp_path, {"tensorboard": True})
    mon = Monitor(run_dir, None, None, None, 60.0, "x", quiet=True)
    mon.add_steps(100)
    mon.add_staleness(2, 0.5)
    mon.add_learner_stats({"pg_loss": -0.25, "td_abs_max": 3.0})
    mon.extra = lambda: {"consensus_distance": 0.125}
    mon.maybe_log(force=True)
    run_dir.close()
    ea = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    ea.Reload()
    for col, want in (("grad_staleness", 2.0), ("grad_staleness_max", 2.0),
                      ("grad_staleness_s", 0.5), ("learner/pg_loss", -0.25),
                      ("learner/td_abs_max", 3.0), ("consensus_distance", 0.125)):
        (event,) = ea.Scalars(f"metrics/{col}")
        assert (event.step, event.value) == (100, want), col
    assert "metrics/policy_lag" not in ea.Tags()["scalars"]  # empty columns are left out


def test_metrics_rows_start_at_the_first_env_step_and_time_only_rises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """time_s counts from the first env step. Rows due during start-up (no step known yet)
    are not written: before, they were timed from the Monitor's start, so the column
    counted 1..5 s of start-up and then restarted at the first step's 0. The Monitor's
    clock is the test's here, moved 12 ms at a time."""
    import time

    from archzoo import runlog

    now = [1000.0]
    monkeypatch.setattr(runlog, "time", SimpleNamespace(time=lambda: now[0],
                                                        perf_counter=time.perf_counter))
    run_dir = RunDir(tmp_path, {"tensorboard": False})
    mon = Monitor(run_dir, None, None, None, 0.01, "x", quiet=True)
    for _ in range(3):  # start-up: rows are due, none is written
        now[0] += 0.012
        mon.maybe_log()
    mon.add_steps(16, first_step_time=now[0])
    for _ in range(3):
        now[0] += 0.012
        mon.add_steps(16)
        mon.maybe_log()
    run_dir.close()
    rows = _rows(tmp_path)
    assert [int(r["env_steps"]) for r in rows] == [32, 48, 64]
    assert [float(r["time_s"]) for r in rows] == [0.012, 0.024, 0.036]
