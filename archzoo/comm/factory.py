"""Which launcher started this process, and the transport that fits it.

- torchrun (or archzoo's embedded launcher): ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT`` in the environment -> gloo over TCP.
- mpiexec (MPICH hydra sets ``PMI_RANK``/``PMI_SIZE``; Open MPI ``OMPI_COMM_WORLD_*``;
  PMIx ``PMIX_RANK``) -> MPI.
- neither: a plain process, world size 1 until a launcher makes more.

Reading the environment imports neither torch nor mpi4py, so arguments can be
validated on every rank before any process group exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from archzoo import envvars
from archzoo.comm.base import DEFAULT_TIMEOUT_S, Transport

_MPI_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_MPI_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")  # world sizes, never per-node ones


@dataclass(frozen=True)
class Launch:
    """How this process was started: ``launcher`` is torchrun, embedded, mpiexec or none."""

    launcher: str
    rank: int
    world_size: int
    launcher_rank: int | None = None  # the launcher's number for this process, if different

    @property
    def under_launcher(self) -> bool:
        return self.launcher != "none"

    @property
    def started_as(self) -> int:
        """The rank the launcher gave this process (``rank`` is archzoo's)."""
        return self.rank if self.launcher_rank is None else self.launcher_rank

    def servers_last(self, servers: int) -> Launch:
        """archzoo's ranks rotated so that its ``servers`` lowest ranks are the launcher's
        last processes (``--servers-on last``): the launcher's rank p becomes
        (p + servers) mod world size."""
        if servers <= 0 or servers >= self.world_size:
            return self
        return Launch(self.launcher, (self.rank + servers) % self.world_size, self.world_size,
                      self.rank)


def detect_launch(environ: dict[str, str] | None = None) -> Launch:
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        kind = "embedded" if env.get(envvars.EMBEDDED) == "1" else "torchrun"
        return Launch(kind, int(env["RANK"]), int(env["WORLD_SIZE"]))
    for rv in _MPI_RANK_VARS:
        if rv in env:
            size = next((int(env[s]) for s in _MPI_SIZE_VARS if s in env), None)
            if size is None:
                from mpi4py import MPI  # size unknown from the environment: ask MPI

                size = MPI.COMM_WORLD.Get_size()
            return Launch("mpiexec", int(env[rv]), size)
    return Launch("none", 0, 1)


def make_transport(backend: str, launch: Launch, timeout_s: float = DEFAULT_TIMEOUT_S,
                   startup_timeout_s: float = 120.0) -> Transport:
    """Join the group the launcher made, over ``backend`` (gloo or mpi)."""
    if backend == "gloo":
        from archzoo.comm.gloo import GlooTransport

        return GlooTransport(
            launch.rank, launch.world_size,
            os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]),
            timeout_s=timeout_s, startup_timeout_s=startup_timeout_s,
            agent_store=os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            store_host=launch.started_as == 0,
        )
    if backend == "mpi":
        from archzoo.comm.mpi import MPITransport

        return MPITransport(timeout_s=timeout_s,
                            rank=None if launch.launcher_rank is None else launch.rank)
    raise ValueError(f"unknown backend {backend!r} (choose gloo or mpi)")
