"""Tests of actors/inference.py and actors/remote.py: the batched inference server.

The multi-process tests launch real ranks (tests/mp.py) running tests/inference_cases.py:
rank 0 serves, ranks 1..4 are PolicyClient actors; every case (batched == unbatched,
exactly-once, max batch, max wait, a silent actor, parameter versions, a restarted actor)
runs in one launch per engine. A separate gloo launch kills an actor mid-run. The rest
drives BatchedPolicy and InferenceStats in one process.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from archzoo.actors.batched_policy import BatchedPolicy, InferenceStats
from archzoo.actors.inference import InferenceServer
from archzoo.nets import ActorCritic, get_flat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import inference_cases as cases  # noqa: E402  (tests/ is on the path only from here on)
import mp  # noqa: E402

CASES = str(HERE / "inference_cases.py")


# ---------------------------------------------------------------------------------------------
# Server + 4 actors, over gloo and MPI
# ---------------------------------------------------------------------------------------------
def _check(ranks) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == cases.WORLD
    for r in ranks:
        assert not r.timed_out, report
        assert r.returncode == 0, report
        for name in cases.CASE_NAMES:
            assert re.search(rf"^\[rank {r.rank}\] CASE {name} OK\b", r.output, re.M), (
                f"rank {r.rank}: case {name} did not report OK\n{report}")
        n = len(cases.CASE_NAMES)
        assert f"DONE {n}/{n} passed" in r.output, report


def test_inference_server_gloo():
    _check(mp.run_gloo(cases.WORLD, [CASES, "gloo"], timeout_s=150, fail_fast_s=25))


def test_inference_server_mpi():
    job = mp.run_mpi(cases.WORLD, [CASES, "mpi"], timeout_s=150)
    assert job.returncode == 0, mp.describe(job)
    _check(job)


# ---------------------------------------------------------------------------------------------
# An actor dies (gloo reports it on the server's posted receive): dropped, the rest served
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["dead", "dead-in-flight"])
def test_dead_actor_is_dropped_gloo(mode):
    ranks = mp.run_gloo(cases.DEAD_WORLD, [CASES, "gloo", mode], timeout_s=60, fail_fast_s=None)
    report = mp.describe(ranks)
    assert ranks[cases.DYING].returncode == 1, report
    out = ranks[0].output
    assert "SERVER FAIL" not in out, report
    for r in ranks[:cases.DYING]:
        assert not r.timed_out and r.returncode == 0, report
    extra = 1 if mode == "dead-in-flight" else 0
    served = (f"SERVED 1:{cases.K_DEAD} 2:{cases.K_DEAD} "
              f"{cases.DYING}:{cases.DIE_AFTER + extra} DEAD [{cases.DYING}]")
    assert served in out, report
    assert "SERVER OK" in out, report
    assert re.search(rf"inference server drops actor {cases.DYING}\b", out), report
    for r in ranks[1:cases.DYING]:
        assert "ACTOR DONE" in r.output, report


# ---------------------------------------------------------------------------------------------
# BatchedPolicy and InferenceStats, one process
# ---------------------------------------------------------------------------------------------
def _model(seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic((4,), 3, 16)


def _flat(m: torch.nn.Module) -> np.ndarray:
    f = np.zeros(sum(p.numel() for p in m.parameters()), np.float32)
    get_flat(m, f)
    return f


def test_load_applies_at_the_next_forward_only():
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    m0, m1 = _model(0), _model(1)
    with torch.no_grad():
        want0, want1 = m0(torch.from_numpy(obs))[0].numpy(), m1(torch.from_numpy(obs))[0].numpy()
    policy = BatchedPolicy(_model(0), torch.device("cpu"), seed=0)
    _, logits, _, v = policy.forward(obs)
    assert v == 0 and np.allclose(logits, want0, atol=1e-6)
    flat = _flat(m1)
    policy.load(flat, 3)
    assert policy.version == 0  # staged, not applied
    flat[:] = 0.0  # load copied it: changing the caller's array afterwards changes nothing
    _, logits, values, v = policy.forward(obs)
    assert v == 3 and policy.version == 3
    assert np.allclose(logits, want1, atol=1e-6)
    assert logits.shape == (5, 3) and values.shape == (5,)
    # a second load before any forward: only the last one counts
    policy.load(_flat(m0), 4)
    policy.load(_flat(m1), 5)
    _, logits, _, v = policy.forward(obs)
    assert v == 5 and np.allclose(logits, want1, atol=1e-6)
    _, _, _, v = policy.forward(obs)  # nothing staged: the version stays
    assert v == 5


def test_actions_are_samples_of_softmax_logits():
    model = _model(0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.policy.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    policy = BatchedPolicy(model, torch.device("cpu"), seed=1)
    obs = np.zeros((20_000, 4), np.float32)
    actions, logits, _, _ = policy.forward(obs)
    assert actions.dtype.kind == "i" and ((actions >= 0) & (actions < 3)).all()
    freq = np.bincount(actions, minlength=3) / len(actions)
    assert np.allclose(freq, [0.2, 0.3, 0.5], atol=0.015), freq
    # seeded: the same seed samples the same actions
    again = BatchedPolicy(model, torch.device("cpu"), seed=1).forward(obs)[0]
    assert np.array_equal(actions, again)


def test_stats_window_and_summary():
    s = InferenceStats()
    assert s.mean_batch is None and s.mean_latency_ms is None
    assert s.window() == {"infer_batch_mean": None, "infer_latency_ms": None}
    s.record(2, 0.01, 0.004)
    s.record(4, 0.02, 0.002)
    assert s.mean_batch == 3.0
    assert s.mean_latency_ms == pytest.approx(1.0)  # 6 ms over 6 requests
    assert s.window() == {"infer_batch_mean": 3.0, "infer_latency_ms": 1.0}
    assert s.window() == {"infer_batch_mean": None, "infer_latency_ms": None}  # reset
    s.record(1, 0.005, 0.003)
    assert s.window() == {"infer_batch_mean": 1.0, "infer_latency_ms": 3.0}
    summary = s.summary()
    assert summary["batches"] == 3 and summary["requests"] == 7
    assert summary["forward_s"] == pytest.approx(0.035)
    assert summary["mean_batch_size"] == pytest.approx(7 / 3)


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError, match="max_batch"):
        InferenceServer(None, None, None, [1], None, 0, 0.0, 1, 2)  # type: ignore[arg-type]
