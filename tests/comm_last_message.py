"""A peer's last message, then its exit: ``python tests/comm_last_message.py inbox|control``
on 2 gloo ranks.

Rank 0 sends one message to rank 1 and exits as soon as it was taken (as a root leaves after
a FINAL that no barrier follows). Rank 1 waits until gloo has surely seen rank 0 go, then:

- ``inbox``: takes the message from an :class:`Inbox` of depth 1 and releases it, which
  reposts its receive to a peer that is gone. The release must not raise (the message was
  delivered); prints ``RELEASED``.
- ``control``: polls a :class:`ControlChannel` (depth 2), which must return the message
  (``POLLED <type>``) though the receives behind it fail.

Then its next wait for rank 0 must fail naming it: ``PEER_FAILURE peer=<p> msg=<error>``
(code 0), else ``PEER_TIMEOUT ...`` (code 5) or ``UNEXPECTED ...`` (code 6).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from archzoo.comm import ControlChannel, Inbox, PeerFailure, PeerTimeout, Schema
from archzoo.comm.factory import detect_launch, make_transport

TAG, GONE_S, WAIT_S = 5, 1.0, 10.0


def last_of_inbox(t) -> None:
    schema = Schema("bye", [("x", np.float32, (4,))])
    inbox = Inbox(t, schema, [0], TAG, depth=1, what="bye") if t.rank == 1 else None
    t.barrier()
    if t.rank == 0:
        msg = schema.new()
        msg["x"][:] = 7.0
        t.send(msg.buffer, 1, TAG, "bye")
        os._exit(0)
    got = inbox.recv_from(0)
    assert float(got["x"][0]) == 7.0, got["x"]
    time.sleep(GONE_S)  # rank 0 has left; gloo has seen its connection close
    inbox.release(0)
    print("RELEASED", flush=True)
    inbox.recv_from(0, WAIT_S)


def last_of_control(t) -> None:
    control = ControlChannel(t, [1] if t.rank == 0 else [0], TAG)
    t.barrier()
    if t.rank == 0:
        control.send(1, {"type": "final", "barrier": False})
        control.flush()
        os._exit(0)
    time.sleep(GONE_S)  # the message arrived (its receive was posted); rank 0 has left
    got = control.poll()
    assert [(p, m["type"]) for p, m in got] == [(0, "final")], got
    print("POLLED final", flush=True)
    deadline = time.monotonic() + WAIT_S
    while not control.poll():
        if time.monotonic() > deadline:
            raise PeerTimeout(t.rank, 0, "control message", WAIT_S)
        time.sleep(1e-3)


def main() -> int:
    mode = sys.argv[1]
    t = make_transport("gloo", detect_launch(), timeout_s=30.0)
    assert t.world_size == 2
    try:
        {"inbox": last_of_inbox, "control": last_of_control}[mode](t)
    except PeerFailure as e:
        print(f"PEER_FAILURE peer={e.peer} msg={e}", flush=True)
        return 0
    except PeerTimeout as e:
        print(f"PEER_TIMEOUT msg={e}", flush=True)
        return 5
    print("UNEXPECTED message after the last", flush=True)
    return 6


if __name__ == "__main__":
    os._exit(main())  # after a peer's exit gloo cannot tear down cleanly
