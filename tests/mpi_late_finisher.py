"""The last rank to finish is not killed: ``mpiexec -n 4 python tests/mpi_late_finisher.py``.

Ranks 0–2 leave at once through :meth:`MPITransport.finalize_and_exit`; rank 3 first works
on for ``LATE_S`` seconds (as an actor still sending its last report does), then leaves the
same way and prints ``LATE_DONE``. Every rank must exit 0: hydra kills the ranks still
running when one leaves in a way it takes for a failure.
"""

from __future__ import annotations

import time

from archzoo.comm.factory import detect_launch, make_transport

LATE, LATE_S = 3, 1.0


def main() -> None:
    t = make_transport("mpi", detect_launch(), timeout_s=30.0)
    assert t.world_size == 4
    t.barrier()
    if t.rank == LATE:
        time.sleep(LATE_S)
        print("LATE_DONE", flush=True)
    t.finalize_and_exit(deadline_s=10.0, code=0)


if __name__ == "__main__":
    main()
