"""A peer dies mid-run: ``python tests/comm_dead_peer.py gloo|mpi [deadline_s]`` on 3 ranks.

After a barrier, rank 2 sleeps briefly and calls ``os._exit(3)``. Meanwhile rank 0 waits on
ranks 1 and 2 (polling an Inbox's ``ready()``, as a root does) and rank 1 waits on ranks 2
and 0 (``wait_any`` over two posted receives); nobody ever sends, so only rank 2's death can
end the waits early.

Each waiting rank prints one line and exits:
``PEER_FAILURE elapsed=<s> peer=<p> msg=<error>`` (code 0 under gloo; 4 under MPI, where the
job has died and exit codes must stay honest), ``PEER_TIMEOUT ...`` (code 5), or
``UNEXPECTED ...`` (code 6).

Under gloo a survivor lingers ``LINGER_S`` before it exits: its own exit closes its sockets,
and the other survivor, still waiting on it too, must meet rank 2's death first, not this one.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from archzoo.comm import Inbox, PeerFailure, PeerTimeout, Schema
from archzoo.comm.factory import detect_launch, make_transport

DYING, DIE_AFTER_S, TAG, LINGER_S = 2, 0.5, 5, 3.0


def main() -> int:
    backend = sys.argv[1]
    deadline_s = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    t = make_transport(backend, detect_launch(), timeout_s=deadline_s)
    assert t.world_size == 3
    schema = Schema("rollout", [("x", np.float32, (4,))])
    if t.rank == 0:
        inbox = Inbox(t, schema, [1, DYING], TAG, what="rollout")
    elif t.rank == 1:
        b2, b0 = schema.new(), schema.new()
        reqs = [t.irecv(b2.buffer, DYING, TAG, "rollout"), t.irecv(b0.buffer, 0, TAG, "weights")]
    t.barrier()
    t0 = time.perf_counter()
    if t.rank == DYING:
        time.sleep(DIE_AFTER_S)
        os._exit(3)
    try:
        if t.rank == 0:
            while not (ready := inbox.ready()):
                if time.perf_counter() - t0 > deadline_s:
                    raise PeerTimeout(0, "1,2", "rollout", deadline_s)
                t.idle(1e-3)
            print(f"UNEXPECTED message from {ready[0]}", flush=True)
            return 6
        i = t.wait_any(reqs)
        print(f"UNEXPECTED request {i} completed", flush=True)
        return 6
    except PeerFailure as e:
        print(f"PEER_FAILURE elapsed={time.perf_counter() - t0:.3f} peer={e.peer} msg={e}",
              flush=True)
        if backend == "gloo":
            time.sleep(LINGER_S)
            return 0
        return 4
    except PeerTimeout as e:
        print(f"PEER_TIMEOUT elapsed={time.perf_counter() - t0:.3f} msg={e}", flush=True)
        return 5


if __name__ == "__main__":
    os._exit(main())  # after a peer's death neither engine can tear down cleanly
