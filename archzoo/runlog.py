"""The run directory: config.json, metrics.csv, summary.json, policy.pt (see docs/index.md).

Only the deciding rank (rank 0) writes it. :class:`Monitor` keeps the learning curve
(episode returns from the actors, env steps, updates, policy lag), decides when the
target is reached, writes a metrics row every ``log_interval`` seconds and shows
progress on the terminal. What else is due at a row (a checkpoint, a video) is the run's
(:class:`archzoo.harness.run.Run`'s heartbeat).
"""

from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from archzoo.learners.schedule import fraction_spent
from archzoo.progress import Progress, ranks_heard, time_left
from archzoo.records import Distribution, JSONObject, LagSummary, PolicyMeta, Summary

if TYPE_CHECKING:
    from archzoo.nets import Weights

# What a V-trace learner reports per update (learners/vtrace.py): loss terms, entropy, the
# importance weights ρ = π/μ (mean, fraction clipped at ρ̄, mean |log π/μ|), gradient norm
# before clipping, learning rate.
# An A2C learner's (learners/a2c.py: A3C, GALA): loss, pg_loss, baseline_loss (the value
# term), entropy, grad_norm, lr.
# A double-DQN learner's (learners/dqn.py: Ape-X, Gorila): loss, mean Q(s, a), the batch's
# mean and max TD error |δ| (the new priorities), the mean importance-sampling weight, and
# the batch's mean and max replay lag: the learner's version − the version that acted the
# item (learners/dqn.py replay_lag_stats).
LEARNER_STATS = ("loss", "pg_loss", "baseline_loss", "entropy", "mean_rho", "rho_clip_frac",
                 "mean_log_ratio_abs", "mean_q", "td_abs_mean", "td_abs_max", "is_weight_mean",
                 "replay_lag_mean", "replay_lag_max", "grad_norm", "lr")

METRIC_COLUMNS = (
    "time_s", "env_steps", "episodes", "mean_return_100", "eval_mean_return", "fps",
    "learner_updates", "policy_lag", "policy_lag_p50", "policy_lag_p90", "policy_lag_max",
    "policy_lag_s", "policy_lag_s_p90",
    # a parameter server's gradients (A3C, Gorila): the shard's version when a gradient
    # arrives minus the version it was computed on, and that version's age in seconds
    "grad_staleness", "grad_staleness_p50", "grad_staleness_p90", "grad_staleness_max",
    "grad_staleness_s", "grad_staleness_s_p90",
    "bytes_sent", "bytes_recv",
    # the learner's update statistics, averaged over the updates since the last row
    *(f"learner/{k}" for k in LEARNER_STATS),
    # GALA: rank 0's L2 distance to its ring neighbours' mean at each gossip round
    "consensus_distance",
    # batched inference (GA3C, SEED); empty for the other architectures
    "infer_batch_mean", "infer_latency_ms", "prediction_queue", "training_queue",
)

# a metrics.csv row: column -> value (None: left empty)
MetricsRow = dict[str, float | None]


class MonitorState(TypedDict):
    """:meth:`Monitor.state_dict`: the counters a checkpoint keeps (plain types only);
    the lag histograms are value (as a string) -> count, absent from older checkpoints."""
    env_steps: int
    episodes: int
    updates: int
    elapsed_s: float
    returns: list[float]
    eval_returns: list[float] | None
    lag_hist: NotRequired[dict[str, int]]
    lag_s_hist: NotRequired[dict[str, int]]
    staleness_hist: NotRequired[dict[str, int]]
    staleness_s_hist: NotRequired[dict[str, int]]
    time_to_target_s: float | None
    steps_to_target: int | None
    rows: int


def accumulate_learner_stats(sums: dict[str, list], stats: dict[str, float]) -> None:
    """Adds one update's statistics (those of :data:`LEARNER_STATS`) to ``sums``, a
    ``name -> [sum, count]`` table from which means are taken."""
    for k, v in stats.items():
        if k in LEARNER_STATS:
            acc = sums.setdefault(k, [0.0, 0])
            acc[0] += float(v)
            acc[1] += 1

