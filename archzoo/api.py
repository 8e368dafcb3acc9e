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
same config and launches through the same function, :func:`launch`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from archzoo.config import RunConfig, flag_fields, flag_name
from archzoo.errors import EXIT_USAGE, RunFailed, UsageError

__all__ = ["Policy", "config_argv", "launch", "load_policy", "run"]


def config_argv(cfg: RunConfig, names: Iterable[str]) -> list[str]:
    """``["run", ARCH, "--flag", "value", ...]`` for the fields ``names`` of ``cfg``: the
    command line that parses back into the same values (booleans as ``--x``/``--no-x``)."""
    fields = {f.name: f for f in flag_fields(type(cfg))}
    argv = ["run", cfg.arch]
    for name in sorted(names):
        value, flag, f = getattr(cfg, name), flag_name(name), fields[name]
        if value is None or (value is False and f.default is False):
            continue  # the default: None is never spelled, a store_true flag has no --no-
        if str(f.type).split("|")[0].strip() == "bool":
            argv.append(flag if value else f"--no-{flag[2:]}")
        else:
            argv += [flag, str(value)]
    return argv


def _config(arch: str, flags: dict[str, Any]) -> RunConfig:
    """The architecture's config from keyword flags (and a ``config=`` file or bundled
    preset, ``config="minatar"``, beneath them)."""
    from archzoo.architectures import get
    from archzoo.cli import _load_config_file, did_you_mean

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
        from archzoo.cli import resumed_values

        arch, values = resumed_values(str(flags["resume"]), arch, flags, cls)
        return cls(arch=arch, **values)
    values = _load_config_file(flags["config"], cls, arch) if flags.get("config") else {}
    values.update(flags)
    return cls(arch=arch, **values)


def launch(cfg: RunConfig, given: set[str], in_process: bool) -> tuple[int, RunConfig]:
    """Validate ``cfg`` (``given``: the fields the user set) and run it: the ranks as child
    processes, or this process as the only rank (``in_process``: the command line's way
    for a one-process run and under a launcher). Returns the run's exit code and the
    resolved config (backend, actors, run directory filled in)."""
    from archzoo.cli import T_START, _forward_argv, validate_run

    record, where, resolved, world = validate_run(cfg, given)
    if where.under_launcher or (world == 1 and in_process):
        if not in_process:
            raise UsageError("archzoo.run starts its own processes: call it outside torchrun "
                             "or mpiexec (under a launcher use the archzoo command)")
        from archzoo.worker import run_rank

        return run_rank(record.load(), resolved, where, T_START), resolved
    from archzoo.launcher import stop_requested, stop_signals

    child = _forward_argv(config_argv(cfg, given), resolved)
    with stop_signals():  # SIGINT/SIGTERM/SIGHUP stop the ranks (archzoo/launcher.py)
        code = _start(child, world, resolved.backend)
        for attempt in range(1, resolved.max_restarts + 1):
            if code in (0, EXIT_USAGE, 130) or stop_requested():
                break
            from archzoo.checkpoint import latest

            if latest(resolved.run_dir) is None:
                print(f"archzoo: the run failed (exit code {code}) before its first "
                      "checkpoint: nothing to restart from", file=sys.stderr, flush=True)
                break
            wait = min(30.0, 2.0 ** (attempt - 1))
            print(f"archzoo: the run failed (exit code {code}); restart {attempt} of "
                  f"{resolved.max_restarts} in {wait:.0f}s from its latest checkpoint",
                  file=sys.stderr, flush=True)
            end = time.time() + wait
            while time.time() < end and not stop_requested():
                time.sleep(0.05)
            if stop_requested():
                code = 128 + stop_requested()
                break
            code = _start(restart_argv(cfg, given, resolved.run_dir), world, resolved.backend)
    return code, resolved


def _start(child: list[str], world: int, backend: str) -> int:
    """The ranks of one launch as child processes; their exit code."""
    from archzoo import launcher

    if world == 1:
        return launcher.run_one(child)
    if backend == "mpi":
        return launcher.run_mpiexec(child, world)
    return launcher.run_gloo(child, world)


def restart_argv(cfg: RunConfig, given: set[str], run_dir: str) -> list[str]:
    """The command line that resumes ``run_dir`` with the flags a resume may set anew."""
    from archzoo.cli import RESUME_MAY_CHANGE

    keep = {k for k in given if k in RESUME_MAY_CHANGE} - {"resume", "run_dir"}
    return [*config_argv(cfg, keep), "--resume", str(run_dir)]


def run(arch: str, **flags: Any) -> dict[str, Any]:
    """Run ``arch`` with the flags as keyword arguments; returns its summary.json as a dict
    (with ``run_dir`` added). Raises UsageError for bad input, RunFailed if a rank failed."""
    code, resolved = launch(_config(arch, flags), set(flags), in_process=False)
    summary_path = Path(resolved.run_dir) / "summary.json"
    if code != 0 or not summary_path.is_file():
        raise RunFailed(f"archzoo run {arch} ended with exit code {code}; its run directory "
                        f"is {resolved.run_dir}", code)
    return dict(json.loads(summary_path.read_text()), run_dir=str(resolved.run_dir))


class Policy:
    """A finished run's policy, ready to act: ``policy(obs)`` maps a batch of observations
    ``[B, *obs_shape]`` (numpy or torch, in the env's dtype) to a numpy batch of actions.

    Q-networks (Ape-X, Gorila) act greedily, argmax_a Q(x, a); actor-critic policies sample
    a ~ π(·|x) (Gumbel-max), or take argmax_a π(a|x) with ``greedy=True``. ``model`` is the
    rebuilt ``nn.Module``; ``meta`` what policy.pt recorded (env, model, observation)."""

    def __init__(self, model: Any, meta: dict[str, Any], greedy: bool = False,
                 seed: int = 0) -> None:
        import numpy as np

        self.model, self.meta = model.eval(), meta
        self.q_net = meta.get("net") == "q"
        self.greedy = greedy or self.q_net
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: Any) -> Any:
        import numpy as np
        import torch

        with torch.no_grad():
            out = self.model(torch.as_tensor(obs))
        scores = (out if self.q_net else out[0]).numpy()
        if self.greedy:
            return np.argmax(scores, axis=-1)
        return np.argmax(scores + self.rng.gumbel(size=scores.shape), axis=-1)


def load_policy(run_dir: str | Path, greedy: bool = False, seed: int = 0) -> Policy:
    """The final policy of the run in ``run_dir`` (its policy.pt), rebuilt without the run:
    any ``--model``, pixel observations included. ``run_dir`` may also name a policy file
    in policy.pt's format (archzoo/video.py films such snapshots). Raises UsageError if it
    cannot be."""
    import torch

    from archzoo.nets import ActorCritic
    from learners.dqn import QNetwork

    path = Path(run_dir) if Path(run_dir).is_file() else Path(run_dir) / "policy.pt"
    if not path.is_file():
        raise UsageError(f"{run_dir}: no policy.pt (not a finished run directory?)")
    saved = torch.load(path, weights_only=True)
    meta = saved["meta"]
    shape, dtype = tuple(meta["obs_shape"]), meta.get("obs_dtype", "<f4")
    model_name = meta.get("model", "mlp")
    try:
        if meta.get("net") == "q":
            model = QNetwork(shape, meta["num_actions"], meta["hidden"], meta["dueling"],
                             model_name, dtype)
        else:
            model = ActorCritic(shape, meta["num_actions"], meta["hidden"], model_name, dtype)
    except ValueError as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy: {e}") from None
    model.load_state_dict(saved["state_dict"])
    return Policy(model, meta, greedy, seed)

