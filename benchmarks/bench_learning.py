"""A learning benchmark the docs are built from: every architecture on the MinAtar games at
a fixed wall time, beside the single-process reference and a random policy.

The grid is setups × games × seeds. A setup is an architecture with its preset
(``--config minatar``, archzoo/presets/minatar/ARCH.toml) and ``--actors 2``, or the
single-process reference ``impala --actors 0`` with the IMPALA preset. Every run is

    python -m archzoo run ARCH --config minatar --env GAME --actors 2
        --seed S --time-limit SECONDS --total-steps 10000000000 --target-return 1e9
        --quiet --log-interval 5 --run-dir DIR

so the wall clock (counted from the first env step) ends it. Per run the tables give the
mean return of the last 100 episodes (return100) at 2, 5 and 10 minutes (blank when the
run is shorter), its best and final windows, the agent steps (on MinAtar one agent step is
one frame), the mean and p90 policy lag in parameter versions, and a collapse flag (the
final window under 0.7 × the best, once the best reached ``--collapse-threshold``). Ape-X
and Gorila explore with ε: their greedy evaluation return is shown beside return100, and
their final, best and collapse are judged on the greedy evaluation windows (the collapse on
the mean of 3 consecutive windows of 30 episodes, as the CI guard: archzoo/collapse.py).

Finished cells are kept in ``--results`` (JSON, written after every run, keyed by setup,
game, seed and minutes) with the run's metrics rows, so the grid can be run in parts and
the tables and figures redrawn without rerunning; ``--rerun`` runs kept cells again. A
failed run is recorded with its error line and the grid goes on. With several games a
first table gives every setup's median final per game, beside the reference and a random
policy. ``--write-docs`` keeps the page's hand-written block (between the ``NOTES`` markers)
when it redraws the rest.

    python benchmarks/bench_learning.py --minutes 5 --seeds 0 1 2
    python benchmarks/bench_learning.py --archs impala apex --games MinAtar/Breakout-v1 \\
        --minutes 10 --write-docs docs/results.md    # tables + docs/figures/learning-*.png
    python benchmarks/bench_learning.py --dry-run    # the commands, nothing run
    python benchmarks/bench_learning.py --report-only --write-docs docs/results.md
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archzoo.collapse import (
    COLLAPSE_RATIO,
    GREEDY_ROWS,
    GREEDY_WINDOW,
    RETURN_WINDOW,
    collapsed,
    judged,
)

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("impala", "seed", "apex", "a3c", "gorila", "ga3c", "gala", "r2d2")
EPSILON_ARCHS = frozenset({"apex", "gorila", "r2d2"})  # ε-greedy: greedy eval shown too
GAMES = ("MinAtar/Breakout-v1", "MinAtar/Asterix-v1", "MinAtar/Freeway-v1",
         "MinAtar/Seaquest-v1", "MinAtar/SpaceInvaders-v1")
REFERENCE = "single process (impala --actors 0)"
ACTORS = 2
LOG_INTERVAL = 5.0  # seconds between metrics rows
CHECKPOINTS = (2.0, 5.0, 10.0)  # minutes at which return100 is read off the metrics rows
RANDOM_EPISODES = 100
NOTES = ("<!-- notes: written by hand, kept by --write-docs -->", "<!-- /notes -->")
DRAIN_S = 300.0  # on top of --time-limit: startup and shutdown before a run is killed
Row = dict[str, float]  # one metrics row: time_s, mean_return_100 [, eval_mean_return]


@dataclass(frozen=True)
class Setup:
    """One row family of the tables: an architecture, its preset and its extra flags."""

    name: str
    arch: str
    flags: tuple[str, ...]
    baseline: str | None = None  # the setup's own single-process run (--own-baselines)

    @property
    def preset(self) -> str:
        """``--config``'s value: the bundled preset (archzoo/presets/minatar/ARCH.toml)."""
        return "minatar"


