"""Make a topology by name (``--topology star|tree|butterfly|ring``, plus ``native``)."""

from __future__ import annotations

from archzoo.comm.base import Transport
from archzoo.tags import TAG_COLLECTIVE_DEFAULT
from archzoo.topology.base import Topology
from archzoo.topology.butterfly import ButterflyTopology
from archzoo.topology.native import NativeTopology
from archzoo.topology.ring import RingTopology
from archzoo.topology.tree import StarTopology, TreeTopology

TOPOLOGIES: dict[str, type[Topology]] = {
    "star": StarTopology,
    "tree": TreeTopology,
    "butterfly": ButterflyTopology,
    "ring": RingTopology,
    "native": NativeTopology,
}


def make_topology(name: str, transport: Transport, fanout: int = 2,
                  tag: int = TAG_COLLECTIVE_DEFAULT) -> Topology:
    """The topology ``name`` over ``transport``; ``fanout`` is the tree's m / butterfly's radix
    (must be ≥ 2 for every kind); ``tag`` the one tag its messages use."""
    try:
        cls = TOPOLOGIES[name]
    except KeyError:
        raise ValueError(f"unknown topology {name!r} (choose one of "
                         f"{', '.join(TOPOLOGIES)})") from None
    return cls(transport, fanout, tag)
