"""Asynchronous parameter broadcast over tree, butterfly and ring in the architectures that
broadcast (async IMPALA, Ape-X, R2D2, and Gorila's server pushing to its actors), on both
engines.

Each actor reports in its BYE what it loaded and relayed (summary.json's params_by_rank):
every actor loaded only increasing versions, sits where the schedule puts it (its parent
is the tree's, or the chain's), and the relays passed versions on. The learner's own
message count is bounded by its children in the schedule, not by all actors as on the star.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from archzoo.topology.async_tree import member_links
from tests.runs import cli, load_run

ACTORS = 4
RUN = ["--actors", str(ACTORS), "--quiet", "--seed", "1", "--log-interval", "0.5",
       "--comm-timeout", "30"]
ARGS = {"impala": ["--total-steps", "24000"],
        "apex": ["--total-steps", "8000", "--replay-shards", "1", "--learning-starts", "1000",
                 "--publish-every", "5"],
        "gorila": ["--total-steps", "8000", "--learning-starts", "1000", "--publish-every",
                   "5"],
        "r2d2": ["--total-steps", "8000", "--replay-shards", "1", "--publish-every", "5",
                 "--sequence-length", "10", "--burn-in", "2", "--sequence-overlap", "5",
                 "--learning-starts", "32", "--batch-size", "8", "--hidden", "32"]}
SCHEDULE = {"tree": (3, False), "butterfly": (2, False), "ring": (2, True)}  # fanout, chain


def members(arch: str) -> list[int]:
    """The broadcast's ranks, the sender first: IMPALA's whole world, Ape-X's without its
    replay shard (rank 1; R2D2's too), Gorila's server (rank 0) and actors (after its
    replay memory and learner, ranks 1 and 2)."""
    first = {"impala": 1, "apex": 2, "r2d2": 2, "gorila": 3}[arch]
    return [0, *range(first, first + ACTORS)]


# every schedule on both engines for IMPALA; Ape-X and Gorila (other members, the same
# ParamsBroadcast) every schedule once, the engines alternating; R2D2 plays Ape-X's roles
# (archzoo/architectures/apex.py), so two of its cases show its messages through them
CASES = [("impala", t, b) for t in ("tree", "butterfly", "ring") for b in ("gloo", "mpi")] + \
    [("apex", "tree", "mpi"), ("apex", "butterfly", "gloo"), ("apex", "ring", "mpi"),
     ("gorila", "tree", "gloo"), ("gorila", "butterfly", "mpi"), ("gorila", "ring", "gloo"),
     ("r2d2", "tree", "mpi"), ("r2d2", "ring", "gloo")]


@pytest.mark.parametrize("arch,topology,backend", CASES)
def test_async_broadcast(tmp_path: Path, arch: str, topology: str, backend: str) -> None:
    d = tmp_path / "run"
    r = cli("run", arch, "--backend", backend, "--topology", topology, "--fanout", "3",
            "--run-dir", str(d), *RUN, *ARGS[arch], timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    s = load_run(d)
    assert (s["topology"], s["mode"], s["backend"]) == (topology, "async", backend)
    assert "asynchronous, latest-wins" in s["topology_applied"], s["topology_applied"]
    fanout, chain = SCHEDULE[topology]
    ranks = members(arch)
    got = s["params_by_rank"]
    assert set(got) == {str(r) for r in ranks[1:]}, got
    for r in ranks[1:]:
        p = got[str(r)]
        parent, kids = member_links(r, ranks, fanout, chain)
        assert p["parent"] == parent, (r, p)
        assert p["out_of_order"] == 0 and p["loads"] >= 2, (r, p)
        assert 0 <= p["version"] <= s["learner_updates"], (r, p)
        assert (p["relayed"] > 0) == bool(kids), (r, p)  # relays pass versions on
    root_kids = member_links(0, ranks, fanout, chain)[1]
    assert 0 < s["params_messages_root"] <= len(root_kids) * (s["learner_updates"] + 2)
    if arch == "impala":
        assert set(s["policy_lag_by_actor"]) == {str(r) for r in ranks[1:]}