def make_setups(archs: Iterable[str], reference: bool, variants: Iterable[str] = (),
                own_baselines: bool = False, variants_only: bool = False) -> list[Setup]:
    """Each architecture with ``--actors 2``, each of those again per variant ("NAME=FLAGS":
    more flags, e.g. "clip=--clip-ratio 0.2"; "ARCH:NAME=FLAGS" for one architecture only),
    then the single-process reference. With
    ``own_baselines`` every such setup also runs as one process (``--actors 0``, same preset
    and flags), the baseline it is judged against; ``variants_only`` leaves out the presets
    as they are."""
    families: list[tuple[str, tuple[str, ...], str | None]] = [("", (), None)] * (
        not variants_only)
    for name, _, flags in (v.partition("=") for v in variants):
        only, _, name = name.rpartition(":")
        families.append((f", {name}", tuple(shlex.split(flags)), only or None))
    reference_setup = Setup(REFERENCE, "impala", ("--actors", "0"))
    out = []
    for suffix, flags, only in families:
        for a in archs:
            if only not in (None, a):
                continue
            base = (reference_setup if (a, flags) == ("impala", ()) else
                    Setup(f"{a} (1 process{suffix})", a, (*flags, "--actors", "0")))
            out.append(Setup(f"{a} ({ACTORS} actors{suffix})", a,
                             (*flags, "--actors", str(ACTORS)),
                             base.name if own_baselines else None))
            if own_baselines and base not in out:
                out.append(base)
    if reference and reference_setup not in out:
        out.append(reference_setup)
    return out


def cell_key(setup: str, game: str, seed: int, minutes: float) -> str:
    return f"{setup}|{game}|{seed}|{minutes:g}"


def command(setup: Setup, game: str, seed: int, minutes: float, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "archzoo", "run", setup.arch, "--config", setup.preset,
            "--env", game, *setup.flags, "--seed", str(seed), "--time-limit", f"{minutes * 60:g}",
            "--total-steps", str(10**10), "--target-return", "1e9", "--quiet",
            "--log-interval", f"{LOG_INTERVAL:g}", "--run-dir", str(run_dir)]


# --- results file -------------------------------------------------------------------------

def load_results(path: Path) -> dict[str, Any]:
    if path.is_file():
        data = json.loads(path.read_text())
        data.setdefault("runs", {})
        data.setdefault("random", {})
        return data
    return {"runs": {}, "random": {}}


def save_results(path: Path, data: dict[str, Any]) -> None:
    """Written whole to a temporary file, then renamed: an interrupted write loses nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# --- one run ------------------------------------------------------------------------------

def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def read_rows(metrics: Path) -> list[Row]:
    """time_s and mean_return_100 of every metrics row (eval_mean_return where present)."""
    if not metrics.is_file():
        return []
    rows: list[Row] = []
    with metrics.open() as f:
        for r in csv.DictReader(f):
            t = _float(r.get("time_s"))
            if t is None:
                continue
            row: Row = {"time_s": t}
            for col in ("mean_return_100", "eval_mean_return"):
                v = _float(r.get(col))
                if v is not None:
                    row[col] = v
            rows.append(row)
    return rows


def error_line(stderr: str, stdout: str, rc: int) -> str:
    """The last non-blank line the run printed (its error message), else its exit status."""
    for text in (stderr, stdout):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return f"exit status {rc}"


def launch(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """Runs ``cmd`` from the repository root in its own process group (killed whole when
    it overruns ``timeout``): exit status, stdout, stderr."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, out, err + f"\ntimed out after {timeout:.0f} s"
    return p.returncode, out, err


def lag(summary: dict[str, Any]) -> tuple[float | None, float | None]:
    """Mean and p90 policy lag in parameter versions (summary.json's policy_lag.versions)."""
    versions = (summary.get("policy_lag") or {}).get("versions") or {}
    return versions.get("mean"), versions.get("p90")


def run_cell(setup: Setup, game: str, seed: int, minutes: float, run_dir: Path) -> dict:
    """One run of the grid, as it is kept in the results file."""
    cmd = command(setup, game, seed, minutes, run_dir)
    started = time.time()
    rc, out, err = launch(cmd, minutes * 60 + DRAIN_S)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    lag_mean, lag_p90 = lag(summary)
    return {
        "setup": setup.name, "arch": setup.arch, "game": game, "seed": seed,
        "minutes": minutes, "command": shlex.join(["python", *cmd[1:]]), "returncode": rc,
        "error": None if rc == 0 else error_line(err, out, rc),
        "env_steps": summary.get("env_steps"), "fps": summary.get("fps"),
        "final_mean_return": summary.get("final_mean_return"),
        "eval_mean_return": summary.get("eval_mean_return"),
        "policy_lag_mean": lag_mean, "policy_lag_p90": lag_p90,
        "wall_s": round(time.time() - started, 1), "cpu_count": os.cpu_count(),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": read_rows(run_dir / "metrics.csv"),
    }


# --- random policy ------------------------------------------------------------------------

