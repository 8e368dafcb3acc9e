"""Placement and multi-node plumbing that needs no namespaces: the processes per host, the
version check of the start-up handshake, the flags that choose a link."""

from __future__ import annotations

import pytest

import archzoo
from archzoo import benchcomm, multinode
from archzoo.harness import placement
from archzoo.simhosts import SimHosts


def test_spread_fills_the_first_hosts_first() -> None:
    assert multinode.spread(7, 2) == [4, 3]
    assert multinode.spread(4, 2) == [2, 2]
    assert multinode.spread(5, 3) == [2, 2, 1]
    with pytest.raises(ValueError):
        multinode.spread(1, 2)


def test_a_different_version_is_named_with_its_host() -> None:
    mine = placement.here()
    assert mine["archzoo"] == archzoo.__version__ and mine["pid"] > 0
    assert placement.record(5, dict(mine)) is None
    other = dict(mine, archzoo="0.0.1", host="nodeB", netns="h1")
    problem = placement.record(7, other)
    assert problem is not None and "rank 7 on nodeB (netns h1) runs archzoo 0.0.1" in problem
    assert archzoo.__version__ in problem
    assert placement.hosts_by_rank()["7"]["host"] == "nodeB"


def test_sim_hosts_names_and_addresses() -> None:
    sim = SimHosts(3, prefix="azt")
    assert [h.name for h in sim.hosts] == ["azth0", "azth1", "azth2"]
    assert [h.addr for h in sim.hosts] == ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
    assert sim[1].argv(["true"]) == ["ip", "netns", "exec", "azth1", "true"]
    with pytest.raises(ValueError):
        SimHosts(1)


def test_bench_comm_link_flag() -> None:
    assert benchcomm.main(["--link", "wifi", "--backend", "gloo"]) == 2
    row = {"backend": "gloo", "link": "netns:1gbit"}
    assert benchcomm.engine(row) == "gloo over netns:1gbit"
    assert benchcomm.engine({"backend": "mpi", "link": "loopback"}) == "mpi"


def test_servers_last_rotates_the_ranks() -> None:
    from archzoo.comm.factory import Launch

    got = [Launch("torchrun", p, 5).servers_last(2) for p in range(5)]
    assert [g.rank for g in got] == [2, 3, 4, 0, 1]
    assert [g.started_as for g in got] == [0, 1, 2, 3, 4]
    assert Launch("mpiexec", 3, 4).servers_last(0).rank == 3  # GALA: no servers


def test_servers_last_needs_a_launcher(tmp_path) -> None:
    from tests.runs import cli

    r = cli("run", "impala", "--servers-on", "last", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "needs torchrun or mpiexec" in r.stderr, r.stderr
