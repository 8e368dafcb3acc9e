"""Tests of archzoo.comm: every transport case on both real engines, a dead peer on each,
and single-process unit tests of Schema/Message and launcher detection.

The multi-process tests launch real ranks (tests/mp.py): gloo on loopback, MPI under the venv's
``mpiexec``. All the point-to-point and collective cases run in one launch per engine
(tests/comm_cases.py) to keep start-up cost down.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archzoo.comm import Message, Schema
from archzoo.comm.factory import Launch, detect_launch, make_transport

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import comm_cases  # noqa: E402  (tests/ is on the path only from here on)
import mp  # noqa: E402

WORLD = 3


# ---------------------------------------------------------------------------------------------
# All transport cases, once per engine
# ---------------------------------------------------------------------------------------------
def _check_cases(ranks) -> None:
    report = mp.describe(ranks)
    assert len(ranks) == WORLD
    for r in ranks:
        assert not r.timed_out, report
        assert r.returncode == 0, report
        for name in comm_cases.CASE_NAMES:
            assert re.search(rf"^\[rank {r.rank}\] CASE {name} OK\b", r.output, re.M), (
                f"rank {r.rank}: case {name} did not report OK\n{report}")
        assert f"DONE {len(comm_cases.CASES)}/{len(comm_cases.CASES)} passed" in r.output, report


def test_cases_gloo():
    _check_cases(mp.run_gloo(WORLD, [str(HERE / "comm_cases.py"), "gloo"], timeout_s=60))


def test_cases_mpi():
    job = mp.run_mpi(WORLD, [str(HERE / "comm_cases.py"), "mpi"], timeout_s=60)
    assert job.returncode == 0, mp.describe(job)
    _check_cases(job)


# ---------------------------------------------------------------------------------------------
# A peer dies mid-run
# ---------------------------------------------------------------------------------------------
DEADLINE_S = 30.0
FAILURE = re.compile(r"^PEER_FAILURE elapsed=([\d.]+) peer=(\S+) msg=(.*)$", re.M)


def _dead_peer_gloo() -> list[float]:
    """Rank 2 dies while ranks 0 and 1 wait on it: both fail with PeerFailure naming it (not
    PeerTimeout: the death ended the waits, not their deadline). Returns how long each took."""
    ranks = mp.run_gloo(WORLD, [str(HERE / "comm_dead_peer.py"), "gloo", str(DEADLINE_S)],
                        timeout_s=DEADLINE_S + 15)
    report = mp.describe(ranks)
    assert ranks[2].returncode == 3, report
    took = []
    for r in ranks[:2]:
        assert not r.timed_out and r.returncode == 0, report
        m = FAILURE.search(r.output)
        assert m, report
        elapsed, peer, msg = float(m.group(1)), m.group(2), m.group(3)
        assert peer == "2", report
        assert msg.startswith(f"rank {r.rank}: rank 2 failed during "), msg
        took.append(elapsed)
    return took


def test_dead_peer_gloo():
    _dead_peer_gloo()


@pytest.mark.timing
def test_dead_peer_noticed_at_once_gloo():
    """Rank 2 dies 0.5 s into the wait: the survivors notice at once, not near the deadline."""
    for rank, elapsed in enumerate(_dead_peer_gloo()):
        assert elapsed < 5.0, f"rank {rank} noticed after {elapsed:.2f}s (deadline {DEADLINE_S}s)"


@pytest.mark.parametrize("mode,took", [("inbox", "RELEASED"), ("control", "POLLED final")])
def test_last_message_before_the_peer_left_gloo(mode, took):
    """A peer's last message is taken though the peer has left: releasing it (which reposts
    a receive to the peer) is not an error, nor is polling the control channel, whose
    receives behind it fail (an actor crashed so after a server's bye in CI). Only the next
    wait for the peer fails, naming it."""
    ranks = mp.run_gloo(2, [str(HERE / "comm_last_message.py"), mode], timeout_s=45)
    report = mp.describe(ranks)
    assert ranks[0].returncode == 0, report
    assert not ranks[1].timed_out and ranks[1].returncode == 0, report
    assert took in ranks[1].output, report
    assert re.search(r"^PEER_FAILURE peer=0 msg=rank 1: rank 0 failed during ", ranks[1].output,
                     re.M), report


def _dead_peer_mpi() -> mp.CompletedJob:
    """Rank 2 dies while ranks 0 and 1 wait on it: the job ends (hydra ends it) with no
    rank's wait reaching its deadline."""
    job = mp.run_mpi(WORLD, [str(HERE / "comm_dead_peer.py"), "mpi", str(DEADLINE_S)],
                     timeout_s=DEADLINE_S + 15)
    report = mp.describe(job)
    assert not job.timed_out, report
    assert job.returncode not in (0, None), report  # hydra ends the job and says it failed
    assert job[2].returncode in (3, None), report
    for r in job:
        assert "PEER_TIMEOUT" not in r.output and "UNEXPECTED" not in r.output, report
    return job


def test_dead_peer_mpi():
    _dead_peer_mpi()


@pytest.mark.timing
def test_dead_peer_ends_the_job_before_the_deadline_mpi():
    job = _dead_peer_mpi()
    assert job.elapsed_s < DEADLINE_S, mp.describe(job)  # ended by the death


DEADLINE_LINE = re.compile(r"^\[rank 0\] DEADLINE ([\d.]+) raised after ([\d.]+)s$", re.M)


@pytest.mark.timing
@pytest.mark.parametrize("engine", ["gloo", "mpi"])
def test_deadlines_are_not_late(engine):
    """comm_cases.py's deadline case alone: each PeerTimeout comes within 1 s of its
    deadline (the case itself checks that none comes before)."""
    argv = [str(HERE / "comm_cases.py"), engine, "deadline"]
    ranks = (mp.run_gloo if engine == "gloo" else mp.run_mpi)(WORLD, argv, timeout_s=60)
    report = mp.describe(ranks)
    assert all(r.returncode == 0 for r in ranks), report
    late = [(float(d), float(el)) for d, el in DEADLINE_LINE.findall(ranks[0].output)]
    assert len(late) == 4, report
    assert all(el < d + 1.0 for d, el in late), late


def test_late_finisher_mpi():
    """A rank still working when the others have finalized and left is not killed (hydra
    killed it when they left by ``os._exit``)."""
    job = mp.run_mpi(4, [str(HERE / "mpi_late_finisher.py")], timeout_s=60)
    report = mp.describe(job)
    assert job.returncode == 0 and [r.returncode for r in job] == [0, 0, 0, 0], report
    assert "LATE_DONE" in job[3].output, report


# ---------------------------------------------------------------------------------------------
# Schema / Message, single process
# ---------------------------------------------------------------------------------------------
DTYPES = [np.float32, np.float64, np.int64, np.int32, np.int16, np.uint8, np.bool_, np.float16]
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8)
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)
field_lists = st.lists(
    st.tuples(names, st.sampled_from(DTYPES), shapes), min_size=1, max_size=8,
    unique_by=lambda f: f[0],
)


