"""Multi-process tests: run a Python script or module as N ranks on this machine, and the
case runner those scripts share.

Two launchers, the same as a user would use (docs/index.md, Launching; never mocked), both
:func:`archzoo.spawn.run_ranks` (archzoo's own spawner) with each rank's output captured:

- :func:`run_gloo` starts N subprocesses itself, as torchrun or archzoo's embedded launcher
  would: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``. The
  rank calls ``make_transport("gloo", detect_launch())``.
- :func:`run_mpi` runs ``mpiexec -n N <python> ...`` with the ``mpiexec`` that sits next to
  ``sys.executable`` (the mpich wheel puts it in the venv's bin/). The rank calls
  ``make_transport("mpi", detect_launch())``.

``argv`` is what follows the interpreter: ``["path/to/script.py", "arg"]`` or
``["-m", "archzoo", "run", "impala"]``. Both launchers set ``PYTHONUNBUFFERED=1`` (output
survives a kill) and ``OMP_NUM_THREADS=1`` (the machine has 2 cores), and collect each rank's
exit code and combined stdout+stderr. On timeout every process is killed and the result says
so (``timed_out``); nothing is left running.

Typical use::

    ranks = run_gloo(3, [str(HERE / "comm_cases.py"), "gloo"], timeout_s=60)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)

    job = run_mpi(3, [str(HERE / "comm_cases.py"), "mpi"], timeout_s=60)
    assert job.returncode == 0, describe(job)

Inside a rank, a ``*_cases.py`` script runs its cases with :func:`run_cases` (one line
``[rank R] CASE <name> OK (<seconds>s)`` or ``... FAIL: <error>`` per case, a barrier between
cases, ``DONE <passed>/<total> passed``), logs with :func:`log`, gives up with :func:`abort`
when the ranks are out of step, and ends with :func:`rank_exit`.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from archzoo.spawn import RankResult, clean_env, find_mpiexec, run_ranks

__all__ = ["CompletedJob", "CompletedRank", "abort", "describe", "log", "mpiexec_path",
           "rank_exit", "run_cases", "run_gloo", "run_mpi"]

REPO_ROOT = Path(__file__).resolve().parent.parent

CompletedRank = RankResult
"""One finished (or killed) rank: ``rank``, ``returncode`` (negative for a signal, None when
hydra did not report it), ``output``, ``timed_out``, ``elapsed_s``; ``ok`` and ``lines()``."""


@dataclass
class CompletedJob:
    """An ``mpiexec`` job: the launcher's own exit code and output, plus one entry per rank.

    Iterating, indexing and ``len()`` go to :attr:`ranks`, so a job reads like the list
    :func:`run_gloo` returns.
    """

    returncode: int | None  # mpiexec's exit code (None if it had to be killed)
    output: str  # what mpiexec itself printed (its errors, the exit-code summary)
    timed_out: bool
    elapsed_s: float
    ranks: list[CompletedRank] = field(default_factory=list)

    def __iter__(self) -> Iterator[CompletedRank]:
        return iter(self.ranks)

    def __getitem__(self, i: int) -> CompletedRank:
        return self.ranks[i]

    def __len__(self) -> int:
        return len(self.ranks)


def run_gloo(n: int, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
             cwd: str | os.PathLike | None = None,
             fail_fast_s: float | None = None) -> list[CompletedRank]:
    """Start ``n`` ranks of ``python argv...`` joined over gloo on loopback; wait for all.

    ``env`` adds to (or overrides) the environment of every rank. If ``fail_fast_s`` is given,
    once any rank exits non-zero the others get that many seconds to finish before being
    killed (useful when a crashed rank would leave the rest waiting until their deadlines).
    """
    return run_ranks(n, argv, "gloo", env=clean_env(env), cwd=cwd or REPO_ROOT, capture=True,
                     timeout_s=timeout_s, grace_s=fail_fast_s).ranks


def mpiexec_path() -> str:
    """The ``mpiexec`` next to the running interpreter (the venv's, from the mpich wheel)."""
    found = find_mpiexec()
    if found is None:
        raise FileNotFoundError(f"no mpiexec next to {sys.executable}; pip install mpich")
    return found


def run_mpi(n: int, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None,
            mpiexec_args: Sequence[str] = ()) -> CompletedJob:
    """Run ``mpiexec -n n <python> argv...`` and wait for it.

    Each rank's stdout+stderr goes to its own file (hydra's ``-outfile-pattern``), so the
    output of different ranks never interleaves; per-rank exit codes come from
    ``-print-all-exitcodes``. ``mpiexec_args`` go before ``-n`` (e.g. ``["-bind-to", "none"]``).
    On timeout mpiexec, its group and every process below it are killed.
    """
    job = run_ranks(n, argv, "mpi", env=clean_env(env), cwd=cwd or REPO_ROOT, capture=True,
                    timeout_s=timeout_s, mpiexec_args=mpiexec_args)
    return CompletedJob(returncode=None if job.timed_out else job.launcher_codes[0],
                        output=job.output, timed_out=job.timed_out, elapsed_s=job.elapsed_s,
                        ranks=job.ranks)


def describe(result: Sequence[CompletedRank] | CompletedJob, tail: int = 40) -> str:
    """A readable account of a launch for assertion messages: codes and each rank's tail."""
    parts = []
    if isinstance(result, CompletedJob):
        parts.append(f"mpiexec rc={result.returncode} timed_out={result.timed_out} "
                     f"elapsed={result.elapsed_s:.1f}s\n{result.output.strip()}")
    for r in result:
        lines = r.lines()[-tail:]
        parts.append(f"--- rank {r.rank}: rc={r.returncode} timed_out={r.timed_out} "
                     f"elapsed={r.elapsed_s:.1f}s\n" + "\n".join(lines))
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Inside a rank: the case scripts' runner
# ---------------------------------------------------------------------------------------------
def log(t: Any, line: str) -> None:
    """``[rank R] line`` on stdout, flushed (the tests read each rank's lines)."""
    sys.stdout.write(f"[rank {t.rank}] {line}\n")
    sys.stdout.flush()


def abort(t: Any, why: str, trace: bool = False) -> NoReturn:
    """The ranks are out of step: log ``ABORT why`` and end the whole job (MPI: abort, which
    ends every rank; gloo: leave without tearing down)."""
    log(t, f"ABORT: {why}")
    if trace:
        traceback.print_exc(file=sys.stdout)
    sys.stdout.flush()
    if t.backend == "mpi":
        t.abort(1)
    os._exit(1)


def run_cases(t: Any, cases: Sequence[tuple[str, Callable[[int], None]]], barrier_s: float,
              summary: Callable[[], str] | None = None) -> int:
    """Run every case on this rank, in order: case i is called with its own base tag
    ``100 · (i + 1)`` and prints ``CASE <name> OK (<seconds>s)``, or ``CASE <name> FAIL:
    <error>`` and a traceback; a barrier (deadline ``barrier_s``) follows each case, so a
    failing case feeds no stray message to the next, and if that barrier fails the ranks are
    out of step: :func:`abort`. Ends with ``DONE <passed>/<total> passed`` (and
    ``summary()``). Returns 1 if a case failed on this rank, else 0."""
    failed = 0
    for i, (name, fn) in enumerate(cases):
        t0 = time.perf_counter()
        try:
            fn(100 * (i + 1))
            log(t, f"CASE {name} OK ({time.perf_counter() - t0:.2f}s)")
        except Exception as e:  # noqa: BLE001 - report and go on to the next case
            failed += 1
            first = (str(e).splitlines() or [""])[0][:400]
            log(t, f"CASE {name} FAIL: {type(e).__name__}: {first}")
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
        try:
            t.barrier(barrier_s)
        except Exception as e:  # noqa: BLE001 - ranks out of step: stop the run
            abort(t, f"after {name}: barrier failed: {e}")
    log(t, f"DONE {len(cases) - failed}/{len(cases)} passed" + (f"; {summary()}" if summary
                                                               else ""))
    return 1 if failed else 0


def rank_exit(main: Callable[[], int], hard: bool | None = None) -> NoReturn:
    """A case script's ``__main__``: run ``main`` (an exception is printed, exit code 1),
    flush, and leave with its code. ``hard`` (default: started by gloo, ``RANK`` set) leaves
    with ``os._exit``: gloo cannot withdraw posted receives, so no tearing down."""
    try:
        code = main()
    except BaseException:  # noqa: BLE001 - a gloo rank must still leave with os._exit
        traceback.print_exc(file=sys.stdout)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if hard if hard is not None else "RANK" in os.environ:
        os._exit(code)
    sys.exit(code)
