"""IMPALA's learner end of the wire, :class:`~archzoo.harness.unroll_link.LearnerLink`, as
the context it is, in one process: rank 0's ``run_learner`` and two ``run_actor`` ranks
as threads over the loopback engine (archzoo/comm/loopback.py), with the real inbox,
parameter broadcast, handshake, run directory, checkpoints and stop protocol. The
multi-process tests (test_impala.py, test_checkpoint.py) run the same over gloo and MPI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from archzoo import builders, checkpoint
from archzoo.architectures import impala
from archzoo.comm import CommError
from archzoo.comm.factory import Launch
from archzoo.comm.loopback import LoopbackGroup, LoopbackTransport
from archzoo.config import RunConfig
from archzoo.harness import RankContext
from archzoo.harness.unroll_link import LearnerLink, topology_applied
from archzoo.resolve import parse_run, validate_run

FLAGS = ["--actors", "2", "--seed", "5", "--envs-per-actor", "4", "--unroll-length", "20",
         "--quiet", "--no-tensorboard", "--device", "cpu", "--log-interval", "0.05",
         "--checkpoint-interval", "0.05", "--config", "none"]


def _cfg(*argv: str) -> RunConfig:
    cfg, given = parse_run(["run", *argv])
    return validate_run(cfg, given)[2]


def _role(cfg: RunConfig, fn: Any) -> Any:
    def play(t: LoopbackTransport) -> Any:
        ctx = RankContext(cfg, Launch("loopback", t.rank, t.world_size), t)
        return fn(ctx, builders.env_spec(cfg))
    return play


def _run(cfg: RunConfig) -> dict[int, Any]:
    """Rank 0 plays IMPALA's learner, ranks 1 and 2 its actors; their values by rank."""
    return LoopbackGroup(3, timeout_s=30).run({
        0: _role(cfg, impala.run_learner), 1: _role(cfg, impala.run_actor),
        2: _role(cfg, impala.run_actor)})


def _policy(d: Path) -> dict[str, torch.Tensor]:
    return torch.load(d / "policy.pt", weights_only=True)["state_dict"]


def _summary(d: Path) -> dict[str, Any]:
    return json.loads((d / "summary.json").read_text())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_link_is_the_runs_root(tmp_path: Path, mode: str) -> None:
    d = tmp_path / "run"
    cfg = _cfg("impala", *FLAGS, "--mode", mode, "--total-steps", "3000", "--run-dir", str(d))
    s = _run(cfg)[0]
    assert s["stop_reason"] == "steps" and s["env_steps"] >= 3000
    assert s["learner_updates"] >= 3000 // (2 * 4 * 20)
    # the stop protocol ran: every actor's BYE statistics are in the summary
    assert set(s["time_breakdown_s"]) == {"learner", "actor1", "actor2"}
    assert set(s["per_rank_bytes"]) == {"0", "1", "2"}
    assert set(s["policy_lag_by_actor"]) == {"1", "2"}
    # async goes on without an actor that dies, so it counts the live ones; sync cannot
    assert (s["dead_actors"], s["live_actors"]) == ({}, 2 if mode == "async" else 0)
    assert s["checkpoints"]["saved"] >= 1 and checkpoint.latest(d) is not None
    assert s["topology_applied"] == topology_applied(cfg)
    assert _summary(d) == json.loads(json.dumps(s))
    assert _policy(d).keys() == builders.actor_critic(cfg, builders.env_spec(cfg)
                                                      ).state_dict().keys()


def test_a_failing_loop_skips_the_stop_protocol(tmp_path: Path) -> None:
    """An error in the ``with`` body propagates from the link with no STOP: the actors end
    with an error naming rank 0, and no summary.json is written by the link."""
    d = tmp_path / "run"

    def failing(ctx: RankContext, spec: Any) -> None:
        learner = builders.vtrace_learner(ctx.cfg, spec)
        with LearnerLink(ctx, spec, learner) as link:
            link.send_params()
            link.next_batch()
            raise RuntimeError("the loop failed")

    group = LoopbackGroup(3, timeout_s=30)
    cfg = _cfg("impala", *FLAGS, "--mode", "sync", "--total-steps", "3000",
               "--run-dir", str(d))
    ranks = {r: group.start(r, _role(cfg, fn))
             for r, fn in {0: failing, 1: impala.run_actor, 2: impala.run_actor}.items()}
    e = ranks[0].failure()
    assert isinstance(e, RuntimeError) and str(e) == "the loop failed"
    for r in (1, 2):
        f = ranks[r].failure()
        assert isinstance(f, CommError) and "rank 0" in str(f), repr(f)
    assert not (d / "summary.json").exists()
