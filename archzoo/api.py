"""archzoo from Python: :func:`run` an architecture, :func:`load_policy` of a finished run.

    import archzoo
    summary = archzoo.run("impala", env="CartPole-v1", actors=2, total_steps=200_000)
    policy = archzoo.load_policy(summary["run_dir"])
    actions = policy(observations)        # a batch of observations -> a batch of actions

The keyword arguments are the flags of ``archzoo run ARCH --help`` with ``_`` for ``-``
(``total_steps=`` for ``--total-steps``), checked by the same rules as the command line:
bad input raises :class:`~archzoo.errors.UsageError` with the command line's one-line
message instead of exiting with code 2. :func:`run` always starts the run's ranks as child
processes (embedded launching, gloo on loopback or the venv's mpiexec for ``backend="mpi"``),
so a notebook's own interpreter is never a rank; it blocks until they end and returns the
run's summary.json as a dict. ``archzoo run`` on the command line parses its flags into the
same config and launches through the same function, :func:`launch`. Both resolve a run
(config files, presets, resume, validation, the child ranks' argv) in archzoo/resolve.py;
:func:`load_policy` is archzoo/policy.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from archzoo import launcher
from archzoo.architectures import get
from archzoo.config import RunConfig, filled, flag_fields
from archzoo.errors import EXIT_USAGE, RunFailed, UsageError
from archzoo.policy import Policy, load_policy
from archzoo.resolve import (
    T_START,
    config_argv,
    did_you_mean,
    forward_argv,
    no_preset,
    preset_values,
    restart_argv,
    resumed_values,
    validate_run,
)

# Policy and load_policy live in archzoo/policy.py, config_argv and restart_argv in
# archzoo/resolve.py; they are re-exported here, where they were first.
__all__ = ["Policy", "config_argv", "launch", "load_policy", "restart_argv", "run"]


def _config(arch: str, flags: dict[str, Any]) -> RunConfig:
    """The architecture's config from keyword flags (and a ``config=`` file or bundled
    preset, ``config="minatar"``, beneath them; without one, the env family's preset, as on
    the command line, ``config="none"`` for none)."""
    try:
        cls = get(arch).config
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    names = {f.name for f in flag_fields(cls)}
    unknown = sorted(set(flags) - names)
    if unknown:
        raise UsageError(f"{arch} has no option {unknown[0]!r}"
                         f"{did_you_mean(unknown[0], sorted(names))} (the options are the flags of "
                         f"'archzoo run {arch} --help', with _ for -)")
    flags = dict(flags)
    if isinstance(flags.get("env_kwargs"), dict):
        flags["env_kwargs"] = json.dumps(flags["env_kwargs"])
    if isinstance(flags.get("env_import"), (list, tuple)):
        flags["env_import"] = ",".join(flags["env_import"])
    if flags.get("resume") is not None:
        arch, values = resumed_values(str(flags["resume"]), arch, flags, cls)
        return cls(arch=arch, **values)
    args = argparse.Namespace(arch=arch, **{k: flags[k] for k in ("config", "env") if k in flags})
    values = preset_values(args, cls)  # as the command line: the env family's preset too
    values.update(flags)
    return cls(arch=arch, **no_preset(values))


def launch(cfg: RunConfig, given: set[str], in_process: bool) -> tuple[int, RunConfig]:
    """Validate ``cfg`` (``given``: the fields the user set) and run it: the ranks as child
    processes, or this process as the only rank (``in_process``: the command line's way
    for a one-process run and under a launcher). Returns the run's exit code and the
    resolved config (backend, actors, run directory filled in)."""
    record, where, resolved, world = validate_run(cfg, given)
    if where.under_launcher or (world == 1 and in_process):
        if not in_process:
            raise UsageError("archzoo.run starts its own processes: call it outside torchrun "
                             "or mpiexec (under a launcher use the archzoo command)")
        from archzoo.worker import run_rank

        return run_rank(record.load(), resolved, where, T_START), resolved
    child = forward_argv(config_argv(cfg, given), resolved)
    with launcher.stop_signals():  # SIGINT/SIGTERM/SIGHUP stop the ranks
        backend = filled(resolved.backend, "--backend")
        run_dir = filled(resolved.run_dir, "--run-dir")
        code = _start(child, world, backend)
        for attempt in range(1, resolved.max_restarts + 1):
            if code in (0, EXIT_USAGE, 130) or launcher.stop_requested():
                break
            from archzoo.checkpoint import latest

            if latest(run_dir) is None:
                print(f"archzoo: the run failed (exit code {code}) before its first "
                      "checkpoint: nothing to restart from", file=sys.stderr, flush=True)
                break
            wait = min(30.0, 2.0 ** (attempt - 1))
            print(f"archzoo: the run failed (exit code {code}); restart {attempt} of "
                  f"{resolved.max_restarts} in {wait:.0f}s from its latest checkpoint",
                  file=sys.stderr, flush=True)
            end = time.time() + wait
            while time.time() < end and not launcher.stop_requested():
                time.sleep(0.05)
            signum = launcher.stop_requested()
            if signum:
                code = 128 + signum
                break
            code = _start(restart_argv(cfg, given, run_dir), world, backend)
    return code, resolved


def _start(child: list[str], world: int, backend: str) -> int:
    """The ranks of one launch as child processes; their exit code."""
    if world == 1:
        return launcher.run_one(child)
    if backend == "mpi":
        return launcher.run_mpiexec(child, world)
    return launcher.run_gloo(child, world)


def run(arch: str, **flags: Any) -> dict[str, Any]:
    """Run ``arch`` with the flags as keyword arguments; returns its summary.json as a dict
    (with ``run_dir`` added). Raises UsageError for bad input, RunFailed if a rank failed."""
    code, resolved = launch(_config(arch, flags), set(flags), in_process=False)
    summary_path = Path(filled(resolved.run_dir, "--run-dir")) / "summary.json"
    if code != 0 or not summary_path.is_file():
        raise RunFailed(f"archzoo run {arch} ended with exit code {code}; its run directory "
                        f"is {resolved.run_dir}", code)
    return dict(json.loads(summary_path.read_text()), run_dir=str(resolved.run_dir))
