"""Each architecture's role map (its record's ``roles``, archzoo/architectures/rolemap.py):
the world size, the ranks of each role and the registry's text follow from it; a real run
starts that many processes and names its ranks by it in summary.json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from archzoo.architectures import ACTORS, ARCHITECTURES, Role, RoleMap, actors_for, world_size
from archzoo.resolve import parse_run
from tests.runs import cli, load_run


def _cfg(arch: str, *flags: str):
    return parse_run(["run", arch, *flags])[0]


# (arch, flags) -> processes for --actors 1, 2, 3, as the config classes counted them
# before the role maps (hand formulas: learner + shards + actors, K + 1 + L + N, ...)
WORLDS = {
    ("impala",): (2, 3, 4),
    ("seed",): (2, 3, 4),
    ("ga3c",): (2, 3, 4),
    ("apex",): (3, 4, 5),  # --replay-shards 1 by default
    ("apex", "--replay-shards", "0"): (2, 3, 4),
    ("apex", "--replay-shards", "3"): (5, 6, 7),
    ("r2d2", "--replay-shards", "2"): (4, 5, 6),
    ("gorila",): (4, 5, 6),
    ("gorila", "--ps-shards", "2", "--learners", "3"): (7, 8, 9),
    ("a3c",): (2, 3, 4),
    ("a3c", "--ps-shards", "3"): (4, 5, 6),
    ("a3c", "--mode", "sync", "--ps-shards", "2"): (3, 4, 5),
    ("a3c", "--mode", "sync", "--topology", "ring"): (1, 2, 3),
    ("a3c", "--mode", "sync", "--topology", "tree"): (1, 2, 3),
    ("gala",): (1, 2, 3),
}


@pytest.mark.parametrize("argv", list(WORLDS))
def test_the_world_size_follows_from_the_role_map(argv: tuple[str, ...]) -> None:
    cfg = _cfg(*argv)
    roles = ARCHITECTURES[cfg.arch].roles
    assert tuple(world_size(cfg, n) for n in (1, 2, 3)) == WORLDS[argv]
    assert tuple(roles.world_size(cfg, n) for n in (1, 2, 3)) == WORLDS[argv]
    assert world_size(cfg, 0) == 1  # --actors 0: one process
    for n in (1, 2, 3):
        world = world_size(cfg, n)
        if world == 1:
            continue
        assert actors_for(cfg, world) == n
        place = roles.place(cfg, world)
        ranks = [r for rs in place.ranks.values() for r in rs]
        assert ranks == list(range(world))  # every rank plays one role, in rank order
        assert len(place[next(r.name for r in roles if r.scales)]) == n


def test_each_rank_plays_its_role_in_order() -> None:
    gorila = _cfg("gorila", "--ps-shards", "2", "--learners", "2")
    place = ARCHITECTURES["gorila"].roles.place(gorila, 7)
    assert dict(place.ranks) == {"shard": [0, 1], "replay": [2], "learner": [3, 4],
                                 "actor": [5, 6]}
    assert [place.role(r) for r in range(7)] == ["shard", "shard", "replay", "learner",
                                                 "learner", "actor", "actor"]
    assert (place.index(4), place.index(5)) == (1, 0)
    apex = ARCHITECTURES["apex"].roles.place(_cfg("apex", "--replay-shards", "0"), 3)
    assert dict(apex.ranks) == {"learner": [0], "shard": [], "actor": [1, 2]}
    ring = _cfg("a3c", "--mode", "sync", "--topology", "ring")
    assert dict(ARCHITECTURES["a3c"].roles.place(ring, 3).ranks) == {"shard": [],
                                                                    "worker": [0, 1, 2]}
    with pytest.raises(ValueError, match="no rank 9|plays no role"):
        place.role(9)
    with pytest.raises(ValueError, match="leave no actor"):
        ARCHITECTURES["gorila"].roles.place(gorila, 5)


def test_the_registry_text_is_the_role_map_read_out() -> None:
    assert {a: str(r.roles) for a, r in ARCHITECTURES.items()} == {
        "impala": "0 learner; 1..N actors",
        "apex": "0 learner; 1..K replay shards; then N actors",
        "a3c": "0..K-1 parameter-server shards (none when all-reducing); then N "
               "actor-learners",
        "gorila": "0..K-1 PS shards; K replay; then L learners; then N actors",
        "gala": "0..N-1 agents (0 also keeps the learning curve)",
        "seed": "0 learner + inference server; 1..N actors",
        "r2d2": "0 learner; 1..K replay shards; then N actors",
        "ga3c": "0 server (predictor and trainer threads); 1..N agents",
    }
    assert str(RoleMap(Role("a", 2), Role("b", "x", symbol="M"), Role("c", ACTORS))) == \
        "0..1 as; 2..M+1 bs; then N cs"


def test_a_role_map_needs_one_scaling_role_and_symbols() -> None:
    with pytest.raises(ValueError, match="exactly one role of count ACTORS"):
        RoleMap(Role("learner"))
    with pytest.raises(ValueError, match="exactly one role"):
        RoleMap(Role("a", ACTORS), Role("b", ACTORS))
    with pytest.raises(ValueError, match="repeat"):
        RoleMap(Role("a"), Role("a", ACTORS))
    with pytest.raises(ValueError, match="needs a symbol"):
        Role("shard", "ps_shards")


SHORT = ["--total-steps", "1500", "--learning-starts", "300", "--log-interval", "0.5",
         "--quiet", "--seed", "1", "--comm-timeout", "60"]
RUNS = [  # every architecture once; the flags that change the map
    ("impala", "--actors", "2"),
    ("seed", "--actors", "1"),
    ("ga3c", "--actors", "2"),
    ("apex", "--actors", "2", "--replay-shards", "2"),
    ("r2d2", "--actors", "1", "--replay-shards", "0"),
    ("gorila", "--actors", "1", "--ps-shards", "2", "--learners", "2"),
    ("a3c", "--actors", "2", "--ps-shards", "2"),
    ("a3c", "--mode", "sync", "--topology", "ring", "--actors", "3"),
    ("gala", "--actors", "3"),
]


@pytest.mark.parametrize("argv", RUNS, ids=["-".join(a).replace("--", "") for a in RUNS])
def test_a_run_starts_the_role_maps_processes(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """The embedded launcher starts as many ranks as the role map says (summary.json's
    world_size is what every rank was told), and the summary names each rank by the role
    it played."""
    cfg = _cfg(*argv)
    world = world_size(cfg, cfg.actors)
    place = ARCHITECTURES[cfg.arch].roles.place(cfg, world)
    flags = [f for f in SHORT if cfg.arch in ("apex", "r2d2", "gorila")
             or f not in ("--learning-starts", "300")]
    r = cli("run", *argv, *flags, "--run-dir", str(tmp_path / "run"), timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    s = load_run(tmp_path / "run")
    assert (s["arch"], s["world_size"], s["actors"]) == (cfg.arch, world, cfg.actors)
    leaves = {k for k in s["time_breakdown_s"] if re.fullmatch(r"[a-z]+[1-9]\d*", k)}
    assert leaves == {f"{place.role(r)}{r}" for r in range(1, world)}
