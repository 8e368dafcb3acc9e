"""Run as N ranks (tests/test_a2c_allreduce.py): all-reduce A2C's round equals the parameter
server's sync round bit for bit.

Every rank runs the architecture's own :class:`Worker` (real envs, real A2C gradients, the
all-reduce over the topology named on the command line) for ROUNDS rounds. After each
round the ranks gather their gradients to rank 0 (the topology's gather), which pushes
them into a sync :class:`ShardState` with D = 0, the server's own update rule, and
asserts its parameters equal rank 0's copy bit for bit; then every rank checks that its
copy equals rank 0's (all copies stay equal without ever being sent).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mp import rank_exit  # noqa: E402

from archzoo import builders  # noqa: E402
from archzoo.architectures.a2c_allreduce import Worker  # noqa: E402
from archzoo.comm.factory import detect_launch, make_transport  # noqa: E402
from archzoo.config import A3CConfig  # noqa: E402
from archzoo.harness import RankContext  # noqa: E402
from archzoo.paramserver import ShardState  # noqa: E402

ROUNDS = 12


def main() -> int:
    backend, topology = sys.argv[1], sys.argv[2]
    launch = detect_launch()
    t = make_transport(backend, launch, timeout_s=60)
    cfg = A3CConfig(arch="a3c", mode="sync", topology=topology, fanout=2, seed=7,
                    actors=t.world_size, envs_per_actor=4, backend=backend)
    ctx = RankContext(cfg, launch, t)
    w = Worker(ctx, builders.env_spec(cfg))
    server = None
    if t.rank == 0:
        server = ShardState(w.params.copy(), builders.ps_optimizer(cfg),
                            list(range(t.world_size)), mode="sync")
    for r in range(ROUNDS):
        _, _, stopped = w.round(stop=False)
        assert not stopped
        grads = w.topo.gather(w.grad, 0)
        mine = w.params.copy()
        w.topo.broadcast(mine, 0)  # rank 0's copy, to every rank
        assert np.array_equal(mine.view(np.uint32), w.params.view(np.uint32)), \
            f"rank {t.rank}: its copy left rank 0's in round {r}"
        if server is not None:
            for worker in range(t.world_size):
                server.push(worker, r, grads[worker])
            assert server.version == r + 1
            diff = int((server.params.view(np.uint32) != w.params.view(np.uint32)).sum())
            assert diff == 0, f"round {r}: {diff} parameters differ from the server's"
    print(f"rank {t.rank}: {ROUNDS} rounds equal to the server's", flush=True)
    t.barrier()
    return 0


if __name__ == "__main__":
    rank_exit(main)
