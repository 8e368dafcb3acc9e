"""docs/results.md and its figures, generated from the record store alone.

Per game a table of every architecture: its ``--actors 2`` run beside its one process at
equal resources, the frozen evaluation and the training return (IQM [95% CI] over seeds),
the difference with its interval and what it lets the page say, the mean over the run,
agent steps, policy lag and threads; then the aggregate over the five games, normalized
between the random policy and a fixed reference score per game; one figure per game; the
exact commands and the commits of the cells. A cell with no record is left out.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from archzoo.benchlearn import protocol as P
from archzoo.benchlearn import stats
from archzoo.benchlearn.quiet import MAX_BUSY_CORES
from archzoo.benchlearn.readouts import collapse, score
from archzoo.benchlearn.store import Record, newest

KINDS = ("distributed", "one process")
BAND_POINTS, BAND_REPS = 25, 300  # a figure's band: IQM intervals at 25 times, 300 resamples
Groups = dict[str, dict[str, dict[str, list[Record]]]]  # game -> arch -> kind -> records


def records_digest(records: list[Record]) -> str:
    """A digest of the records a page was drawn from (tests/test_docs.py compares it with
    the store's)."""
    text = json.dumps(records, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def chosen_digests(records: list[Record], preset: str) -> dict[str, str]:
    """Per architecture, the digest of its newest preset choice of ``preset``."""
    return {r["arch"]: r["preset_digest"] for r in records if r.get("kind") == "preset-choice"
            and r["preset"] == preset and r.get("preset_digest")}


def group(records: list[Record], preset: str, minutes: float) -> Groups:
    """The newest reported record of every cell, by game, architecture and setup kind; where
    the store has a choice of the architecture's preset, only runs of the chosen values."""
    out: Groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    chosen = chosen_digests(records, preset)
    for r in newest(r for r in records if r.get("kind") != "learning" or r["arch"] not in
                    chosen or r.get("preset_digest") == chosen[r["arch"]]).values():
        if r["purpose"] == "report" and r["preset"] == preset and r["minutes"] == minutes \
                and not r.get("error") and r["setup_kind"] in KINDS:
            out[r["game"]][r["arch"]][r["setup_kind"]].append(r)
    for by_arch in out.values():
        for by_kind in by_arch.values():
            for rs in by_kind.values():
                rs.sort(key=lambda r: r["seed"])
    return out


def random_scores(records: list[Record]) -> dict[str, float]:
    return {r["game"]: r["mean_return"] for r in records if r.get("kind") == "random"}


def scores(rs: list[Record], readout: str) -> list[float]:
    return [s for r in rs if (s := score(r, readout)) is not None]


def fmt(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def fmt_iqm(xs: list[float]) -> str:
    if not xs:
        return ""
    if len(xs) == 1:
        return f"{xs[0]:.1f} (1 run)"
    point, lo, hi = stats.iqm(xs)
    return f"{point:.1f} [{lo:.1f}, {hi:.1f}]"


def fmt_diff(a: list[float], b: list[float]) -> tuple[str, str]:
    """The difference of IQMs with its interval, and the verdict it allows."""
    if not a or not b:
        return "", ""
    d = stats.difference(a, b)
    said = stats.verdict(d, 0.0, ("2 actors", "one process"), (len(a), len(b)))
    return f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]", said


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _msteps(rs: list[Record]) -> str:
    """The median agent steps of ``rs``, in millions."""
    v = _median([r["summary"].get("env_steps") or 0 for r in rs])
    return fmt(None if v is None else v / 1e6, 2)


def _threads(r: Record) -> str:
    t = r.get("threads") or {}
    procs = t.get("processes") or 1
    if procs == 1:
        return f"1×{t.get('learner_process', 1)}"
    return f"{procs} ({t.get('learner_process', 1)}+{t.get('other_processes', 1)}×" \
        f"{procs - 1})"


def game_table(by_arch: dict[str, dict[str, list[Record]]]) -> list[str]:
    header = ["architecture", "seeds", "eval: 2 actors", "eval: one process",
              "Δ eval [95% CI]", "eval says", "train100: 2 actors", "train100: one process",
              "Δ train100", "train100 says", "mean over run (2 a. / 1 p.)",
              "agent steps, M (2 a. / 1 p.)", "lag (2 a.)", "threads (2 a. / 1 p.)",
              "collapsed (2 a. / 1 p.)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---:|" * 12]
    for arch in P.ARCHS:
        kinds = by_arch.get(arch)
        if not kinds:
            continue
        a, b = kinds.get("distributed", []), kinds.get("one process", [])
        ea, eb, ta, tb = (scores(a, "eval"), scores(b, "eval"), scores(a, "train"),
                          scores(b, "train"))
        de, se = fmt_diff(ea, eb)
        dt, st = fmt_diff(ta, tb)
        auc = f"{fmt(_median(scores(a, 'auc')))} / {fmt(_median(scores(b, 'auc')))}"
        steps = " / ".join(_msteps(rs) for rs in (a, b))
        lag = fmt(_median([v for r in a if (v := r["summary"].get("policy_lag_mean"))
                           is not None]), 2)
        threads = " / ".join(_threads(rs[0]) if rs else "" for rs in (a, b))
        fell = " / ".join(f"{sum(collapse(r) is not None for r in rs)} of {len(rs)}"
                          for rs in (a, b))
        seeds = f"{len(a)} / {len(b)}"
        lines.append("| " + " | ".join([arch, seeds, fmt_iqm(ea), fmt_iqm(eb), de, se,
                                        fmt_iqm(ta), fmt_iqm(tb), dt, st, auc, steps, lag,
                                        threads, fell]) + " |")
    return lines


def aggregate(groups: Groups, randoms: dict[str, float], readout: str
              ) -> list[list[str]]:
    """Per architecture: the normalized IQM over the games of each setup, and P(2 actors >
    one process) with its interval, on the seeds every game has."""
    games = [g for g in P.GAMES if g in groups and g in randoms]  # those with a reference
    rows = []
    for arch in P.ARCHS:
        mats = {}
        for kind in KINDS:
            per_game = [scores(groups[g].get(arch, {}).get(kind, []), readout) for g in games]
            n = min((len(s) for s in per_game), default=0)
            if n == 0 or len(games) < 2:
                break
            m = np.array([s[:n] for s in per_game]).T  # runs × games
            ref = np.array([P.REFERENCE_SCORES[g] for g in games])
            mats[kind] = stats.normalized(m, np.array([randoms[g] for g in games]), ref)
        if len(mats) < 2:
            continue
        x, y = mats["distributed"], mats["one process"]
        poi = stats.probability_of_improvement(x, y)
        said = stats.verdict(poi, 0.5, ("2 actors", "one process"), (len(x), len(y)))
        cells = []
        for m in (x, y):
            p, lo, hi = stats.iqm(m)
            cells.append(f"{p:.2f} [{lo:.2f}, {hi:.2f}]")
        rows.append([arch, f"{len(games)} × {len(x)}", *cells,
                     f"{poi[0]:.2f} [{poi[1]:.2f}, {poi[2]:.2f}]", said])
    return rows


def figure(game: str, by_arch: dict[str, dict[str, list[Record]]], path: Path,
           random: float | None) -> None:
    """return100 against minutes, one panel per architecture, each setup's IQM over seeds
    with its 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = [a for a in P.ARCHS if a in by_arch]
    cols = 4
    fig, axes = plt.subplots((len(archs) + cols - 1) // cols, cols, figsize=(13, 6),
                             squeeze=False, sharex=True)
    for ax, arch in zip(axes.flat, archs, strict=False):
        for i, kind in enumerate(KINDS):
            curves = [r["rows"] for r in by_arch[arch].get(kind, []) if r["rows"]]
            curve = _band(curves)
            if curve is None:
                continue
            t, mid, lo, hi = curve
            label = "2 actors" if kind == "distributed" else "one process"
            ax.plot(t, mid, color=f"C{i}", label=f"{label} ({len(curves)})")
            ax.fill_between(t, lo, hi, color=f"C{i}", alpha=0.2, lw=0)
        if random is not None:
            ax.axhline(random, color="gray", ls=":", lw=1)
        ax.set_title(arch, fontsize=9)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(archs):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(f"{game}: training return100, IQM over seeds with 95% CI")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _band(curves: list[list[dict]]) -> tuple[np.ndarray, ...] | None:
    pts = [(np.array([r["time_s"] for r in c if "mean_return_100" in r]) / 60,
            np.array([r["mean_return_100"] for r in c if "mean_return_100" in r]))
           for c in curves]
    pts = [(x, y) for x, y in pts if len(x) > 1]
    if not pts:
        return None
    t = np.linspace(max(x[0] for x, _ in pts), min(x[-1] for x, _ in pts), BAND_POINTS)
    ys = np.array([np.interp(t, x, y) for x, y in pts])  # runs × times
    if len(ys) == 1:
        return t, ys[0], ys[0], ys[0]
    _, metrics = stats._rliable()
    point, ci = stats.interval_estimates(
        {"c": ys[:, None, :]}, lambda s: np.array([metrics.aggregate_iqm(s[..., k])
                                                   for k in range(s.shape[-1])]),
        reps=BAND_REPS)
    return t, point["c"], ci["c"][0], ci["c"][1]


def figure_name(game: str) -> str:
    return f"learning-{game.split('/')[-1].split('-v')[0].lower()}.png"


PROTOCOL = """\
- **Environments.** MinAtar v1 ([Young & Tian 2019](references.md)) as gymnasium ids: the
  minimal action set (3 actions on Breakout), sticky actions with probability 0.1, no time
  limit. One agent step is one frame.
- **Setups.** `--actors 2` with the architecture's preset (`--config {preset}`), and one
  process (`--actors 0`) at equal resources: `--learner-threads` = the cores the two actors'
  run uses ({cores} here), twice the envs (`--envs-per-actor`), and for Ape-X, Gorila and
  R2D2 the same ε ladder over its envs (`--eps-ladder 2`).
- **Budget.** {minutes:g} minutes of wall time from the first env step (`--time-limit`), every
  run alone on the machine: the grid waits before each cell until the other processes use at
  most {busy:g} cores (`--max-busy`) and records what they used (older cells record only the
  load average). Setups alternate within a seed. Wall time buys what the machine gives: this
  workplace's machines all read "AMD EPYC" yet differ up to twice in speed, so each cell
  records a timing taken just before it (per day under Reproduce). A seed's two
  setups run back to back on one machine; cells of different days may not have.
- **Seeds.** Reported seeds are 0-4 (Breakout) and 0-2 (the other games); presets were chosen
  on seeds 100 and up (below), never on a reported seed.
- **Read-outs.** *eval*: {episodes} episodes of the final parameters, frozen, in a separate
  pass (`archzoo eval --parallel`; greedy for Q-networks, sampled for actor-critic policies).
  *train100*: the mean return of the last 100 training episodes, pooled over all envs of all
  actors (for Ape-X, Gorila and R2D2 it includes their exploration). *Mean over run*: the mean
  of train100 over the run's rows, every {log:g} s.
- **Statistics.** IQM over seeds with 95% stratified-bootstrap intervals (rliable,
  [Agarwal et al. 2021](references.md#rliable)). "Better" needs the interval of the
  difference (or of the probability of improvement) to exclude a tie; otherwise the page
  says "no difference measured". A comparison with fewer than {min_runs} runs a side says
  nothing.
- **Collapsed**: train100 ended under 0.7 of its best window (once that reached 4), or the
  policy's entropy ended under 0.05; for Ape-X, Gorila and R2D2 the windows are their
  periodic greedy evaluation's, 3 in a row averaged (their train100 pools the ε ladder).
- **Deviations from the papers.** The IMPALA, SEED RL and GA3C presets are APPO-like: PPO's
  clipped surrogate (Schulman et al. 2017) on the V-trace advantages; GA3C's preset uses
  V-trace, not GA3C's own loss. Ape-X, Gorila and R2D2 run scaled-down replay and batch
  settings (their presets say which). The recurrent actor-critic's value head is scaled ×10
  (archzoo/nets.py); no preset here uses it."""


def page(records: list[Record], preset: str, minutes: float, figures: Path | None,
         store_path: str, commands: list[str]) -> str:
    """The markdown of docs/results.md (figures drawn into ``figures`` when given)."""
    groups = group(records, preset, minutes)
    randoms = random_scores(records)
    cells = [r for g in groups.values() for a in g.values() for rs in a.values() for r in rs]
    cores = sorted({r["threads"].get("cores") for r in cells if r.get("threads")})
    out = ["# Learning on MinAtar at equal wall time and equal resources", "",
           f"<!-- generated by `archzoo bench learning page` from {store_path} (records "
           f"digest {records_digest(records)}); do not edit by hand -->", "",
           f"Which architecture learns most in {minutes:g} minutes on this machine, and does "
           "running it as 2 actors beat one process given the same cores, envs and "
           f"exploration? {len(cells)} runs answer below; every number comes from the "
           f"records in `{store_path}`.", "", "## Protocol", "",
           PROTOCOL.format(preset=preset, cores=", ".join(map(str, cores)) or "?",
                           minutes=minutes, episodes=P.EVAL_EPISODES, log=P.LOG_INTERVAL,
                           min_runs=stats.MIN_RUNS, busy=MAX_BUSY_CORES), ""]
    out += _aggregate_section(groups, randoms)
    for game in [g for g in P.GAMES if g in groups] + sorted(set(groups) - set(P.GAMES)):
        n = max(len(rs) for a in groups[game].values() for rs in a.values())
        out += [f"## {game}", "", f"Up to {n} seeds per cell; random policy "
                f"{fmt(randoms.get(game), 2)}.", ""]
        if figures is not None:
            name = figure_name(game)
            figure(game, groups[game], figures / name, randoms.get(game))
            out += [f"![{game}](figures/{name})", ""]
        out += game_table(groups[game]) + [""]
    out += _choices_section(records, preset)
    out += _reproduce_section(cells, commands)
    gone = [r for r in records if r.get("kind") == "withdrawn" and r["purpose"] == "report"
            and r["preset"] == preset]
    if gone:
        out += ["", "Withdrawn (`archzoo bench learning withdraw`; the store keeps the runs): " +
                "; ".join(f"{r['setup']}, {r['game']}, seed {r['seed']}: {r['why']}"
                          for r in gone) + "."]
    return "\n".join(out).rstrip() + "\n"


def _aggregate_section(groups: Groups, randoms: dict[str, float]) -> list[str]:
    ref = ", ".join(f"{g.split('/')[1].split('-')[0]} {P.REFERENCE_SCORES[g]:g}"
                    for g in P.GAMES)
    out = ["## Across the games", "",
           "Scores normalized per game as (score − random) / (reference − random), with the "
           f"random policy's mean (100 episodes) and a fixed reference: {ref} (the best "
           "5-minute window of any setup in the records before this protocol, rounded up). "
           "IQM over games × seeds (the seeds every game has); P(2 actors > one process) "
           "is the probability of improvement.", ""]
    empty = True
    for readout, title in (("eval", "frozen evaluation"), ("train", "train100")):
        rows = aggregate(groups, randoms, readout)
        if not rows:
            continue
        empty = False
        out += [f"**{title}**", "", "| architecture | games × seeds | 2 actors | one process "
                "| P(2 actors > one process) | says |", "|---|---:|---:|---:|---:|---|"]
        out += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    if empty:
        have = [g for g in P.GAMES if g in groups and g in randoms]
        out += ["No aggregate yet: it needs an architecture with both setups on at least 2 "
                f"games (games with cells and a random score so far: {len(have)}).", ""]
    return out


def _choices_section(records: list[Record], preset: str) -> list[str]:
    latest: dict[str, Record] = {}
    for r in records:
        if r.get("kind") == "preset-choice" and r["preset"] == preset:
            latest[r["arch"]] = r
    if not latest:
        return []
    out = ["## How the presets were chosen", "",
           "Each candidate ran with `--actors 2` on Breakout, tuning seeds only; the best mean "
           "frozen evaluation that did not collapse was kept (`archzoo bench learning tune`, "
           "then `choose`), counting a run only where its resolved config holds its candidate's "
           "values. Its one process played no part.", "",
           "| architecture | seeds | candidates: mean eval (collapsed runs) | chosen |",
           "|---|---|---|---|"]
    for arch in P.ARCHS:
        c = latest.get(arch)
        if c is None:
            continue
        cands = "; ".join(f"{n}: {fmt(v['mean'])}" + (f" ({len(v['collapsed'])} collapsed)"
                                                       if v["collapsed"] else "")
                          for n, v in c["candidates"].items())
        out.append(f"| {arch} | {', '.join(map(str, c['seeds']))} | {cands} | "
                   f"{c['chosen']} |")
    left = [r for a in P.ARCHS if a in latest for r in latest[a].get("left_out", [])]
    if left:
        out += ["", "Left out, since the run's resolved config did not hold its candidate's "
                f"values: {'; '.join(left)}."]
    return out + [""]


def _reproduce_section(cells: list[Record], commands: list[str]) -> list[str]:
    commits = Counter((r["provenance"].get("commit") or "?")[:10] +
                      (" (dirty)" if r["provenance"].get("dirty") else "") for r in cells)
    machines = Counter(r["provenance"].get("cpu_model", "?")
                       for r in cells)
    example = next((r for r in cells if r["setup_kind"] == "one process"), None)
    out = ["## Reproduce", "", "The grid (it keeps finished cells, so it runs in parts):", "",
           *(f"    {c}" for c in commands), ""]
    if example is not None:
        run_dir = example["command"].split("--run-dir ", 1)[-1].split(" ", 1)[0]
        out += ["One cell, as the store records it (then its evaluation):", "",
                *(f"    {example[k].replace(run_dir, 'RUN_DIR')}"
                  for k in ("command", "eval_command")), ""]
    out += ["Commits of the cells: " + ", ".join(f"`{c}` ({n})" for c, n in
                                                 commits.most_common()) + ".",
            "Machines: " + ", ".join(f"{m} ({n})" for m, n in machines.most_common()) + "."]
    return out + ["", *speed_lines(cells)]


def speed_lines(cells: list[Record]) -> list[str]:
    """The machine's speed per day of cells (archzoo/benchlearn/calibrate.py): the model
    name is the same on machines up to twice as fast as each other."""
    if not cells:
        return []
    days: dict[str, list[Record]] = defaultdict(list)
    for r in cells:
        days[str(r["provenance"].get("start_time", "?"))[:10]].append(r)
    out = ["Machine speed before each cell (best of 3 one-thread timings: MinAtar steps/s, "
           "impala-cnn updates/s of 320 observations; median and range), per day:", ""]
    for day in sorted(days):
        cal = [r["calibration"] for r in days[day] if r.get("calibration")]
        n = f"{len(days[day])} cell{'s' if len(days[day]) != 1 else ''}"
        if not cal:
            out.append(f"- {day}: {n}, not measured (before calibration)")
            continue
        env, upd = ([c[k] for c in cal] for k in ("env_steps_per_s", "updates_per_s"))
        out.append(f"- {day}: {n}, {statistics.median(env) / 1e3:.0f}k "
                   f"({min(env) / 1e3:.0f}k-{max(env) / 1e3:.0f}k) steps/s, "
                   f"{statistics.median(upd):.1f} ({min(upd):.1f}-{max(upd):.1f}) updates/s")
    return out


BLOCK = re.compile(r"(<!-- results: (?P<arch>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /results -->)",
                   re.S)
"""A block of an architecture's page that :func:`fill_blocks` writes from the store."""


def arch_summary(groups: Groups, arch: str, results_page: str = "results.md") -> str:
    """The current numbers of ``arch`` for its own page, on one line whatever the number of
    games: per game the IQM of the frozen evaluation of both setups and their seeds (point
    estimates only, so that a docs test can recompute them cheaply), and where the
    intervals are."""
    games = []
    for game in P.GAMES:
        kinds = groups.get(game, {}).get(arch)
        if not kinds:
            continue
        xs = [scores(kinds.get(kind, []), "eval") for kind in KINDS]
        iqms = " / ".join(f"{point_iqm(x):.1f}" if x else "–" for x in xs)
        games.append(f"{game.split('/')[1]} {iqms} ({' / '.join(str(len(x)) for x in xs)} "
                     "seeds)")
    if not games:
        return f"No reported runs in the store yet ([results]({results_page})).\n"
    return ("Frozen evaluation after 5 minutes, IQM over seeds, 2 actors / one process "
            f"(intervals, training returns and what they allow to say: [results]"
            f"({results_page})):\n\n" + "; ".join(games) + ".\n")


def point_iqm(xs: list[float]) -> float:
    """The IQM's point estimate (scipy's 25% trimmed mean, as rliable's)."""
    import scipy.stats

    return float(scipy.stats.trim_mean(xs, 0.25))


def fill_blocks(text: str, groups: Groups) -> str:
    """``text`` with every results block rewritten from ``groups``."""
    return BLOCK.sub(lambda m: m.group(1) + arch_summary(groups, m.group("arch")) +
                     m.group(4), text)
