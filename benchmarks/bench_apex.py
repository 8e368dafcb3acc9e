"""Ape-X benchmarks: time to the target (greedy evaluation) and every launch way.

1. Time and env steps to 475 on CartPole-v1 (greedy evaluation), from the first env step,
   for several seeds: 2 actors with 1 replay shard, with the replay inside the learner
   (``--replay-shards 0``), with 2 shards, and the ``--actors 0`` single-process baseline.
2. ``--matrix``: one solve with every launch way and both backends.

    python benchmarks/bench_apex.py [--seeds 0 1 2] [--matrix]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from solving import launch_matrix, time_to_target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--matrix", action="store_true", help="one solve per launch way")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if a.matrix:
            launch_matrix("apex", 4, a.target, a.seeds[0] if a.seeds else 0, tmp_path,
                          sync=False)
        if a.seeds:
            time_to_target("apex", {
                "2 actors, 1 shard (gloo)": ["--actors", "2"],
                "2 actors, replay in learner": ["--actors", "2", "--replay-shards", "0"],
                "2 actors, 2 shards": ["--actors", "2", "--replay-shards", "2"],
                "--actors 0 baseline": ["--actors", "0"],
            }, a.seeds, a.target, tmp_path)


if __name__ == "__main__":
    main()