def random_policy(game: str, episodes: int = RANDOM_EPISODES, seed: int = 0) -> dict:
    """Mean return of uniformly random actions over ``episodes`` whole episodes."""
    import gymnasium as gym

    if game.startswith("MinAtar/") and game not in gym.registry:
        import minatar.gym

        minatar.gym.register_envs()
    env = gym.make(game)
    env.action_space.seed(seed)
    returns = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"mean_return": statistics.fmean(returns), "std": statistics.pstdev(returns),
            "episodes": episodes, "seed": seed}


# --- reading a run off --------------------------------------------------------------------

def windows(rows: list[Row], col: str = "mean_return_100") -> list[float]:
    return [r[col] for r in rows if col in r]


def value_at(rows: list[Row], minutes: float, col: str = "mean_return_100") -> float | None:
    """``col`` of the last row logged by ``minutes`` (half a log interval's slack), None when
    the run did not last that long or had no value yet."""
    t = minutes * 60
    if not rows or rows[-1]["time_s"] < t - LOG_INTERVAL / 2:
        return None
    known = [r for r in rows if r["time_s"] <= t + LOG_INTERVAL / 2 and col in r]
    return known[-1][col] if known else None


def best_final(rows: list[Row], col: str = "mean_return_100") -> tuple[float | None,
                                                                        float | None]:
    w = windows(rows, col)
    return (max(w), w[-1]) if w else (None, None)


def judged_column(run: dict) -> str:
    """The windows a run's best, final and collapse are judged on: return100, or for the
    ε-greedy architectures the greedy evaluation (their behaviour return mixes in each
    actor's ε; :func:`score`)."""
    return GREEDY_WINDOW if run["arch"] in EPSILON_ARCHS else RETURN_WINDOW


def judged_best_final(run: dict) -> tuple[float | None, float | None]:
    """The best and final of the windows a run's collapse is judged on (archzoo.collapse:
    greedy evaluation windows as the mean of GREEDY_ROWS consecutive ones)."""
    col = judged_column(run)
    w = judged(windows(run.get("rows") or [], col), greedy=col == GREEDY_WINDOW)
    return (max(w), w[-1]) if w else (None, None)


# --- tables -------------------------------------------------------------------------------

def fmt(x: float | None, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def with_eval(run: dict, value: float | None, ev: float | None) -> str:
    """return100, and the greedy evaluation beside it for the ε-greedy architectures."""
    text = fmt(value)
    if run["arch"] in EPSILON_ARCHS and ev is not None:
        text += f" (eval {ev:.2f})"
    return text


def run_row(run: dict, checkpoints: Iterable[float], threshold: float) -> list[str]:
    rows = run.get("rows") or []
    best, final = best_final(rows)
    at = [with_eval(run, value_at(rows, m), value_at(rows, m, "eval_mean_return"))
          for m in checkpoints]
    steps = run.get("env_steps")
    flag = "collapsed" if collapsed(*judged_best_final(run), threshold) else ""
    if run.get("error"):
        flag = ("failed: " + run["error"]).replace("|", "\\|")
    best_eval = best_final(rows, "eval_mean_return")[0]
    return [run["setup"], str(run["seed"]), *at, with_eval(run, best, best_eval),
            with_eval(run, final, final_eval(run)),
            "" if steps is None else f"{steps:,}", fmt(run.get("policy_lag_mean")),
            fmt(run.get("policy_lag_p90"), 1), flag]


def table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def runs_table(runs: list[dict], checkpoints: tuple[float, ...], threshold: float) -> str:
    header = ["setup", "seed", *(f"return100 @ {m:g} min" for m in checkpoints),
              "best window", "final window", "agent steps (= frames on MinAtar)", "lag mean",
              "lag p90",
              f"collapse (final < {COLLAPSE_RATIO:g} × best ≥ {threshold:g}; greedy: "
              f"means of {GREEDY_ROWS} windows)"]
    align = ["---", "---:", *("---:" for _ in checkpoints), "---:", "---:", "---:", "---:",
             "---:", "---"]
    return table(header, align, [run_row(r, checkpoints, threshold) for r in runs])


def final_eval(run: dict) -> float | None:
    """The run's last greedy evaluation (summary.json, else the last metrics row's)."""
    ev = run.get("eval_mean_return")
    return ev if ev is not None else (windows(run.get("rows") or [], "eval_mean_return")
                                      or [None])[-1]


def score(run: dict) -> float | None:
    """What a run is judged by: its final return100 window, or for the ε-greedy
    architectures (Ape-X, Gorila: their behaviour return includes exploration) the greedy
    evaluation, as those papers report."""
    if run.get("error"):
        return None
    return final_eval(run) if run["arch"] in EPSILON_ARCHS else best_final(run["rows"])[1]


def median_final(runs: list[dict]) -> float | None:
    finals = [f for r in runs if (f := score(r)) is not None]
    return statistics.median(finals) if finals else None


def summary_table(by_setup: dict[str, list[dict]], random_mean: float | None,
                  baselines: dict[str, str | None] | None = None) -> str:
    """Median over seeds of the final window per setup, beside its own single-process
    baseline (``--own-baselines``), the single-process reference and a random policy."""
    baselines = baselines or {}
    ref = median_final(by_setup.get(REFERENCE, []))
    rows = []
    for name, runs in by_setup.items():
        med = median_final(runs)
        own_name = baselines.get(name)
        own = median_final(by_setup.get(own_name, [])) if own_name else None
        ok = sum(1 for r in runs if not r.get("error"))
        ratio = med / ref if med is not None and ref not in (None, 0) else None
        own_ratio = med / own if med is not None and own not in (None, 0) else None
        rows.append([name, f"{ok}/{len(runs)}", fmt(med), fmt(own), fmt(own_ratio), fmt(ref),
                     fmt(ratio), fmt(random_mean)])
    header = ["setup", "seeds run", "median final (ε-greedy: greedy eval)", "own single process",
              "× own", "single process (reference)", "× reference",
              f"random policy ({RANDOM_EPISODES} episodes)"]
    return table(header, ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], rows)