def _fill(msg: Message, rng: np.random.Generator) -> dict[str, bytes]:
    out = {}
    for name, f in msg.schema.fields.items():
        raw = rng.integers(0, 256, size=f.nbytes, dtype=np.uint8)
        if f.dtype == np.bool_:
            raw %= 2
        msg[name].reshape(-1).view(np.uint8)[:] = raw  # through the view
        out[name] = raw.tobytes()
    return out


@settings(max_examples=150, deadline=None)
@given(fields=field_lists, seed=st.integers(0, 2**32 - 1))
def test_schema_round_trip(fields, seed):
    schema = Schema("s", fields)
    msg = schema.new()
    expect = _fill(msg, np.random.default_rng(seed))
    # "the wire": only the flat byte buffer travels
    wire = msg.buffer.tobytes()
    assert len(wire) == schema.nbytes
    got = Message(schema, np.frombuffer(bytearray(wire), np.uint8))
    for name, f in schema.fields.items():
        assert got[name].shape == f.shape and got[name].dtype == f.dtype
        assert got[name].tobytes() == expect[name], name
        assert not got[name].flags.owndata
        if f.nbytes:
            assert np.shares_memory(got[name], got.buffer)
    assert list(got) == [f[0] for f in fields] and len(got) == len(fields)
    # the same description on another rank gives the same digest and layout
    again = Schema("s", [(n, np.dtype(d).str, list(s)) for n, d, s in fields])
    assert again.digest() == schema.digest() and again.offsets == schema.offsets


