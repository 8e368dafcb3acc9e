"""The learning benchmark (archzoo/benchlearn/): its protocol, its records from real runs,
the rule that reported seeds never choose a preset, rliable's statistics against plain
references, and the page generated from the records alone."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from archzoo.benchlearn import main, stats, store, tuning
from archzoo.benchlearn import protocol as P
from archzoo.benchlearn.page import page
from archzoo.benchlearn.readouts import collapse, mean_over_run
from archzoo.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
NO_WAIT = 64.0  # --max-busy: the other tests of a parallel session keep the machine busy


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """Intervals from 400 bootstrap resamples, not the page's 5,000 (the same rliable
    calls, a tenth of the time)."""
    monkeypatch.setattr(stats, "REPS", 400)


def test_the_one_process_gets_the_two_actors_cores_envs_and_exploration() -> None:
    dist, one = P.setups("apex", "minatar", cores=2)
    assert dist.flags == ("--actors", "2") and dist.name == "apex, 2 actors"
    assert one.name == "apex, one process"
    flags = dict(zip(one.flags[::2], one.flags[1::2], strict=True))
    assert flags == {"--actors": "0", "--envs-per-actor": "32", "--learner-threads": "2",
                     "--eps-ladder": "2"}
    _, impala = P.setups("impala", "minatar", cores=2)
    assert "--eps-ladder" not in impala.flags  # no ε: nothing to match
    # the cores the distributed run can use: its processes, at most the machine's
    assert P.setups("gorila", "minatar", cores=16)[1].threads == 5  # PS, replay, learner, 2
    assert P.setups("gala", "minatar", cores=16)[1].threads == 2  # two agents


def test_setups_alternate_within_a_seed() -> None:
    setups = {a: P.setups(a, None, cores=2) for a in ("impala", "apex")}
    order = [(s.name, g, seed) for s, g, seed in P.cells(
        ["impala", "apex"], ["A", "B"], {"A": [0, 1], "B": [0]}, setups)]
    assert order == [("impala, 2 actors", "A", 0), ("impala, one process", "A", 0),
                     ("apex, 2 actors", "A", 0), ("apex, one process", "A", 0),
                     ("impala, 2 actors", "B", 0), ("impala, one process", "B", 0),
                     ("apex, 2 actors", "B", 0), ("apex, one process", "B", 0),
                     ("impala, 2 actors", "A", 1), ("impala, one process", "A", 1),
                     ("apex, 2 actors", "A", 1), ("apex, one process", "A", 1)]
    # the pairs that run back to back: one architecture's setups on one game and seed
    pairs = P.units(P.cells(["impala", "apex"], ["A", "B"], {"A": [0, 1], "B": [0]}, setups))
    assert [[(s.name, g, seed) for s, g, seed in u] for u in pairs] == \
        [order[k:k + 2] for k in range(0, len(order), 2)]
    assert P.seeds_for("MinAtar/Breakout-v1") == [0, 1, 2, 3, 4]
    assert P.seeds_for("MinAtar/Freeway-v1") == [0, 1, 2]


@pytest.mark.parametrize("argv, said", [
    (["tune", "--seeds", "100", "3"], "seed 3 is a reported seed"),
    (["grid", "--preset", "none", "--seeds", "100"], "seed 100 is a tuning seed"),
])
def test_tuning_and_reported_seeds_are_kept_apart(argv, said, tmp_path, capsys) -> None:
    assert main([*argv, "--store", str(tmp_path / "s.jsonl"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def _learning(arch: str, seed: int, candidate: str, value: float, purpose: str = "tune",
              rows: list[dict] | None = None, config: dict | None = None) -> dict:
    """A learning record as the runner writes it, with the fields a choice reads (its
    resolved config holds the candidate's values unless ``config`` says otherwise)."""
    rows = rows or [{"time_s": 5.0, "mean_return_100": value}]
    if config is None:
        values = dict(tuning.CANDIDATES[arch])[candidate]
        config = {k.replace("-", "_"): v for k, v in values.items()}
    return {"kind": "learning", "purpose": purpose, "preset": "minatar", "arch": arch,
            "config": config,
            "setup": f"{arch}, 2 actors [{candidate}]", "setup_kind": "distributed",
            "game": tuning.TUNING_GAME, "seed": seed, "minutes": 5.0, "error": None,
            "rows": rows, "readouts": {"eval": value, "train": rows[-1]["mean_return_100"],
                                       "train_best": max(r["mean_return_100"] for r in rows),
                                       "entropy_final": None}}


def test_a_preset_is_chosen_by_its_own_score_on_tuning_seeds_alone(tmp_path) -> None:
    fell = [{"time_s": 5.0, "mean_return_100": 50.0}, {"time_s": 10.0, "mean_return_100": 5.0}]
    records = [_learning("impala", 100, "lr-decay", 30.0),
               _learning("impala", 101, "lr-decay", 34.0),
               _learning("impala", 100, "constant lr", 60.0, rows=fell),  # best, but collapsed
               _learning("impala", 101, "constant lr", 40.0)]
    choice = tuning.choose(records, "impala", "minatar")
    assert choice["chosen"] == "lr-decay" and choice["seeds"] == [100, 101]
    assert choice["candidates"]["lr-decay"]["mean"] == 32.0
    assert choice["candidates"]["constant lr"]["collapsed"]
    # a record of a reported seed among them: no choice at all
    with pytest.raises(UsageError, match="reported seed"):
        tuning.choose([*records, _learning("impala", 0, "lr-decay", 99.0)], "impala", "minatar")

    # the choice goes into the preset file (a copy), with the digest of what it now holds
    preset = tmp_path / "impala.toml"
    shutil.copy(ROOT / "archzoo/presets/minatar/impala.toml", preset)
    decay = tuning.apply(choice, preset)
    assert "lr-decay = true" in preset.read_text()
    choice = {**choice, "candidates": {**choice["candidates"]}, "chosen": "constant lr"}
    constant = tuning.apply(choice, preset)
    assert "lr-decay = false" in preset.read_text() and "lr-decay = true" not in \
        preset.read_text()
    # the digest is of the values: the bundled preset holds one of the two candidates
    assert decay["preset_digest"] != constant["preset_digest"]
    assert P.preset_digest("impala", "minatar") in (decay["preset_digest"],
                                                    constant["preset_digest"])


def test_a_tuning_run_that_did_not_hold_its_candidate_is_left_out_and_run_again(
        tmp_path, capsys) -> None:
    """A run whose resolved config lacks its candidate's values (its child ranks lost a
    ``--no-`` flag, as they did before config_argv spelled every given switch) ran the other
    candidate: the choice leaves it out and names it, and ``tune`` runs its cell again."""
    lost = _learning("impala", 100, "constant lr", 90.0, config={"lr_decay": True})
    records = [_learning("impala", 100, "lr-decay", 30.0), lost,
               _learning("impala", 101, "constant lr", 20.0)]
    assert not tuning.holds(lost) and tuning.holds(records[0]) and tuning.holds(records[2])
    path = tmp_path / "s.jsonl"
    for r in records:
        store.append(path, r)
    assert main(["tune", "--archs", "impala", "--store", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()  # the lost cell and the one never run
    assert len(out) == 2 and "--no-lr-decay --actors 2 --seed 100" in out[0] \
        and "--lr-decay --actors 2 --seed 101" in out[1], out
    assert main(["tune", "--archs", "impala", "--store", str(path), "--dry-run", "--rerun",
                 "--candidates", "lr-decay"]) == 0  # one candidate again, beside its rival
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("--lr-decay --actors 2" in ln for ln in out), out
    assert main(["tune", "--archs", "impala", "--store", str(path), "--dry-run",
                 "--candidates", "adam"]) == 2
    assert "--candidates adam: the candidates of impala are constant lr, lr-decay" in \
        capsys.readouterr().err
    with pytest.raises(UsageError, match=r"'lr-decay' has no run of its values on seed"):
        tuning.choose(records, "impala", "minatar")  # each candidate on every seed first
    records += [_learning("impala", 100, "constant lr", 25.0),
                _learning("impala", 101, "lr-decay", 26.0)]
    choice = tuning.choose(records, "impala", "minatar")
    assert choice["candidates"]["constant lr"]["scores"] == [20.0, 25.0]  # not the 90
    assert choice["chosen"] == "lr-decay"  # 28 against 22.5; with the 90, constant lr
    assert choice["left_out"] == ["impala, 2 actors [constant lr] s100"]
    rerun = tuning.choose([*records, _learning("impala", 100, "lr-decay", 10.0)], "impala",
                          "minatar")  # a cell run again counts once, as its newest run
    assert rerun["candidates"]["lr-decay"]["scores"] == [10.0, 26.0]
    assert rerun["chosen"] == "constant lr"
    text = page([*records, {**choice, "preset_digest": "d"}], "minatar", 5.0, None, "s.jsonl",
                ["cmd"])
    assert "Left out, since the run's resolved config did not hold its candidate's values: " \
        "impala, 2 actors [constant lr] s100." in text


def test_a_reported_run_of_other_preset_values_runs_again_and_leaves_the_page(
        tmp_path, capsys) -> None:
    """A reported cell whose record ran other values than the preset holds now (its digest
    differs) is not kept: the grid runs it again, and the page draws only runs of the values
    of the architecture's newest choice."""
    path = tmp_path / "s.jsonl"
    _chosen_impala_seed0(path, two_actors_digest="0" * 16)
    _only_the_two_actors_run_again(path, capsys)


def _chosen_impala_seed0(path: Path, two_actors_digest: str | None = None) -> None:
    """A choice of IMPALA's preset as it is now and its two reported seed-0 cells (the
    2-actor one of ``two_actors_digest``, default: the preset's)."""
    digest = P.preset_digest("impala", "minatar")
    store.append(path, {"kind": "preset-choice", "arch": "impala", "preset": "minatar",
                        "preset_digest": digest, "seeds": [100, 101], "chosen": "lr-decay",
                        "candidates": {}})
    for kind, setup, d in (("distributed", "impala, 2 actors", two_actors_digest or digest),
                           ("one process", "impala, one process", digest)):
        store.append(path, {**record(kind, 0, 50.0), "preset": "minatar", "setup": setup,
                            "preset_digest": d})


def _only_the_two_actors_run_again(path: Path, capsys) -> str:
    """The grid's dry run lists the 2-actor cell alone, and the page (returned) counts 0 / 1
    seeds for IMPALA."""
    assert main(["grid", "--archs", "impala", "--games", "MinAtar/Breakout-v1", "--seeds", "0",
                 "--store", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "--actors 2 --seed 0" in out[0], out
    text = page(store.read(path), "minatar", 5.0, None, "s.jsonl", ["cmd"])
    row = next(ln for ln in text.splitlines() if ln.startswith("| impala |")).split(" | ")
    assert row[1] == "0 / 1"
    return text


def test_a_withdrawn_run_leaves_the_page_and_runs_again(tmp_path, capsys) -> None:
    """``withdraw`` appends why a run's conditions were broken: the page drops the run and
    names it, the grid runs its cell again, and a cell with no run left is a usage error."""
    path = tmp_path / "s.jsonl"
    _chosen_impala_seed0(path)
    withdraw = ["withdraw", "--setup", "impala, 2 actors", "--game", "MinAtar/Breakout-v1",
                "--seed", "0", "--why", "it ran beside a pip install", "--store", str(path)]
    assert main(withdraw) == 0
    capsys.readouterr()
    text = _only_the_two_actors_run_again(path, capsys)
    assert "impala, 2 actors, MinAtar/Breakout-v1, seed 0: it ran beside a pip install." in text
    assert main(withdraw) == 2  # nothing left to withdraw
    assert "has no run of impala, 2 actors, MinAtar/Breakout-v1, seed 0" in \
        capsys.readouterr().err


def test_a_reported_grid_refuses_a_preset_not_chosen_on_tuning_seeds(tmp_path, capsys) -> None:
    path = tmp_path / "s.jsonl"
    argv = ["grid", "--archs", "impala", "--games", "MinAtar/Breakout-v1", "--store", str(path),
            "--dry-run"]
    assert main(argv) == 2  # no choice in the store
    assert "no choice on the tuning seeds" in capsys.readouterr().err
    digest = P.preset_digest("impala", "minatar")
    choice = {"kind": "preset-choice", "arch": "impala", "preset": "minatar",
              "preset_digest": digest, "seeds": [0, 100], "chosen": "lr-decay",
              "candidates": {}}
    store.append(path, choice)
    assert main(argv) == 2  # chosen with a reported seed among its runs
    assert "chosen on reported seed(s) [0]: refused" in capsys.readouterr().err
    store.append(path, {**choice, "preset_digest": "0" * 16, "seeds": [100, 101]})
    assert main(argv) == 2  # a newer choice of other values than the preset holds now
    assert "is not its newest choice (digest 0000000000000000)" in capsys.readouterr().err
    store.append(path, {**choice, "seeds": [100, 101]})
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 10 and "--actors 0 --envs-per-actor 32 --learner-threads 2" in out[1]


def test_hours_starts_no_pair_that_would_end_past_it(tmp_path, capsys) -> None:
    """``--hours 0.025`` (90 s) holds one 0.1-minute cell with its minute of start-up and
    evaluation (66 s by the first estimate) but not the pair a seed runs back to back: the
    grid stops before its first cell and stores no learning record."""
    path = tmp_path / "s.jsonl"
    assert main(["grid", "--preset", "none", "--archs", "impala", "--games", "CartPole-v1",
                 "--seeds", "0", "--minutes", "0.1", "--store", str(path), "--run-root",
                 str(tmp_path / "runs"), "--hours", "0.025", "--max-busy", str(NO_WAIT)]) == 0
    assert [r["kind"] for r in store.read(path)] == ["random"]
    assert "--hours 0.025: stopping with 2 cell(s) left" in capsys.readouterr().err
    assert main(["tune", "--archs", "impala", "--store", str(path), "--hours", "0"]) == 2
    assert "--hours 0: give a positive number of hours" in capsys.readouterr().err
    assert main(["tune", "--archs", "impala", "--store", str(path), "--max-busy", "-1"]) == 2
    assert "--max-busy -1: give the cores other processes may use" in capsys.readouterr().err


def test_a_record_carries_commit_config_threads_and_both_readouts(tmp_path) -> None:
    """Two real runs of the grid (CartPole, IMPALA, 2 actors and its one process), each
    with its frozen evaluation, appended to the store; a second grid runs nothing."""
    path = tmp_path / "s.jsonl"
    argv = ["grid", "--preset", "none", "--archs", "impala", "--games", "CartPole-v1",
            "--seeds", "0", "--minutes", "0.1", "--store", str(path), "--run-root",
            str(tmp_path / "runs"), "--max-busy", str(NO_WAIT)]
    assert main(argv) == 0
    records = store.read(path)
    assert [r["kind"] for r in records] == ["random", "learning", "learning"]
    dist, one = records[1:]
    assert (dist["setup"], one["setup"]) == ("impala, 2 actors", "impala, one process")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    for r in (dist, one):
        assert r["error"] is None and r["returncode"] == 0
        assert r["provenance"]["commit"] == head and isinstance(r["provenance"]["dirty"], bool)
        assert r["provenance"]["cpu_count"] and r["provenance"]["versions"]["torch"]
        assert r["calibration"]["env_steps_per_s"] > 0 and r["calibration"]["updates_per_s"] > 0
        assert 0 <= r["busy_cores_before"] <= 1.1 * (os.cpu_count() or 1)  # measured
        assert r["config"]["arch"] == "impala" and r["config"]["seed"] == 0
        assert r["config"]["env"] == "CartPole-v1" and r["minutes"] == 0.1
        ev = r["evaluation"]
        assert len(ev["returns"]) == P.EVAL_EPISODES and ev["policy"] == "sample"
        assert r["readouts"]["eval"] == pytest.approx(statistics.fmean(ev["returns"]))
        returns = [row["mean_return_100"] for row in r["rows"] if "mean_return_100" in row]
        assert r["readouts"]["train"] == returns[-1]
        assert r["readouts"]["auc"] == pytest.approx(statistics.fmean(returns))
        times = [row["time_s"] for row in r["rows"]]
        assert times == sorted(times) and times[-1] >= 0.1 * 60 - P.LOG_INTERVAL
    assert dist["threads"]["processes"] == 3 and dist["threads"]["learner_process"] == 1
    assert one["threads"]["processes"] == 1 and one["threads"]["learner_process"] == 2
    assert one["config"]["envs_per_actor"] == 2 * dist["config"]["envs_per_actor"]
    assert main(argv) == 0 and len(store.read(path)) == 3  # kept: nothing runs again

    out = tmp_path / "docs" / "results.md"
    out.parent.mkdir()
    assert main(["page", "--preset", "none", "--minutes", "0.1", "--store", str(path),
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert len(text.splitlines()) <= 250
    row = next(ln for ln in text.splitlines() if ln.startswith("| impala |"))
    assert f"{dist['readouts']['eval']:.1f} (1 run)" in row and "too few runs" in row
    assert (tmp_path / "docs/figures/learning-cartpole.png").stat().st_size > 0
    run_dir = str(tmp_path / "runs")
    assert head[:10] in text and one["command"].split(run_dir)[0] in text
    assert run_dir not in text and "--run-dir RUN_DIR" in text  # no path of this machine
    day = dist["provenance"]["start_time"][:10]
    assert f"- {day}: 2 cells, " in text and "steps/s" in text.split(f"- {day}")[1]


def test_iqm_intervals_and_improvement_against_plain_references() -> None:
    x = [3.0, 9.0, 1.0, 7.0, 5.0]
    point, lo, hi = stats.iqm(x)
    assert point == pytest.approx(scipy.stats.trim_mean(x, 0.25)) and lo <= point <= hi
    assert lo >= min(x) and hi <= max(x) and lo < hi
    d, dlo, dhi = stats.difference([v + 10 for v in x], x)
    assert d == pytest.approx(10.0) and dlo < d < dhi
    assert stats.probability_of_improvement(np.array([[5.0], [6.0], [7.0]]),
                                            np.array([[1.0], [2.0], [3.0]])) == (1.0, 1.0, 1.0)
    assert stats.probability_of_improvement(np.array([[1.0], [2.0]]),
                                            np.array([[1.0], [2.0]]))[0] == 0.5
    names, runs = ("A", "B"), (3, 3)
    assert stats.verdict((2.0, 0.5, 3.0), 0.0, names, runs) == "A better"
    assert stats.verdict((-2.0, -3.0, -0.1), 0.0, names, runs) == "B better"
    assert stats.verdict((1.0, -0.5, 3.0), 0.0, names, runs) == "no difference measured"
    assert stats.verdict((0.9, 0.6, 1.0), 0.5, names, runs) == "A better"
    assert stats.verdict((2.0, 1.0, 3.0), 0.0, names, (2, 3)).startswith("too few runs")
    ref = np.array([[10.0, 20.0]])
    assert stats.normalized(ref, np.array([0.0, 10.0]), np.array([20.0, 30.0])).tolist() == \
        [[0.5, 0.5]]


def test_two_sample_intervals_do_not_depend_on_what_ran_before() -> None:
    # rliable's independent bootstrap draws from the global np.random: the page must come
    # out the same from the same records, and leave the caller's generator as it found it
    a, b = [80.0, 55.0, 112.0, 70.0, 90.0], [73.0, 38.0, 110.0, 60.0, 100.0]
    x, y = np.array([[5.0, 1.0], [2.0, 7.0], [4.0, 3.0]]), np.array([[3.0, 2.0], [6.0, 1.0]])
    def intervals() -> tuple:
        return stats.iqm(a), stats.difference(a, b), stats.probability_of_improvement(x, y)

    first = intervals()
    np.random.seed(123)
    np.random.random(17)
    state = np.random.get_state()
    assert intervals() == first
    assert np.random.get_state()[1].tolist() == state[1].tolist()


def test_a_collapse_is_read_off_the_rows() -> None:
    rows = [{"time_s": 5.0 * k, "mean_return_100": v} for k, v in enumerate([1, 8, 10, 6])]
    record = {"readouts": {"train": 6.0, "train_best": 10.0, "entropy_final": 0.5}}
    assert collapse(record) == "return fell to 6.0 from a best window of 10.0"
    assert collapse({"readouts": {"train": 7.5, "train_best": 10.0, "entropy_final": 0.5}}) \
        is None
    assert collapse({"readouts": {"train": 9, "train_best": 10, "entropy_final": 0.01}}) == \
        "entropy ended at 0.01"
    assert mean_over_run(rows) == 6.25
    # An ε-greedy architecture is judged on its greedy evaluation's windows (3 averaged),
    # not on a return100 that pools its ε ladder.
    greedy = [{"mean_return_100": t, "eval_mean_return": e}
              for t, e in [(3, 40), (9, 60), (9, 62), (8, 61), (3, 58), (4, 60)]]
    apex = {"arch": "apex", "rows": greedy,
            "readouts": {"train": 4.0, "train_best": 9.0, "entropy_final": None}}
    assert collapse(apex) is None
    fell = [*greedy, *({"eval_mean_return": 20.0} for _ in range(3))]
    assert collapse({**apex, "rows": fell}) == \
        "greedy return fell to 20.0 from a best window of 61.0"


def record(kind: str, seed: int, value: float, game: str = "MinAtar/Breakout-v1") -> dict:
    """A reported IMPALA cell as the runner writes it, with readouts around ``value``."""
    return {"kind": "learning", "purpose": "report", "preset": "p", "arch": "impala",
            "setup": f"impala, {kind}", "setup_kind": kind, "game": game,
            "seed": seed, "minutes": 5.0, "error": None, "rows": [],
            "readouts": {"eval": value, "train": value + 1 if kind == "distributed" else
                         value + 1 + seed % 2, "auc": value},
            "summary": {"env_steps": 10**6, "policy_lag_mean": 1.0},
            "threads": {"processes": 3, "learner_process": 1, "other_processes": 1,
                        "cores": 2},
            "provenance": {"commit": "abc", "dirty": False, "cpu_model": "cpu"},
            "command": "cmd", "eval_command": "ev"}


def test_the_page_claims_only_what_the_intervals_allow() -> None:
    """Five seeds a side from records as the runner writes them: a clear gap is a claim,
    overlapping scores are "no difference measured"."""
    records = [record("distributed", s, 50.0 + s) for s in range(5)] + \
        [record("one process", s, 10.0 + s) for s in range(5)]
    # train100: 2 actors 51..55, one process 11..16 as well but shifted back by 40 below
    for r in records[5:]:
        r["readouts"]["train"] += 40.0
    text = page(records, "p", 5.0, None, "s.jsonl", ["cmd"])
    row = next(ln for ln in text.splitlines() if ln.startswith("| impala |")).split(" | ")
    assert row[5] == "2 actors better"  # eval: 50..54 against 10..14
    assert row[9] == "no difference measured"  # train100: 51..55 against 51..56
    assert json.dumps(text).count("dirty") == 0


def test_the_aggregate_normalizes_per_game_and_says_when_it_has_too_few_games() -> None:
    """Two games, 3 seeds a side: the IQM of (score − random) / (reference − random) over
    games × seeds, and P(2 actors > one process) against a count over all pairs. With one
    game the page says there is no aggregate yet."""
    games = P.GAMES[:2]
    randoms = {games[0]: 1.0, games[1]: 5.0}
    values = {("distributed", games[0]): [61.0, 81.0, 101.0],
              ("one process", games[0]): [31.0, 91.0, 41.0],
              ("distributed", games[1]): [25.0, 15.0, 35.0],
              ("one process", games[1]): [10.0, 20.0, 45.0]}
    records = [record(kind, seed, v, game) for (kind, game), vs in values.items()
               for seed, v in enumerate(vs)]
    randoms_records = [{"kind": "random", "game": g, "mean_return": m}
                       for g, m in randoms.items()]
    text = page(records + randoms_records, "p", 5.0, None, "s.jsonl", ["cmd"])
    row = next(ln for ln in text.split("**frozen evaluation**")[1].splitlines()
               if ln.startswith("| impala |")).strip("| ").split(" | ")

    def norm(kind: str) -> np.ndarray:
        return np.array([[(v - randoms[g]) / (P.REFERENCE_SCORES[g] - randoms[g])
                          for v in values[(kind, g)]] for g in games]).T  # seeds × games
    x, y = norm("distributed"), norm("one process")
    assert row[1] == "2 × 3"
    assert float(row[2].split(" [")[0]) == pytest.approx(
        scipy.stats.trim_mean(x.ravel(), 0.25), abs=0.005)
    assert float(row[3].split(" [")[0]) == pytest.approx(
        scipy.stats.trim_mean(y.ravel(), 0.25), abs=0.005)
    pairs = [np.mean([(a > b) + 0.5 * (a == b) for a in x[:, t] for b in y[:, t]])
             for t in range(len(games))]
    assert float(row[4].split(" [")[0]) == pytest.approx(np.mean(pairs), abs=0.005)
    assert "No aggregate yet" not in text

    one_game = [r for r in records if r["game"] == games[0]]
    text = page(one_game + randoms_records, "p", 5.0, None, "s.jsonl", ["cmd"])
    assert "**frozen evaluation**" not in text and "No aggregate yet" in text