def games_table(games: dict[str, dict[str, list[dict]]], rand: dict[str, float]) -> str:
    """One row per setup, one column per game: the median final (ε-greedy: greedy eval) over
    the kept seeds, and the games on which it beats a random policy and on which it matches
    or beats the single-process reference (``>=``, ``<`` in the cells)."""
    names = list(dict.fromkeys(n for by in games.values() for n in by))
    refs = {g: median_final(by.get(REFERENCE, [])) for g, by in games.items()}
    rows = []
    for name in names:
        cells, above_random, at_ref, played = [], 0, 0, 0
        for g, by in games.items():
            med = median_final(by.get(name, []))
            if med is None:
                cells.append("")
                continue
            played += 1
            above_random += med > rand[g]
            mark = ""
            if name != REFERENCE and refs[g] is not None:
                at_ref += med >= refs[g]
                mark = " ≥" if med >= refs[g] else " <"
            cells.append(f"{fmt(med)}{mark} ({len(by[name])})")
        ref_col = "" if name == REFERENCE else f"{at_ref}/{played}"
        rows.append([name, *cells, f"{above_random}/{played}", ref_col])
    rows.append(["random policy", *(fmt(rand[g]) for g in games), "", ""])
    header = ["setup", *(game_slug(g) for g in games), "beats random",
              "≥ reference"]
    return ("Median final return100 (ε-greedy architectures: greedy evaluation) over the seeds "
            "kept, their number in brackets; ≥ or < compares it with the single-process "
            "reference on that game.\n\n"
            + table(header, ["---", *["---:"] * (len(games) + 2)], rows))


# --- figures ------------------------------------------------------------------------------

def game_slug(game: str) -> str:
    """``MinAtar/SpaceInvaders-v1`` -> ``spaceinvaders``."""
    return game.split("/")[-1].split("-v")[0].lower()


def figure_name(game: str) -> str:
    return f"learning-{game_slug(game)}.png"


