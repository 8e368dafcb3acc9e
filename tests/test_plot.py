"""``archzoo plot``: seeds grouped into a median with a min–max band against numpy on known
curves, labels from the flags that differ, a figure from a real run, one-line errors."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from runs import cli

from archzoo.plot import band, group_runs, load_curve, plot
from archzoo.runlog import METRIC_COLUMNS


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plot") / "impala-s0"
    r = cli("run", "impala", "--actors", "0", "--total-steps", "6000", "--envs-per-actor", "4",
            "--unroll-length", "5", "--log-interval", "0.2", "--quiet", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    return d


def _sibling(real: Path, name: str, xs: list[float], ys: list[float], **config) -> Path:
    """A copy of ``real`` with ``config`` changes and a metrics.csv of the given curve."""
    d = real.parent / name
    shutil.copytree(real, d, dirs_exist_ok=True)
    (d / "summary.json").unlink()  # the real run's end is not this curve's
    cfg = json.loads((real / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **config, "run_dir": str(d)}))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        w.writerow({"time_s": 0.0, "env_steps": 0})  # no return logged yet: left out
        for x, y in zip(xs, ys, strict=True):
            w.writerow({"time_s": x, "env_steps": int(100 * x), "mean_return_100": y})
    return d


def test_seeds_form_one_group_with_median_and_band(real_run: Path) -> None:
    a = _sibling(real_run, "a", [1, 2, 3, 4, 5], [1, 2, 3, 4, 5], seed=0)
    b = _sibling(real_run, "b", [2, 4, 6], [4, 8, 12], seed=1)  # y = 2x, other x samples
    c = _sibling(real_run, "c", [1, 3, 5], [3, 9, 15], seed=2)  # y = 3x
    other = _sibling(real_run, "d", [1, 2], [0, 0], seed=0, lr=0.5)
    groups = group_runs([a, b, c, other])
    assert [g.runs for g in groups] == [[a, b, c], [other]]
    assert [g.label for g in groups] == ["impala, lr=0.001 (3 seeds)", "impala, lr=0.5"]

    curves = [load_curve(d, "time", "return") for d in (a, b, c)]
    assert curves[1][0].tolist() == [2, 4, 6]  # the row without a return is left out
    grid, med, lo, hi = band(curves, points=7)
    np.testing.assert_allclose(grid, np.linspace(2, 5, 7))  # latest start, earliest end
    np.testing.assert_allclose(lo, grid)  # y = x, 2x, 3x: min x, median 2x, max 3x
    np.testing.assert_allclose(med, 2 * grid)
    np.testing.assert_allclose(hi, 3 * grid)
    gx, gm, _, _ = band([load_curve(d, "steps", "return") for d in (a, b)], points=3)
    np.testing.assert_allclose(gx, [200, 350, 500])
    np.testing.assert_allclose(gm, 1.5 * gx / 100)


def test_plot_of_a_real_run_and_the_command_line(real_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "fig.png"
    groups = plot([real_run], "steps", "return", out)
    assert [g.label for g in groups] == ["impala"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    x, y = load_curve(real_run, "steps", "fps")
    assert len(x) >= 2 and (y > 0).all()

    r = cli("plot", str(real_run), "--x", "steps", "--y", "fps", "--out", str(tmp_path / "f.svg"))
    assert r.returncode == 0 and (tmp_path / "f.svg").is_file(), r.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(real_run / "config.json", bare)
    for argv, needle in (([str(tmp_path)], "no config.json"),
                         ([str(bare)], "no metrics.csv"),
                         ([str(real_run), "--y", "speed"], "invalid choice: 'speed'")):
        r = cli("plot", *argv, "--out", str(tmp_path / "x.png"))
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1 and needle in err[0], err


def _made_run(d: Path, rows: list[tuple[float, float]], **config) -> Path:
    """A run directory of config.json and a metrics.csv of ``rows`` (time, return)."""
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"arch": "seed", "env": "CartPole-v1",
                                               "seed": 0, **config}))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        for x, y in rows:
            w.writerow({"time_s": x, "env_steps": int(100 * x), "mean_return_100": y})
    return d


@pytest.fixture(scope="module")
def one_row_runs(tmp_path_factory) -> list[Path]:
    """Two short CartPole runs of 60,000 steps that each logged a single metrics row (the
    last, at the stop; no start-up rows), as a short run with the default --log-interval
    does."""
    base = tmp_path_factory.mktemp("short")
    runs = []
    for seed in (0, 1):
        d = base / f"impala-s{seed}"
        r = cli("run", "impala", "--actors", "0", "--total-steps", "60000", "--seed", str(seed),
                "--log-interval", "1000", "--quiet", "--no-tensorboard", "--run-dir", str(d))
        assert r.returncode == 0, r.stderr
        assert len((d / "metrics.csv").read_text().splitlines()) == 2  # header, one row
        runs.append(d)
    return runs


def test_short_runs_of_one_metrics_row_are_drawn(one_row_runs: list[Path],
                                                 tmp_path: Path) -> None:
    out = tmp_path / "short.png"
    r = cli("plot", *map(str, one_row_runs), "--x", "steps", "--out", str(out))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    x, y = load_curve(one_row_runs[0], "steps", "return")
    s = json.loads((one_row_runs[0] / "summary.json").read_text())
    assert x.tolist() == [s["env_steps"]] and y[0] == pytest.approx(s["final_mean_return"],
                                                                     abs=1e-3)


def test_the_summary_gives_the_last_point_and_nothing_is_one_line(
        one_row_runs: list[Path], tmp_path: Path, capsys) -> None:
    """A run stopped before its last row (a signal, an error) ends at its summary's values;
    a run with no value anywhere is left out with a line, and nothing at all to draw is one
    line and exit code 2, with no figure."""
    from archzoo.cli import main

    stopped = _made_run(tmp_path / "stopped", [(1.0, 5.0)])
    (stopped / "summary.json").write_text(json.dumps(
        {"wall_s": 3.5, "env_steps": 350, "final_mean_return": 9.0, "fps": 100.0}))
    for x, end in (("time", 3.5), ("steps", 350)):
        xs, ys = load_curve(stopped, x, "return")
        assert xs.tolist() == [xs[0], end] and ys.tolist() == [5.0, 9.0]
    only_summary = _made_run(tmp_path / "only-summary", [])
    (only_summary / "summary.json").write_text(json.dumps(
        {"wall_s": 2.0, "env_steps": 200, "final_mean_return": 7.0}))
    assert load_curve(only_summary, "time", "return")[1].tolist() == [7.0]
    nothing = _made_run(tmp_path / "nothing", [], lr=0.5)
    assert main(["plot", str(only_summary), str(nothing), "--out", str(tmp_path / "a.png")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(nothing) in err[0] and "left out" in err[0], err
    assert (tmp_path / "a.png").is_file()

    assert main(["plot", str(nothing), "--out", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing to draw" in err[0], err
    assert not (tmp_path / "b.png").exists()


def test_legends_leave_out_unset_settings(tmp_path: Path) -> None:
    """Flags are named where groups of one architecture differ, not unset ones, and not
    between architectures (whose flags and defaults differ anyway)."""
    a = _made_run(tmp_path / "a", [(1, 1), (2, 2)], arch="impala", max_batch=None, lr=0.1)
    b = _made_run(tmp_path / "b", [(1, 1), (2, 2)], arch="seed", max_batch=64)
    c = _made_run(tmp_path / "c", [(1, 1), (2, 2)], arch="seed", max_batch=None)
    assert [g.label for g in group_runs([a, b, c])] == ["impala", "seed, max_batch=64", "seed"]
