"""GA3C end to end on the real engines: every launch way, both backends, several threads.

Smoke runs assert that data flowed, the run directory is complete, the return beat a random
policy, and the server's counts of requests, unrolls and updates agree with what the agents
counted themselves (nothing lost, back-pressure bounded by the training queue); its learning
on MinAtar is guarded in the slow tier (tests/test_learning_guard.py).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from archzoo.actors.batched_policy import reply_schema, request_schema
from archzoo.actors.unroll import unroll_schema
from archzoo.comm.control import control_schema
from archzoo.envs import env_spec
from tests.mp import describe, run_mpi
from tests.runs import (
    RANDOM_RETURN,
    best_return,
    cli,
    leaf_counters,
    load_run,
    solve_counts,
    torchrun,
)

SMOKE = ["--total-steps", "150000", "--log-interval", "0.5", "--quiet", "--seed", "3",
         "--comm-timeout", "30"]
# The other launchers and settings run the same roles: a shorter run checks their counts,
# test_torchrun's (gloo, the defaults) that the policy learns, and the slow tier that it
# learns MinAtar Breakout (tests/test_learning_guard.py).
SHORT = ["--total-steps", "50000", *SMOKE[2:]]


def agent_counts(s: dict, cfg: dict, agent: int) -> tuple[int, int, int]:
    """(requests sent, replies taken, unrolls sent) by ``agent``'s own transport's counters:
    it sent HELLO, a request per env step and an unroll per T steps (messages and bytes give
    two equations for the last two); it received WELCOME, STOP and the replies it took."""
    spec, E, T = env_spec(cfg["env"]), cfg["envs_per_actor"], cfg["unroll_length"]
    control = control_schema().nbytes
    c = leaf_counters(s, agent)
    unrolls, requests = solve_counts(c["msgs_sent"], c["bytes_sent"], {control: 1},
                                     (unroll_schema(spec, T, E).nbytes,
                                      request_schema(spec, E).nbytes))
    replies = c["msgs_recv"] - 2
    assert c["bytes_recv"] == 2 * control + replies * reply_schema(spec, E).nbytes, c
    assert 0 <= requests - replies <= 1, c  # a request may be left unanswered at STOP
    assert T * unrolls <= requests <= T * (unrolls + 1), c  # STOP may cut an unroll short
    return requests, replies, unrolls


def window_means(rows: list[dict], column: str) -> list[float]:
    return [float(r[column]) for r in rows if r[column]]


def check(d: Path, backend: str, world: int, learns: bool = False) -> dict:
    """Counts that agree with the agents' own; ``learns``: it beat random within SMOKE's
    150,000 agent steps."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("ga3c", backend, world)
    assert s["env_steps"] >= (150000 if learns else 50000) and s["learner_updates"] > 10
    if learns:
        assert best_return(d) > RANDOM_RETURN + 10, s["final_mean_return"]
    cfg = json.loads((d / "config.json").read_text())
    T, E = cfg["unroll_length"], cfg["envs_per_actor"]
    inf = s["inference"]
    assert inf["requests"] * E >= s["env_steps"]
    if world == 1:  # T requests per unroll, one update per unroll
        assert inf["requests"] == inf["batches"] == T * s["learner_updates"]
        return s
    agents = range(1, world)
    W = len(agents)
    counts = [agent_counts(s, cfg, a) for a in agents]
    # the predictors answered every reply an agent took, and no request no agent sent
    assert sum(c[1] for c in counts) <= inf["requests"] <= sum(c[0] for c in counts), counts
    # a batch holds at most one request per agent (each has one in flight)
    assert inf["requests"] / min(W, cfg["max_batch"]) <= inf["batches"] <= inf["requests"]
    # Unrolls the server accepted into the training queue, from its step and episode counts:
    # each is T·E env steps, valid or the autoreset step after one of the counted episode
    # ends (all but at most one per env of each agent's last accepted unroll).
    n = s["env_steps"] + s["episodes"]
    accepted = n // (T * E)
    assert n - accepted * T * E <= W * E, (n, accepted)
    # back-pressure, no loss: all that agents sent was accepted but for what was in flight at
    # STOP (per agent one in the server's posted receive and one more in its send buffers)
    sent = sum(c[2] for c in counts)
    assert 0 <= sent - accepted <= 2 * W, (counts, accepted)
    # what was accepted and not trained fits in the training queue; an update takes 1 to
    # --batch-unrolls (default: one per agent) unrolls
    q = s["queues"]
    per_update = cfg["batch_unrolls"] or W
    assert s["learner_updates"] <= accepted <= per_update * s["learner_updates"] + \
        q["training_bound"], (accepted, s["learner_updates"])
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    # the prediction queue holds at most one request per agent, whatever its bound
    assert all(m <= W for m in window_means(rows, "prediction_queue"))
    assert 0 <= q["prediction_mean"] <= W
    # the overall means are weighted means of the metrics rows' windows
    for overall, column, rnd in ((q["prediction_mean"], "prediction_queue", 5e-3),
                                 (q["training_mean"], "training_queue", 5e-3),
                                 (inf["mean_batch_size"], "infer_batch_mean", 5e-4)):
        means = window_means(rows, column)
        assert min(means) - rnd <= overall <= max(means) + rnd, (column, overall, means)
    assert any(r["infer_latency_ms"] for r in rows)
    assert {"server", *(f"actor{a}" for a in agents)} <= set(s["time_breakdown_s"])
    return s


def test_single_process(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "ga3c", "--actors", "0", "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stderr
    check(d, "none", 1)


# gloo with the default flags is test_torchrun's run, MPI with them test_mpiexec's (the
# launcher changes nothing else; archzoo starting mpiexec itself is in test_pixels.py)
@pytest.mark.parametrize("backend,extra", [
    ("gloo", ["--predictors", "2", "--trainers", "2", "--training-queue", "2",
              "--batch-unrolls", "1", "--loss", "vtrace"]),
])
def test_embedded(tmp_path: Path, backend: str, extra: list[str]) -> None:
    d = tmp_path / "run"
    r = cli("run", "ga3c", "--actors", "2", "--backend", backend, "--run-dir", str(d),
            *extra, *SHORT)
    assert r.returncode == 0, r.stdout + r.stderr
    s = check(d, backend, 3)
    if extra:
        assert s["inference"]["predictors"] == 2 and s["inference"]["trainers"] == 2
        assert s["queues"]["training_bound"] == 2


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "ga3c", "--run-dir", str(d), *SMOKE)
    assert check(d, "gloo", 3, learns=True)["launcher"] == "torchrun"


def test_mpiexec(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "ga3c", "--run-dir", str(d), *SHORT],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    assert check(d, "mpi", 3)["launcher"] == "mpiexec"


@pytest.mark.parametrize("argv,needle", [
    (["--mode", "sync"], "--mode sync"),
    (["--predictors", "0"], "--predictors"),
    (["--trainers", "0"], "--trainers"),
    (["--prediction-queue", "0"], "--prediction-queue"),
    (["--training-queue", "0"], "--training-queue"),
    (["--topology", "ring"], "--topology ring"),
    (["--loss", "ppo"], "invalid choice"),
    (["--loss", "a3c", "--normalize-advantages"], "--normalize-advantages"),
    (["--epochs", "2"], "sample reuse"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "ga3c", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
