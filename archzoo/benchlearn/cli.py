"""``archzoo bench learning grid|tune|choose|page|status``: the learning benchmark's commands.

    archzoo bench learning tune --archs impala seed       # candidates on seeds 100, 101
    archzoo bench learning tune --archs apex --candidates lr-decay --rerun   # one again
    archzoo bench learning choose --archs impala seed     # the best into each preset
    archzoo bench learning grid                           # every reported cell not yet run
    archzoo bench learning grid --games MinAtar/Breakout-v1 --archs impala --dry-run
    archzoo bench learning page --out docs/results.md     # the page and its figures
    archzoo bench learning status                         # cells done, left, hours
    archzoo bench learning withdraw --setup "seed, 2 actors" --game G --seed 2 --why "..."

``benchmarks/bench_learning.py`` is the same command. Every run appends a record to
``--store`` (benchmarks/results/learning.jsonl); a cell already there is not run again
unless ``--rerun``. A seed's setups of one architecture run back to back (a pair, the unit
of interleaving): before each pair the grid waits while ``--pause-file`` exists and for
``--lock``, with ``--hours H`` it starts no pair that would end after H hours, and before
each cell it waits until the other processes are quiet (``--max-busy``).
"""

from __future__ import annotations

import argparse
import fcntl
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from archzoo.benchlearn import protocol as P
from archzoo.benchlearn import store, tuning
from archzoo.benchlearn.quiet import MAX_BUSY_CORES, wait_until_quiet
from archzoo.benchlearn.runner import ROOT, run_cell
from archzoo.errors import EXIT_USAGE, UsageError

STORE = ROOT / "benchmarks" / "results" / "learning.jsonl"
PAGE = ROOT / "docs" / "results.md"
RANDOM_EPISODES = 100
LOCK_GAP_S = 3.0


