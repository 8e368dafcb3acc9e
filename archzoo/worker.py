"""One rank of a run: join the group, play the architecture's role, leave cleanly.

Exit codes are honest under every launcher: 0 only when the run finished through the
stop protocol. On an error the rank prints one line naming what failed (a peer, a
deadline) and exits 1; under MPI it aborts the job, since MPICH would otherwise hang
the surviving ranks, unless the job outlives a dead rank (``ARCHZOO_MPI_SURVIVE``, set by
archzoo's launchers): then only rank 0 aborts, after it kept what it learnt, and another
rank just exits, for rank 0 to notice. gloo cannot withdraw posted receives, so a gloo
rank ends with ``os._exit`` after its final barrier (buffers flushed first); so does an
MPI rank under archzoo's own launcher. Under a plain mpiexec an MPI rank calls
``MPI_Finalize`` (with a deadline: it waits for every rank of the job, the dead included)
and leaves through the C library's ``exit``, which hydra needs to see the rank done.

SIGTERM and SIGHUP end a rank as Ctrl-C does (:class:`Stopped`, a KeyboardInterrupt): the
deciding rank keeps a checkpoint, policy.pt and summary.json with ``stop_reason``
"signal: SIGTERM" (Ctrl-C: "interrupted"), and the rank exits with 128 + the signal's
number. Later stop signals are ignored, so that saving is not cut short (the launcher
kills a rank that takes too long).

A rank that a launcher started does not outlive it (archzoo/lifeline.py): when its parent or
its launcher dies (``kill -9``, an OOM kill, a scheduler that signalled only the launcher),
the kernel's parent-death signal or the lifeline's watch sends it SIGTERM, and the rank ends
as on SIGTERM, with ``stop_reason`` "launcher lost" and one line naming what died (also when
the end of a peer, which lost the launcher too, reaches it first, as a failed peer). With no
launcher left to kill it, it gives itself ``--comm-timeout`` seconds to do so, then exits;
either way it removes the launcher's temporary folder, if the launcher itself is gone
(:func:`archzoo.lifeline.clean_up`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType

from archzoo import envvars, lifeline
from archzoo.architectures import ArchModule
from archzoo.checkpoint import CheckpointError
from archzoo.comm import CommError
from archzoo.comm.factory import Launch, make_transport
from archzoo.comm.mpi import MPITransport
from archzoo.config import RunConfig, filled
from archzoo.harness import RankContext
from archzoo.harness.finish import abandon_run
from archzoo.progress import close_all

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Handler = Callable[[int, FrameType | None], object] | int | None  # signal.getsignal's


class Stopped(KeyboardInterrupt):
    """A stop signal other than SIGINT (SIGTERM, SIGHUP) arrived: end as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class LauncherLost(Stopped):
    """SIGTERM because the process that launched this rank (or its parent) died."""

    REASON = "launcher lost"

    def __init__(self, why: str) -> None:
        super().__init__(signal.SIGTERM)
        self.why = why


_OWN_DEADLINE_S = [60.0]  # --comm-timeout: how long a rank whose launcher died may take


def _ignore_stop_signals() -> None:
    for s in STOP_SIGNALS:  # from now on: what follows saves the run, and must not be cut short
        signal.signal(s, signal.SIG_IGN)


def _on_stop_signal(signum: int, frame: object) -> None:
    _ignore_stop_signals()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    if signum == signal.SIGTERM and (why := lifeline.lost()):
        _end_by_own_deadline(128 + signum)  # at once: unwinding to the save may hang too
        raise LauncherLost(why)
    raise Stopped(signum)


_OWN_TIMER: list[threading.Timer] = []


def _end_by_own_deadline(code: int) -> None:
    """No launcher is left to kill this rank if saving hangs: it ends itself after
    ``--comm-timeout`` (one timer, however often asked)."""
    if not _OWN_TIMER:
        _OWN_TIMER.append(threading.Timer(_OWN_DEADLINE_S[0], _exit_without_launcher,
                                          args=(code,)))
        _OWN_TIMER[0].daemon = True
        _OWN_TIMER[0].start()


def _launcher_lost(rank: int, e: LauncherLost) -> tuple[int, str, bool]:
    """The launcher is gone (this rank's SIGTERM, or the peers' ends that it caused, met
    first): the rank stops as on SIGTERM, and as no launcher is left to kill it if saving
    hangs, it ends itself after ``--comm-timeout``. (exit code, stop reason, error)"""
    if threading.current_thread() is threading.main_thread():
        _ignore_stop_signals()  # the watch's SIGTERM may still come: saving goes on
    _end_by_own_deadline(128 + e.signum)
    print(f"archzoo: rank {rank}: {e.why}: the rank stops (stop_reason: "
          f"{LauncherLost.REASON})", file=sys.stderr, flush=True)
    return 128 + e.signum, LauncherLost.REASON, False


def _exit_without_launcher(code: int) -> None:
    lifeline.clean_up()
    os._exit(code)


