"""The loopback engine (archzoo/comm/loopback.py): the transport cases that gloo and MPI pass
(tests/comm_cases.py) run on it as threads of this process, under MPI's eager sends and
under gloo's rendezvous; its deadlines pass on a clock that the test moves; a rank that is
gone fails what its peers have pending with it, naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from archzoo.comm import CommError, ControlChannel, Inbox, PeerFailure, PeerTimeout, Schema
from archzoo.comm.loopback import Killed, LoopbackGroup, ManualClock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import comm_cases  # noqa: E402  (tests/ is on the path only from here on)


@pytest.mark.parametrize("rendezvous", [False, True], ids=["eager", "rendezvous"])
@pytest.mark.parametrize("name", comm_cases.CASE_NAMES)
def test_the_transport_cases_of_the_engines(name: str, rendezvous: bool) -> None:
    """Each case on 3 ranks, then a barrier (as tests/mp.py's run_cases keeps them apart)."""
    case = dict(comm_cases.CASES)[name]
    group = LoopbackGroup(3, timeout_s=comm_cases.TIMEOUT_S, rendezvous=rendezvous)

    def role(t) -> None:
        case(t, 100)
        t.barrier()

    group.run({r: role for r in range(3)}, timeout_s=60)


# -- the clock -----------------------------------------------------------------------------
def test_a_deadline_passes_when_the_clock_is_moved_past_it() -> None:
    clock = ManualClock(start=5.0)
    group = LoopbackGroup(2, clock=clock, timeout_s=60)
    waiter = group.start(0, lambda t: t.recv(np.zeros(2), 1, 7, "the reply"))
    group.settle(0)
    clock.advance(59.9)
    group.settle(0)  # it looked at the clock at 64.9: not yet
    assert waiter.is_alive()
    clock.advance(0.2)
    e = waiter.failure()
    assert isinstance(e, PeerTimeout) and (e.rank, e.peer, e.what) == (0, 1, "the reply")
    assert str(e) == "rank 0: timed out after 60s waiting for the reply from rank 1"
    assert group.transports[0].wait_s == pytest.approx(60.1)  # waits are timed on the clock


def test_a_wait_whose_deadline_has_come_ends_on_a_stopped_clock() -> None:
    """A wait of 0 s (what is left of a deadline that has come) ends at once, also while the
    clock stands still: handshake_root's wait for the last leaf, after a late HELLO of
    another, hung on it (the deadline passed only once the clock moved past it)."""
    group = LoopbackGroup(2, clock=ManualClock(start=3.0), timeout_s=60)
    waiter = group.start(0, lambda t: t.recv(np.zeros(2), 1, 7, "the reply", timeout_s=0.0))
    e = waiter.failure()
    assert isinstance(e, PeerTimeout) and (e.peer, e.what) == (1, "the reply"), repr(e)


def _timed_out(world: int, rank: int, role, timeout_s: float) -> str:
    """What ``role`` on ``rank`` raises once the clock passes ``timeout_s``; the other ranks
    stay silent."""
    clock = ManualClock()
    group = LoopbackGroup(world, clock=clock, timeout_s=timeout_s)
    waiting = group.start(rank, role)
    group.settle(rank)
    clock.advance(timeout_s + 0.5)
    e = waiting.failure()
    assert isinstance(e, PeerTimeout), repr(e)
    return str(e)


def test_every_wait_names_whom_it_waited_for() -> None:
    def any_of(t) -> None:
        t.wait_any([t.irecv(np.zeros(1), 1, 3, "an unroll"), t.irecv(np.zeros(1), 2, 3,
                                                                    "a sample")])

    assert _timed_out(3, 0, any_of, 10) == ("rank 0: timed out after 10s waiting for a "
                                            "sample or an unroll from rank 1,2")
    def untaken(t) -> None:
        t.wait(t.isend(np.ones(4), 0, 4, "the parameters", synchronous=True))

    assert _timed_out(2, 1, untaken, 3) == (
        "rank 1: timed out after 3s waiting for rank 0 to take the parameters")
    assert _timed_out(3, 2, lambda t: t.barrier(), 4) == (
        "rank 2: timed out after 4s waiting for barrier from rank any")
    inbox = _timed_out(2, 0, lambda t: Inbox(t, Schema("u", [("x", np.float32, (3,))]), [1], 5,
                                             what="rollout").recv_from(1), 6)
    assert inbox == "rank 0: timed out after 6s waiting for rollout from rank 1"


# -- dead ranks ----------------------------------------------------------------------------
def test_a_dead_rank_fails_what_waits_on_it_and_its_last_messages_stay() -> None:
    group = LoopbackGroup(3)
    t0, t1, t2 = group.transports
    last = t2.isend(np.full(3, 7, np.int64), 1, 5, "its last unroll")  # eager: complete
    pending = t0.irecv(np.zeros(3, np.int64), 2, 5, "an unroll")
    assert last.test() and not pending.test()
    group.kill(2, "killed by the test")
    with pytest.raises(PeerFailure) as e:
        pending.test()
    assert (e.value.peer, str(e.value)) == (2, "rank 0: rank 2 failed during an unroll: "
                                               "killed by the test")
    got = np.zeros(3, np.int64)
    t1.wait(t1.irecv(got, 2, 5, "an unroll"), timeout_s=1)  # sent before it died
    assert got.tolist() == [7, 7, 7]
    for req in (t1.irecv(got, 2, 5, "the next unroll"), t0.isend(got, 2, 6, "parameters"),
                t0._ibarrier()):
        with pytest.raises(PeerFailure, match="rank 2 failed during"):
            req.test()
    with pytest.raises(Killed, match="rank 2: this rank is gone"):
        t2.isend(got, 0, 5).test()


def test_a_rank_whose_thread_raises_is_gone_naming_why() -> None:
    group = LoopbackGroup(2)
    waiting = group.start(0, lambda t: t.recv(np.zeros(1), 1, 9, "a reply", timeout_s=30))

    def crash(t) -> None:
        raise RuntimeError("the env crashed")

    group.start(1, crash)
    assert str(waiting.failure()) == ("rank 0: rank 1 failed during a reply: its thread "
                                      "ended with RuntimeError: the env crashed")
    assert isinstance(group.threads[1].failure(), RuntimeError)


def test_a_dead_peer_reaches_a_control_channel_poll() -> None:
    """Messages taken before the death come back; the failure follows on the next poll."""
    group = LoopbackGroup(2)
    t0, t1 = group.transports
    root, leaf = ControlChannel(t0, [1], 1), ControlChannel(t1, [0], 1)
    leaf.send(0, {"type": "bye"})
    group.kill(1)
    assert root.poll() == [(1, {"type": "bye"})]
    with pytest.raises(PeerFailure, match="rank 1 failed during control message"):
        root.poll()


# -- matching ------------------------------------------------------------------------------
def test_sends_complete_eagerly_or_at_the_rendezvous() -> None:
    for rendezvous in (False, True):
        group = LoopbackGroup(2, rendezvous=rendezvous)
        t0, t1 = group.transports
        data = np.arange(4.0)
        eager = t0.isend(data, 1, 2)
        sync = t0.isend(data, 1, 3, synchronous=True)
        assert eager.test() is not rendezvous and not sync.test()
        data[:] = -1  # an eager send copied its bytes; a rendezvous one reads them later
        a, b = np.zeros(4), np.zeros(4)
        t1.wait(t1.irecv(a, 0, 2), 1)
        t1.wait(t1.irecv(b, 0, 3), 1)
        assert eager.test() and sync.test()
        assert a.tolist() == ([-1.0] * 4 if rendezvous else [0.0, 1.0, 2.0, 3.0])
        assert b.tolist() == [-1.0] * 4


def test_a_message_of_the_wrong_size_fails_both_sides() -> None:
    group = LoopbackGroup(2)
    t0, t1 = group.transports
    recv = t1.irecv(np.zeros(3), 0, 1, "a batch")
    send = t0.isend(np.zeros(4), 1, 1, "a batch")
    for req in (recv, send):
        with pytest.raises(CommError, match="a 32 B message from rank 0 .* receive of 24 B"):
            req.test()


def test_a_withdrawn_receive_takes_nothing() -> None:
    group = LoopbackGroup(2)
    t0, t1 = group.transports
    first, second = np.zeros(1), np.zeros(1)
    withdrawn = t1.irecv(first, 0, 1)
    withdrawn.cancel()
    kept = t1.irecv(second, 0, 1)
    t0.send(np.ones(1), 1, 1)
    assert kept.test() and second[0] == 1 and first[0] == 0
    assert t1.counters.totals()["msgs_recv"] == 1


def test_ranks_that_call_different_collectives_fail() -> None:
    group = LoopbackGroup(2)
    a = group.transports[0]._iallreduce(np.ones(2), "sum")
    b = group.transports[1]._ibroadcast(np.ones(2), 0)
    for req in (a, b):
        with pytest.raises(CommError, match="collective #0"):
            req.test()


def test_one_thread_can_drive_every_rank() -> None:
    """Nothing blocks but a wait: a test may step several ranks in turn itself."""
    group = LoopbackGroup(3)
    schema = Schema("x", [("v", np.int64, ())])
    inbox = Inbox(group.transports[0], schema, [1, 2], 4)
    for r in (2, 1):
        m = schema.new()
        m["v"][...] = r
        group.transports[r].send(m.buffer, 0, 4)
    assert inbox.ready() == [1, 2] and int(inbox.poll(2)["v"]) == 2
