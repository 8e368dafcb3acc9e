"""Every transport case in one launch: run on each rank, ``python tests/comm_cases.py gloo|mpi``.

Start it as ≥3 ranks (tests/mp.py: ``run_gloo`` or ``run_mpi``). Each case prints one line
(tests/mp.py's ``run_cases``)
``CASE <name> OK (<seconds>s)`` or ``CASE <name> FAIL: <error>`` (plus a traceback); the
process exits 0 only if every case passed on this rank. Cases use disjoint tags and are
separated by barriers, so a failing case does not feed stray messages to the next one; if a
barrier itself fails the ranks are out of step and the run stops (exit 1).
"""

from __future__ import annotations

import sys
import time
from functools import partial

import numpy as np
from mp import log, rank_exit, run_cases

from archzoo.comm import (
    ControlChannel,
    Inbox,
    Message,
    PeerTimeout,
    Schema,
    SchemaMismatch,
    Transport,
)
from archzoo.comm.factory import detect_launch, make_transport

TIMEOUT_S = 20.0  # every wait below has this deadline unless a case says otherwise


def peers_of(t: Transport) -> list[int]:
    return [p for p in range(t.world_size) if p != t.rank]


def ring(t: Transport) -> tuple[int, int]:
    """(left, right): this rank receives from left and sends to right."""
    return (t.rank - 1) % t.world_size, (t.rank + 1) % t.world_size


# -- tagged messages -----------------------------------------------------------------------------
def case_tagged(t: Transport, tag: int) -> None:
    """Two tags from the same peer, sent interleaved A0 B0 A1 B1 ..., received all-B-then-A."""
    a, b = tag, tag + 1
    left, right = ring(t)
    n = 5
    keep, sends = [], []
    for i in range(n):
        for tg in (a, b):
            buf = np.array([tg, i, t.rank], np.int64)
            keep.append(buf)
            sends.append(t.isend(buf, right, tg, f"tag {tg} #{i}"))
    for tg in (b, a):
        for i in range(n):
            got = np.full(3, -1, np.int64)
            t.recv(got, left, tg, f"tag {tg} #{i}", timeout_s=TIMEOUT_S)
            assert got.tolist() == [tg, i, left], (tg, i, got.tolist())
    for r in sends:
        t.wait(r, TIMEOUT_S)
    # Same again with both receives posted before either message is looked at.
    ra, rb = np.zeros(2, np.float64), np.zeros(2, np.float64)
    qa, qb = t.irecv(ra, left, a, "tag a"), t.irecv(rb, left, b, "tag b")
    sa, sb = np.array([1.5, left + 0.0]), np.array([2.5, left + 0.0])
    mine_a, mine_b = np.array([1.5, t.rank + 0.0]), np.array([2.5, t.rank + 0.0])
    s1, s2 = t.isend(mine_b, right, b, "tag b"), t.isend(mine_a, right, a, "tag a")
    t.wait(qb, TIMEOUT_S)
    t.wait(qa, TIMEOUT_S)
    t.wait(s1, TIMEOUT_S)
    t.wait(s2, TIMEOUT_S)
    assert np.array_equal(ra, sa) and np.array_equal(rb, sb), (ra, rb)


# -- receive from any of several peers -----------------------------------------------------------
ANY_SCHEMA = Schema("any", [("src", np.int64, ()), ("seq", np.int64, ()),
                            ("payload", np.float32, (16,))])


