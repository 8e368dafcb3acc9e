"""One cell of the learning benchmark: the run, its frozen evaluation and its record.

The run is ``archzoo run`` in its own process group, ended by its wall clock
(``--time-limit``, counted from the first env step); then ``archzoo eval --parallel`` plays
the final parameters for :data:`~archzoo.benchlearn.protocol.EVAL_EPISODES` episodes in a
separate process. The record holds what the run directory says (config.json, metrics.csv,
summary.json) with its provenance and the machine's speed just before it
(:mod:`~archzoo.benchlearn.calibrate`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from archzoo.benchlearn import protocol as P
from archzoo.benchlearn.readouts import readouts
from archzoo.benchlearn.store import Record

ROOT = Path(__file__).resolve().parents[2]
DRAIN_S = 300.0  # on top of --time-limit: start-up and shutdown before a run is killed
EVAL_TIMEOUT_S = 900.0
ROW_COLUMNS = ("time_s", "env_steps", "episodes", "mean_return_100", "eval_mean_return",
               "fps", "learner_updates", "policy_lag", "learner/entropy", "learner/lr")
SUMMARY_KEYS = ("env_steps", "fps", "learner_updates", "episodes", "policy_lag_mean",
                "stop_reason", "wall_s", "startup_s", "world_size", "epsilon",
                "final_mean_return", "eval_mean_return")


def command(setup: P.Setup, game: str, seed: int, minutes: float, preset: str | None,
            run_dir: Path) -> list[str]:
    """The ``archzoo run`` of one cell."""
    return [sys.executable, "-m", "archzoo", "run", setup.arch, "--config", preset or "none",
            "--env", game, *setup.flags, "--seed", str(seed), "--time-limit",
            f"{minutes * 60:g}", "--total-steps", str(10**10), "--target-return", "1e9",
            "--quiet", "--log-interval", f"{P.LOG_INTERVAL:g}", "--run-dir", str(run_dir)]


def eval_command(run_dir: Path, seed: int) -> list[str]:
    return [sys.executable, "-m", "archzoo", "eval", str(run_dir), "--episodes",
            str(P.EVAL_EPISODES), "--parallel", "--seed", str(P.EVAL_SEED + 1000 * seed)]


def launch(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """``cmd`` from the repository root in its own process group, killed whole when it
    overruns ``timeout``: exit status, stdout, stderr."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, out, err + f"\ntimed out after {timeout:.0f} s"
    return p.returncode, out, err


def error_line(stderr: str, stdout: str, rc: int) -> str:
    """The last non-blank line a failed command printed, else its exit status."""
    for text in (stderr, stdout):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return f"exit status {rc}"


def _number(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) else None


def read_rows(metrics: Path) -> list[dict[str, float]]:
    """The :data:`ROW_COLUMNS` of every metrics row that has them."""
    if not metrics.is_file():
        return []
    rows = []
    with metrics.open() as f:
        for r in csv.DictReader(f):
            row = {c: v for c in ROW_COLUMNS if (v := _number(r.get(c))) is not None}
            if "time_s" in row:
                rows.append(row)
    return rows


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def threads(config: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The processes and torch threads the run had: the deciding rank's as it measured
    them (summary.json), the others' from the resolved config."""
    other = int(config.get("threads") or 1)
    learner = summary.get("torch_threads") or int(config.get("learner_threads") or 0) or other
    return {"processes": int(summary.get("world_size") or 0), "learner_process": learner,
            "other_processes": other, "cores": os.cpu_count()}


def run_cell(setup: P.Setup, game: str, seed: int, minutes: float, preset: str | None,
             run_dir: Path, purpose: str, busy_before: float | None = None) -> Record:
    """Run one cell and return its record (not yet stored); ``busy_before``: the cores
    other processes used just before it (:mod:`~archzoo.benchlearn.quiet`)."""
    from archzoo.benchlearn.calibrate import calibrate
    from archzoo.provenance import provenance

    prov = provenance()
    try:
        speed: dict[str, float] | None = calibrate()
    except Exception as e:  # noqa: BLE001 - a timing that fails must not stop the grid
        print(f"calibration failed, recorded as None: {e}", file=sys.stderr, flush=True)
        speed = None
    load_before = os.getloadavg()
    cmd = command(setup, game, seed, minutes, preset, run_dir)
    started = time.time()
    rc, out, err = launch(cmd, minutes * 60 + DRAIN_S)
    wall = time.time() - started
    evaluation, eval_error = None, None
    if rc == 0 and (run_dir / "policy.pt").is_file():
        erc, eout, eerr = launch(eval_command(run_dir, seed), EVAL_TIMEOUT_S)
        if erc == 0:
            evaluation = json.loads(eout.strip().splitlines()[-1])
        else:
            eval_error = error_line(eerr, eout, erc)
    summary = _json(run_dir / "summary.json")
    config = _json(run_dir / "config.json")
    rows = read_rows(run_dir / "metrics.csv")
    lag = ((summary.get("policy_lag") or {}).get("versions")) or {}
    error = None if rc == 0 else error_line(err, out, rc)
    return {
        "kind": "learning", "purpose": purpose, "preset": preset or "none",
        "preset_digest": P.preset_digest(setup.arch, preset),
        "setup": setup.name, "setup_kind": setup.kind, "arch": setup.arch, "game": game,
        "seed": seed, "minutes": minutes, "flags": list(setup.flags),
        "command": shlex.join(["python", *cmd[1:]]), "eval_command":
            shlex.join(["python", *eval_command(run_dir, seed)[1:]]),
        "provenance": prov, "calibration": speed, "config": config,
        "threads": threads(config, summary),
        "returncode": rc, "error": error or eval_error, "wall_s": round(wall, 1),
        "load_avg": {"before": load_before, "after": os.getloadavg()},
        "busy_cores_before": None if busy_before is None else round(busy_before, 3),
        "summary": {k: summary.get(k) for k in SUMMARY_KEYS if k in summary} | {
            "policy_lag_p90": lag.get("p90"), "policy_lag_mean_versions": lag.get("mean")},
        "rows": rows,
        "evaluation": evaluation,
        "readouts": readouts(rows, evaluation),
    }
