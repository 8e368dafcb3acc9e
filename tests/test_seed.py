"""SEED RL end to end on the real engines: every launch way, both backends, both modes.

Smoke runs assert that data flowed, the run directory is complete, the return beat a random
policy and the inference server batched; its learning on MinAtar is guarded in the slow tier
(tests/test_learning_guard.py).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from archzoo.actors.batched_policy import reply_schema, request_schema
from archzoo.comm.control import control_schema
from archzoo.envs import env_spec
from tests.mp import describe, run_mpi
from tests.runs import (
    RANDOM_RETURN,
    best_return,
    cli,
    leaf_counters,
    load_run,
    torchrun,
)

SMOKE = ["--total-steps", "150000", "--log-interval", "0.5", "--quiet", "--seed", "3",
         "--comm-timeout", "30"]
# The other launchers and modes run the same roles: a shorter run checks their counts,
# test_torchrun's (gloo async, the default) that the policy learns, and the slow tier that
# it learns MinAtar Breakout (tests/test_learning_guard.py).
SHORT = ["--total-steps", "50000", *SMOKE[2:]]


def actor_requests(s: dict, actor: int) -> tuple[int, int]:
    """(requests sent, replies received) by ``actor``'s own transport's counters: it sent
    HELLO and one message per request; it received WELCOME, STOP and the replies it took
    (a request may be left unanswered at STOP). In sync mode it also received its action
    log's size (two int64, the log is empty) and sent "done" (one int64). Byte totals must
    agree with the counts."""
    spec = env_spec(s["env"])
    E, control = s["envs_per_actor"], control_schema().nbytes
    c = leaf_counters(s, actor)
    sync = int(s["mode"] == "sync")
    sent, replies = c["msgs_sent"] - 1 - sync, c["msgs_recv"] - 2 - sync
    assert c["bytes_sent"] == control + 8 * sync + sent * request_schema(spec, E).nbytes, c
    assert c["bytes_recv"] == (2 * control + 16 * sync
                               + replies * reply_schema(spec, E).nbytes), c
    assert 0 <= sent - replies <= 1, c
    return sent, replies


def check(d: Path, backend: str, world: int, mode: str = "async", learns: bool = False) -> dict:
    """Complete run directory, data flowed, and the server's inference and update counts
    agree with what the actors counted themselves; ``learns``: it beat random within SMOKE's
    150,000 agent steps."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"], s["mode"]) == ("seed", backend, world,
                                                                     mode)
    assert s["env_steps"] >= (150000 if learns else 50000) and s["learner_updates"] > 10
    if learns:
        assert best_return(d) > RANDOM_RETURN + 10, s["final_mean_return"]
    inf = s["inference"]
    T, E = json.loads((d / "config.json").read_text())["unroll_length"], s["envs_per_actor"]
    # every env step of every actor was one answered request row (plus first requests)
    assert inf["requests"] * E >= s["env_steps"]
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    if world == 1:  # one request per env step; an update per unroll of T after the first
        assert inf["requests"] == inf["batches"] == T * s["learner_updates"] + 1
        return s
    actors = range(1, world)
    counts = [actor_requests(s, a) for a in actors]
    sent, taken = sum(c[0] for c in counts), sum(c[1] for c in counts)
    # the server answered every reply an actor took, and no request no actor sent
    assert taken <= inf["requests"] <= sent, (counts, inf)
    # a batch holds at most one request per actor (each has one in flight)
    assert inf["requests"] / len(actors) <= inf["batches"] <= inf["requests"]
    assert inf["mean_batch_size"] == pytest.approx(inf["requests"] / inf["batches"])
    if mode == "sync":  # lockstep: every actor took part in every batch
        for a_sent, a_taken in counts:
            assert a_taken <= inf["batches"] <= a_sent, (counts, inf)
    # an actor's first answered request opens its unroll, each T more close one; an update
    # takes one unroll per actor as soon as that many are complete (--batch-unrolls 0)
    lo = sum((t - 1) // T for _, t in counts) // len(actors)
    hi = sum((n - 1) // T for n, _ in counts) // len(actors)
    assert lo <= s["learner_updates"] <= hi, (counts, s["learner_updates"])
    # the overall mean batch is a weighted mean of the metrics rows' window means
    means = [float(r["infer_batch_mean"]) for r in rows if r["infer_batch_mean"]]
    assert min(means) - 5e-4 <= inf["mean_batch_size"] <= max(means) + 5e-4
    assert {f"actor{a}" for a in actors} <= set(s["time_breakdown_s"])
    return s


def test_single_process_and_eval(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "seed", "--actors", "0", "--run-dir", str(d), "--total-steps", "50000",
            "--log-interval", "0.5", "--seed", "3")  # not quiet: a device line would show
    assert r.returncode == 0, r.stderr
    if torch.cuda.is_available():
        assert "--device auto: using CUDA" in r.stdout
    else:  # the CPU, the usual case, goes unsaid
        assert "--device auto" not in r.stdout
    check(d, "none", 1)
    ev = cli("eval", str(d), "--episodes", "2")
    assert ev.returncode == 0 and json.loads(ev.stdout)["episodes"] == 2, ev.stderr


# gloo async is test_torchrun's run, MPI async test_mpiexec's (the launcher changes nothing
# else; archzoo starting mpiexec itself is in test_pixels.py)
@pytest.mark.parametrize("backend,mode", [("gloo", "sync")])
def test_embedded(tmp_path: Path, backend: str, mode: str) -> None:
    d = tmp_path / "run"
    r = cli("run", "seed", "--actors", "2", "--backend", backend, "--mode", mode,
            "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stdout + r.stderr
    s = check(d, backend, 3, mode)
    assert s["inference"]["dead_actors"] == [] and s["actor_restarts"] == {}


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", "seed", "--run-dir", str(d), *SMOKE)
    s = check(d, "gloo", 3, learns=True)
    assert s["launcher"] == "torchrun"
    assert s["inference"]["dead_actors"] == [] and s["actor_restarts"] == {}


def test_mpiexec(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "seed", "--run-dir", str(d), *SHORT],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    s = check(d, "mpi", 3)
    assert s["launcher"] == "mpiexec"
    assert s["inference"]["dead_actors"] == [] and s["actor_restarts"] == {}


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "tree"], "--topology tree"),
    (["--max-batch", "0"], "--max-batch"),
    (["--max-wait-us", "-1"], "--max-wait-us"),
    (["--unroll-length", "0"], "--unroll-length"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "seed", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_gpu(capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "seed", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0], err