def _catch_stop_signals() -> dict[signal.Signals, Handler]:
    """Install :func:`_on_stop_signal`; returns the handlers it replaced (none outside the
    main thread, where handlers cannot be installed)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _on_stop_signal)
    return before


def _restore(handlers: dict[signal.Signals, Handler]) -> None:
    for s, handler in handlers.items():
        signal.signal(s, handler if handler is not None else signal.SIG_DFL)


FINALIZE_S = 10.0  # longest wait in MPI_Finalize before a rank just exits


def _say(rank: int, msg: str) -> None:
    print(f"archzoo: rank {rank}: error: {msg}", file=sys.stderr, flush=True)


def run_rank(arch: ArchModule, args: RunConfig, launch: Launch, t_start: float) -> int:
    import torch

    torch.set_num_threads(args.threads)
    args = args.for_rank(launch.rank)  # --straggler: this rank's envs step slower
    if args.device == "auto":
        args = args.replace(device="cuda" if torch.cuda.is_available() else "cpu")
        if launch.rank == 0 and not args.quiet and args.device == "cuda":
            print("archzoo: --device auto: using CUDA", flush=True)  # the CPU goes unsaid
    transport = None
    code, reason, error = 0, "", True
    handlers = _catch_stop_signals()
    _OWN_DEADLINE_S[0] = args.comm_timeout
    try:
        if launch.under_launcher or os.environ.get(envvars.LAUNCHER_PID):
            lifeline.watch()  # SIGTERM when the launcher dies (a one-process run has none)
        if launch.world_size > 1:
            transport = make_transport(filled(args.backend, "--backend"), launch, args.comm_timeout,
                                       args.startup_timeout)
        summary = arch.run(RankContext(args, launch, transport, t_start))
        if summary is not None and not args.quiet:
            _print_summary(summary, args)
    except (CommError, TimeoutError, CheckpointError) as e:
        if (why := lifeline.lost()) is not None:  # the peers ended with the launcher
            code, reason, error = _launcher_lost(launch.rank, LauncherLost(why))
        else:
            _say(launch.rank, str(e))
            code, reason = 1, str(e)
    except LauncherLost as e:
        code, reason, error = _launcher_lost(launch.rank, e)
    except Stopped as e:
        code, reason, error = 128 + e.signum, f"signal: {signal.Signals(e.signum).name}", False
    except KeyboardInterrupt:
        code, reason, error = 130, "interrupted", False
    except Exception as e:  # noqa: BLE001 - a bug: show where
        traceback.print_exc()
        _say(launch.rank, f"{type(e).__name__}: {e}")
        code, reason = 1, f"{type(e).__name__}: {e}"
    if code != 0:
        _keep_what_was_learnt(launch.rank, reason, error)
    lifeline.clean_up()  # if the launcher is gone (whatever ended this rank): its folder
    close_all()  # a live progress panel left by a failed run
    lifeline.unwatch()
    _restore(handlers)
    if code == 0 and launch.rank == 0:
        envvars.mark_done()
    if transport is not None:
        survive = envvars.mpi_survive()
        ends_job = launch.rank == 0 or not survive  # under a job that survives, rank 0 decides
        if not error:  # a stop signal reached every rank; archzoo's launcher kills the rest
            ends_job = launch.rank == 0 and not survive  # and rank 0 may still be saving
        if reason == LauncherLost.REASON:  # nobody to tell: mpiexec itself may be gone
            ends_job = False
        if code != 0 and isinstance(transport, MPITransport) and ends_job:
            transport.abort(code)
        sys.stdout.flush()
        sys.stderr.flush()
        if isinstance(transport, MPITransport) and code == 0 and not survive:
            # A plain mpiexec ends the job when a rank leaves without MPI_Finalize, so leave
            # properly, but with a deadline: MPI_Finalize ends in a PMI barrier of every rank
            # of the job, which never completes once any rank died (even one this rank
            # never talked to). Not skipped when a peer looks gone: a peer that finalized
            # and left first looks gone too, and leaving unfinalized then got the ranks
            # still finishing killed. Under archzoo's own launcher (a job that outlives a
            # dead rank) no rank finalizes: the stop protocol's final barrier met every
            # live peer.
            transport.finalize_and_exit(deadline_s=FINALIZE_S, code=code)
        os._exit(code)
    return code


def _keep_what_was_learnt(rank: int, reason: str, error: bool = True) -> None:
    """The deciding rank of a failed or stopped run writes a checkpoint, policy.pt and
    summary.json (``error``: the stop reason is "error: ``reason``", else ``reason``)."""
    try:
        wrote = abandon_run(reason, error=error)
        if wrote:
            what = "failed run (stop_reason: error)" if error else \
                f"stopped run (stop_reason: {reason})"
            print(f"archzoo: rank {rank}: kept {', '.join(wrote)} of the {what}",
                  file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - never hide the first error behind a second
        _say(rank, f"could not save the failed run: {type(e).__name__}: {e}")


def _print_summary(s: dict, args: RunConfig) -> None:
    ttt = s.get("time_to_target_s")
    solved = f"solved in {ttt:.1f}s / {s['env_steps_to_target']:,} steps" if ttt is not None \
        else f"not solved ({s['stop_reason']})"
    mean = s.get("final_mean_return")
    mean_s = "-" if mean is None else f"{mean:.1f}"
    print(f"[{s['arch']}] {s['env']} {s['backend']} {s['mode']} world={s['world_size']}: "
          f"{solved}; final return100={mean_s}; {s['env_steps']:,} steps at "
          f"{s['fps']:,.0f} fps; run dir {args.run_dir}", flush=True)
