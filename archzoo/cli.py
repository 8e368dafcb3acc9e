"""``archzoo list | run ARCH | eval RUN_DIR`` (and ``study``, ``bench comm``, ``plot``): the
command line parses and dispatches.

``run`` goes through archzoo/resolve.py (flags, config files and presets, resume,
validation) and :func:`archzoo.api.launch`, as ``archzoo.run`` does. Arguments are
validated on every rank before any process group exists; a bad one gives one line on rank
0's stderr and exit code 2, no traceback.

Every archzoo process prints the stacks of all its threads on SIGUSR2 (``kill -USR2 PID``),
and carries on: a run that seems stuck shows where each rank waits.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from typing import Any

from archzoo import presets
from archzoo.api import launch
from archzoo.architectures import get, names
from archzoo.comm.factory import detect_launch
from archzoo.config import RunConfig
from archzoo.errors import EXIT_USAGE, UsageError
from archzoo.resolve import UsageParser, add_run_arguments, arch_from_argv, parse_run


def build_parser(arch: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; ``archzoo run ARCH`` takes ARCH's config fields as flags
    (an ARCH that names no architecture is a UsageError)."""
    try:
        cls = RunConfig if arch is None else get(arch).config
    except KeyError as e:
        raise UsageError(e.args[0]) from None

    p = UsageParser(prog="archzoo", description="A zoo of parallel actor-learner architectures.")
    p.add_argument("--version", action="version", version=f"archzoo {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    ls = sub.add_parser("list", help="the architectures: roles, modes, topologies")
    ls.add_argument("--matrix", action="store_true", help="architecture x topology x mode: "
                    "runs, or why not")
    ls.add_argument("--configs", action="store_true", help="the bundled presets for --config "
                    "NAME: the env each sets and the architectures it has")
    sub.add_parser("study", help="sweep topologies/actors/backends/modes (archzoo study -h)",
                   add_help=False)
    sub.add_parser("bench", help="archzoo bench comm: collectives per topology; archzoo "
                   "bench learning: the learning benchmark (-h)",
                   add_help=False)
    sub.add_parser("plot", help="learning curves of run directories in one figure "
                   "(archzoo plot -h)", add_help=False)
    run = sub.add_parser("run", help="run an architecture")
    add_run_arguments(run, cls)
    ev = sub.add_parser("eval", help="replay a run's final policy")
    ev.add_argument("run_dir")
    ev.add_argument("--episodes", type=int, default=10, help="episodes (default: 10)")
    ev.add_argument("--greedy", action="store_true",
                    help="take the most likely action (default: sample, as in training)")
    ev.add_argument("--seed", type=int, default=12345, help="(default: 12345)")
    ev.add_argument("--max-steps", type=int, default=None, metavar="N",
                    help="cut an episode after N steps (default: 27000, ALE's own limit: an "
                    "env without a time limit may never end under a greedy policy)")
    ev.add_argument("--video", metavar="FILE.mp4", default=None,
                    help="film the episodes into this video: the env's own frames, one per "
                    "reset and one per step (default: none)")
    ev.add_argument("--parallel", action="store_true",
                    help="play the episodes at once, one env each (one forward pass per step "
                    "for all of them; no --video)")
    return p


def version() -> str:
    """The installed package's version (the source's when it is not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("archzoo")
    except PackageNotFoundError:
        from archzoo import __version__

        return __version__


def parse(argv: list[str]) -> Any:
    """A run's config for ``run``; the parsed namespace for the other commands."""
    if argv[:1] == ["run"]:
        return parse_run(argv)[0]
    return build_parser(arch_from_argv(argv)).parse_args(argv)


def cmd_run(argv: list[str]) -> int:
    """``archzoo run``: the flags as a config, launched as ``archzoo.run`` launches it."""
    cfg, given = parse_run(argv)
    return launch(cfg, given, in_process=True)[0]


def cmd_list() -> int:
    """The built-in architectures, then those that installed packages register."""
    for name in names():
        try:
            a = get(name)
        except KeyError as e:  # a broken registration: say so, list the others
            print(f"{name:8s} (cannot be loaded: {e.args[0]})")
            continue
        print(f"{name:8s} {a.description}")
        print(f"{'':8s}   roles: {a.roles}; modes: {'/'.join(a.modes)}; "
              f"topologies: {'/'.join(a.topologies)}")
    return 0


def cmd_list_configs() -> int:
    """``archzoo list --configs``: the bundled presets that ``--config NAME`` takes."""
    for line in presets.describe():
        print(line)
    print("use: archzoo run ARCH --config NAME (flags on the command line override the "
          "preset's values)")
    return 0


def _stacks_on_sigusr2() -> None:
    """``kill -USR2 PID`` prints every thread's stack to this process's stderr (fd 2)."""
    stderr = sys.__stderr__
    if not hasattr(signal, "SIGUSR2") or stderr is None:
        return
    try:
        faulthandler.register(signal.SIGUSR2, file=stderr, all_threads=True)
    except (OSError, ValueError, AttributeError):  # a stderr without a file descriptor
        pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _stacks_on_sigusr2()
    if argv[:1] in (["--version"], ["-V"]):
        print(f"archzoo {version()}")
        return 0
    try:
        rank = detect_launch().rank
    except Exception:  # noqa: BLE001
        rank = 0
    try:
        if argv[:1] == ["study"]:
            from archzoo import study

            return study.main(argv[1:], UsageParser)
        if argv[:1] == ["plot"]:
            from archzoo import plot

            return plot.main(argv[1:], UsageParser)
        if argv[:2] == ["bench", "comm"]:
            from archzoo import benchcomm

            return benchcomm.main(argv[2:])
        if argv[:2] == ["bench", "learning"]:
            from archzoo import benchlearn

            return benchlearn.main(argv[2:])
        if any(a in ("-h", "--help") for a in argv):
            build_parser(arch_from_argv(argv)).parse_args(argv)
        if argv[:1] == ["run"]:
            return cmd_run(argv)
        args = parse(argv)
        if args.command == "list" and args.configs:
            return cmd_list_configs()
        if args.command == "list" and args.matrix:
            from archzoo import matrix

            return matrix.main()
        if args.command == "list":
            return cmd_list()
        from archzoo.evaluate import cmd_eval

        return cmd_eval(args)
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
