"""StarPublisher (archzoo/topology/star.py) on the real engines: latest-wins, wait_all,
message counts (tests/star_cases.py, one launch per scenario and engine).

Parameter sizes: 4675 floats is CartPole's default actor-critic (--hidden 64), 1000 floats a
small model. Under MPI a message that small would go eagerly (MPICH copies it out and
completes the send before the receiver asked for it), so StarPublisher sends synchronously
(Issend): the small cases check that latest-wins and wait_all still hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from archzoo.comm.base import Request
from archzoo.comm.loopback import LoopbackGroup
from archzoo.topology.star import StarPublisher, params_schema
from tests import star_cases
from tests.mp import describe, run_gloo, run_mpi

HERE = Path(__file__).resolve().parent
CARTPOLE_AC = 4675  # parameters of ActorCritic((4,), 2, hidden=64)
SMALL = 1000


def launch(engine: str, n_ranks: int, scenario: str, n_params: int) -> list[dict]:
    argv = [str(HERE / "star_cases.py"), engine, scenario, str(n_params)]
    if engine == "gloo":
        ranks = run_gloo(n_ranks, argv, timeout_s=90, fail_fast_s=10)
        report = describe(ranks)
        assert all(r.ok for r in ranks), report
    else:
        ranks = run_mpi(n_ranks, argv, timeout_s=90)
        report = describe(ranks)
        assert ranks.returncode == 0 and all(r.returncode == 0 for r in ranks), report
    out = []
    for r in ranks:
        lines = [ln for ln in r.lines() if ln.startswith("RESULT ")]
        assert len(lines) == 1, report
        out.append(json.loads(lines[0][len("RESULT "):]))
    return out


def _check_leaves_and_counts(res: list[dict], last: int) -> None:
    """Every leaf took increasing versions ending with the newest, each with its own
    parameters; what the root's publisher counted it sent is what the transports counted
    it sent to each leaf and what each leaf's transport counted it received."""
    root, leaves = res[0], res[1:]
    for i, leaf in enumerate(leaves, start=1):
        v = leaf["versions"]
        assert v[-1] == last and v == sorted(set(v)), (i, v)
        assert leaf["bad_params"] == [], (i, leaf["bad_params"])
    sent = {int(p): c for p, c in root["sent_per_leaf"].items()}
    assert sent.keys() == set(range(1, len(res)))
    assert root["messages"] == sum(len(leaf["versions"]) for leaf in leaves)
    for i, leaf in enumerate(leaves, start=1):
        go = 1 if root["timed_out_on"] and i == 1 else 0  # the timeout case's "go" message
        assert leaf["received"] == len(leaf["versions"]) + go, (i, leaf)
        assert sent[i] == leaf["received"], (i, sent[i], leaf)


LATEST_CASES = [("gloo", SMALL), ("gloo", CARTPOLE_AC), ("mpi", CARTPOLE_AC),
                ("mpi", SMALL)]


@pytest.mark.parametrize("engine,n_params", LATEST_CASES)
def test_latest_wins_slow_leaf_skips_versions(engine: str, n_params: int) -> None:
    """40 versions published 3 ms apart without waiting; the last of 3 leaves holds each
    message 50 ms. It must skip versions, not queue them: after each message it holds it can
    get the one already in flight and then the newest, so at most 2 per hold period."""
    res = launch(engine, 4, "latest", n_params)
    _check_leaves_and_counts(res, star_cases.K)
    slow = res[-1]
    assert slow["slow"] and not any(leaf["slow"] for leaf in res[1:-1])
    holds = res[0]["publish_s"] / star_cases.SLOW_HOLD_S + 1
    assert len(slow["versions"]) <= 2 * holds + 1, (res[0]["publish_s"], slow["versions"])


@pytest.mark.parametrize("engine,n_params", [("gloo", CARTPOLE_AC), ("mpi", CARTPOLE_AC),
                                             ("mpi", SMALL)])
def test_wait_all_after_each_publish_delivers_every_version(engine: str, n_params: int) -> None:
    """IMPALA's sync mode: publish, wait_all, repeat; every leaf sees 1..K in order."""
    res = launch(engine, 3, "sync", n_params)
    _check_leaves_and_counts(res, star_cases.K)
    for leaf in res[1:]:
        assert leaf["versions"] == list(range(1, star_cases.K + 1))
    assert res[0]["messages"] == star_cases.K * 2


@pytest.mark.parametrize("engine,n_params", [("gloo", SMALL), ("mpi", CARTPOLE_AC),
                                             ("mpi", SMALL)])
def test_wait_all_waits_for_a_leaf_that_has_not_taken_it(engine: str, n_params: int) -> None:
    """A leaf with no receive posted: wait_all(timeout_s=1) raises PeerTimeout naming it;
    once the leaf takes the message every leaf ends with the version."""
    res = launch(engine, 3, "timeout", n_params)
    assert res[0]["timed_out_on"] is not None and "rank 1" in res[0]["timed_out_on"], res[0]
    _check_leaves_and_counts(res, 1)
    assert res[0]["messages"] == 2


class _TakenBetweenTests(Request):
    """A pending send whose leaf takes the message right after the first test() said "not
    yet": the order in which pump's test and wait_all's own test can see one send."""

    def __init__(self, inner: Request, take: Callable[[], None]) -> None:
        self.inner, self.take, self.peer, self.what = inner, take, inner.peer, inner.what
        self.direction, self.tests = "to", 0

    def test(self) -> bool:
        self.tests += 1
        done = self.inner.test()
        if self.tests == 1:
            self.take()
        return done


def test_wait_all_sends_the_newest_to_a_leaf_whose_old_send_completes_meanwhile() -> None:
    """Version 1 is in flight to the leaf when version 2 is published, so the leaf is stale.
    The leaf takes version 1 between pump's test (not complete: stays stale) and wait_all's
    check of what is pending (complete). wait_all must still send version 2, not return."""
    group = LoopbackGroup(2, timeout_s=10)
    root, leaf = group.transports
    schema = params_schema(8)
    pub = StarPublisher(root, schema, [1], star_cases.TAG)
    pub.publish(params=np.full(8, 1.0, np.float32), version=1)
    pub.publish(params=np.full(8, 2.0, np.float32), version=2)
    got = [schema.new(), schema.new()]
    recvs: list[Request] = []

    def take() -> None:
        recvs.extend(leaf.irecv(m.buffer, 0, star_cases.TAG, "parameters") for m in got)

    first = pub._req[1]
    assert first is not None and not first.test()
    pub._req[1] = _TakenBetweenTests(first, take)
    pub.wait_all(timeout_s=5)
    assert recvs[0].test() and int(got[0]["version"]) == 1
    assert recvs[1].test(), "wait_all returned with the leaf's newest version never sent"
    assert int(got[1]["version"]) == 2 and pub.messages == 2
