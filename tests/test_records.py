"""summary.json's typed records (archzoo/records.py) and the check that every test's run
directory passes through (``load_run`` in tests/runs.py): it finds what is missing or of
the wrong type, and passes what is right."""

from __future__ import annotations

import copy

from archzoo.records import RunSummary
from tests.runs import record_problems, summary_problems

LAG = {"versions": {"mean": 1.0, "p50": 1, "p90": 2, "max": 3}, "seconds": {}}
GOOD = {
    "arch": "impala", "env": "CartPole-v1", "backend": "gloo", "launcher": "embedded",
    "topology": "star", "topology_applied": "...", "mode": "async", "world_size": 3,
    "actors": 2, "envs_per_actor": 16, "device": "cpu", "seed": 0, "solved": True,
    "stop_reason": "target", "target_return": 475.0, "time_to_target_s": 8.2,
    "env_steps_to_target": 123456, "startup_s": None, "wall_s": 9, "final_mean_return": 480.1,
    "eval_mean_return": None, "episodes": 900, "env_steps": 130000, "learner_updates": 200,
    "fps": 14000.5, "policy_lag_mean": 1.01, "policy_lag": LAG, "grad_staleness": {
        "versions": {}, "seconds": {}},
    "learner_stats": {"loss": 0.5, "grad_norm": 1.25},
    "bytes_sent": 10, "bytes_recv": 20, "bytes_sent_per_env_step": 0.5,
    "time_breakdown_s": {"learner": {"update": 3.5}, "actor1": {"env": 2, "wait": 0.1}},
    "hosts_by_rank": {"0": "a"}, "torch_threads": 1,
    "per_rank_bytes": {"0": {"msgs_sent": 1, "bytes_sent": 2, "msgs_recv": 3, "bytes_recv": 4}},
    "dead_actors": {"2": {"time_s": 3.1, "during": "sending parameters", "error": "gone"}},
    "an_architectures_own_key": [1, 2],
}


def test_a_summary_as_written_passes() -> None:
    assert set(GOOD) >= set(RunSummary.__annotations__)
    assert summary_problems(GOOD) == []


def test_what_is_missing_or_mistyped_is_named() -> None:
    bad = copy.deepcopy(GOOD)
    del bad["fps"]
    bad["world_size"] = "3"
    bad["episodes"] = True  # a bool is no count
    bad["stop_reason"] = 7
    bad["policy_lag"]["versions"]["p90"] = "2"
    bad["time_breakdown_s"]["learner"]["update"] = None
    del bad["per_rank_bytes"]["0"]["bytes_recv"]
    bad["dead_actors"]["2"]["during"] = 1
    assert sorted(summary_problems(bad)) == sorted([
        "summary.fps: missing",
        "summary.world_size: '3' is not int",
        "summary.episodes: True is not int",
        "summary.stop_reason: 7 is not str",
        "summary.policy_lag.versions.p90: '2' is not float",
        "summary.time_breakdown_s.learner.update: None is not float",
        "summary.per_rank_bytes.0.bytes_recv: missing",
        "summary.dead_actors.2.during: 1 is not str",
    ])
    assert record_problems([], RunSummary) == ["summary: list, not an object"]
