"""benchmarks/bench_learning.py without training: archzoo runs are faked (a metrics.csv and a
summary.json written into the run directory), so the grid, the kept cells, the tables, the
results file and the figures are checked in a second."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_learning.py"
spec = importlib.util.spec_from_file_location("bench_learning", PATH)
bl = importlib.util.module_from_spec(spec)
sys.modules["bench_learning"] = bl
spec.loader.exec_module(bl)

HEADER = "time_s,env_steps,episodes,mean_return_100,eval_mean_return,policy_lag\n"


def fake_launch(calls: list[list[str]], fail_arch: str | None = None):
    """A launch that writes a run's files: return100 rises to 6 at 3 minutes, then falls to
    3 by the end (a collapse); ``fail_arch`` exits 1 with an error line."""

    def launch(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append(cmd)
        arch = cmd[cmd.index("run") + 1]
        if arch == fail_arch:
            return 1, "", "Traceback ...\nerror: something broke\n"
        d = Path(cmd[cmd.index("--run-dir") + 1])
        d.mkdir(parents=True)
        seconds = float(cmd[cmd.index("--time-limit") + 1])
        lines, t = [HEADER], 5.0
        while t <= seconds + 1e-9:
            r = 6 * t / 180 if t <= 180 else 6 - 3 * (t - 180) / (seconds - 180)
            ev = f"{r + 1:.2f}" if arch == "apex" else ""
            lines.append(f"{t:.3f},{int(t * 1000)},{int(t)},{r:.2f},{ev},1.0\n")
            t += 5.0
        (d / "metrics.csv").write_text("".join(lines))
        (d / "summary.json").write_text(json.dumps({
            "env_steps": int(seconds * 1000), "fps": 1000.0, "final_mean_return": 3.0,
            "eval_mean_return": 4.0 if arch == "apex" else None,
            "policy_lag": {"versions": {"mean": 1.02, "p50": 1, "p90": 2, "max": 3}}}))
        return 0, "", ""

    return launch


@pytest.fixture
def fakes(monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(bl, "launch", fake_launch(calls, fail_arch="gorila"))
    monkeypatch.setattr(bl, "random_policy", lambda game: {"mean_return": 0.5, "std": 0.1,
                                                           "episodes": 100, "seed": 0})
    return calls


def test_grid_tables_results_figures_and_kept_cells(tmp_path, fakes, capsys):
    results, docs = tmp_path / "learning.json", tmp_path / "docs" / "results.md"
    argv = ["--archs", "impala", "apex", "gorila", "--games", "MinAtar/Breakout-v1",
            "--minutes", "6", "--results", str(results), "--run-root", str(tmp_path / "runs"),
            "--write-docs", str(docs)]
    assert bl.main(argv) == 0
    out = capsys.readouterr().out
    assert len(fakes) == 4  # three architectures and the single-process reference
    ref = [c for c in fakes if "0" == c[c.index("--actors") + 1]]
    assert len(ref) == 1 and ref[0][ref[0].index("run") + 1] == "impala"
    assert all(c[c.index("--config") + 1] == "minatar" for c in fakes)

    data = json.loads(results.read_text())
    assert len(data["runs"]) == 4 and data["random"]["MinAtar/Breakout-v1"]["mean_return"] == 0.5
    run = data["runs"][bl.cell_key("impala (2 actors)", "MinAtar/Breakout-v1", 0, 6)]
    assert set(run["rows"][0]) == {"time_s", "mean_return_100"}
    assert run["policy_lag_mean"] == 1.02 and run["env_steps"] == 360000
    failed = data["runs"][bl.cell_key("gorila (2 actors)", "MinAtar/Breakout-v1", 0, 6)]
    assert failed["error"] == "error: something broke"

    impala = next(ln for ln in out.splitlines() if ln.startswith("| impala (2 actors) | 0 |"))
    cells = [c.strip() for c in impala.split("|")[1:-1]]
    # at 2 and 5 min, blank at 10 (the run is 6 min), best, final, steps, lag, collapse
    assert cells[2:5] == ["4.00", "4.00", ""]  # 6 at 3 min, 6 - 3 * 2/3 at 5
    assert cells[5:] == ["6.00", "3.00", "360,000", "1.02", "2.0", "collapsed"]
    apex = next(ln for ln in out.splitlines() if ln.startswith("| apex (2 actors) | 0 |"))
    assert "4.00 (eval 5.00)" in apex and "6.00 (eval 7.00) |" in apex
    assert "3.00 (eval 4.00)" in apex and apex.endswith("| collapsed |")  # greedy: 4 < 0.7 × 7
    assert "failed: error: something broke" in out
    # median final, own baseline and × own (blank: no --own-baselines), reference, ×, random
    assert "| impala (2 actors) | 1/1 | 3.00 |  |  | 3.00 | 1.00 | 0.50 |" in out
    assert "| apex (2 actors) | 1/1 | 4.00 |" in out  # ε-greedy: judged by the greedy eval
    assert (tmp_path / "docs" / "figures" / "learning-breakout.png").stat().st_size > 0
    page = docs.read_text()
    assert "bench_learning.py" in page and "CPU cores, torch" in page
    assert "figures/learning-breakout.png" in page

    fakes.clear()  # a second run keeps every cell
    assert bl.main(argv) == 0
    assert fakes == [] and "4 finished cell(s) kept" in capsys.readouterr().err
    assert bl.main([*argv, "--archs", "impala", "--no-reference", "--rerun"]) == 0
    assert len(fakes) == 1


def test_several_seeds_draw_a_band(tmp_path, fakes):
    argv = ["--archs", "impala", "--games", "MinAtar/Breakout-v1", "--seeds", "0", "1",
            "--minutes", "4", "--results", str(tmp_path / "r.json"), "--run-root",
            str(tmp_path / "runs"), "--write-docs", str(tmp_path / "r.md")]
    assert bl.main(argv) == 0 and len(fakes) == 4
    assert (tmp_path / "figures" / "learning-breakout.png").is_file()


def test_dry_run_runs_nothing(tmp_path, fakes, capsys):
    assert bl.main(["--dry-run", "--results", str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 * (len(bl.ARCHS) + 1) and fakes == []
    assert not (tmp_path / "r.json").exists()
    assert all("--total-steps 10000000000 --target-return 1e9 --quiet" in ln for ln in lines)


def test_own_baselines_and_variants_for_one_architecture():
    setups = bl.make_setups(["impala", "seed"], True, ["seed:clip=--clip-ratio 0.2"],
                            own_baselines=True)
    names = [s.name for s in setups]
    assert names == ["impala (2 actors)", bl.REFERENCE, "seed (2 actors)", "seed (1 process)",
                     "seed (2 actors, clip)", "seed (1 process, clip)"]
    by = {s.name: s for s in setups}
    assert by["impala (2 actors)"].baseline == bl.REFERENCE  # the same run, kept once
    assert by["seed (2 actors, clip)"].baseline == "seed (1 process, clip)"
    assert by["seed (1 process, clip)"].flags == ("--clip-ratio", "0.2", "--actors", "0")
    only = bl.make_setups(["impala", "seed"], False, ["seed:clip=--clip-ratio 0.2"],
                          variants_only=True)
    assert [s.name for s in only] == ["seed (2 actors, clip)"]


def test_value_at_and_collapse():
    rows = [{"time_s": 5.0 * i, "mean_return_100": float(i)} for i in range(1, 25)]  # to 120 s
    assert bl.value_at(rows, 2) == 24.0 and bl.value_at(rows, 1) == 12.0
    assert bl.value_at(rows, 5) is None
    assert bl.collapsed(6.0, 4.1, 4.0) and not bl.collapsed(6.0, 4.3, 4.0)
    assert not bl.collapsed(3.0, 0.0, 4.0)


def test_epsilon_greedy_runs_are_judged_on_their_greedy_evaluation():
    """Ape-X's behaviour return falls as its ε ladder explores while its greedy policy
    improves: not a collapse. A greedy evaluation that falls is one, whatever return100 does."""
    rows = [{"time_s": 5.0 * i, "mean_return_100": 6.0 if i < 5 else 3.0,
             "eval_mean_return": 2.0 * i} for i in range(1, 10)]
    run = {"arch": "apex", "setup": "apex (2 actors)", "seed": 0, "rows": rows,
           "env_steps": 1000, "eval_mean_return": 18.0}
    cells = bl.run_row(run, (), 4.0)
    assert cells[2:4] == ["6.00 (eval 18.00)", "3.00 (eval 18.00)"] and cells[-1] == ""
    assert bl.score(run) == 18.0
    fell = [{**r, "eval_mean_return": 18.0 - 2.0 * i} for i, r in enumerate(rows)]
    assert bl.run_row({**run, "rows": fell}, (), 4.0)[-1] == "collapsed"
    assert bl.run_row({**run, "arch": "impala"}, (), 4.0)[-1] == "collapsed"  # 3 < 0.7 × 6


def test_every_game_table_counts_random_and_reference(tmp_path, fakes, capsys):
    """Two games: a first table with each setup's median final per game, the games on which
    it beats the random policy, and those on which it matches or beats the reference."""
    argv = ["--archs", "impala", "apex", "--games", "MinAtar/Breakout-v1",
            "MinAtar/Freeway-v1", "--minutes", "4", "--results", str(tmp_path / "r.json"),
            "--run-root", str(tmp_path / "runs")]
    assert bl.main(argv) == 0
    out = capsys.readouterr().out
    assert out.index("## Every game") < out.index("## MinAtar/Breakout-v1")
    # impala's final 3.00 equals the reference's; apex's greedy eval 4.00 beats it
    assert "| impala (2 actors) | 3.00 ≥ (1) | 3.00 ≥ (1) | 2/2 | 2/2 |" in out
    assert "| apex (2 actors) | 4.00 ≥ (1) | 4.00 ≥ (1) | 2/2 | 2/2 |" in out
    assert f"| {bl.REFERENCE} | 3.00 (1) | 3.00 (1) | 2/2 |  |" in out
    assert "| random policy | 0.50 | 0.50 |  |  |" in out
    games = {"G": {bl.REFERENCE: [], "x (2 actors)": []}}
    games["G"][bl.REFERENCE] = [{"arch": "impala", "rows": [{"time_s": 5, "mean_return_100": 2}]}]
    games["G"]["x (2 actors)"] = [{"arch": "x", "rows": [{"time_s": 5, "mean_return_100": 0.1}]}]
    assert "| x (2 actors) | 0.10 < (1) | 0/1 | 0/1 |" in bl.games_table(games, {"G": 0.5})


def test_write_docs_keeps_the_hand_written_notes(tmp_path, fakes):
    docs = tmp_path / "results.md"
    argv = ["--archs", "impala", "--games", "MinAtar/Breakout-v1", "--minutes", "4",
            "--results", str(tmp_path / "r.json"), "--run-root", str(tmp_path / "runs"),
            "--write-docs", str(docs)]
    assert bl.main(argv) == 0
    begin, end = bl.NOTES
    page = docs.read_text()
    assert f"{begin}\n{end}" in page  # a new page: empty markers where the notes go
    docs.write_text(page.replace(f"{begin}\n{end}", f"{begin}\nIMPALA wins here.\n{end}")
                    .replace("| impala (2 actors) |", "| stale |"))
    assert bl.main([*argv, "--report-only"]) == 0
    page = docs.read_text()
    assert f"{begin}\nIMPALA wins here.\n{end}" in page and "| stale |" not in page
    assert page.index(end) < page.index("## MinAtar/Breakout-v1")


def test_greedy_windows_are_judged_as_means_of_three():
    """One lucky greedy window of 30 episodes is not a best to collapse from: the benchmark
    judges the mean of 3 consecutive windows, as the CI guard does (archzoo.collapse)."""
    from archzoo.collapse import GREEDY_ROWS, smoothed

    rng = np.random.default_rng(0)
    w = rng.normal(5.0, 2.0, 40).tolist()
    want = np.convolve(w, np.ones(GREEDY_ROWS) / GREEDY_ROWS, mode="valid")
    assert np.allclose(smoothed(w, GREEDY_ROWS), want) and smoothed(w[:2], 3) == []
    evals = [6.0, 7.0, 6.0, 12.0, 6.0, 7.0, 6.0, 7.0, 7.5]  # one lucky window of 12
    rows = [{"time_s": 5.0 * i, "mean_return_100": 3.0, "eval_mean_return": e}
            for i, e in enumerate(evals, 1)]
    run = {"arch": "gorila", "setup": "gorila (2 actors)", "seed": 0, "rows": rows,
           "env_steps": 1000, "eval_mean_return": 7.5}
    assert bl.collapsed(12.0, 7.5, 4.0)  # judged one window at a time it would be flagged
    assert bl.judged_best_final(run) == (pytest.approx(25 / 3), pytest.approx(20.5 / 3))
    assert bl.run_row(run, (), 4.0)[-1] == ""
    fell = [{**r, "eval_mean_return": 2.0} for r in rows[-3:]]
    assert bl.run_row({**run, "rows": rows[:-3] + fell}, (), 4.0)[-1] == "collapsed"
