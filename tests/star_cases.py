"""StarPublisher on one real engine: run on every rank as
``python tests/star_cases.py gloo|mpi SCENARIO NPARAMS`` under tests/mp.py (run_gloo/run_mpi).

Rank 0 publishes parameter versions 1..K with archzoo.topology.star.StarPublisher; every other
rank receives them as an IMPALA actor does (an Inbox of depth 1 on the parameters tag). The
parameters of version v are ``expected(v)``, so a leaf checks each message it takes against the
version it carries (a buffer overwritten while in flight would not match).

Scenarios:

- ``latest``: versions 1..K published PUBLISH_GAP_S apart without waiting; the last rank is
  slow (it holds each message SLOW_HOLD_S before taking the next), the others take every
  message at once. Then the root calls ``wait_all``. Every leaf stops at version K.
- ``sync``: every publish is followed by ``wait_all`` (IMPALA's sync mode): each leaf must
  see every version, in order.
- ``timeout``: leaf 1 posts no receive; the root's ``wait_all(timeout_s=1)`` must raise
  PeerTimeout naming rank 1 (then leaf 1 takes the message and all finish).

Each rank prints one line ``RESULT {json}`` (root: publisher.messages, the messages the
transport sent to each leaf, how long publishing took, the PeerTimeout message if any; leaf:
the versions it took, in order, any whose parameters did not match, and how many messages the
transport received from the root) and exits 0, or prints ``FAIL ...`` and exits 1.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import numpy as np
from mp import rank_exit

from archzoo.comm import Inbox, PeerTimeout
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.topology.star import StarPublisher, params_schema

TAG = 2
K = 40
PUBLISH_GAP_S = 0.003
SLOW_HOLD_S = 0.05
TIMEOUT_S = 30.0


def expected(v: int, n: int) -> np.ndarray:
    """Version v's parameters: distinct per version and per position."""
    return (np.arange(n, dtype=np.float32) * np.float32(1e-3) + np.float32(v))


def root(t, scenario: str, n: int) -> dict:
    leaves = list(range(1, t.world_size))
    pub = StarPublisher(t, params_schema(n), leaves, TAG)
    t0 = time.perf_counter()
    for v in range(1, K + 1):
        if v % 2:
            pub.publish(params=expected(v, n), version=v)
        else:  # fill ``latest`` in place and publish it as filled (what IMPALA does)
            pub.latest["params"][:] = expected(v, n)
            pub.publish(version=v)
        if scenario == "sync":
            pub.wait_all(TIMEOUT_S)
        elif scenario == "latest":
            end = time.perf_counter() + PUBLISH_GAP_S
            while time.perf_counter() < end:
                pub.pump()
                time.sleep(2e-4)
        elif scenario == "timeout":
            break
    publish_s = time.perf_counter() - t0
    timed_out_on = None
    if scenario == "timeout":
        try:
            pub.wait_all(timeout_s=1.0)
        except PeerTimeout as e:
            timed_out_on = str(e)
        t.send(np.zeros(1, np.uint8), 1, TAG + 1, "go")  # now leaf 1 may take its message
    pub.wait_all(TIMEOUT_S)
    return {"messages": pub.messages,
            "sent_per_leaf": {str(p): t.counters.msgs_sent.get(p, 0) for p in leaves},
            "timed_out_on": timed_out_on, "publish_s": publish_s}


def leaf(t, scenario: str, n: int) -> dict:
    last = 1 if scenario == "timeout" else K
    if scenario == "timeout" and t.rank == 1:
        t.recv(np.zeros(1, np.uint8), 0, TAG + 1, "go", TIMEOUT_S)
    inbox = Inbox(t, params_schema(n), [0], TAG, depth=1, what="parameters")
    slow = scenario == "latest" and t.rank == t.world_size - 1
    versions: list[int] = []
    bad: list[int] = []
    while not versions or versions[-1] != last:
        msg = inbox.recv_from(0, TIMEOUT_S)
        v = int(msg["version"])
        if not np.array_equal(msg["params"], expected(v, n)):
            bad.append(v)
        versions.append(v)
        if slow:
            time.sleep(SLOW_HOLD_S)
        inbox.release(0)
    return {"versions": versions, "bad_params": bad, "slow": slow,
            "received": t.counters.msgs_recv.get(0, 0)}


def main() -> int:
    engine, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t = make_transport(engine, detect_launch(), timeout_s=TIMEOUT_S)
    try:
        out = root(t, scenario, n) if t.rank == 0 else leaf(t, scenario, n)
        print("RESULT " + json.dumps(out), flush=True)
        t.barrier(TIMEOUT_S)
    except Exception:  # noqa: BLE001 - reported, then the job ends
        print(f"FAIL rank {t.rank}\n{traceback.format_exc()}", flush=True)
        if engine == "mpi":
            t.abort(1)
        return 1
    if engine == "mpi":
        t.shutdown()
    return 0


if __name__ == "__main__":
    rank_exit(main)
