"""Run a Python script or module as N ranks on this machine, for multi-process tests.

Two launchers, the same as a user would use (docs/index.md, Launching; never mocked):

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
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CompletedJob", "CompletedRank", "describe", "mpiexec_path", "run_gloo", "run_mpi"]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class CompletedRank:
    """One finished (or killed) rank.

    ``returncode``: the process's exit code, negative for a signal (``-9`` = killed); ``None``
    when it could not be known (an MPI rank whose code hydra did not report).
    ``output``: its stdout and stderr, interleaved as written.
    ``timed_out``: the launch ran past its timeout and this rank was still running (so killed).
    ``elapsed_s``: seconds from the launch until this rank ended (or was killed).
    """

    rank: int
    returncode: int | None
    output: str
    timed_out: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def lines(self) -> list[str]:
        return self.output.splitlines()


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


def _base_env(env: Mapping[str, str] | None) -> dict[str, str]:
    e = dict(os.environ)
    # A launcher's variables from the test's own environment must not leak into the ranks.
    for k in list(e):
        if k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT") or k.startswith(("PMI_", "OMPI_", "PMIX_", "TORCHELASTIC_")):
            del e[k]
    e["PYTHONUNBUFFERED"] = "1"
    e["OMP_NUM_THREADS"] = "1"
    pp = e.get("PYTHONPATH")
    e["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    if env:
        e.update(env)
    return e


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the process group this child leads (it was started in its own session)."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
    p.wait()


def run_gloo(n: int, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
             cwd: str | os.PathLike | None = None,
             fail_fast_s: float | None = None) -> list[CompletedRank]:
    """Start ``n`` ranks of ``python argv...`` joined over gloo on loopback; wait for all.

    ``env`` adds to (or overrides) the environment of every rank. If ``fail_fast_s`` is given,
    once any rank exits non-zero the others get that many seconds to finish before being
    killed (useful when a crashed rank would leave the rest waiting until their deadlines).
    """
    port = _free_port()
    base = _base_env(env)
    cwd = cwd or REPO_ROOT
    t0 = time.monotonic()
    procs: list[subprocess.Popen] = []
    files = []
    try:
        for r in range(n):
            rank_env = dict(base, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            f = tempfile.TemporaryFile(mode="w+b")
            files.append(f)
            procs.append(subprocess.Popen([sys.executable, *argv], env=rank_env, cwd=cwd,
                                          stdout=f, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        ended: dict[int, float] = {}
        deadline = t0 + timeout_s
        first_failure: float | None = None
        while len(ended) < n:
            now = time.monotonic()
            for r, p in enumerate(procs):
                if r not in ended and p.poll() is not None:
                    ended[r] = now - t0
                    if p.returncode != 0 and first_failure is None:
                        first_failure = now
            if len(ended) == n:
                break
            if now > deadline or (fail_fast_s is not None and first_failure is not None
                                  and now > first_failure + fail_fast_s):
                break
            time.sleep(0.02)
        results = []
        for r, p in enumerate(procs):
            killed = r not in ended
            if killed:
                _kill_group(p)
            else:
                p.wait()
            files[r].seek(0)
            out = files[r].read().decode(errors="replace")
            results.append(CompletedRank(
                rank=r, returncode=p.returncode, output=out,
                timed_out=killed and time.monotonic() > deadline,
                elapsed_s=ended.get(r, time.monotonic() - t0)))
        return results
    finally:
        for p in procs:
            _kill_group(p)
        for f in files:
            f.close()


def mpiexec_path() -> str:
    """The ``mpiexec`` next to the running interpreter (the venv's, from the mpich wheel)."""
    p = Path(sys.executable).parent / "mpiexec"
    if not p.exists():
        raise FileNotFoundError(f"no mpiexec next to {sys.executable}; pip install mpich")
    return str(p)


_EXIT_CODES = re.compile(r"Exit codes: \[[^\]]*\]\s*([-\d, ]+)")


def _parse_exit_codes(text: str, n: int) -> list[int | None]:
    """Per-rank codes from hydra's ``-print-all-exitcodes`` line (raw wait statuses)."""
    m = _EXIT_CODES.search(text)
    if not m:
        return [None] * n
    codes: list[int | None] = []
    for s in m.group(1).replace(" ", "").split(","):
        if not s:
            continue
        st = int(s)
        codes.append(-(st & 0x7F) if st & 0x7F else (st >> 8) & 0xFF)
    return (codes + [None] * n)[:n]


def run_mpi(n: int, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None,
            mpiexec_args: Sequence[str] = ()) -> CompletedJob:
    """Run ``mpiexec -n n <python> argv...`` and wait for it.

    Each rank's stdout+stderr goes to its own file (hydra's ``-outfile-pattern``), so the
    output of different ranks never interleaves; per-rank exit codes come from
    ``-print-all-exitcodes``. ``mpiexec_args`` go before ``-n`` (e.g. ``["-bind-to", "none"]``).
    On timeout mpiexec gets SIGINT (hydra then kills its ranks), then SIGKILL to its group.
    """
    base = _base_env(env)
    cwd = cwd or REPO_ROOT
    with tempfile.TemporaryDirectory(prefix="archzoo-mpi-") as tmp:
        pattern = os.path.join(tmp, "rank.%r")
        cmd = [mpiexec_path(), *mpiexec_args, "-print-all-exitcodes",
               "-outfile-pattern", pattern, "-errfile-pattern", pattern,
               "-n", str(n), sys.executable, *argv]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=base, cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        timed_out = False
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            p.send_signal(signal.SIGINT)
            try:
                out, _ = p.communicate(timeout=3)
            except subprocess.TimeoutExpired:
                _kill_group(p)
                out, _ = p.communicate()
        finally:
            _kill_group(p)
        elapsed = time.monotonic() - t0
        text = out.decode(errors="replace")
        codes = _parse_exit_codes(text, n)
        ranks = []
        for r in range(n):
            path = os.path.join(tmp, f"rank.{r}")
            try:
                with open(path, "rb") as f:
                    rank_out = f.read().decode(errors="replace")
            except FileNotFoundError:
                rank_out = ""
            ranks.append(CompletedRank(rank=r, returncode=codes[r], output=rank_out,
                                       timed_out=timed_out, elapsed_s=elapsed))
    return CompletedJob(returncode=None if timed_out else p.returncode, output=text,
                        timed_out=timed_out, elapsed_s=elapsed, ranks=ranks)


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
