"""``archzoo list | run ARCH | eval RUN_DIR``.

Arguments are validated on every rank before any process group exists; a bad one gives
one line on rank 0's stderr and exit code 2, no traceback (DESIGN.md, Launching).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

T_START = float(os.environ.get("ARCHZOO_LAUNCH_TIME", time.time()))
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _common_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--env", default="CartPole-v1", help="gymnasium environment id")
    g.add_argument("--actors", type=int, default=None,
                   help="actor processes (default 2; 0 = learner and actor in one process, "
                        "no transport; under a launcher it follows from the world size)")
    g.add_argument("--envs-per-actor", type=int, default=16, help="vector envs per actor")
    g.add_argument("--backend", choices=("gloo", "mpi"), default=None,
                   help="transport engine (default: mpi under mpiexec, else gloo)")
    g.add_argument("--mode", choices=("sync", "async"), default="async")
    g.add_argument("--topology", choices=("star", "tree", "butterfly", "ring", "native"),
                   default=None, help="schedule of parameter broadcasts and reductions "
                   "(default: the architecture's own: star, or ring for gala)")
    g.add_argument("--fanout", type=int, default=2, help="tree fan-out / butterfly radix m")
    g.add_argument("--total-steps", type=int, default=2_000_000, help="env-step budget")
    g.add_argument("--target-return", type=float, default=None,
                   help="stop when the mean return of the last 100 episodes reaches this "
                        "(default: the env's reward threshold, 475 for CartPole-v1)")
    g.add_argument("--time-limit", type=float, default=600.0, help="seconds")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--run-dir", default=None, help="default runs/ARCH-ENV-BACKEND-TIME")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="learner device")
    g.add_argument("--config", default=None, help="JSON or TOML file of flag values")
    g.add_argument("--comm-timeout", type=float, default=60.0,
                   help="deadline (s) of every wait on a peer")
    g.add_argument("--startup-timeout", type=float, default=120.0,
                   help="deadline (s) for all ranks to join")
    g.add_argument("--log-interval", type=float, default=2.0, help="seconds between rows")
    g.add_argument("--threads", type=int, default=1, help="torch threads per process")
    g.add_argument("--quiet", action="store_true", help="no progress lines")


def build_parser(arch: str | None = None) -> argparse.ArgumentParser:
    from archzoo.architectures import ARCHITECTURES, load

    p = _Parser(prog="archzoo", description="A zoo of parallel actor-learner architectures.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="name the architectures")
    sub.add_parser("study", help="sweep topologies/actors/backends/modes (archzoo study -h)",
                   add_help=False)
    sub.add_parser("bench", help="archzoo bench comm: collectives per topology (-h)",
                   add_help=False)
    run = sub.add_parser("run", help="run an architecture",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("arch", help=f"one of: {', '.join(ARCHITECTURES)}")
    _common_arguments(run)
    if arch in ARCHITECTURES:
        load(arch).add_arguments(run)
    ev = sub.add_parser("eval", help="replay a run's final policy")
    ev.add_argument("run_dir")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--greedy", action="store_true",
                    help="take the most likely action (default: sample, as in training)")
    ev.add_argument("--seed", type=int, default=12345)
    return p


def _arch_from_argv(argv: list[str]) -> str | None:
    if len(argv) >= 2 and argv[0] == "run" and not argv[1].startswith("-"):
        return argv[1]
    return None


def _load_config_file(path: str) -> dict[str, Any]:
    f = Path(path)
    if not f.is_file():
        raise UsageError(f"--config: no such file {path!r}")
    try:
        if f.suffix == ".toml":
            import tomllib

            data = tomllib.loads(f.read_text())
        else:
            data = json.loads(f.read_text())
    except Exception as e:  # noqa: BLE001 - any parse error is bad input
        raise UsageError(f"--config {path}: cannot parse: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a table/object of flag values")
    return {k.replace("-", "_"): v for k, v in data.items()}


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse (and merge a --config file under explicit flags)."""
    parser = build_parser(_arch_from_argv(argv))
    args = parser.parse_args(argv)
    if args.command == "run" and args.config:
        file_values = _load_config_file(args.config)
        known = set(vars(args))
        unknown = sorted(set(file_values) - known - {"arch", "command"})
        if unknown:
            raise UsageError(f"--config {args.config}: unknown keys {', '.join(unknown)}")
        run_parser = parser._subparsers._group_actions[0].choices["run"]  # type: ignore
        run_parser.set_defaults(**file_values)
        args = parser.parse_args(argv)
    args.actors_given = args.command == "run" and args.actors is not None
    return args


