"""The role contexts of archzoo/harness/roles.py, in one process: what ``harness.leaf`` and
``harness.root`` do around a role's body, in which order, and what they leave out when the
body fails. The protocol's own functions (handshake, BYE/FINAL, the run directory) are
replaced by recorders here; the multi-process tests of every architecture run them for
real."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from archzoo.comm import PeerFailure, PeerTimeout
from archzoo.harness import roles


class FakeCounters:
    def totals(self) -> dict[str, int]:
        return {"bytes_sent": 7, "bytes_recv": 9}


class FakeControl:
    def __init__(self, transport: Any, peers: list[int], tag: int) -> None:
        self.peers, self.inbox = list(peers), []
        self.dropped: list[int] = []

    def poll(self) -> list[tuple[int, dict[str, Any]]]:
        got, self.inbox = self.inbox, []
        return got

    def drop(self, peer: int) -> None:
        self.dropped.append(peer)


class FakeMonitor:
    def __init__(self) -> None:
        self.stops: list[str | None] = [None, "time"]

    def check_stop(self) -> str | None:
        return self.stops.pop(0)

    def elapsed(self) -> float:
        return 1.0


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Every protocol step the contexts take, in order."""
    log: list[tuple] = []
    monkeypatch.setattr(roles, "ControlChannel", FakeControl)
    monkeypatch.setattr(roles.protocol, "handshake_leaf",
                        lambda control, root, digests, timeout: log.append(("hello", root)))
    monkeypatch.setattr(roles.protocol, "handshake_root",
                        lambda control, leaves, digests, timeout: log.append(("welcome", leaves)))

    def finish_leaf(ctx, control, lc, root, stats, drain, settle) -> None:
        drain()
        if settle is not None:
            settle()
        log.append(("bye", stats))

    def finish_root(ctx, control, leaves, drain, outstanding, survivors) -> dict[int, Any]:
        drain()
        outstanding()
        log.append(("final", survivors is not None))
        if leaves == [13]:
            raise PeerTimeout(0, 13, "BYE", 1.0)
        return {r: {"timing": {}} for r in leaves}

    def finish_run(ctx, run_dir, mon, stop, **kw) -> dict[str, Any]:
        log.append(("summary", stop, kw["extra"]))
        return {"stop_reason": stop, **kw["extra"]}

    monkeypatch.setattr(roles.protocol, "finish_leaf", finish_leaf)
    monkeypatch.setattr(roles.protocol, "finish_root", finish_root)
    monkeypatch.setattr(roles, "open_run",
                        lambda ctx, window, parts, policy: ("dir", FakeMonitor()))
    monkeypatch.setattr(roles, "finish_run", finish_run)
    return log


CTX = SimpleNamespace(
    rank=0, cfg=SimpleNamespace(startup_timeout=1.0, min_actors=0),
    transport=SimpleNamespace(wait_s=0.5, counters=FakeCounters()))


def test_a_leaf_stops_flushes_then_says_bye_with_its_stats(calls: list[tuple]) -> None:
    with roles.leaf(CTX, {"params": "d"}) as link:
        link.on_stop(lambda: calls.append(("flush", 1)), lambda: calls.append(("flush", 2)),
                     stats=lambda: {"timing": {"env": 2.0}, "steps": 3},
                     drain=lambda: calls.append(("drain",)),
                     settle=lambda: calls.append(("settle",)))
        link.control.inbox.append((0, {"type": "stop"}))
        assert link.stopped
        link.raise_if_stopped()
        calls.append(("not reached",))
    assert calls == [("hello", 0), ("flush", 1), ("flush", 2), ("drain",), ("settle",),
                     ("bye", {"timing": {"env": 2.0, "wait": 0.5}, "steps": 3,
                              "bytes": {"bytes_sent": 7, "bytes_recv": 9}})]
    assert link.lc.stopped


def test_a_leaf_whose_body_ends_on_its_own_says_bye_too(calls: list[tuple]) -> None:
    with roles.leaf(CTX, {}, root=3) as link:
        assert not link.stopped
    assert calls == [("hello", 3), ("bye", {"bytes": {"bytes_sent": 7, "bytes_recv": 9}})]


def test_a_leaf_that_fails_sends_no_bye(calls: list[tuple]) -> None:
    with pytest.raises(ValueError), roles.leaf(CTX, {}) as link:
        link.on_stop(lambda: calls.append(("flush",)))
        raise ValueError("a bug")
    assert calls == [("hello", 0)]


def test_a_root_runs_the_stop_protocol_after_its_body_and_finishes(calls: list[tuple]) -> None:
    with roles.root(CTX, [1, 2], {}, actors=[2]) as run:
        run.on_stop(drain=lambda: calls.append(("drain",)),
                    outstanding=lambda: calls.append(("outstanding",)))
        while not run.stopped:
            run.check_stop()
        run.survive(SimpleNamespace(drop=lambda r: calls.append(("dropped", r))))
        run.survivors.drop(PeerFailure(0, 2, "x", "gone"), "the test")
        assert run.control.dropped == [2]
    assert run.byes == {1: {"timing": {}}, 2: {"timing": {}}}
    s = run.finish("model", 4, meta={}, extra={"mine": 1})
    assert s["stop_reason"] == "time" and s["mine"] == 1 and list(s["dead_actors"]) == ["2"]
    assert calls[:5] == [("welcome", [1, 2]), ("dropped", 2), ("drain",), ("outstanding",),
                         ("final", True)]
    assert calls[5][:2] == ("summary", "time") and len(calls) == 6


def test_a_root_keeps_a_failed_stop_for_the_summary_then_raises_it(calls: list[tuple]) -> None:
    with roles.root(CTX, [13], {}, keep_stop_error=True) as run:
        run.check_stop()
    assert isinstance(run.stop_error, PeerTimeout) and run.byes == {}
    with pytest.raises(PeerTimeout):
        run.finish("model", 0, meta={})
    assert calls[-1][0] == "summary" and "rank 13" in calls[-1][2]["stop_error"]


def test_a_root_without_keep_stop_error_raises_at_once(calls: list[tuple]) -> None:
    with pytest.raises(PeerTimeout), roles.root(CTX, [13], {}):
        pass
    assert calls[-1] == ("final", False)


def test_a_root_whose_body_fails_skips_the_stop_protocol(calls: list[tuple]) -> None:
    with pytest.raises(ValueError), roles.root(CTX, [1], {}):
        raise ValueError("a bug")
    assert calls == [("welcome", [1])]

