"""One rank of a run: join the group, play the architecture's role, leave cleanly.

Exit codes are honest under every launcher: 0 only when the run finished through the
stop protocol. On an error the rank prints one line naming what failed (a peer, a
deadline) and exits 1; under MPI it aborts the job, since MPICH would otherwise hang
the surviving ranks, unless the job outlives a dead rank (``ARCHZOO_MPI_SURVIVE``, set by
archzoo's launchers): then only rank 0 aborts, after it kept what it learnt, and another
rank just exits, for rank 0 to notice. gloo cannot withdraw posted receives, so a gloo
rank ends with ``os._exit`` after its final barrier (buffers flushed first); so does an
MPI rank, since ``MPI_Finalize`` waits without a deadline for every rank of the job, the
dead included.
"""

from __future__ import annotations

import os
import sys
import traceback

from archzoo.architectures import ArchModule
from archzoo.checkpoint import CheckpointError
from archzoo.comm import CommError
from archzoo.comm.factory import Launch, make_transport
from archzoo.config import RunConfig
from archzoo.harness import RankContext
from archzoo.harness.finish import abandon_run
from archzoo.progress import close_all


def _say(rank: int, msg: str) -> None:
    print(f"archzoo: rank {rank}: error: {msg}", file=sys.stderr, flush=True)


def run_rank(arch: ArchModule, args: RunConfig, launch: Launch, t_start: float) -> int:
    import torch

    torch.set_num_threads(args.threads)
    args = args.for_rank(launch.rank)  # --straggler: this rank's envs step slower
    if args.device == "auto":
        args = args.replace(device="cuda" if torch.cuda.is_available() else "cpu")
        if launch.rank == 0 and not args.quiet:
            found = "using CUDA" if args.device == "cuda" else "no CUDA device, using the CPU"
            print(f"archzoo: --device auto: {found}", flush=True)
    transport = None
    code, reason = 0, ""
    try:
        if launch.world_size > 1:
            transport = make_transport(args.backend, launch, args.comm_timeout,
                                       args.startup_timeout)
        summary = arch.run(RankContext(args, launch, transport, t_start))
        if summary is not None and not args.quiet:
            _print_summary(summary, args)
    except (CommError, TimeoutError, CheckpointError) as e:
        _say(launch.rank, str(e))
        code, reason = 1, str(e)
    except KeyboardInterrupt:
        code, reason = 130, "interrupted"
    except Exception as e:  # noqa: BLE001 - a bug: show where
        traceback.print_exc()
        _say(launch.rank, f"{type(e).__name__}: {e}")
        code, reason = 1, f"{type(e).__name__}: {e}"
    if code != 0:
        _keep_what_was_learnt(launch.rank, reason)
    close_all()  # a live progress panel left by a failed run
    if code == 0 and launch.rank == 0:
        _tell_launcher_done()
    if transport is not None:
        if code != 0 and transport.backend == "mpi" and (
                launch.rank == 0 or not os.environ.get("ARCHZOO_MPI_SURVIVE")):
            transport.abort(code)  # under a job that survives a death, rank 0 decides
        # Never MPI_Finalize: it ends in a PMI barrier of every rank of the job, without a
        # deadline, so a survivor hangs there for ever when any rank died (even one it never
        # talked to). The stop protocol's final barrier already met every live peer.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _tell_launcher_done() -> None:
    """Rank 0 finished the stop protocol: the embedded MPI launcher then reports success
    although mpiexec exits with a dead actor's code (archzoo/launcher.py)."""
    path = os.environ.get("ARCHZOO_DONE_FILE")
    if path:
        open(path, "w").close()


def _keep_what_was_learnt(rank: int, reason: str) -> None:
    """The deciding rank of a failed run writes a checkpoint, policy.pt and summary.json."""
    try:
        wrote = abandon_run(reason)
        if wrote:
            print(f"archzoo: rank {rank}: kept {', '.join(wrote)} of the failed run "
                  "(stop_reason: error)", file=sys.stderr, flush=True)
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