def validate_run(args: argparse.Namespace) -> Any:
    """Check every flag and the launch; resolve defaults. Returns (arch module, Launch)."""
    from archzoo.architectures import ARCHITECTURES, load
    from archzoo.comm.factory import detect_launch
    from archzoo.envs import EnvError, env_spec

    if args.arch not in ARCHITECTURES:
        raise UsageError(f"unknown architecture {args.arch!r} "
                         f"(known: {', '.join(sorted(ARCHITECTURES))})")
    arch = load(args.arch)
    for flag, value, low in (("--envs-per-actor", args.envs_per_actor, 1),
                             ("--fanout", args.fanout, 2),
                             ("--total-steps", args.total_steps, 1),
                             ("--threads", args.threads, 1)):
        if value < low:
            raise UsageError(f"{flag} must be >= {low}, got {value}")
    for flag, value in (("--time-limit", args.time_limit), ("--comm-timeout", args.comm_timeout),
                        ("--startup-timeout", args.startup_timeout),
                        ("--log-interval", args.log_interval)):
        if not value > 0:
            raise UsageError(f"{flag} must be > 0, got {value}")
    if args.actors is not None and args.actors < 0:
        raise UsageError(f"--actors must be >= 0, got {args.actors}")
    try:
        spec = env_spec(args.env)
    except EnvError as e:
        raise UsageError(str(e)) from None
    if args.target_return is None:
        import gymnasium as gym

        args.target_return = gym.spec(args.env).reward_threshold

    launch = detect_launch()
    if launch.launcher in ("torchrun", "embedded"):
        if args.backend == "mpi":
            raise UsageError("--backend mpi needs mpiexec (mpiexec -n N python -m archzoo ...); "
                             "under torchrun use gloo")
        args.backend = "gloo"
    elif launch.launcher == "mpiexec":
        if args.backend == "gloo":
            raise UsageError("under mpiexec use --backend mpi (gloo needs torchrun or no launcher)")
        args.backend = "mpi"
    else:
        args.backend = args.backend or "gloo"
    if launch.under_launcher:
        expected_actors = arch.actors_for(args, launch.world_size)
        if args.actors_given and arch.world_size_for(args, args.actors) != launch.world_size:
            raise UsageError(f"--actors {args.actors} contradicts the launcher's world size "
                             f"{launch.world_size} (that is --actors {expected_actors})")
        if expected_actors < 1 and launch.world_size > 1:
            need = arch.world_size_for(args, 1)
            raise UsageError(f"{args.arch} needs at least {need} processes with these flags, "
                             f"the launcher started {launch.world_size}")
        args.actors = expected_actors
    elif args.actors is None:
        args.actors = 2
    world = launch.world_size if launch.under_launcher else arch.world_size_for(args, args.actors)
    if args.topology is None:
        args.topology = getattr(arch, "DEFAULT_TOPOLOGY", "star")
    problem = arch.validate(args)
    if problem:
        raise UsageError(problem)
    if args.backend == "mpi":
        import importlib.util

        from archzoo.launcher import find_mpiexec

        if importlib.util.find_spec("mpi4py") is None:
            raise UsageError("--backend mpi: mpi4py is not installed (pip install mpi4py mpich)")
        if not launch.under_launcher and world > 1 and find_mpiexec() is None:
            raise UsageError("--backend mpi: mpiexec not found (pip install mpich)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available "
                             "(use --device auto or cpu)")
    if args.run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.run_dir = str(Path("runs") / f"{args.arch}-{args.env}-{args.backend}-{stamp}")
    args.env_spec = {"obs_shape": list(spec.obs_shape), "num_actions": spec.num_actions}
    return arch, launch, world


def _forward_argv(argv: list[str], args: argparse.Namespace) -> list[str]:
    """The child command: the user's flags plus what the parent resolved."""
    out = list(argv)
    if "--run-dir" not in argv:
        out += ["--run-dir", args.run_dir]
    if "--backend" not in argv:
        out += ["--backend", args.backend]
    return out


def cmd_run(argv: list[str], args: argparse.Namespace) -> int:
    arch, launch, world = validate_run(args)
    if not launch.under_launcher and world > 1:
        from archzoo import launcher

        child = _forward_argv(argv, args)
        if args.backend == "mpi":
            return launcher.run_mpiexec(child, world)
        return launcher.run_gloo(child, world)
    from archzoo.worker import run_rank

    return run_rank(arch, args, launch, T_START)


def cmd_list() -> int:
    from archzoo.architectures import ARCHITECTURES

    for name, (_, desc) in ARCHITECTURES.items():
        print(f"{name:10s} {desc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from archzoo.comm.factory import detect_launch

    try:
        rank = detect_launch().rank
    except Exception:  # noqa: BLE001
        rank = 0
    try:
        if argv[:1] == ["study"]:
            from archzoo import study

            return study.main(argv[1:], _Parser)
        if argv[:2] == ["bench", "comm"]:
            from archzoo import benchcomm

            return benchcomm.main(argv[2:])
        if any(a in ("-h", "--help") for a in argv):
            build_parser(_arch_from_argv(argv)).parse_args(argv)
        args = parse(argv)
        if args.command == "list":
            return cmd_list()
        if args.command == "eval":
            from archzoo.evaluate import cmd_eval

            return cmd_eval(args)
        return cmd_run(argv, args)
    except UsageError as e:
        if rank == 0:
            print(f"archzoo: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyError as e:  # unknown architecture from the registry
        if rank == 0:
            print(f"archzoo: error: {e.args[0]}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
