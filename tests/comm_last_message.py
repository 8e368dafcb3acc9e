"""A peer's last message, then its exit: ``python tests/comm_last_message.py`` on 2 gloo ranks.

Rank 0 sends one message to rank 1 and exits as soon as it was taken (as a learner leaves after
its last ``bye``). Rank 1 takes it from an :class:`Inbox`, waits until gloo has surely seen rank
0 go, and releases the message, which reposts its receive to a peer that is gone. The release
must not raise (the message was delivered); the failure belongs to whoever waits for a next
message, and names rank 0.

Rank 1 prints ``RELEASED`` after the release, then ``PEER_FAILURE peer=<p> msg=<error>``
(code 0), ``PEER_TIMEOUT ...`` (code 5) or ``UNEXPECTED ...`` (code 6) for its next wait.
"""

from __future__ import annotations

import os
import time

import numpy as np

from archzoo.comm import Inbox, PeerFailure, PeerTimeout, Schema
from archzoo.comm.factory import detect_launch, make_transport

TAG, GONE_S, WAIT_S = 5, 1.0, 10.0


def main() -> int:
    t = make_transport("gloo", detect_launch(), timeout_s=30.0)
    assert t.world_size == 2
    schema = Schema("bye", [("x", np.float32, (4,))])
    inbox = Inbox(t, schema, [0], TAG, depth=1, what="bye") if t.rank == 1 else None
    t.barrier()
    if t.rank == 0:
        msg = schema.new()
        msg["x"][:] = 7.0
        t.send(msg.buffer, 1, TAG, "bye")
        return 0
    got = inbox.recv_from(0)
    assert float(got["x"][0]) == 7.0, got["x"]
    time.sleep(GONE_S)  # rank 0 has left; gloo has seen its connection close
    inbox.release(0)
    print("RELEASED", flush=True)
    try:
        inbox.recv_from(0, WAIT_S)
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