def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str]:
    import gymnasium
    import numpy
    import torch

    import archzoo

    v = {"python": platform.python_version(), "archzoo": archzoo.__version__,
         "torch": torch.__version__, "numpy": numpy.__version__,
         "gymnasium": gymnasium.__version__}
    try:
        import mpi4py

        v["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    return v


class Timers:
    """Seconds spent per activity (env, inference, comm, wait, update)."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.s[name] = self.s.get(name, 0.0) + time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        self.s[name] = self.s.get(name, 0.0) + seconds


class VersionClock:
    """When each parameter version came into being (a learner's publish, a shard's update),
    so a lag in versions gets its twin in seconds: the age of the version a policy acted
    with, or a gradient was computed on, on this rank's clock. Keeps the last ``keep``
    versions marked (marked in increasing order); older ones have no age (None)."""

    def __init__(self, version: int | None = 0, keep: int = 10_000) -> None:
        self.keep = keep
        self._born: dict[int, float] = {}
        if version is not None:
            self.mark(version)

    def mark(self, version: int, at: float | None = None) -> None:
        """``version`` exists from ``at`` (default now); a version marked twice keeps its
        first time."""
        v = int(version)
        if v not in self._born:
            self._born[v] = time.time() if at is None else at
            while len(self._born) > self.keep:
                del self._born[next(iter(self._born))]

    def age(self, version: int, now: float | None = None) -> float | None:
        """Seconds since ``version`` was marked, or None if it never was (or was forgotten)."""
        born = self._born.get(int(version))
        if born is None:
            return None
        return max(0.0, (time.time() if now is None else now) - born)


class RunDir:
    """Writes one run's files under ``path``."""

    def __init__(self, path: str | Path, config: JSONObject, resume: bool = False) -> None:
        """``resume``: metrics.csv is appended to (a resumed run goes on in it)."""
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        full = dict(config, git_sha=git_sha(), versions=versions(), argv=sys.argv)
        (self.path / "config.json").write_text(json.dumps(full, indent=2, default=str) + "\n")
        metrics = self.path / "metrics.csv"
        append = resume and metrics.is_file()
        self._csv_file = open(metrics, "a" if append else "w", newline="")  # noqa: SIM115
        self._csv = csv.DictWriter(self._csv_file, fieldnames=METRIC_COLUMNS,
                                   extrasaction="ignore")
        if not append:
            self._csv.writeheader()
        self._tb = None  # TensorBoard (torch.utils.tensorboard), unless --no-tensorboard
        if config.get("tensorboard"):
            from archzoo.extras import missing

            if missing("tensorboard"):  # the default is on: say why there is none, go on
                print("archzoo: no tensorboard/ event files: TensorBoard is archzoo's "
                      "tensorboard extra (pip install 'archzoo[tensorboard]'; "
                      "--no-tensorboard hides this line)", file=sys.stderr, flush=True)
            else:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.path / "tensorboard"))
        self._wandb = None  # Weights & Biases (archzoo/tracking.py), with --wandb
        if config.get("wandb"):
            from archzoo import tracking

            self._wandb = tracking.start(self.path, full)

    def metrics_row(self, row: MetricsRow) -> None:
        self._csv.writerow(row)
        self._csv_file.flush()
        step = int(row.get("env_steps") or 0)  # each column against env steps
        if self._tb is not None:
            for k, v in scalars(row).items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.scalars(step, scalars(row))

    def write_summary(self, summary: Summary) -> None:
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if self._tb is not None:  # as text: its constants (pids, settings) are no curves
            steps = summary.get("env_steps")
            step = int(steps) if isinstance(steps, (int, float)) else 0
            self._tb.add_text("summary", "```\n" + json.dumps(summary, indent=2) + "\n```",
                              step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.summary(summary)

    def save_policy(self, model: Weights, meta: PolicyMeta | None) -> None:
        import torch

        from archzoo.nets import cpu_state_dict

        torch.save({"state_dict": cpu_state_dict(model), "meta": meta}, self.path / "policy.pt")

    def close(self) -> None:
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None


def scalars(row: MetricsRow) -> dict[str, float]:
    """What TensorBoard and W&B plot of a metrics row: each column but the time and the
    env steps (the x axis), as ``metrics/COLUMN``, where it has a value."""
    return {f"metrics/{k}": float(v) for k in METRIC_COLUMNS[2:]
            if (v := row.get(k)) is not None and v != ""}


def sample_stats(xs: list[float]) -> dict[str, float]:
    """mean, p50, p90 and max of ``xs`` (rounded), or {} when empty."""
    if not xs:
        return {}
    a = sorted(xs)
    pick = lambda q: a[min(len(a) - 1, int(q * len(a)))]  # noqa: E731 - nearest rank
    return {"mean": round(sum(a) / len(a), 3), "p50": round(pick(0.5), 3),
            "p90": round(pick(0.9), 3), "max": round(a[-1], 3)}


def hist_stats(hist: Counter) -> Distribution:
    """:func:`sample_stats` of a histogram value -> count."""
    n = sum(hist.values())
    if not n:
        return {}
    keys = sorted(hist)

    def pick(q: float) -> float:
        rank, seen = min(n - 1, int(q * n)), 0
        for k in keys:
            seen += hist[k]
            if seen > rank:
                return k
        return keys[-1]

    return {"mean": round(sum(k * v for k, v in hist.items()) / n, 3),
            "p50": round(pick(0.5), 3), "p90": round(pick(0.9), 3), "max": round(keys[-1], 3)}


class LagDistribution:
    """A lag in versions and, where known, in seconds: the values since the last metrics
    row (their mean, p50, p90 and max in the row) and the whole run's histograms (the
    summary's distribution)."""

    def __init__(self) -> None:
        self.row: list[float] = []  # versions, since the last metrics row
        self.row_s: list[float] = []  # seconds, since the last metrics row
        self.hist: Counter[int] = Counter()  # the whole run: versions -> count
        self.hist_s: Counter[float] = Counter()  # seconds, rounded to 10 ms -> count

    def add(self, lag: float, seconds: float | None = None) -> None:
        self.row.append(float(lag))
        self.hist[int(round(lag))] += 1
        if seconds is not None:
            self.row_s.append(float(seconds))
            self.hist_s[round(float(seconds), 2)] += 1

    def columns(self, prefix: str) -> dict[str, float | None]:
        """The metrics row's columns: ``prefix`` (mean), ``_p50``, ``_p90``, ``_max`` in
        versions, ``_s`` (mean) and ``_s_p90`` in seconds."""
        v, sec = sample_stats(self.row), sample_stats(self.row_s)
        return {prefix: v.get("mean"), f"{prefix}_p50": v.get("p50"),
                f"{prefix}_p90": v.get("p90"), f"{prefix}_max": v.get("max"),
                f"{prefix}_s": sec.get("mean"), f"{prefix}_s_p90": sec.get("p90")}

    def next_row(self) -> None:
        self.row, self.row_s = [], []

    @property
    def mean(self) -> float | None:
        n = sum(self.hist.values())
        return sum(k * v for k, v in self.hist.items()) / n if n else None

    def summary(self) -> LagSummary:
        """The whole run's distribution, in versions and in seconds (mean, p50, p90, max)."""
        return {"versions": hist_stats(self.hist), "seconds": hist_stats(self.hist_s)}

    def state_dict(self) -> dict[str, dict[str, int]]:
        return {"hist": {str(k): v for k, v in self.hist.items()},
                "hist_s": {str(k): v for k, v in self.hist_s.items()}}

    def load_state_dict(self, hist: dict[str, int], hist_s: dict[str, int]) -> None:
        self.hist = Counter({int(float(k)): v for k, v in hist.items()})
        self.hist_s = Counter({float(k): v for k, v in hist_s.items()})


class Monitor:
    """Learning curve, stop decision and progress for the deciding rank.

    Progress goes through :class:`archzoo.progress.Progress`: a live panel on a
    terminal, one line per metrics row elsewhere; ``last_heard`` (the transport's
    per-peer time of the last message) adds which ranks are heard."""

    def __init__(self, run_dir: RunDir | None, target_return: float | None,
                 total_steps: int | None, time_limit_s: float | None, log_interval_s: float,
                 label: str, quiet: bool = False, window: int = 100,
                 eval_window: int | None = None) -> None:
        self.run_dir = run_dir
        self.target, self.total_steps, self.time_limit = target_return, total_steps, time_limit_s
        self.log_interval, self.label, self.quiet = log_interval_s, label, quiet
        self.returns: deque[float] = deque(maxlen=window)
        self.window = window
        self.episodes = 0
        self.env_steps = 0
        self.updates = 0
        self.eval_returns: deque[float] | None = deque(maxlen=eval_window) \
            if eval_window else None
        self.t_start = time.time()
        self.first_step_time: float | None = None
        self.time_to_target_s: float | None = None
        self.steps_to_target: int | None = None
        # update statistics since the last row: name -> [sum, count]
        self._learner_row: dict[str, list[float]] = {}
        self._learner_run: dict[str, list[float]] = {}  # the same, over the whole run
        self.lag = LagDistribution()  # policy lag: learner version − behaviour version
        self.staleness = LagDistribution()  # a parameter server's gradients' staleness
        self._last_t = time.time()
        self._last_steps = 0
        self.rows = 0
        self.extra: Callable[[], MetricsRow] | None = None  # more columns for each row
        self.last_heard: dict[int, float] | None = None  # the transport's, for "ranks heard"
        self.progress = Progress(label, quiet)
        self.resumed_from: JSONObject | None = None

    # -- checkpoints ------------------------------------------------------
    def state_dict(self) -> MonitorState:
        """The counters a resumed run goes on from (plain types only)."""
        return {"env_steps": self.env_steps, "episodes": self.episodes,
                "updates": self.updates, "elapsed_s": self.elapsed(),
                "returns": list(self.returns),
                "eval_returns": None if self.eval_returns is None else list(self.eval_returns),
                "lag_hist": self.lag.state_dict()["hist"],
                "lag_s_hist": self.lag.state_dict()["hist_s"],
                "staleness_hist": self.staleness.state_dict()["hist"],
                "staleness_s_hist": self.staleness.state_dict()["hist_s"],
                "time_to_target_s": self.time_to_target_s,
                "steps_to_target": self.steps_to_target, "rows": self.rows}

    def load_state_dict(self, state: MonitorState) -> None:
        """Go on from a checkpoint: counters as saved, the clock ``elapsed_s`` in."""
        self.env_steps, self.episodes = state["env_steps"], state["episodes"]
        self.updates, self.rows = state["updates"], state["rows"]
        self.returns.extend(state["returns"])
        if self.eval_returns is not None and state["eval_returns"] is not None:
            self.eval_returns.extend(state["eval_returns"])
        self.lag.load_state_dict(state.get("lag_hist", {}), state.get("lag_s_hist", {}))
        self.staleness.load_state_dict(state.get("staleness_hist", {}),
                                       state.get("staleness_s_hist", {}))
        self.time_to_target_s = state["time_to_target_s"]
        self.steps_to_target = state["steps_to_target"]
        now = time.time()  # elapsed() and the time limit count the whole run
        self.t_start = self.first_step_time = now - state["elapsed_s"]
        self._last_t, self._last_steps = now, self.env_steps

    # -- feeding ----------------------------------------------------------
    def add_episodes(self, returns) -> None:
        for r in returns:
            self.returns.append(float(r))
        self.episodes += len(returns)

    def add_steps(self, n: int, first_step_time: float | None = None) -> None:
        self.env_steps += n
        if first_step_time and (self.first_step_time is None
                                or first_step_time < self.first_step_time):
            self.first_step_time = first_step_time

    def add_learner_stats(self, stats: dict[str, float]) -> None:
        """One update's statistics (:data:`LEARNER_STATS`); rows show their means."""
        accumulate_learner_stats(self._learner_row, stats)
        accumulate_learner_stats(self._learner_run, stats)

    def add_learner_sums(self, sums: Mapping[str, Sequence[float]]) -> None:
        """Several updates' statistics at once, as ``name -> (sum, count)`` (what a rank
        that computes updates sends the deciding rank: :class:`~archzoo.harness.stats.
        StatsReporter`); rows show the means over all updates."""
        for k, (total, n) in sums.items():
            if k in LEARNER_STATS and n:
                for table in (self._learner_row, self._learner_run):
                    acc = table.setdefault(k, [0.0, 0])
                    acc[0] += float(total)
                    acc[1] += int(n)

    def learner_means(self) -> dict[str, float]:
        """summary.json's ``learner_stats``: each update statistic's mean over the run's
        updates since this process started (a resumed run's since the resume)."""
        return {k: round(total / n, 5) for k, (total, n) in self._learner_run.items() if n}

    def add_lag(self, lag: float, seconds: float | None = None) -> None:
        """One unroll's (or report's) policy lag: learner version − behaviour version, and
        where known the behaviour policy's age in seconds."""
        self.lag.add(lag, seconds)

    def add_staleness(self, versions: float, seconds: float | None = None) -> None:
        """One gradient's staleness at a parameter server: the shard's version when it
        arrived − the version it was computed on, and where known that version's age."""
        self.staleness.add(versions, seconds)

    @property
    def lag_hist(self) -> Counter[int]:
        """The whole run's policy lag in versions -> count."""
        return self.lag.hist

    @property
    def lag_s_hist(self) -> Counter[float]:
        """The whole run's policy lag in seconds (rounded to 10 ms) -> count."""
        return self.lag.hist_s

    @property
    def lag_mean(self) -> float | None:
        """Mean policy lag (learner version − behaviour version) over the whole run."""
        return self.lag.mean

    def lag_summary(self) -> LagSummary:
        """summary.json's ``policy_lag``: the whole run's distribution, in versions and in
        seconds (mean, p50, p90, max)."""
        return self.lag.summary()

    def staleness_summary(self) -> LagSummary:
        """summary.json's ``grad_staleness``: as :meth:`lag_summary`, for the gradients a
        parameter server received (empty distributions elsewhere)."""
        return self.staleness.summary()

    def add_eval(self, returns) -> None:
        """Greedy evaluation returns (architectures that explore with ε are judged by them)."""
        if self.eval_returns is not None:
            self.eval_returns.extend(float(r) for r in returns)

    # -- reading ----------------------------------------------------------
    @property
    def eval_mean_return(self) -> float | None:
        """Mean of the last ``eval_window`` greedy episodes, once that many have finished."""
        ev = self.eval_returns
        if not ev or len(ev) < (ev.maxlen or 0):
            return None
        return sum(ev) / len(ev)

    @property
    def mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def judged_return(self) -> float | None:
        """What 'solved' uses: greedy eval return where there is one, else training returns."""
        if self.eval_returns is not None:
            return self.eval_mean_return
        if len(self.returns) < self.window:
            return None
        return self.mean_return

    def elapsed(self) -> float:
        origin = self.first_step_time or self.t_start
        return time.time() - origin

    def budget_spent(self) -> float:
        """The fraction of the run's budget used: env steps over ``total_steps`` or seconds
        over the time limit, whichever is larger (0 without a budget)."""
        return fraction_spent((self.env_steps, self.total_steps),
                              (time.time() - self.t_start, self.time_limit))

    def check_stop(self) -> str | None:
        """'target', 'steps', 'time' or None; records the time to target once."""
        judged = self.judged_return()
        if self.target is not None and judged is not None and judged >= self.target:
            if self.time_to_target_s is None:
                self.time_to_target_s = self.elapsed()
                self.steps_to_target = self.env_steps
            return "target"
        if self.total_steps is not None and self.env_steps >= self.total_steps:
            return "steps"
        if self.time_limit is not None and time.time() - self.t_start >= self.time_limit:
            return "time"
        return None

    def maybe_log(self, bytes_sent: int = 0, bytes_recv: int = 0, force: bool = False) -> bool:
        """A metrics row (and a progress line) every ``log_interval`` seconds, or now with
        ``force``; in between, the live panel on a terminal is redrawn. True if a row was
        taken (none is written to metrics.csv before the first env step but at ``force``)."""
        now = time.time()
        dt = now - self._last_t
        if not force and dt < self.log_interval:
            if self.progress.live:
                self.progress.tick(*self._report(now, dt, bytes_sent, bytes_recv))
            return False
        row, left, ranks = self._report(now, dt, bytes_sent, bytes_recv)
        extra = self.extra() if self.extra is not None else {}
        row.update(extra)
        # time_s counts from the first env step: before one is known (start-up) the progress
        # line shows the wait, metrics.csv gets no row, so its time column only rises
        if self.run_dir is not None and (self.first_step_time is not None or force):
            self.run_dir.metrics_row(row)
        self.rows += 1
        self._last_t, self._last_steps = now, self.env_steps
        self.lag.next_row()
        self.staleness.next_row()
        self._learner_row = {}
        self.progress.row(row, extra, left, ranks)
        return True

    def _report(self, now: float, dt: float, bytes_sent: int, bytes_recv: int):
        """The metrics row since the last one, the time left, the ranks heard."""
        fps = (self.env_steps - self._last_steps) / dt if dt > 0 else 0.0
        row = {
            "time_s": round(self.elapsed(), 3), "env_steps": self.env_steps,
            "episodes": self.episodes,
            "mean_return_100": None if self.mean_return is None else round(self.mean_return, 3),
            "eval_mean_return": self.eval_mean_return, "fps": round(fps, 1),
            "learner_updates": self.updates,
            **self.lag.columns("policy_lag"), **self.staleness.columns("grad_staleness"),
            "bytes_sent": bytes_sent, "bytes_recv": bytes_recv,
            **{f"learner/{k}": round(total / n, 5)
               for k, (total, n) in self._learner_row.items()},
        }
        left = time_left(now - self.t_start, self.time_limit, self.env_steps,
                         self.total_steps, fps)
        ranks = None if self.last_heard is None else \
            ranks_heard(self.last_heard, max(10.0, 3 * self.log_interval))
        return row, left, ranks

    def close(self) -> None:
        self.progress.close()
