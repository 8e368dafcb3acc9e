"""Start a group of ranks on this machine and watch it to the end: the one spawner behind
archzoo's own launch (archzoo/launcher.py), ``archzoo bench comm`` (archzoo/benchcomm/) and
the multi-process tests (tests/mp.py). :func:`run_ranks` is the function; ``argv`` is what
follows the interpreter (``["-m", "archzoo", "run", "impala"]``, ``["tests/x.py", "gloo"]``).

How the ranks start, by ``backend``:

- ``gloo``: ``n`` processes, each with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT`` (what torchrun
  would set). Where ``argv`` is ``-m MODULE ...`` or ``SCRIPT.py ...`` they are forks of a
  server that imported torch once (:mod:`archzoo.forkstart`), unless ``ARCHZOO_FORK=0``.
- ``mpi``: one ``mpiexec -n n`` (the venv's, from the mpich wheel), leading a session of its
  own so that it is killed as a group. With ``survive`` the job outlives a dead rank:
  ``-disable-auto-cleanup``, and every rank runs under a shell (:data:`RANK_SHELL`) that
  turns its death into an exit code, takes hydra's SIGUSR1 notice, and writes ``RANK CODE``
  to a file from which the deaths are read as they happen.
- ``none``: one plain process without a launcher's variables (a one-process run).
- ``hosts`` (:class:`archzoo.simhosts.SimHosts`, with gloo or mpi): the ranks split over the
  simulated hosts and started as on separate machines (:mod:`archzoo.multinode`: a torchrun
  per host, or one mpiexec with a host file).

``capture``: each rank's stdout and stderr go to a file of its own (gloo: the process's; MPI:
hydra's ``-outfile-pattern``, with ``-print-all-exitcodes`` for each rank's code) and come back
in the result, and stdin is /dev/null; gloo ranks then also run in sessions of their own.
Without it the ranks share this process's terminal and gloo ranks stay in its process group
(Ctrl-C reaches them too).

Supervision, every :data:`POLL_S` until every process has ended:

- a rank that fails (non-zero exit) is a *death*; ``on_death(rank, code)`` says how many
  seconds the others get before they are killed (0: now; None: they go on), by default
  ``grace_s`` (None: they go on). Under MPI without ``survive`` and across hosts, a death
  is a launcher process's (mpiexec, a torchrun), numbered by its position;
- past ``timeout_s`` everything is killed and the result is ``timed_out`` (code 124);
- when ``stop()`` returns a signal number (archzoo.launcher.stop_requested), the signal goes
  on to every rank (below mpiexec, to the ranks themselves: hydra would kill them at once),
  the ranks get :data:`STOP_GRACE_S` to end, then what is left is killed (code 128 +
  signal). A KeyboardInterrupt does the same with SIGINT when ``stop`` is given, else
  kills the group and goes on up.

Killing is SIGKILL to each process, to the group it leads (mpiexec), and to every process
found below it (from /proc): nothing is left running when :func:`run_ranks` returns.

No rank outlives this process either (archzoo.lifeline): the ranks' environment names it
(``ARCHZOO_LAUNCHER_PID``), so that an archzoo rank stops as on SIGTERM when it dies, and
its temporary folder (``ARCHZOO_LAUNCHER_TMP``, ``workdir``), which such a rank removes
then; and supervision follows the ranks that are not its children:

- a forked rank's parent is the fork server: should the server die, the ranks (whose
  parent it was) stop, and each is watched by its pid until it ended; a line says so, and
  what is left after :data:`ORPHAN_GRACE_S` is killed;
- the processes below mpiexec and the torchruns are noted every :data:`KNOWN_EVERY_S` (pid
  and start time): where a launcher process ended and left some of them running, they get
  :data:`ORPHAN_GRACE_S` to end, then are killed, as they are by any kill.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from archzoo import envvars, forkstart, lifeline, procfs

if TYPE_CHECKING:
    from archzoo.simhosts import SimHosts

# a rank's working directory (None: this process's)
Cwd = str | os.PathLike[str] | None

__all__ = ["BACKENDS", "Group", "RankResult", "clean_env", "descendants", "find_mpiexec",
           "free_port", "run_ranks"]

BACKENDS = ("gloo", "mpi", "none")
POLL_S = 0.02
STOP_GRACE_S = 10.0  # after a stop signal: time for the ranks to save and end
ORPHAN_GRACE_S = 15.0  # ranks whose launcher process (fork server, mpiexec) died: to end
KNOWN_EVERY_S = 0.5  # how often the processes below the launcher processes are noted
REPO_ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", envvars.EMBEDDED, envvars.LAUNCHER_PID, envvars.LAUNCHER_TMP)
LAUNCHER_PREFIXES = ("PMI_", "OMPI_", "PMIX_", "TORCHELASTIC_")
_HOST_PORTS = itertools.count(29400)  # rendezvous ports on simulated hosts (fresh per job)

# The MPI job outlives a dead rank, so that rank 0 decides whether the run goes on without
# it. -disable-auto-cleanup alone is not enough: hydra still kills the job when a rank dies
# by a signal, and tells the others with SIGUSR1. So every rank runs under a shell that
# turns its death into an exit code and takes that notice (launch/mpirun.sh does the same),
# and ARCHZOO_MPI_SURVIVE tells a failing rank other than 0 to exit rather than abort.
MPI_SURVIVE = ["-disable-auto-cleanup"]
_DEATHS = "$" + envvars.DEATHS_FILE
# (The echo is quiet where the file's folder is gone: the launcher died, and a rank that
# outlived it removed the folder, archzoo.lifeline.clean_up.)
RANK_SHELL = ["sh", "-c", f'trap : USR1; "$@"; c=$?; [ "$c" = 0 ] || [ -z "{_DEATHS}" ]'
              f' || echo "$PMI_RANK $c" 2>/dev/null >> "{_DEATHS}"; exit $c', "archzoo-rank"]


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for ranks it starts as a job of their own: without a
    launcher's variables (a rank must not take this process's place for its own), with
    ``PYTHONUNBUFFERED=1`` (output survives a kill), ``OMP_NUM_THREADS=1`` and this
    repository first on ``PYTHONPATH``; then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    env.update(extra or {})
    return env


@dataclass
class RankResult:
    """One rank of a finished group.

    ``returncode``: its exit code, negative for a signal (``-9``: killed); None where it
    is not known (an MPI rank whose code hydra did not report). ``output``: its stdout and
    stderr as written (with ``capture``; else ""). ``timed_out``: it was still running at
    the group's timeout, so killed. ``elapsed_s``: seconds from the start until it ended
    (MPI: until the job ended).
    """

    rank: int
    returncode: int | None
    output: str = ""
    timed_out: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def lines(self) -> list[str]:
        return self.output.splitlines()


@dataclass
class Group:
    """A finished group of ranks (:func:`run_ranks`).

    ``returncode``: 128 + the signal if stopped; 124 if timed out; else the first death's
    code, or the first non-zero exit of the processes started, or 0 (a signal's negative
    code becomes 1). ``launcher_codes``: the exit codes of the processes started (gloo: the
    ranks; MPI: mpiexec; hosts: each launcher). ``output``: what mpiexec or the torchruns
    printed themselves (with ``capture``). ``ranks``: one entry per rank (none across
    hosts, where the ranks' output is in ``output``)."""

    backend: str
    returncode: int
    ranks: list[RankResult]
    launcher_codes: list[int]  # all known: the group waited for every process
    output: str = ""
    timed_out: bool = False
    stopped: int | None = None
    elapsed_s: float = 0.0
    deaths: dict[int, int] = field(default_factory=dict)

    def all_output(self) -> str:
        """Every rank's output, then the launchers'."""
        return "".join(r.output for r in self.ranks) + self.output


def run_ranks(n: int, argv: Sequence[str], backend: str = "gloo", *,
              env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
              capture: bool = False, timeout_s: float | None = None,
              grace_s: float | None = None,
              on_death: Callable[[int, int], float | None] | None = None,
              stop: Callable[[], int | None] | None = None, survive: bool = False,
              mpiexec_args: Sequence[str] = (), hosts: SimHosts | None = None,
              slots: Sequence[int] | None = None, workdir: Path | None = None) -> Group:
    """Start ``n`` ranks of ``python argv...`` over ``backend`` and supervise them until every
    one has ended (see the module's docstring); the :class:`Group`'s result.

    ``env``: the ranks' environment (default :func:`clean_env`); the launcher's own
    variables are added to it. ``cwd``: their working directory. ``mpiexec_args`` go
    before ``-n``. ``hosts``: a :class:`~archzoo.simhosts.SimHosts` to split the ranks over,
    ``slots[i]`` of them on host i (default: as evenly as they go, the first hosts fuller).
    ``workdir``: the folder for the job's own files (the caller's, which it removes; default
    a temporary folder, removed at the end).
    """
    if backend not in BACKENDS or (backend == "none" and (n != 1 or hosts is not None)):
        raise ValueError(f"backend {backend!r}, {n} ranks: choose gloo or mpi, or none for "
                         "one rank on this host")
    if slots is not None and (hosts is None or len(slots) != len(hosts.hosts)
                              or sum(slots) != n or min(slots) < 0):
        raise ValueError(f"slots {list(slots)}: one count per simulated host, {n} in all")
    base = clean_env() if env is None else dict(env)
    with ExitStack() as stack:
        tmp = workdir if workdir is not None else \
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="archzoo-ranks-")))
        # the ranks stop when we die, and remove our folder
        base.update({envvars.LAUNCHER_PID: lifeline.this_process(),
                     envvars.LAUNCHER_TMP: str(tmp)})
        job = _Job(n, backend, capture, tmp)
        stack.callback(job.kill)  # whatever happens, nothing is left running
        stack.callback(job.close_files)
        if stop is not None and (signum := stop()):
            return job.result(signum)
        if hosts is not None:
            job.start_on_hosts(hosts, slots, argv, base, cwd)
        elif backend == "mpi":
            job.start_mpiexec(argv, base, cwd, survive, mpiexec_args)
        else:
            port = str(free_port())
            for r in range(n):
                if stop is not None and stop():
                    break
                extra = {} if backend == "none" else dict(
                    RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
                if backend == "gloo" and envvars.fork_ranks() and forkstart.forkable(argv):
                    job.fork(argv, dict(base, **extra), cwd, tmp / f"rank.{r}")
                else:
                    job.start([sys.executable, *argv], dict(base, **extra), cwd,
                              tmp / f"rank.{r}")
        signum = job.supervise(timeout_s, on_death or (lambda rank, code: grace_s), stop,
                               [sys.executable, *argv[:2]])
        return job.result(signum)


class _Job:
    """The processes of one :func:`run_ranks` call and their files."""

    def __init__(self, n: int, backend: str, capture: bool, tmp: Path) -> None:
        self.n, self.backend, self.capture, self.tmp = n, backend, capture, tmp
        self.kind = "ranks"  # a process per rank; "mpiexec": one for all; "hosts": launchers
        self.procs: list[subprocess.Popen[bytes] | forkstart.ForkedRank] = []
        self.files: list[IO[bytes]] = []
        self.t0 = time.monotonic()
        self.ended: dict[int, float] = {}  # process index -> seconds from t0 to its end
        self.noted: dict[int, int] = {}  # rank -> code of each death noted, in order
        self.deaths_file: Path | None = None
        self.rank_files: Path | None = None  # MPI: hydra's per-rank output files
        self.timed_out = False
        self.killed_at: float | None = None
        self.known: dict[int, int] = {}  # pid -> start time of processes below launchers
        self._noted_at = 0.0
        self.server_lost = False  # the fork server of forked ranks died

    # -- starting -----------------------------------------------------------------------------
    def start(self, cmd: list[str], env: dict[str, str], cwd: Cwd, out: Path) -> None:
        # Popen's defaults unless captured (or a launcher: mpiexec, torchrun, in a group)
        f: IO[bytes] | None = None
        stderr: int | None = None
        stdin: int | None = None
        session = False
        if self.capture:
            f = open(out, "w+b")  # noqa: SIM115 - closed with the job
            self.files.append(f)
            stderr, stdin, session = subprocess.STDOUT, subprocess.DEVNULL, True
        elif cmd[0] != sys.executable:
            session = True
        self.procs.append(subprocess.Popen(cmd, env=env, cwd=cwd, stdout=f, stderr=stderr,
                                           stdin=stdin, start_new_session=session))

    def fork(self, argv: Sequence[str], env: dict[str, str], cwd: Cwd, out: Path) -> None:
        """A rank forked from archzoo.forkstart's server rather than started afresh."""
        self.procs.append(forkstart.start(argv, env, cwd, out if self.capture else None,
                                          session=self.capture))

    def start_mpiexec(self, argv: Sequence[str], env: dict[str, str], cwd: Cwd, survive: bool,
                      mpiexec_args: Sequence[str]) -> None:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            raise FileNotFoundError("mpiexec not found (pip install mpich)")
        self.kind = "mpiexec"
        pre, wrap = list(mpiexec_args), []
        if survive:
            self.deaths_file = self.tmp / "deaths"
            env = dict(env, **{envvars.MPI_SURVIVE: "1",
                               envvars.DEATHS_FILE: str(self.deaths_file)})
            pre, wrap = [*MPI_SURVIVE, *pre], RANK_SHELL
        if self.capture:
            self.rank_files = self.tmp / "out"
            self.rank_files.mkdir()
            pattern = str(self.rank_files / "rank.%r")
            pre += ["-print-all-exitcodes", "-outfile-pattern", pattern,
                    "-errfile-pattern", pattern]
        self.start([mpiexec, *pre, "-n", str(self.n), *wrap, sys.executable, *argv], env, cwd,
                   self.tmp / "mpiexec")

    def start_on_hosts(self, hosts: SimHosts, slots: Sequence[int] | None, argv: Sequence[str],
                       env: dict[str, str], cwd: Cwd) -> None:
        from archzoo import multinode

        self.kind = "hosts"
        e = multinode.cross_env(self.backend, env)
        if slots is None:
            slots = multinode.spread(self.n, len(hosts.hosts))
        cmds = multinode.commands(hosts, slots, self.backend, list(argv), next(_HOST_PORTS))
        for i, c in enumerate(cmds):
            self.start(c, e, cwd, self.tmp / f"launcher.{i}")

    # -- watching -----------------------------------------------------------------------------
    def deaths(self) -> dict[int, int]:
        """rank (or launcher process) -> exit code of each that failed so far."""
        if self.deaths_file is not None:  # MPI that survives: the ranks' shells say
            out: dict[int, int] = {}
            path = self.deaths_file
            lines = path.read_text().splitlines() if path.exists() else []
            for rank, _, rc in (line.partition(" ") for line in lines):
                if rank.isdigit() and rc.isdigit():
                    out.setdefault(int(rank), int(rc))
            return out
        return {i: code for i, p in enumerate(self.procs)
                if (code := p.poll()) is not None and code != 0}

    def note_below(self, now: float) -> None:
        """Note the processes below the launcher processes (mpiexec and its proxies, shells
        and ranks; a torchrun's ranks), every KNOWN_EVERY_S."""
        if self.kind == "ranks" or now - self._noted_at < KNOWN_EVERY_S:
            return
        self._noted_at = now
        for p in self.procs:
            if p.poll() is None:
                for d in descendants(p.pid):
                    if d not in self.known and (start := lifeline.start_time(d)) is not None:
                        self.known[d] = start

    def orphans(self) -> list[int]:
        """Noted processes still running (once their launcher process ended, nobody else
        watches them)."""
        return [pid for pid, start in self.known.items() if lifeline.alive((pid, start))]

    def fork_server_died(self) -> bool:
        """Whether the fork server of forked ranks still running died (said once)."""
        if self.server_lost:
            return False
        forked = [p for p in self.procs if isinstance(p, forkstart.ForkedRank)]
        if not forked or not forked[0].orphaned():
            return False
        self.server_lost = True
        left = [str(i) for i, p in enumerate(self.procs) if p.poll() is None]
        print(f"archzoo: the fork server (pid {forked[0].server}) died; ranks "
              f"{','.join(left) or '-'}, which it started, lost their parent and stop",
              file=sys.stderr, flush=True)
        return True

    def supervise(self, timeout_s: float | None,
                  on_death: Callable[[int, int], float | None],
                  stop: Callable[[], int | None] | None, rank_cmd: list[str]) -> int | None:
        """Watch until every process ended; the stop signal that ended it, if one did."""
        deadline = None if timeout_s is None else self.t0 + timeout_s
        kill_at: float | None = None
        orphans_until: float | None = None
        try:
            while True:
                now = time.monotonic()
                self.note_below(now)
                if self.fork_server_died():  # before the ranks' ends: it is why they end
                    kill_at = min(kill_at or math.inf, now + ORPHAN_GRACE_S)
                for i, p in enumerate(self.procs):
                    if i not in self.ended and p.poll() is not None:
                        self.ended[i] = now - self.t0
                if len(self.ended) == len(self.procs):
                    left = self.orphans()
                    if not left or (orphans_until is not None and now > orphans_until):
                        break  # kill() takes what is left
                    if orphans_until is None:
                        orphans_until = now + ORPHAN_GRACE_S
                        print(f"archzoo: the launcher process ended and left {len(left)} of "
                              f"its processes running; they get {ORPHAN_GRACE_S:.0f}s to end",
                              file=sys.stderr, flush=True)
                if stop is not None and (signum := stop()):
                    return self.stop(signum, rank_cmd)
                for rank, rc in self.deaths().items():
                    if rank in self.noted:
                        continue
                    self.noted[rank] = rc
                    if self.server_lost:  # said once above; their codes are lost with it
                        continue
                    grace = on_death(rank, rc)
                    if grace is not None:
                        kill_at = now + grace if kill_at is None else min(kill_at, now + grace)
                if deadline is not None and now > deadline:
                    self.timed_out = True
                    self.kill()
                    break
                if kill_at is not None and now > kill_at and self.killed_at is None:
                    self.kill()
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            if stop is None:
                raise
            return self.stop(signal.SIGINT, rank_cmd)
        if stop is not None and (signum := stop()):
            return self.stop(signum, rank_cmd)
        return None

    def kill(self) -> None:
        """SIGKILL what is left: each process, the group it leads, what runs below it."""
        if self.killed_at is None and any(p.poll() is None for p in self.procs):
            self.killed_at = time.monotonic()
        below = [d for p in self.procs if p.poll() is None for d in descendants(p.pid)]
        below += self.orphans()
        for p in self.procs:
            if p.poll() is None:
                try:
                    if os.getpgid(p.pid) == p.pid:
                        os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.kill()
        _signal(below, signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, signum: int, rank_cmd: list[str]) -> int:
        """A stop signal: send it on to every rank (a child itself, or under a launcher the
        ranks below it, which run in sessions of their own), wait STOP_GRACE_S for them to
        end, then kill what is left."""
        below = {p.pid: descendants(p.pid) for p in self.procs}
        for p in self.procs:
            if p.poll() is None:
                ranks = [d for d in below[p.pid] if _runs(d, rank_cmd)]
                if ranks:  # below mpiexec: the ranks, not hydra (which would kill them at once)
                    _signal(ranks, signum)
                else:
                    p.send_signal(signum)
        deadline = time.time() + STOP_GRACE_S
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        left = [d for pids in below.values() for d in pids]
        self.kill()
        for p in self.procs:  # what started since, and what outlived mpiexec
            left += descendants(p.pid)
        _signal(left, signal.SIGKILL)
        print(f"archzoo: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
        return signum

    # -- the result ---------------------------------------------------------------------------
    def close_files(self) -> None:
        for f in self.files:
            f.close()

    def _read(self, path: Path) -> str:
        try:
            return path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def result(self, stopped: int | None) -> Group:
        codes = [p.wait() for p in self.procs]
        elapsed = time.monotonic() - self.t0
        ranks: list[RankResult] = []
        output = ""
        if self.kind == "mpiexec":
            output = self._read(self.tmp / "mpiexec") if self.capture else ""
            known = _exit_codes(output, self.n)
            if self.deaths_file is not None:
                for r, rc in self.deaths().items():
                    if 0 <= r < self.n:
                        known[r] = rc
            for r in range(self.n):
                out = self._read(self.rank_files / f"rank.{r}") if self.rank_files else ""
                ranks.append(RankResult(r, known[r], out, self.timed_out, elapsed))
        elif self.kind == "ranks":
            for r, rc in enumerate(codes):
                killed = r not in self.ended
                out = self._read(self.tmp / f"rank.{r}") if self.capture else ""
                ranks.append(RankResult(r, rc, out, killed and self.timed_out,
                                        self.ended.get(r, elapsed)))
        else:  # across hosts: the launchers' output holds the ranks'
            output = "".join(self._read(self.tmp / f"launcher.{i}")
                             for i in range(len(self.procs))) if self.capture else ""
        if stopped:
            code = 128 + stopped
        elif self.timed_out:
            code = 124
        else:
            code = next(iter(self.noted.values()), 0) or next((c for c in codes if c), 0)
            code = 1 if code < 0 else code
        return Group(self.backend, code, ranks, codes, output, self.timed_out, stopped,
                     elapsed, dict(self.noted))


_EXIT_CODES = re.compile(r"Exit codes: \[[^\]]*\]\s*([-\d, ]+)")


def _exit_codes(text: str, n: int) -> list[int | None]:
    """Per-rank codes from hydra's ``-print-all-exitcodes`` line (raw wait statuses)."""
    m = _EXIT_CODES.search(text)
    if not m:
        return [None] * n
    codes: list[int | None] = []
    for s in m.group(1).replace(" ", "").split(","):
        if s:
            st = int(s)
            codes.append(-(st & 0x7F) if st & 0x7F else (st >> 8) & 0xFF)
    return (codes + [None] * n)[:n]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for e in procfs.pids():
        up = procfs.parent(e)
        if up is not None:
            children.setdefault(up, []).append(e)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _runs(pid: int, head: list[str]) -> bool:
    """``pid``'s command line starts with ``head`` (a rank, not mpiexec, its proxy or a
    shell)."""
    cmd = procfs.cmdline(pid)
    return cmd is not None and cmd[:len(head)] == [os.fsencode(x) for x in head]


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