@contextmanager
def exclusive(path: Path | None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the duration (nothing when ``path`` is None)."""
    if path is None:
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def parser() -> argparse.ArgumentParser:
    from archzoo.resolve import UsageParser

    p = UsageParser(prog="archzoo bench learning", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=UsageParser)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", type=Path, default=STORE, help=f"default: {STORE}")
        q.add_argument("--preset", default="minatar", help="bundled preset of every setup "
                       "(none: the architectures' defaults); default: minatar")
        q.add_argument("--minutes", type=float, default=P.MINUTES, help="wall time per run")

    def running(q: argparse.ArgumentParser) -> None:
        q.add_argument("--archs", nargs="+", default=list(P.ARCHS), choices=P.ARCHS)
        q.add_argument("--run-root", type=Path, default=None, help="run directories "
                       "(default: a new temporary directory)")
        q.add_argument("--rerun", action="store_true", help="run cells the store has")
        q.add_argument("--dry-run", action="store_true", help="print the commands only")
        q.add_argument("--pause-file", type=Path, default=None,
                       help="between pairs of cells, wait while this file exists")
        q.add_argument("--lock", type=Path, default=None, help="hold an exclusive flock on "
                       "this file while a seed's setups of one architecture run, so that "
                       "jobs taking the same lock wait for it (and get their turn between "
                       "these pairs)")
        q.add_argument("--hours", type=float, default=None, metavar="H",
                       help="start no pair of cells (a seed's setups of one architecture) "
                       "that would end more than H hours from now (by the mean cell so far, "
                       "at first --minutes plus one): a grid in parts")
        q.add_argument("--max-busy", type=float, default=MAX_BUSY_CORES, metavar="CORES",
                       help="before each cell, wait until all other processes together use "
                       f"at most CORES cores (default {MAX_BUSY_CORES:g}): every run alone "
                       "on the machine")

    g = sub.add_parser("grid", help="the reported cells")
    common(g)
    running(g)
    g.add_argument("--games", nargs="+", default=list(P.GAMES))
    g.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="default: 0-4 on Breakout, 0-2 on the other games")
    t = sub.add_parser("tune", help="the candidates of each preset on tuning seeds")
    common(t)
    running(t)
    t.add_argument("--seeds", type=int, nargs="+", default=[P.TUNING_SEEDS,
                                                            P.TUNING_SEEDS + 1])
    t.add_argument("--game", default=tuning.TUNING_GAME)
    t.add_argument("--candidates", nargs="+", default=None, metavar="NAME",
                   help="only these candidates (e.g. 'lr-decay'; default: all): with "
                   "--rerun, run one candidate again beside its rival's new runs")
    c = sub.add_parser("choose", help="write each architecture's best candidate into its "
                       "preset")
    common(c)
    c.add_argument("--archs", nargs="+", default=list(P.ARCHS), choices=P.ARCHS)
    c.add_argument("--no-apply", action="store_true", help="print the choice, change nothing")
    pg = sub.add_parser("page", help="docs/results.md and its figures from the store")
    common(pg)
    pg.add_argument("--out", type=Path, default=PAGE, help=f"default: {PAGE}")
    w = sub.add_parser("withdraw", help="drop a cell's runs so far from the page, and run it "
                       "again on the next grid (the store keeps them, and why)")
    common(w)
    w.add_argument("--setup", required=True, help="as the store names it, e.g. 'seed, 2 actors'")
    w.add_argument("--game", required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--why", required=True, help="what broke the run's conditions")
    s = sub.add_parser("status", help="cells done and left, and the hours left")
    common(s)
    s.add_argument("--archs", nargs="+", default=list(P.ARCHS), choices=P.ARCHS)
    s.add_argument("--games", nargs="+", default=list(P.GAMES))
    return p


def _preset(args: argparse.Namespace) -> str | None:
    return None if args.preset == "none" else args.preset


def report_cells(args: argparse.Namespace) -> list[tuple[P.Setup, str, int]]:
    seeds = {g: (args.seeds if args.seeds is not None else P.seeds_for(g)) for g in args.games}
    P.check_seeds([s for ss in seeds.values() for s in ss], "report")
    setups = {a: P.setups(a, _preset(args)) for a in args.archs}
    return list(P.cells(args.archs, args.games, seeds, setups))


def _run_name(setup: P.Setup, game: str, seed: int) -> str:
    """A cell's run directory name: its setup, game, seed and the time it starts."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in setup.name).strip("-")
    return f"{slug}-{game.split('/')[-1]}-s{seed}-{time.strftime('%H%M%S')}"


def run_cells(args: argparse.Namespace, todo: list[tuple[P.Setup, str, int]],
              purpose: str) -> int:
    """Run the cells of ``todo`` the store does not have yet (all with ``--rerun``)."""
    if args.hours is not None and not args.hours > 0:
        raise UsageError(f"--hours {args.hours:g}: give a positive number of hours")
    if not args.max_busy >= 0:
        raise UsageError(f"--max-busy {args.max_busy:g}: give the cores other processes may "
                         "use, 0 or more")
    preset = _preset(args)
    digests = {a: P.preset_digest(a, preset) for a in {s.arch for s, _, _ in todo}}

    def current(r: store.Record) -> bool:
        """A tuning run of its candidate's values; a reported run of the preset as it is."""
        if r.get("purpose") == "report":
            return r.get("preset_digest") == digests.get(str(r.get("arch")))
        return tuning.holds(r)

    have = store.newest(r for r in store.read(args.store) if current(r))

    def key(setup: P.Setup, game: str, seed: int) -> tuple:
        return (purpose, preset or "none", setup.name, game, seed, float(args.minutes))

    left = [c for c in todo if args.rerun or key(*c) not in have]
    if len(todo) > len(left):
        print(f"{len(todo) - len(left)} cell(s) kept from {args.store} (--rerun runs them "
              "again)", file=sys.stderr)
    root = args.run_root or (Path("RUN_ROOT") if args.dry_run else
                             Path(tempfile.mkdtemp(prefix="bench-learning-")))
    from archzoo.benchlearn.runner import command

    if args.dry_run:
        for setup, game, seed in left:
            print(shlex.join(["python", *command(setup, game, seed, args.minutes, preset,
                                                 root / _run_name(setup, game, seed))[1:]]))
        return 0
    spent: list[float] = []  # seconds per cell, from its start to its record
    deadline = None if args.hours is None else time.time() + args.hours * 3600
    done = 0
    for unit in P.units(left):
        # a unit (one architecture's setups on one game and seed) runs back to back: the
        # pause file, the lock and --hours act only between units
        while args.pause_file is not None and args.pause_file.exists():
            time.sleep(5)
        with exclusive(args.lock):
            cell_s = statistics.fmean(spent) if spent else args.minutes * 60 + 60
            if deadline is not None and time.time() + cell_s * len(unit) > deadline:
                print(f"--hours {args.hours:g}: stopping with {len(left) - done} cell(s) "
                      "left (run the same command again to go on)", file=sys.stderr,
                      flush=True)
                break
            for setup, game, seed in unit:
                _, busy = wait_until_quiet(args.max_busy)
                eta = f", about {statistics.fmean(spent) * (len(left) - done) / 3600:.1f}" \
                    " h left" if spent else ""
                done += 1
                print(f"[{done}/{len(left)}] {setup.name}, {game}, seed {seed}{eta}",
                      file=sys.stderr, flush=True)
                t0 = time.time()
                record = run_cell(setup, game, seed, args.minutes, preset,
                                  root / _run_name(setup, game, seed), purpose,
                                  busy_before=busy)
                store.append(args.store, record)
                spent.append(time.time() - t0)
                r = record["readouts"]
                print(f"    failed: {record['error']}" if record["error"] else
                      f"    eval {r['eval']}, train100 {r['train']}, "
                      f"{record['summary'].get('env_steps') or 0:,} agent steps",
                      file=sys.stderr, flush=True)
        if args.lock is not None:
            time.sleep(LOCK_GAP_S)  # a job waiting for the lock takes it now
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    todo = report_cells(args)
    if _preset(args) is not None:
        records = store.read(args.store)
        for arch in args.archs:
            tuning.check_chosen(records, arch, args.preset)
    if not args.dry_run:
        random_policies(args.store, args.games)
    return run_cells(args, todo, "report")


def cmd_tune(args: argparse.Namespace) -> int:
    P.check_seeds(args.seeds, "tune")
    if _preset(args) is None:
        raise UsageError("tune chooses a preset: give --preset NAME")
    setups = {a: tuple(s for s in tuning.tuning_setups(a, args.preset)
                       if args.candidates is None or s.candidate in args.candidates)
              for a in args.archs}
    known = {name for a in args.archs for name, _ in tuning.CANDIDATES[a]}
    if unknown := sorted(set(args.candidates or ()) - known):
        raise UsageError(f"--candidates {unknown[0]}: the candidates of "
                         f"{', '.join(args.archs)} are {', '.join(sorted(known))}")
    todo = list(P.cells(args.archs, [args.game], {args.game: args.seeds}, setups))
    return run_cells(args, todo, "tune")


def cmd_choose(args: argparse.Namespace) -> int:
    from archzoo import presets

    records = store.read(args.store)
    for arch in args.archs:
        choice = tuning.choose(records, arch, args.preset)
        means = ", ".join(f"{n} {c['mean']}" for n, c in choice["candidates"].items())
        print(f"{arch}: {means}; chosen: {choice['chosen']}")
        if not args.no_apply:
            path = Path(presets.__file__).parent / args.preset / f"{arch}.toml"
            store.append(args.store, tuning.apply(choice, path))
    return 0


def cmd_withdraw(args: argparse.Namespace) -> int:
    purpose = "tune" if args.seed >= P.TUNING_SEEDS else "report"
    cell = (purpose, _preset(args) or "none", args.setup, args.game, args.seed,
            float(args.minutes))
    if cell not in store.newest(store.read(args.store)):
        raise UsageError(f"{args.store} has no run of {args.setup}, {args.game}, seed "
                         f"{args.seed} ({args.minutes:g} minutes, preset {args.preset}) to "
                         "withdraw")
    store.append(args.store, {"kind": "withdrawn", "purpose": purpose, "preset": cell[1],
                              "setup": args.setup, "game": args.game, "seed": args.seed,
                              "minutes": float(args.minutes), "why": args.why,
                              "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    print(f"withdrawn: {args.setup}, {args.game}, seed {args.seed}")
    return 0


def cmd_page(args: argparse.Namespace) -> int:
    from archzoo.benchlearn.page import fill_blocks, group, page

    records = store.read(args.store)
    rel = args.store.resolve().relative_to(ROOT) if args.store.resolve().is_relative_to(
        ROOT) else args.store
    commands = ["archzoo bench learning tune && archzoo bench learning choose",
                "archzoo bench learning grid --games MinAtar/Breakout-v1",
                "archzoo bench learning grid", f"archzoo bench learning page --out {PAGE.name}"]
    text = page(records, args.preset, args.minutes, args.out.parent / "figures", str(rel),
                commands)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines) and its figures",
          file=sys.stderr)
    groups = group(records, args.preset, args.minutes)
    for doc in sorted(args.out.parent.glob("*.md")):
        old = doc.read_text()
        new = fill_blocks(old, groups)
        if new != old:
            doc.write_text(new)
            print(f"updated the results blocks of {doc}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    args.seeds = None
    todo = report_cells(args)
    have = store.newest(store.read(args.store))
    done = [r for r in have.values() if r["purpose"] == "report"
            and r["preset"] == args.preset and r["minutes"] == args.minutes]
    keys = {(s.name, g, seed) for s, g, seed in todo}
    finished = [r for r in done if (r["setup"], r["game"], r["seed"]) in keys]
    mean_s = statistics.fmean(r["wall_s"] + 30 for r in finished) if finished else \
        args.minutes * 60 + 40
    left = len(todo) - len(finished)
    print(f"{len(finished)} of {len(todo)} cells done; {left} left, about "
          f"{left * mean_s / 3600:.1f} h; the whole grid about {len(todo) * mean_s / 3600:.1f} h "
          "of machine time")
    return 0


def random_policies(path: Path, games: list[str]) -> None:
    """The random policy's mean return per game, measured once into the store."""
    have = {r["game"] for r in store.read(path) if r.get("kind") == "random"}
    for game in games:
        if game not in have:
            print(f"random policy on {game}: {RANDOM_EPISODES} episodes", file=sys.stderr)
            store.append(path, {"kind": "random", "game": game,
                                **random_policy(game, RANDOM_EPISODES)})


def random_policy(game: str, episodes: int, seed: int = 0) -> dict:
    """Mean return of uniformly random actions over ``episodes`` whole episodes."""
    import gymnasium as gym

    if game.startswith("MinAtar/") and game not in gym.registry:
        import minatar.gym

        minatar.gym.register_envs()
    env = gym.make(game)
    env.action_space.seed(seed)
    returns = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"mean_return": statistics.fmean(returns), "std": statistics.pstdev(returns),
            "episodes": episodes, "seed": seed}


COMMANDS = {"grid": cmd_grid, "tune": cmd_tune, "choose": cmd_choose, "page": cmd_page,
            "status": cmd_status, "withdraw": cmd_withdraw}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"archzoo bench learning: error: {e}", file=sys.stderr)
        return EXIT_USAGE