@settings(max_examples=150, deadline=None)
@given(fields=field_lists)
def test_schema_alignment(fields):
    schema = Schema("s", fields)
    assert schema.nbytes % 8 == 0 and schema.nbytes >= 8
    spans = []
    for name, f in schema.fields.items():
        off = schema.offsets[name]
        assert off % 8 == 0, (name, off)
        assert off + f.nbytes <= schema.nbytes
        assert f.nbytes == int(np.prod(f.shape, dtype=np.int64)) * f.dtype.itemsize
        spans.append((off, off + f.nbytes))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, "fields overlap"
    # no more than 7 bytes of padding per field, beyond the 8-byte minimum
    assert schema.nbytes <= max(8, sum(f.nbytes + 7 for f in schema.fields.values()))
    msg = schema.new()
    base = msg.buffer.__array_interface__["data"][0]
    for name in schema.fields:
        addr = msg[name].__array_interface__["data"][0]
        assert addr - base == schema.offsets[name]
        assert msg[name].flags.aligned


@settings(max_examples=100, deadline=None)
@given(fields=field_lists, data=st.data())
def test_schema_duplicate_names_rejected(fields, data):
    i = data.draw(st.integers(0, len(fields) - 1))
    dup = (fields[i][0], data.draw(st.sampled_from(DTYPES)), data.draw(shapes))
    j = data.draw(st.integers(0, len(fields)))
    with pytest.raises(ValueError, match="duplicate field"):
        Schema("s", [*fields[:j], dup, *fields[j:]])


@settings(max_examples=100, deadline=None)
@given(fields=field_lists, data=st.data())
def test_schema_digest_sensitive(fields, data):
    d = Schema("s", fields).digest()
    i = data.draw(st.integers(0, len(fields) - 1))
    name, dtype, shape = fields[i]
    other = data.draw(st.sampled_from([x for x in DTYPES if np.dtype(x) != np.dtype(dtype)]))
    changed = [
        [*fields[:i], (name, other, shape), *fields[i + 1:]],
        [*fields[:i], (name, dtype, (*shape, 1)), *fields[i + 1:]],
        [*fields[:i], (name + "X", dtype, shape), *fields[i + 1:]],
    ]
    if len(fields) > 1:
        j = (i + 1) % len(fields)
        swapped = list(fields)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        changed.append(swapped)
    for f in changed:
        assert Schema("s", f).digest() != d, f
    assert Schema("t", fields).digest() != d


def test_schema_edges():
    with pytest.raises(ValueError, match="negative"):
        Schema("s", [("a", np.float32, (2, -1))])
    s = Schema("s", [("n", np.int64, 3), ("z", np.float32, (0,))])  # int shape, empty field
    assert s.fields["n"].shape == (3,) and s.nbytes == 24
    assert Schema("s", [("z", np.float32, (0,))]).nbytes == 8  # never a zero-byte message
    m = s.new()
    with pytest.raises(ValueError):
        Message(s, np.zeros(s.nbytes + 1, np.uint8))
    with pytest.raises(ValueError):
        Message(s, np.zeros(s.nbytes // 8, np.int64))
    m["n"][:] = [1, 2, 3]
    m2 = s.new()
    m2.copy_from(m)
    assert m2["n"].tolist() == [1, 2, 3] and not np.shares_memory(m2.buffer, m.buffer)
    assert "n:int64[3]" in repr(s)


# ---------------------------------------------------------------------------------------------
# Launcher detection, with fake environments
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env, expect", [
    ({}, Launch("none", 0, 1)),
    ({"PATH": "/bin"}, Launch("none", 0, 1)),
    ({"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     Launch("torchrun", 2, 4)),
    ({"RANK": "1", "WORLD_SIZE": "3", "ARCHZOO_EMBEDDED": "1"}, Launch("embedded", 1, 3)),
    ({"RANK": "1", "WORLD_SIZE": "3", "ARCHZOO_EMBEDDED": "0"}, Launch("torchrun", 1, 3)),
    ({"PMI_RANK": "3", "PMI_SIZE": "5"}, Launch("mpiexec", 3, 5)),
    ({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
     Launch("mpiexec", 0, 2)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, Launch("mpiexec", 1, 2)),
    # torchrun's variables win over stray MPI ones
    ({"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "4"}, Launch("torchrun", 0, 2)),
    # half a torchrun environment is not a launch
    ({"RANK": "1"}, Launch("none", 0, 1)),
])
def test_detect_launch(env, expect):
    got = detect_launch(dict(env))
    assert got == expect
    assert got.under_launcher == (expect.launcher != "none")


def test_detect_launch_imports_no_engine():
    code = ("import sys; from archzoo.comm.factory import detect_launch; "
            "l = detect_launch({'PMI_RANK': '1', 'PMI_SIZE': '3'}); "
            "assert (l.rank, l.world_size) == (1, 3); "
            "print(sorted(m for m in ('torch', 'mpi4py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_make_transport_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend"):
        make_transport("nccl", Launch("none", 0, 1))
