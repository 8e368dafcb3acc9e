"""The chaos table: every kind of rank killed once, per architecture, on both engines.

The matrix is the chaos suite's (tests/test_reliability.py: ``ASYNC``, an actor of each
asynchronous architecture; ``NEEDED``, each rank a run cannot do without). Each cell starts
``archzoo run`` embedded, ``kill -9``s the rank at the suite's random moment after the first
metrics row, and reports the outcome: the exit code, summary.json's stop reason (or none),
the dead actors rank 0 counted, what rank 0 kept, the seconds from the kill to the end, and
whether any process of the run was left.

    python benchmarks/bench_chaos.py              # the whole matrix, both engines
    python benchmarks/bench_chaos.py --engines mpi --only impala
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from archzoo import checkpoint  # noqa: E402
from tests.test_reliability import (  # noqa: E402 - the suite's matrix and its way to kill
    ASYNC,
    NEEDED,
    moment,
    no_process_left,
    run_and_kill,
)


def cells(only: str | None) -> list[tuple[str, str, list[str], int]]:
    """(architecture, rank kind, flags, victim) for every cell of the matrix."""
    out = [(arch, "actor", args, victim) for arch, (args, victim, _) in ASYNC.items()]
    kinds = {0: "learner"}
    for name, args, victim in NEEDED:
        kind = kinds.get(victim) or {"apex": "replay shard", "a3c": "parameter-server shard",
                                     "gorila": "replay memory", "gala": "agent",
                                     "seed-sync": "actor (sync)",
                                     "impala-tree": "tree relay"}[name]
        out.append((name, kind, [*args, "--time-limit", "60"], victim))
    return [c for c in out if only is None or c[0].startswith(only)]


def kept(d: Path) -> str:
    have = [n for n, ok in (("summary", (d / "summary.json").is_file()),
                            ("policy", (d / "policy.pt").is_file()),
                            ("checkpoint", checkpoint.latest(d) is not None)) if ok]
    return "+".join(have) or "nothing"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="gloo,mpi")
    ap.add_argument("--only", default=None, help="architectures whose name starts so")
    a = ap.parse_args()
    print("| architecture | rank killed | engine | exit | stop reason | dead actors counted "
          "| rank 0 kept | kill -> end (s) | processes left |")
    print("| --- | --- | --- | ---: | --- | --- | --- | ---: | --- |")
    with tempfile.TemporaryDirectory(prefix="archzoo-chaos-") as tmp:
        for arch, kind, args, victim in cells(a.only):
            for engine in a.engines.split(","):
                d = Path(tmp) / f"{arch}-{victim}-{engine}"
                r, after = run_and_kill(d, [*args, "--backend", engine], victim,
                                        delay_s=moment(f"{arch}-{engine}"))
                s = json.loads((d / "summary.json").read_text()) \
                    if (d / "summary.json").is_file() else {}
                reason = (s.get("stop_reason") or "-").split(":")[0]
                dead = ",".join(s.get("dead_actors", {})) or "-"
                print(f"| {arch} | {kind} (rank {victim}) | {engine} | {r.returncode} "
                      f"| {reason} | {dead} | {kept(d)} | {after:.1f} "
                      f"| {'no' if no_process_left(d) else 'YES'} |", flush=True)


if __name__ == "__main__":
    main()