def _next_ready(t: Transport, inbox: Inbox) -> int:
    """The first peer of ``inbox.ready()`` once one has a message (a root's loop), under
    the case's deadline."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (ready := inbox.ready()):
        assert time.monotonic() < deadline, f"no message from {inbox.peers} in {TIMEOUT_S}s"
        t.idle(1e-3)
    return ready[0]


def case_from_any_peer(t: Transport, tag: int) -> None:
    """Every rank sends K messages to every other; an Inbox's ready() gives each exactly
    once, in order per peer."""
    k = 25
    peers = peers_of(t)
    inbox = Inbox(t, ANY_SCHEMA, peers, tag, depth=2, what="any-test message")
    sends = []
    for i in range(k):
        for p in peers:
            m = ANY_SCHEMA.new()
            m["src"][...] = t.rank
            m["seq"][...] = i
            m["payload"][:] = t.rank * 1000 + i + np.arange(16, dtype=np.float32) / 16
            sends.append((m, t.isend(m.buffer, p, tag, "any-test message")))
    seen: dict[int, list[int]] = {p: [] for p in peers}
    for _ in range(k * len(peers)):
        p = _next_ready(t, inbox)
        m = inbox.poll(p)
        inbox.advance(p)  # round robin: the next scan starts after p
        assert p in seen, p
        assert int(m["src"]) == p, (p, int(m["src"]))
        seq = int(m["seq"])
        expect = p * 1000 + seq + np.arange(16, dtype=np.float32) / 16
        assert np.array_equal(m["payload"], expect), (p, seq)
        seen[p].append(seq)
        inbox.release(p)
    for p in peers:
        assert seen[p] == list(range(k)), (p, seen[p])  # exactly once, in order per peer
    for _, r in sends:
        t.wait(r, TIMEOUT_S)
    assert inbox.ready() == [], "a message arrived that nobody sent"
    assert all(inbox.poll(p) is None for p in peers)


# -- non-blocking requests -----------------------------------------------------------------------
def case_nonblocking(t: Transport, tag: int) -> None:
    """Several outstanding irecv/isend; test() is False before a match; wait_any/wait finish."""
    left, right = ring(t)
    n = 4
    go = tag + 10
    rbufs = [np.full(1000 + 7 * i, -1, np.int32) for i in range(n)]
    rreqs = [t.irecv(rbufs[i], left, tag + i, f"nb #{i}") for i in range(n)]
    # left sends nothing before our "go", so none of these can be complete yet
    time.sleep(0.05)
    assert not any(r.test() for r in rreqs), "receive completed before anything was sent"
    go_out = np.array([t.rank], np.int64)
    go_req = t.isend(go_out, left, go, "go")
    go_in = np.zeros(1, np.int64)
    t.recv(go_in, right, go, "go", timeout_s=TIMEOUT_S)
    assert int(go_in[0]) == right
    sbufs = [np.arange(1000 + 7 * i, dtype=np.int32) * (t.rank + 1) for i in range(n)]
    sreqs = [t.isend(sbufs[i], right, tag + i, f"nb #{i}") for i in reversed(range(n))]
    pending = list(range(n))
    order = []
    while pending:
        j = t.wait_any([rreqs[i] for i in pending], TIMEOUT_S)
        i = pending.pop(j)
        assert rreqs[i].test(), "wait_any returned an incomplete request"
        order.append(i)
    assert sorted(order) == list(range(n))
    for i in range(n):
        assert rreqs[i].test()  # stays complete
        assert np.array_equal(rbufs[i], np.arange(1000 + 7 * i, dtype=np.int32) * (left + 1)), i
    for r in sreqs:
        t.wait(r, TIMEOUT_S)
        assert r.test()
    t.wait(go_req, TIMEOUT_S)


# -- schema round trips --------------------------------------------------------------------------
ROUND_TRIP_SCHEMAS = [
    Schema("mixed", [
        ("u8", np.uint8, (13,)),           # odd size: the next field must be realigned
        ("f32", np.float32, (3, 4, 5)),
        ("f64", np.float64, ()),
        ("i64", np.int64, (7,)),
        ("empty", np.float32, (0,)),       # zero-length field
        ("i32", np.int32, (2, 3, 2)),
        ("flag", np.bool_, (5,)),
        ("s_i32", np.int32, ()),
        ("s_bool", np.bool_, ()),
        ("f64_3d", np.float64, (2, 1, 3)),
    ]),
    Schema("scalar", [("x", np.int64, ())]),
    Schema("only_empty", [("nothing", np.float64, (0, 4))]),
]


def fill_random(msg: Message, seed: int) -> dict[str, bytes]:
    """Random bit patterns in every field (NaN payloads, infs, denormals included)."""
    rng = np.random.default_rng(seed)
    expect = {}
    for name, f in msg.schema.fields.items():
        raw = rng.integers(0, 256, size=f.nbytes, dtype=np.uint8)
        if f.dtype == np.bool_:
            raw %= 2
        off = msg.schema.offsets[name]
        msg.buffer[off:off + f.nbytes] = raw  # written through the buffer ...
        expect[name] = raw.tobytes()
        assert msg[name].tobytes() == expect[name], name  # ... visible through the view
    return expect


def check_views(msg: Message) -> None:
    """Every field is a view into ``msg.buffer`` at its offset (zero copy)."""
    base = msg.buffer.__array_interface__["data"][0]
    for name, f in msg.schema.fields.items():
        v = msg[name]
        assert v.shape == f.shape and v.dtype == f.dtype, (name, v.shape, v.dtype)
        assert not v.flags.owndata, name
        if f.nbytes:
            assert np.shares_memory(v, msg.buffer), name
            assert v.__array_interface__["data"][0] == base + msg.schema.offsets[name], name
            assert v.__array_interface__["data"][0] % min(8, f.dtype.alignment) == 0, name


def case_schema_round_trip(t: Transport, tag: int) -> None:
    peers = peers_of(t)
    for si, schema in enumerate(ROUND_TRIP_SCHEMAS):
        mtag = tag + si
        inbox = Inbox(t, schema, peers, mtag, depth=1)
        outs = []
        for p in peers:
            m = schema.new()
            check_views(m)
            fill_random(m, seed=1000 * si + 10 * t.rank + p)
            outs.append((m, t.isend(m.buffer, p, mtag, schema.name)))
        for p in peers:
            m = inbox.recv_from(p, TIMEOUT_S)
            check_views(m)
            expect = fill_random(schema.new(), seed=1000 * si + 10 * p + t.rank)
            for name in schema.fields:
                assert m[name].tobytes() == expect[name], (schema.name, name, p)
            # a write through a view lands in the posted buffer itself
            for name, f in schema.fields.items():
                if f.nbytes and f.dtype != np.bool_:
                    m[name].reshape(-1)[0] = 7
                    off = schema.offsets[name]
                    got = m.buffer[off:off + f.dtype.itemsize].view(f.dtype)[0]
                    assert got == 7, (schema.name, name)
            inbox.release(p)
        for _, r in outs:
            t.wait(r, TIMEOUT_S)
    # a Message refuses a buffer of the wrong size or type
    s = ROUND_TRIP_SCHEMAS[0]
    for bad in (np.zeros(s.nbytes + 8, np.uint8), np.zeros(s.nbytes // 8, np.int64)):
        try:
            Message(s, bad)
        except ValueError:
            continue
        raise AssertionError("Message accepted a wrong buffer")


# -- schema digest -------------------------------------------------------------------------------
BASE_FIELDS = [("obs", np.float32, (4, 3)), ("action", np.int64, ()), ("done", np.bool_, (2,))]


def case_schema_digest(t: Transport, tag: int) -> None:
    d = Schema("rollout", BASE_FIELDS).digest()
    assert d == Schema("rollout", list(BASE_FIELDS)).digest()
    assert d == Schema("rollout", [("obs", "float32", [4, 3]), ("action", "int64", ()),
                                   ("done", "bool", 2)]).digest()
    variants = {
        "dtype": [("obs", np.float64, (4, 3)), *BASE_FIELDS[1:]],
        "shape": [("obs", np.float32, (3, 4)), *BASE_FIELDS[1:]],
        "extra dim": [("obs", np.float32, (4, 3, 1)), *BASE_FIELDS[1:]],
        "name": [("observation", np.float32, (4, 3)), *BASE_FIELDS[1:]],
        "order": [BASE_FIELDS[1], BASE_FIELDS[0], BASE_FIELDS[2]],
        "missing": BASE_FIELDS[:2],
    }
    digests = {d}
    for why, fields in variants.items():
        dv = Schema("rollout", fields).digest()
        assert dv != d, f"digest unchanged when the {why} changes"
        digests.add(dv)
    assert len(digests) == len(variants) + 1
    assert Schema("other", BASE_FIELDS).digest() != d

    # Across ranks: the last rank derives a different layout; rank 0 collects the digests over
    # the control channel, names the odd one out, and tells everyone.
    odd = t.world_size - 1
    fields = variants["dtype"] if t.rank == odd else BASE_FIELDS
    mine = Schema("rollout", fields).digest()
    if t.rank == 0:
        cc = ControlChannel(t, peers_of(t), tag)
        got = {p: cc.recv_from(p, TIMEOUT_S) for p in peers_of(t)}
        assert all(got[p]["schema"] == "rollout" for p in got)
        mismatched = sorted(p for p in got if got[p]["digest"] != mine)
        err = SchemaMismatch(f"ranks {mismatched} disagree with rank 0 on schema 'rollout'")
        for p in peers_of(t):
            cc.send(p, {"mismatched": mismatched, "error": str(err)})
        cc.flush(TIMEOUT_S)
    else:
        cc = ControlChannel(t, [0], tag)
        cc.send(0, {"schema": "rollout", "digest": mine})
        cc.flush(TIMEOUT_S)
        mismatched = cc.recv_from(0, TIMEOUT_S)["mismatched"]
    assert mismatched == [odd], mismatched


# -- control channel -----------------------------------------------------------------------------
def control_obj(src: int, dst: int) -> dict:
    return {"kind": "stats", "from": src, "to": dst, "floats": [0.1, 1e300, -2.5e-300, 3.0],
            "nested": {"a": [1, {"b": None}], "t": True, "f": False}, "text": "héllo ✓ 日本",
            "big": 2**62 + src, "empty": {}}


def case_control(t: Transport, tag: int) -> None:
    peers = peers_of(t)
    cc = ControlChannel(t, peers, tag)
    for p in peers:
        cc.send(p, control_obj(t.rank, p))
    # collect with poll() (non-blocking) until every peer's message is in
    got: dict[int, dict] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < len(peers):
        for p, obj in cc.poll():
            assert p not in got, f"two control messages from {p}"
            got[p] = obj
        assert time.monotonic() < deadline, f"control messages missing from {set(peers) - set(got)}"
        time.sleep(0.001)
    cc.flush(TIMEOUT_S)
    for p in peers:
        assert got[p] == control_obj(p, t.rank), (p, got[p])

    # capacity is in bytes of UTF-8 JSON: exactly full passes, one byte more is refused
    small = ControlChannel(t, peers, tag + 1, capacity=64)
    left, right = ring(t)
    exact = {"x": "a" * 56}  # '{"x":"' + 56 + '"}' = 64 bytes
    for too_big in ({"x": "a" * 57}, {"x": "é" * 40}):  # 40 chars, 86 bytes
        try:
            small.send(right, too_big)
        except ValueError as e:
            assert "exceeds" in str(e), e
        else:
            raise AssertionError(f"oversize control message accepted: {too_big}")
    try:
        cc.send(right, {"blob": "z" * 9000})
    except ValueError:
        pass
    else:
        raise AssertionError("9000-byte message accepted by an 8192-byte channel")
    small.send(right, exact)
    assert small.recv_from(left, TIMEOUT_S) == exact
    small.flush(TIMEOUT_S)


# -- counters ------------------------------------------------------------------------------------
def _n_msgs(src: int, dst: int) -> int:
    return (src + 2 * dst) % 3 + 1


def _size(src: int, dst: int, k: int) -> int:
    return 8 * (src + 1) + 24 * k + 3 * dst + 1  # bytes; deliberately not multiples of 8


def _snapshot(t: Transport) -> dict[str, dict[int, int]]:
    c = t.counters
    return {k: dict(getattr(c, k)) for k in ("msgs_sent", "bytes_sent", "msgs_recv", "bytes_recv")}


def case_counters(t: Transport, tag: int) -> None:
    peers, w, me = peers_of(t), t.world_size, t.rank
    before = _snapshot(t)
    sends, recvs = [], []
    for p in peers:
        for k in range(_n_msgs(me, p)):
            buf = np.full(_size(me, p, k), me, np.uint8)
            sends.append((buf, t.isend(buf, p, tag, "counted message")))
        for k in range(_n_msgs(p, me)):
            buf = np.zeros(_size(p, me, k), np.uint8)
            recvs.append((p, buf, t.irecv(buf, p, tag, "counted message")))
    for p, buf, r in recvs:
        t.wait(r, TIMEOUT_S)
        assert (buf == p).all()
    for _, r in sends:
        t.wait(r, TIMEOUT_S)
    after = _snapshot(t)

    def delta(kind: str, p: int) -> int:
        return after[kind].get(p, 0) - before[kind].get(p, 0)

    for p in peers:
        exp = {
            "msgs_sent": _n_msgs(me, p),
            "bytes_sent": sum(_size(me, p, k) for k in range(_n_msgs(me, p))),
            "msgs_recv": _n_msgs(p, me),
            "bytes_recv": sum(_size(p, me, k) for k in range(_n_msgs(p, me))),
        }
        got = {kind: delta(kind, p) for kind in exp}
        assert got == exp, (p, got, exp)
    assert me not in after["msgs_sent"] and me not in after["msgs_recv"]
    # and every rank's view agrees: what i sent to j is what j received from i
    sent = np.zeros((w, w), np.int64)
    recv = np.zeros((w, w), np.int64)
    for p in peers:
        sent[me, p] = after["bytes_sent"].get(p, 0)
        recv[p, me] = after["bytes_recv"].get(p, 0)
    t.all_reduce(sent, "sum", TIMEOUT_S)
    t.all_reduce(recv, "sum", TIMEOUT_S)
    # earlier cases left posted receives that were never matched; those count nothing, so the
    # whole-run totals must agree as well
    assert np.array_equal(sent, recv), (sent, recv)


# -- deadline ------------------------------------------------------------------------------------
DEADLINE_SCHEMA = Schema("rollout", [("x", np.float32, (8,))])


def _expect_timeout(t: Transport, fn, timeout_s: float, names: list[str]) -> PeerTimeout:
    """``fn()`` raises PeerTimeout naming ``names``, not before ``timeout_s``; the line
    ``DEADLINE <timeout_s> raised after <s>s`` is for test_comm's timing test, which bounds
    how late."""
    t0 = time.perf_counter()
    try:
        fn()
    except PeerTimeout as e:
        el = time.perf_counter() - t0
        log(t, f"DEADLINE {timeout_s:g} raised after {el:.3f}s")
        assert el >= timeout_s * 0.99, f"raised after {el:.2f}s, before its {timeout_s}s"
        msg = str(e)
        for s in names:
            assert s in msg, f"{s!r} not in {msg!r}"
        return e
    raise AssertionError("no PeerTimeout")


def case_deadline(t: Transport, tag: int) -> None:
    """Rank 0 waits on the last rank, which stays silent: PeerTimeout names it and the wait."""
    silent = t.world_size - 1
    if t.rank != 0:
        return
    buf = np.zeros(4, np.int64)
    e = _expect_timeout(t, lambda: t.recv(buf, silent, tag, "the silent reply", timeout_s=1.0),
                        1.0, [f"rank {silent}", "the silent reply", "rank 0"])
    assert e.peer == silent and e.rank == 0 and e.what == "the silent reply", vars(e)

    inbox = Inbox(t, DEADLINE_SCHEMA, [silent], tag + 1, what="rollout")
    _expect_timeout(t, lambda: inbox.recv_from(silent, timeout_s=0.5), 0.5,
                    [f"rank {silent}", "rollout"])
    msgs = [DEADLINE_SCHEMA.new() for _ in peers_of(t)]
    reqs = [t.irecv(m.buffer, p, tag + 2, "rollout") for m, p in zip(msgs, peers_of(t),
                                                                     strict=True)]
    e = _expect_timeout(t, lambda: t.wait_any(reqs, timeout_s=0.5), 0.5, ["rollout"])
    assert str(e.peer) == ",".join(map(str, peers_of(t))), e.peer
    ticks = []
    _expect_timeout(t, lambda: t.wait(t.irecv(buf, 1, tag + 3, "a tick"), 0.3,
                                      on_poll=lambda: ticks.append(1)), 0.3,
                    ["rank 1", "a tick"])
    assert len(ticks) > 3, "on_poll was not called while waiting"


# -- native collectives --------------------------------------------------------------------------
def _rank_data(r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + r)
    ints = rng.integers(-10**12, 10**12, size=(4, 5), dtype=np.int64)
    f32 = rng.integers(-4096, 4096, size=(3, 7)).astype(np.float32) / 8  # exact sums
    f64 = rng.standard_normal(33)
    return ints, f32, f64


def case_collectives(t: Transport, tag: int) -> None:
    w = t.world_size
    all_data = [_rank_data(r) for r in range(w)]
    for i, ref_dtype in enumerate(("int64", "float32", "float64")):
        stack = np.stack([d[i] for d in all_data])
        assert stack.dtype == ref_dtype
        for op, ref in (("sum", stack.sum(0)), ("max", stack.max(0)), ("min", stack.min(0))):
            a = all_data[t.rank][i].copy()
            t.all_reduce(a, op, TIMEOUT_S)
            assert a.dtype == ref.dtype and a.shape == ref.shape
            if ref_dtype == "float64" and op == "sum":
                assert np.allclose(a, ref, rtol=1e-12, atol=1e-12), (op, ref_dtype)
            else:
                assert np.array_equal(a, ref), (op, ref_dtype, a, ref)
    try:
        t.all_reduce(np.zeros(2), "prod")
    except ValueError:
        pass
    else:
        raise AssertionError("unknown reduction accepted")
    for root in range(w):
        ref = np.arange(1000, dtype=np.float64).reshape(10, 100) * (root + 1) + 0.25
        a = ref.copy() if t.rank == root else np.full_like(ref, -1.0)
        t.broadcast(a, root, TIMEOUT_S)
        assert np.array_equal(a, ref), root
        b = np.full(17, root, np.int32) if t.rank == root else np.zeros(17, np.int32)
        t.broadcast(b, root, TIMEOUT_S)
        assert (b == root).all()


# -- barrier -------------------------------------------------------------------------------------
def case_barrier(t: Transport, tag: int) -> None:
    """Nobody leaves a barrier before everyone entered it."""
    late = t.world_size - 1
    for round_ in range(3):
        if t.rank == (late + round_) % t.world_size:
            time.sleep(0.3)
        enter = np.array([time.time()])
        t0 = time.perf_counter()
        t.barrier(TIMEOUT_S)
        left = time.time()
        waited = time.perf_counter() - t0
        t.all_reduce(enter, "max", TIMEOUT_S)
        assert left >= enter[0], f"left the barrier {enter[0] - left:.4f}s before the last entered"
        if t.rank != (late + round_) % t.world_size:
            assert waited >= 0.2, f"barrier returned after {waited:.3f}s, the late rank slept 0.3s"


CASES = [
    ("tagged", case_tagged),
    ("from_any_peer", case_from_any_peer),
    ("nonblocking", case_nonblocking),
    ("schema_round_trip", case_schema_round_trip),
    ("schema_digest", case_schema_digest),
    ("control", case_control),
    ("counters", case_counters),
    ("deadline", case_deadline),
    ("collectives", case_collectives),
    ("barrier", case_barrier),
]
CASE_NAMES = [name for name, _ in CASES]


def main() -> int:
    """``comm_cases.py ENGINE [CASE ...]``: every case, or those named."""
    t = make_transport(sys.argv[1], detect_launch(), timeout_s=TIMEOUT_S)
    assert t.world_size >= 3, "run comm_cases.py with at least 3 ranks"
    cases = [(n, fn) for n, fn in CASES if n in sys.argv[2:] or len(sys.argv) == 2]
    code = run_cases(t, [(name, partial(fn, t)) for name, fn in cases], TIMEOUT_S,
                     lambda: f"counters {t.counters.totals()}")
    t.shutdown()
    return code


if __name__ == "__main__":
    rank_exit(main)