def draw(game: str, by_setup: dict[str, list[dict]], random_mean: float | None,
         title: str, path: Path) -> None:
    """return100 against wall-clock minutes, one colour per setup: the median over seeds
    with a band from the min to the max when there are several seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, runs) in enumerate(by_setup.items()):
        curves = [(np.array([r["time_s"] for r in rows if "mean_return_100" in r]) / 60,
                   np.array(windows(rows))) for run in runs if (rows := run.get("rows"))]
        curves = [(x, y) for x, y in curves if len(x)]
        if not curves:
            continue
        if len(curves) == 1:
            ax.plot(*curves[0], color=f"C{i}", label=name)
            continue
        grid = np.linspace(min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves), 200)
        ys = np.array([np.where((grid >= x[0]) & (grid <= x[-1]), np.interp(grid, x, y), np.nan)
                       for x, y in curves])
        some = ~np.all(np.isnan(ys), axis=0)
        g, ys = grid[some], ys[:, some]
        ax.plot(g, np.nanmedian(ys, axis=0), color=f"C{i}",
                label=f"{name}, median of {len(curves)} seeds")
        ax.fill_between(g, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=f"C{i}",
                        alpha=0.2, lw=0)
    if random_mean is not None:
        ax.axhline(random_mean, color="gray", ls=":", label="random policy")
    ax.set_xlim(left=0)
    ax.set_xlabel("wall-clock minutes from the first env step")
    ax.set_ylabel("mean return, last 100 episodes")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- the grid -----------------------------------------------------------------------------

def cells(setups: list[Setup], games: list[str],
          seeds: list[int]) -> Iterator[tuple[Setup, str, int]]:
    """Seeds outermost, setups innermost: a noisy machine loads every setup alike."""
    for seed in seeds:
        for game in games:
            for setup in setups:
                yield setup, game, seed


def run_grid(args: argparse.Namespace, setups: list[Setup], data: dict[str, Any]) -> None:
    """Runs the grid's cells that are not kept yet (all with ``--rerun``), saving the results
    after every run; with ``--dry-run`` prints their commands instead."""
    todo = [c for c in cells(setups, args.games, args.seeds)
            if args.rerun or cell_key(c[0].name, c[1], c[2], args.minutes) not in data["runs"]]
    skipped = len(list(cells(setups, args.games, args.seeds))) - len(todo)
    if skipped:
        print(f"{skipped} finished cell(s) kept from {args.results} (--rerun runs them again)",
              file=sys.stderr)
    root = Path(args.run_root or ("RUN_ROOT" if args.dry_run else
                                  tempfile.mkdtemp(prefix="bench-learning-")))
    for n, (setup, game, seed) in enumerate(todo, 1):
        slug = "".join(ch if ch.isalnum() else "-" for ch in setup.name).strip("-")
        run_dir = root / f"{slug}-{game_slug(game)}-s{seed}"
        if run_dir.exists():  # --rerun into the same --run-root: a fresh directory
            run_dir = run_dir.with_name(run_dir.name + time.strftime("-%Y%m%d-%H%M%S"))
        if args.dry_run:  # the presets' paths are relative to the repository root
            print(f"(cd {shlex.quote(str(ROOT))} && "
                  f"{shlex.join(command(setup, game, seed, args.minutes, run_dir))})")
            continue
        print(f"[{n}/{len(todo)}] {setup.name}, {game}, seed {seed}, {args.minutes:g} min",
              file=sys.stderr, flush=True)
        run = run_cell(setup, game, seed, args.minutes, run_dir)
        data["runs"][cell_key(setup.name, game, seed, args.minutes)] = run
        save_results(args.results, data)
        best, final = best_final(run["rows"])
        print(f"    failed: {run['error']}" if run["error"] else
              f"    final {fmt(final)}, best {fmt(best)}, {run['env_steps'] or 0:,} agent steps",
              file=sys.stderr, flush=True)


def random_means(games: list[str], data: dict[str, Any], results: Path) -> dict[str, float]:
    """The random policy's mean return per game, measured once and kept in the results."""
    for game in games:
        if game not in data["random"]:
            print(f"random policy on {game}: {RANDOM_EPISODES} episodes", file=sys.stderr)
            data["random"][game] = random_policy(game)
            save_results(results, data)
    return {g: data["random"][g]["mean_return"] for g in games}


def grid_runs(args: argparse.Namespace, setups: list[Setup], data: dict[str, Any],
              game: str) -> dict[str, list[dict]]:
    """The kept runs of one game, by setup, in the grid's order (seeds ascending)."""
    out: dict[str, list[dict]] = {}
    for setup in setups:
        runs = [data["runs"].get(cell_key(setup.name, game, s, args.minutes)) for s in args.seeds]
        if any(r is not None for r in runs):  # a setup never run is left out of the report
            out[setup.name] = [r for r in runs if r is not None]
    return out


def machine() -> str:
    return f"{os.cpu_count()} CPU cores, torch {importlib.metadata.version('torch')}, " \
        f"Python {sys.version.split()[0]}"


