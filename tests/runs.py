"""Helpers for tests that run ``archzoo`` as a user would: the CLI in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import types
import typing
from pathlib import Path

from archzoo.records import ByteTotals, DeadActor, RunSummary
from archzoo.spawn import descendants

ARCHZOO = [sys.executable, "-m", "archzoo"]
RANDOM_RETURN = 22.0  # CartPole-v1 under a uniformly random policy
RUN_FILES = ("config.json", "metrics.csv", "summary.json", "policy.pt")
SUMMARY_KEYS = {
    "arch", "env", "backend", "topology", "mode", "world_size", "solved", "time_to_target_s",
    "env_steps_to_target", "startup_s", "final_mean_return", "time_breakdown_s",
}
METRIC_KEYS = {"time_s", "env_steps", "episodes", "mean_return_100", "fps", "learner_updates",
               "policy_lag", "bytes_sent"}


def clean_env() -> dict[str, str]:
    """This process's environment without any launcher's variables."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
           and not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def cli(*args: str, timeout: float = 180,
        cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ARCHZOO, *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(), cwd=cwd)


def load_run(d: Path) -> dict:
    """Check the run directory is complete (archzoo/runlog.py); return summary.json."""
    for f in RUN_FILES:
        assert (d / f).is_file(), f"{f} missing in {d}"
    cfg = json.loads((d / "config.json").read_text())
    assert "git_sha" in cfg and "torch" in cfg["versions"]
    s = json.loads((d / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(s), SUMMARY_KEYS - set(s)
    assert not (bad := summary_problems(s)), bad
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    assert rows and METRIC_KEYS <= set(rows[0])
    assert int(rows[-1]["env_steps"]) == s["env_steps"]
    return s


def summary_problems(s: dict) -> list[str]:
    """summary.json against archzoo/records.py: the keys every run writes, each rank's
    traffic and each dead actor's entry."""
    problems = record_problems(s, RunSummary)
    for r, b in s.get("per_rank_bytes", {}).items():
        problems += record_problems(b, ByteTotals, f"summary.per_rank_bytes.{r}")
    for r, d in s.get("dead_actors", {}).items():
        problems += record_problems(d, DeadActor, f"summary.dead_actors.{r}")
    return problems


def record_problems(value: object, record: type, where: str = "summary") -> list[str]:
    """Where ``value`` (a JSON object) does not hold what the TypedDict ``record``
    (archzoo/records.py) declares: a required key missing, or a value of another type
    (an int passes for a float; extra keys are the architecture's own)."""
    hints = typing.get_type_hints(record)
    if not isinstance(value, dict):
        return [f"{where}: {type(value).__name__}, not an object"]
    problems = []
    for key, hint in hints.items():
        if key not in value:
            if key in record.__required_keys__:
                problems.append(f"{where}.{key}: missing")
            continue
        problems += _type_problems(value[key], hint, f"{where}.{key}")
    return problems


def _type_problems(v: object, hint: object, where: str) -> list[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        tries = [_type_problems(v, a, where) for a in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if typing.is_typeddict(hint):
        return record_problems(v, hint, where)
    if origin is dict:
        if not isinstance(v, dict):
            return [f"{where}: {type(v).__name__}, not an object"]
        return [p for k, x in v.items() for p in _type_problems(x, args[1], f"{where}.{k}")]
    if hint is typing.Any:
        return []
    if hint is type(None):
        return [] if v is None else [f"{where}: {v!r}, not null"]
    ok = {float: (int, float), int: (int,), str: (str,), bool: (bool,)}[hint]
    if isinstance(v, bool) and hint is not bool:
        ok = ()
    return [] if isinstance(v, ok) else [f"{where}: {v!r} is not {hint.__name__}"]


def filled(d: Path, col: str) -> list[float]:
    """The non-empty values of metrics.csv's column ``col``, row by row."""
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    assert col in rows[0], f"no column {col} in {d / 'metrics.csv'}"
    return [float(r[col]) for r in rows if r[col] not in ("", None)]


def check_lag_columns(d: Path, prefix: str, seconds: bool = True) -> list[float]:
    """metrics.csv's ``prefix`` distribution (policy_lag or grad_staleness) is filled and
    sane: per row 0 <= p50 <= p90 <= max and 0 <= mean <= max in versions, and (with
    ``seconds``) mean and p90 >= 0 in seconds; returns the rows' means."""
    rows = [r for r in csv.DictReader(open(d / "metrics.csv")) if r[prefix] not in ("", None)]
    assert rows, f"{prefix} never filled in {d / 'metrics.csv'}"
    for r in rows:
        mean, p50, p90, top = (float(r[prefix + k]) for k in ("", "_p50", "_p90", "_max"))
        assert 0 <= p50 <= p90 <= top and 0 <= mean <= top, r
        if seconds:
            assert float(r[prefix + "_s"]) >= 0 and float(r[prefix + "_s_p90"]) >= 0, r
    if seconds:
        assert all(r[prefix + "_s"] not in ("", None) for r in rows), prefix
    return [float(r[prefix]) for r in rows]


def check_replay_lag(d: Path, s: dict) -> list[float]:
    """metrics.csv's replay lag of the learner's batches (learners/dqn.py replay_lag_stats:
    its version − the version that acted each item) is filled and sane: per row
    0 <= mean <= max <= the updates so far (no version is newer than the learner's), and
    summary.json's run mean within the rows'; returns the rows' means."""
    rows = [r for r in csv.DictReader(open(d / "metrics.csv"))
            if r["learner/replay_lag_mean"] not in ("", None)]
    assert rows, f"learner/replay_lag_mean never filled in {d / 'metrics.csv'}"
    for r in rows:
        mean, top = float(r["learner/replay_lag_mean"]), float(r["learner/replay_lag_max"])
        assert 0 <= mean <= top <= int(r["learner_updates"]), r
    means = [float(r["learner/replay_lag_mean"]) for r in rows]
    assert min(means) <= s["learner_stats"]["replay_lag_mean"] <= max(means), s["learner_stats"]
    return means


def best_return(d: Path) -> float:
    """The best mean return over the last 100 episodes that metrics.csv logged once 100
    episodes had ended. Smoke runs assert learning on it, not on the final window: an
    async policy-gradient run on CartPole can fall back after it learned (2 of ~40 smoke
    runs under a loaded CI ended below random + 10, having been far above it)."""
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    return max((float(r["mean_return_100"]) for r in rows
                if r["mean_return_100"] and int(r["episodes"]) >= 100), default=0.0)


def solve_either_seed(arch: str, args: list[str], tmp: Path, seeds=(0, 1)) -> dict:
    """Run ``archzoo run ARCH`` with each seed until one solves (a bounded solve passes if
    either of two seeds solves); returns that run's summary."""
    results = []
    for seed in seeds:
        d = tmp / f"seed{seed}"
        r = cli("run", arch, *args, "--seed", str(seed), "--quiet", "--run-dir", str(d),
                timeout=900)
        assert r.returncode == 0, r.stderr
        s = json.loads((d / "summary.json").read_text())
        s["run_dir"] = str(d)
        results.append(s)
        if s["solved"]:
            return s
    raise AssertionError(f"{arch} solved with no seed: " + str(
        [(s["stop_reason"], s["final_mean_return"], s["eval_mean_return"]) for s in results]))


def torchrun(nproc: int, *args: str, timeout: float = 240,
             cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node N -m archzoo ARGS`` (the venv's torchrun),
    in ``cwd`` if given."""
    import shutil

    exe = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert exe, "torchrun ships with torch"
    r = subprocess.run([exe, "--standalone", "--nproc_per_node", str(nproc), "-m", "archzoo",
                        *args], capture_output=True, text=True, timeout=timeout,
                       env=clean_env(), cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


# -- what a leaf's own transport counted (its BYE statistics, summary.json per_rank_bytes) --


def leaf_counters(summary: dict, rank: int) -> dict[str, int]:
    """Messages and bytes rank ``rank`` sent and received by its own transport's count, as it
    reported them in its BYE (taken before the BYE itself was sent)."""
    return summary["per_rank_bytes"][str(rank)]



def solve_counts(total_msgs: int, total_bytes: int, known: dict[int, int],
                 unknown: tuple[int, int]) -> tuple[int, int]:
    """The numbers (x, y) of messages of two unknown sizes ``unknown`` = (size_x, size_y) in a
    stream of ``total_msgs`` messages and ``total_bytes`` bytes that also holds ``known``
    {size: count}: two equations, two unknowns; both must come out whole and >= 0."""
    m = total_msgs - sum(known.values())
    b = total_bytes - sum(size * count for size, count in known.items())
    sx, sy = unknown
    x, rem = divmod(b - m * sy, sx - sy)
    assert rem == 0 and 0 <= x <= m, f"no whole solution: {total_msgs} msgs, {total_bytes} B"
    return x, m - x


def rank_pid(run_dir: Path, rank: int, deadline_s: float = 60) -> int:
    """The pid of rank ``rank`` of the embedded run writing ``run_dir`` (found by its
    command line, which names the run directory; and by its rank: a forked rank's title
    ends ``[rank R of N]`` (archzoo.forkstart), an MPI rank's environment holds PMI_RANK)."""
    end = time.time() + deadline_s
    while time.time() < end:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            is_rank = (f" [rank {rank} of ".encode() in cmd or f"RANK={rank}".encode() in env
                       or f"PMI_RANK={rank}".encode() in env)
            names_it = f" {run_dir}".encode() in cmd.replace(b"\0", b" ")
            if names_it and is_rank and not cmd.startswith(b"sh\0"):  # not its shell
                return int(pid)
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} of {run_dir} within {deadline_s}s")


def naming(marker: str) -> dict[int, bytes]:
    """Every process whose command line names ``marker`` (a run directory): pid -> its
    command line (NUL-separated)."""
    found = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found[int(p)] = cmd
    return found


def kill_tree(proc: subprocess.Popen, marker: str | None = None) -> None:
    """SIGKILL ``proc``, everything it started (mpiexec in its own session included) and,
    given ``marker`` (a run directory), any process whose command line names it: a failed
    test leaves nothing running, even ranks that were re-parented to init."""
    victims = set(descendants(proc.pid))
    if marker is not None:
        victims.update(naming(marker))
    victims.discard(os.getpid())
    for p in [proc.pid, *victims]:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def communicate_or_dump(proc: subprocess.Popen, marker: str,
                        timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; when the run overstays, every archzoo process whose
    command line names ``marker`` prints its threads' stacks (SIGUSR2, archzoo/cli.py)
    before all are killed, and the test fails with the run's output: a hang names its
    waits."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for p, cmd in naming(marker).items():
            if b"python" in cmd.split(b"\0")[0]:
                try:
                    os.kill(p, signal.SIGUSR2)
                except ProcessLookupError:
                    pass
        time.sleep(2)
        kill_tree(proc, marker)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"the run did not end within {timeout:.0f}s; its output, then "
                             f"every rank's stacks:\n{out[-3000:]}\n{err[-20000:]}") from None
