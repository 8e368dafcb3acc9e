"""Every cell of `archzoo list --matrix` that runs has a smoke run on both engines.

Most cells are run by their architecture's own tests (ELSEWHERE names them); the rest run
here, briefly. A test keeps the two lists complete: a cell that starts to run without a
smoke run on gloo and on MPI fails it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from archzoo import matrix
from archzoo.architectures import ARCHITECTURES, world_size
from tests.mp import describe, run_mpi
from tests.runs import cli, load_run

HERE = Path(__file__).resolve().parent
BROADCAST = ("tree", "butterfly", "ring")

# (arch, topology, mode, backend) -> "file::test" that runs it
ELSEWHERE: dict[tuple[str, str, str, str], str] = {
    ("impala", "star", "async", "gloo"): "test_impala.py::test_torchrun",
    ("impala", "star", "async", "mpi"): "test_impala.py::test_embedded",
    ("impala", "star", "sync", "gloo"): "test_impala.py::test_embedded",
    ("impala", "star", "sync", "mpi"): "test_impala.py::test_mpiexec_sync",
    **{("impala", t, "sync", "gloo"): "test_impala.py::test_sync_parameter_broadcast_over_each_"
       "topology" for t in (*BROADCAST, "native")},
    **{(a, t, "async", b): "test_async_broadcast.py::test_async_broadcast"
       for a in ("impala", "apex", "gorila", "r2d2") for t in BROADCAST for b in ("gloo", "mpi")},
    ("r2d2", "star", "async", "gloo"): "test_r2d2_runs.py::test_embedded",
    ("r2d2", "star", "async", "mpi"): "test_r2d2_runs.py::test_mpiexec",
    ("apex", "star", "async", "gloo"): "test_apex.py::test_embedded",
    ("apex", "star", "async", "mpi"): "test_apex.py::test_mpiexec",
    ("a3c", "star", "async", "gloo"): "test_a3c.py::test_embedded_gloo",
    ("a3c", "star", "sync", "gloo"): "test_a3c.py::test_embedded_gloo",
    ("a3c", "star", "sync", "mpi"): "test_a3c.py::test_mpiexec_sync",
    **{("a3c", t, "sync", "gloo"): "test_a2c_allreduce.py::test_every_topology_ends_where_"
       "the_others_do" for t in ("ring", "tree", "native")},
    ("a3c", "ring", "sync", "mpi"): "test_a2c_allreduce.py::test_mpiexec_allreduce",
    ("gorila", "star", "async", "gloo"): "test_gorila.py::test_embedded_gloo",
    ("gorila", "star", "async", "mpi"): "test_gorila.py::test_mpiexec",
    ("gala", "ring", "async", "gloo"): "test_gala.py::test_embedded_gloo",
    ("gala", "ring", "async", "mpi"): "test_gala.py::test_mpiexec",
    ("seed", "star", "async", "gloo"): "test_seed.py::test_torchrun",
    ("seed", "star", "async", "mpi"): "test_seed.py::test_mpiexec",
    ("seed", "star", "sync", "gloo"): "test_seed.py::test_embedded",
    ("seed", "star", "sync", "mpi"): "test_sync_equivalence.py::"
    "test_sync_seed_equals_sequential_reference",
    ("ga3c", "star", "async", "gloo"): "test_ga3c.py::test_embedded",
    ("ga3c", "star", "async", "mpi"): "test_ga3c.py::test_mpiexec",
}

# (arch, topology, mode, backend, --actors, extra flags): the cells run here
SMOKES = [
    *[("impala", t, "sync", "mpi", 3, ["--total-steps", "8000"])
      for t in (*BROADCAST, "native")],
    ("a3c", "star", "async", "mpi", 2, ["--total-steps", "8000"]),
    *[("a3c", t, "sync", "mpi", 3, ["--total-steps", "8000"])
      for t in ("tree", "butterfly", "native")],
    ("a3c", "butterfly", "sync", "gloo", 3, ["--total-steps", "8000"]),
]


def test_every_cell_that_runs_has_a_smoke_run_on_both_engines() -> None:
    here = {(a, t, m, b) for a, t, m, b, _, _ in SMOKES}
    assert not here & set(ELSEWHERE), here & set(ELSEWHERE)
    for (a, t, m), v in matrix.matrix().items():
        for b in ("gloo", "mpi"):
            cell = (a, t, m, b)
            assert (v == matrix.RUNS) == (cell in here or cell in ELSEWHERE), cell
    for where in set(ELSEWHERE.values()):
        name, test = where.split("::")
        assert f"def {test}(" in (HERE / name).read_text(), where


@pytest.mark.parametrize("arch,topology,mode,backend,actors,extra", SMOKES,
                         ids=["-".join(map(str, s[:4])) for s in SMOKES])
def test_smoke(tmp_path: Path, arch: str, topology: str, mode: str, backend: str,
               actors: int, extra: list[str]) -> None:
    d = tmp_path / "run"
    args = ["run", arch, "--topology", topology, "--mode", mode, "--fanout", "2",
            "--actors", str(actors), "--quiet", "--log-interval", "0.5", "--run-dir", str(d),
            *extra]
    if backend == "gloo":
        r = cli(*args, timeout=180)
        assert r.returncode == 0, r.stderr[-3000:]
    else:
        world = world_size(ARCHITECTURES[arch].config(arch=arch, topology=topology,
                                                      mode=mode), actors)
        job = run_mpi(world, ["-m", "archzoo", *args], timeout_s=180)
        assert job.returncode == 0, describe(job)
    s = load_run(d)
    assert (s["arch"], s["topology"], s["mode"], s["backend"]) == (arch, topology, mode,
                                                                 backend)
    assert s["learner_updates"] > 0 and s["env_steps"] >= 8000