def report(args: argparse.Namespace, setups: list[Setup], data: dict[str, Any],
           rand: dict[str, float], figures: Path | None) -> str:
    """The markdown: one table of runs and one summary table per game (and its figure)."""
    parts = []
    for game in args.games:
        by_setup = grid_runs(args, setups, data, game)
        parts.append(f"## {game}, {args.minutes:g} min per run\n")
        if figures is not None:
            name = figure_name(game)
            draw(game, by_setup, rand[game], f"{game}, {args.minutes:g} min, {machine()}",
                 figures / name)
            parts.append(f"![{game} learning curves]({figures.name}/{name})\n")
        runs = [r for rs in by_setup.values() for r in rs]
        parts.append(runs_table(runs, tuple(args.at), args.collapse_threshold) + "\n")
        parts.append(summary_table(by_setup, rand[game],
                                   {s.name: s.baseline for s in setups}) + "\n")
    if len(args.games) > 1:
        games = {g: grid_runs(args, setups, data, g) for g in args.games}
        parts.insert(0, f"## Every game, {args.minutes:g} min per run\n\n"
                     + games_table(games, rand) + "\n")
    return "\n".join(parts)


def kept_notes(path: Path) -> str:
    """The hand-written block of an existing page (between the ``NOTES`` markers), so that
    redrawing the tables keeps the prose that reads them; empty markers for a new page."""
    begin, end = NOTES
    text = path.read_text() if path.is_file() else ""
    i, j = text.find(begin), text.find(end)
    return text[i:j + len(end)] if 0 <= i < j else f"{begin}\n{end}"


def docs_page(args: argparse.Namespace, body: str) -> str:
    cmdline = shlex.join(["python", *sys.argv])
    return f"""# Learning on MinAtar at a fixed wall time

Generated by `benchmarks/bench_learning.py`:

    {cmdline}

Machine: {machine()}. The papers are in the [references](references.md).

Every setup runs its preset (`--config minatar`) with `--actors {ACTORS}`; "ARCH (1
process)" is the same preset with `--actors 0`, the architecture's own single-process
baseline, and the reference is `impala --actors 0`, one process, with the IMPALA preset.
return100: the mean return of the last 100 episodes, read off metrics.csv at each time
(wall clock from the first env step; blank when the run is shorter). Ape-X and Gorila act
ε-greedily: their greedy evaluation return is given in brackets, and the summary judges
them by it. Agent steps are env steps summed over all envs; on MinAtar one agent step is
one frame. Policy lag: parameter versions between the policy that acted and the one that
learned from it (summary.json). Collapse: the final window under {COLLAPSE_RATIO:g} × the
best, once the best reached {args.collapse_threshold:g} (Ape-X and Gorila: greedy evaluation
windows of 30 episodes, each taken as the mean of {GREEDY_ROWS} consecutive ones, as the CI
guard judges them; archzoo/collapse.py).

{kept_notes(args.write_docs)}

{body}"""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="*", default=list(ARCHS), choices=ARCHS)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                   help="each architecture again with more flags, e.g. "
                   "'clip=--clip-ratio 0.2' (repeatable)")
    p.add_argument("--own-baselines", action="store_true",
                   help="also run every setup as one process (--actors 0), its own baseline")
    p.add_argument("--variants-only", action="store_true",
                   help="run only the --variant setups, not the presets as they are")
    p.add_argument("--no-reference", action="store_true",
                   help=f"leave out the reference setup, {REFERENCE}")
    p.add_argument("--games", nargs="*", default=list(GAMES))
    p.add_argument("--seeds", type=int, nargs="*", default=[0])
    p.add_argument("--minutes", type=float, default=5.0, help="wall time of every run")
    p.add_argument("--at", type=float, nargs="*", default=list(CHECKPOINTS),
                   help="minutes at which return100 is read off (default: 2 5 10)")
    p.add_argument("--collapse-threshold", type=float, default=4.0)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks/results/learning.json")
    p.add_argument("--rerun", action="store_true", help="run cells already in --results")
    p.add_argument("--run-root", default=None, help="run directories (default: a temp dir)")
    p.add_argument("--write-docs", type=Path, default=None, metavar="PATH",
                   help="write the markdown to PATH, figures to PATH's dir/figures/")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: tables and figures from the kept cells alone")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    setups = make_setups(args.archs, not args.no_reference, args.variant, args.own_baselines,
                         args.variants_only)
    data = load_results(args.results)
    if not args.report_only:
        run_grid(args, setups, data)
    if args.dry_run:
        return 0
    rand = random_means(args.games, data, args.results)
    figures = args.write_docs.parent / "figures" if args.write_docs else None
    body = report(args, setups, data, rand, figures)
    print(body)
    if args.write_docs:
        args.write_docs.parent.mkdir(parents=True, exist_ok=True)
        args.write_docs.write_text(docs_page(args, body))
        print(f"wrote {args.write_docs} and {figures}/learning-*.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
