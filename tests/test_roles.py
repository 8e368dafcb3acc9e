"""The role contexts of archzoo/harness/roles.py in one process: ``harness.root`` and
``harness.leaf`` as threads over the loopback engine (archzoo/comm/loopback.py), with the
real control channel, handshake, stop-and-drain protocol, survivors, run directory and
summary. The multi-process tests of every architecture run the same over gloo and MPI."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from archzoo import harness
from archzoo.comm import CommError, PeerFailure, PeerTimeout, SchemaMismatch
from archzoo.comm.factory import Launch
from archzoo.comm.loopback import LoopbackGroup, LoopbackTransport, ManualClock
from archzoo.config import RunConfig
from archzoo.harness import RankContext, TooFewActors, abandon_run, stats_message

DIGESTS = {"unroll": "d1", "params": "d2"}


def _ctx(t: LoopbackTransport, run_dir: Path, **flags: Any) -> RankContext:
    cfg = RunConfig(**{"arch": "loopback", "run_dir": str(run_dir), "quiet": True,
                       "tensorboard": False, "actors": t.world_size - 1,
                       "target_return": 1e9, "total_steps": 200, **flags})
    return RankContext(cfg, Launch("loopback", t.rank, t.world_size), t)


def _actor(run_dir: Path, steps: int = 100, before_stats: threading.Event | None = None,
           **flags: Any):
    """A leaf that reports ``steps`` env steps (2 episodes) and waits for STOP; its stop
    callbacks record what the leaf had sent and received when each ran."""
    def role(t: LoopbackTransport) -> list[tuple[str, int, int, bool]]:
        seen: list[tuple[str, int, int, bool]] = []

        def note(what: str) -> None:
            c = t.counters.totals()
            if not seen or seen[-1][0] != what:
                seen.append((what, c["msgs_sent"], c["msgs_recv"], link.lc.final))

        with harness.leaf(_ctx(t, run_dir, **flags), DIGESTS) as link:
            link.on_stop(lambda: note("flush"), stats=lambda: {"timing": {"env": 2.0},
                                                               "steps": steps},
                         drain=lambda: note("drain"), settle=lambda: note("settle"))
            if before_stats is not None:
                before_stats.wait(10)
            link.control.send(0, stats_message(steps, [1.0, 3.0], 0, time.time()))
            while True:
                link.raise_if_stopped()
                t.idle(1e-3)
        return seen
    return role


def _learner(run_dir: Path, leaves: list[int], actors: list[int] | None = None,
             keep_stop_error: bool = False, **flags: Any):
    """The deciding rank: takes the leaves' statistics until the Monitor says stop; the
    summary it writes, or the error that ended it."""
    def role(t: LoopbackTransport) -> dict[str, Any]:
        with harness.root(_ctx(t, run_dir, **flags), leaves, DIGESTS, actors=actors,
                          keep_stop_error=keep_stop_error) as run:
            while not run.stopped:
                run.absorb(version=0)
                run.check_stop()
                t.idle(1e-3)
        return run.finish(torch.nn.Linear(2, 2), 0, meta={"kind": "test"})
    return role


def test_stop_and_drain_delivers_every_leafs_bye_stats(tmp_path: Path) -> None:
    group = LoopbackGroup(3, timeout_s=30)
    d = tmp_path / "run"
    got = group.run({0: _learner(d, [1, 2], actors=[1, 2]), 1: _actor(d), 2: _actor(d)})
    s = got[0]
    assert s["stop_reason"] == "steps" and (s["env_steps"], s["episodes"]) == (200, 4)
    assert s["final_mean_return"] == 2.0  # the mean of the 4 returns reported
    assert json.loads((d / "summary.json").read_text()) == json.loads(json.dumps(s))
    assert torch.load(d / "policy.pt", weights_only=True)["meta"] == {"kind": "test"}
    # BYE carries each leaf's stats: its timing (plus its wait) and its bytes at the BYE,
    # by then HELLO and the stats sent, WELCOME and STOP received
    for r in (1, 2):
        assert set(s["time_breakdown_s"][f"actor{r}"]) == {"env", "wait"}
        assert s["time_breakdown_s"][f"actor{r}"]["env"] == 2.0
        bye = s["per_rank_bytes"][str(r)]
        assert (bye["msgs_sent"], bye["msgs_recv"]) == (2, 2), bye
    # the root: WELCOME, STOP and FINAL to each; HELLO, stats and BYE from each
    root = s["per_rank_bytes"]["0"]
    assert (root["msgs_sent"], root["msgs_recv"]) == (6, 6), root
    assert (s["dead_actors"], s["live_actors"]) == ({}, 2)
    # on the leaf, in order: flush before BYE; drain after BYE until FINAL; settle after it
    for r in (1, 2):
        assert got[r] == [("flush", 2, 2, False), ("drain", 3, 2, False),
                          ("settle", 3, 3, True)], got[r]


def test_a_leaf_that_never_answers_the_handshake_is_named(tmp_path: Path) -> None:
    """Rank 2 never says HELLO: once the clock passes --startup-timeout the root raises a
    deadline error naming it; the leaf that did answer ends with an error naming rank 0."""
    clock = ManualClock()
    group = LoopbackGroup(3, clock=clock, timeout_s=30)
    d = tmp_path / "run"
    root = group.start(0, _learner(d, [1, 2], startup_timeout=120))
    leaf = group.start(1, _actor(d, startup_timeout=120))
    group.settle(0, 1)
    clock.advance(119)
    group.settle(0, 1)  # both still wait: the deadline has not passed
    clock.advance(2)
    e = root.failure()
    assert isinstance(e, PeerTimeout) and (e.peer, e.what) == (2, "control message"), repr(e)
    assert str(e) == "rank 0: timed out after 120s waiting for control message from rank 2"
    assert isinstance(leaf.failure(), CommError) and "rank 0" in str(leaf.failure())
    assert not d.exists()  # the handshake comes before the run directory


def test_the_handshake_has_one_deadline_for_every_leaf(tmp_path: Path) -> None:
    """--startup-timeout bounds the whole handshake: rank 1 says HELLO only at 119 s of
    120, and rank 2 never does; the root names rank 2 once the clock passes 120 s (a
    deadline per leaf would have waited until 239 s)."""
    clock = ManualClock()
    group = LoopbackGroup(3, clock=clock, timeout_s=30)
    d = tmp_path / "run"
    root = group.start(0, _learner(d, [1, 2], startup_timeout=120))
    group.settle(0)
    clock.advance(119)
    leaf = group.start(1, _actor(d, startup_timeout=120))
    group.settle(0, 1)  # rank 0 has rank 1's HELLO and waits for rank 2's
    clock.advance(2)
    e = root.failure()
    assert isinstance(e, PeerTimeout) and (e.peer, e.what) == (2, "control message"), repr(e)
    assert str(e) == "rank 0: timed out after 120s waiting for control message from rank 2"
    assert isinstance(leaf.failure(), CommError)


def test_a_dead_actor_is_dropped_and_counted(tmp_path: Path, capsys) -> None:
    """Actor 2 dies after the handshake; the root drops it where it next hears from it,
    goes on with actor 1, skips the final barrier (it needs every rank) and counts the dead
    actor in summary.json."""
    group = LoopbackGroup(3, timeout_s=30)
    d = tmp_path / "run"
    two_gone = threading.Event()

    def dies(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), DIGESTS):
            raise RuntimeError("the env crashed")

    root = group.start(0, _learner(d, [1, 2], actors=[1, 2], total_steps=100))
    leaf = group.start(1, _actor(d, before_stats=two_gone))
    crashed = group.start(2, dies)
    assert isinstance(crashed.failure(), RuntimeError)
    two_gone.set()
    s = root.result()
    assert s["stop_reason"] == "steps" and s["env_steps"] == 100
    assert (s["live_actors"], s["min_actors"], list(s["dead_actors"])) == (1, 1, ["2"])
    dead = s["dead_actors"]["2"]
    assert dead["during"] == "taking statistics", dead
    assert dead["error"] == ("rank 0: rank 2 failed during control message: its thread "
                             "ended with RuntimeError: the env crashed")
    assert set(s["time_breakdown_s"]) == {"actor1"}  # a BYE from the survivor only
    assert leaf.result()[-1] == ("settle", 3, 3, True)
    assert "rank 0: actor rank 2 is gone after" in capsys.readouterr().err


def test_an_actor_that_dies_during_the_drain_is_dropped(tmp_path: Path) -> None:
    """Actor 2 is frozen at the stop (it sends no BYE) and killed while the root drains: the
    root drops it, as lost during the stop's drain, and ends with actor 1's BYE."""
    group = LoopbackGroup(3, timeout_s=30)
    d = tmp_path / "run"
    draining, thaw = threading.Event(), threading.Event()

    def learner(t: LoopbackTransport) -> dict[str, Any]:
        with harness.root(_ctx(t, d), [1, 2], DIGESTS, actors=[1, 2]) as run:
            run.on_stop(drain=draining.set)
            while not run.stopped:
                run.absorb(version=0)
                run.check_stop()
                t.idle(1e-3)
        return run.finish(torch.nn.Linear(2, 2), 0, meta={})

    def frozen(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), DIGESTS) as link:
            link.control.send(0, stats_message(100, [], 0, time.time()))
            thaw.wait(30)  # polls nothing: no BYE

    root = group.start(0, learner)
    group.start(1, _actor(d))
    victim = group.start(2, frozen)
    assert draining.wait(10), "the root never drained"
    group.kill(2, "SIGKILL")
    thaw.set()
    s = root.result()
    assert s["stop_reason"] == "steps" and (s["live_actors"], list(s["dead_actors"])) == (1, ["2"])
    assert s["dead_actors"]["2"]["during"] == "the stop's drain", s["dead_actors"]
    assert s["dead_actors"]["2"]["error"] == ("rank 0: rank 2 failed during control message: "
                                              "SIGKILL")
    assert set(s["time_breakdown_s"]) == {"actor1"}
    assert isinstance(victim.failure(), CommError)  # its own sends find it gone


def test_too_few_actors_end_the_run_and_the_survivor_hears_of_it(tmp_path: Path) -> None:
    group = LoopbackGroup(3, timeout_s=30)
    d = tmp_path / "run"
    two_gone = threading.Event()

    def dies(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), DIGESTS):
            raise RuntimeError("the env crashed")

    root = group.start(0, _learner(d, [1, 2], actors=[1, 2], min_actors=2))
    leaf = group.start(1, _actor(d, before_stats=two_gone))
    group.start(2, dies).failure()
    e = root.failure()
    two_gone.set()
    assert isinstance(e, TooFewActors), repr(e)
    assert str(e) == "rank 0: 1 actors left (--min-actors 2); dead: 2"
    assert isinstance(leaf.failure(), PeerFailure) and "rank 0 failed" in str(leaf.failure())
    # what the worker does next on the deciding rank
    assert abandon_run(str(e)) == ["summary.json"]
    s = json.loads((d / "summary.json").read_text())
    assert s["stop_reason"] == f"error: {e}"


def test_a_leaf_silent_at_the_stop_is_named_in_the_summary(tmp_path: Path) -> None:
    """A leaf that never says BYE: with ``keep_stop_error`` the root writes summary.json
    with the error, then raises it. (The BYE deadline is protocol.finish_root's, on the
    wall clock: --comm-timeout 0.3 s here.)"""
    group = LoopbackGroup(2, timeout_s=0.3)
    d = tmp_path / "run"
    release = threading.Event()

    def hangs(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), DIGESTS) as link:
            link.control.send(0, stats_message(200, [], 0, time.time()))
            release.wait(30)  # hung: polls nothing

    root = group.start(0, _learner(d, [1], keep_stop_error=True))
    leaf = group.start(1, hangs)
    e = root.failure()
    release.set()
    assert isinstance(e, PeerTimeout) and str(e) == ("rank 0: timed out after 0.3s waiting "
                                                     "for BYE from rank 1")
    s = json.loads((d / "summary.json").read_text())
    assert s["stop_reason"] == "steps" and s["stop_error"] == str(e)
    assert isinstance(leaf.failure(), PeerFailure)  # its BYE finds rank 0 gone


def test_a_leaf_whose_body_fails_sends_no_bye_and_a_run_that_needs_it_fails(
        tmp_path: Path) -> None:
    """Without survivors (a synchronous run) the root ends with an error naming the leaf."""
    group = LoopbackGroup(2, timeout_s=30)
    d = tmp_path / "run"

    def fails(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), DIGESTS) as link:
            link.on_stop(stats=lambda: pytest.fail("a failed body says no BYE"))
            raise ValueError("a bug")

    root = group.start(0, _learner(d, [1]))
    assert isinstance(group.start(1, fails).failure(), ValueError)
    e = root.failure()
    assert isinstance(e, PeerFailure) and e.peer == 1, repr(e)
    assert "ValueError: a bug" in str(e)


def test_a_root_whose_body_fails_skips_the_stop_protocol(tmp_path: Path) -> None:
    group = LoopbackGroup(2, timeout_s=30)
    d = tmp_path / "run"

    def fails(t: LoopbackTransport) -> None:
        with harness.root(_ctx(t, d), [1], DIGESTS):
            raise ValueError("a bug")

    root = group.start(0, fails)
    leaf = group.start(1, _actor(d))
    assert isinstance(root.failure(), ValueError)
    e = leaf.failure()
    assert isinstance(e, PeerFailure) and e.peer == 0, repr(e)
    assert not (d / "summary.json").exists()
    abandon_run("a bug")


def test_a_schema_mismatch_is_refused_on_both_sides(tmp_path: Path) -> None:
    group = LoopbackGroup(3, timeout_s=30)
    d = tmp_path / "run"

    def odd(t: LoopbackTransport) -> None:
        with harness.leaf(_ctx(t, d), {**DIGESTS, "unroll": "other"}):
            pytest.fail("welcomed")

    root = group.start(0, _learner(d, [1, 2]))
    leaf = group.start(1, _actor(d))
    mismatched = group.start(2, odd)
    want = "rank 2's 'unroll' message schema differs from rank 0's"
    for th in (root, leaf, mismatched):
        e = th.failure()
        assert isinstance(e, SchemaMismatch) and str(e) == want, repr(e)
