"""Where each rank runs: its host, network namespace and archzoo version.

Every leaf's HELLO carries :func:`here`; the root keeps them (:func:`record`) and checks
that every rank runs the archzoo version it runs, since two hosts with different installs
would disagree on more than the message schemas. summary.json's ``hosts_by_rank``
(:func:`hosts_by_rank`) shows the placement a multi-node run got.
"""

from __future__ import annotations

import os
import socket

import archzoo
from archzoo.records import Place
from archzoo.simhosts import netns_name

_SEEN: dict[int, Place] = {}  # rank -> where it runs (filled on the root)


def here() -> Place:
    """This process: host name, network namespace (None: the machine's own), pid, the
    archzoo version."""
    return {"host": socket.gethostname(), "netns": netns_name(), "pid": os.getpid(),
            "archzoo": archzoo.__version__}


def describe(place: Place) -> str:
    ns = place.get("netns")
    return f"{place.get('host', '?')}" + (f" (netns {ns})" if ns else "")


def record(rank: int, place: Place | None) -> str | None:
    """Keep where ``rank`` runs; a problem (a different archzoo version) or None."""
    if not place:
        return None
    _SEEN[rank] = place
    mine = archzoo.__version__
    if place.get("archzoo") != mine:
        return (f"rank {rank} on {describe(place)} runs archzoo {place.get('archzoo')}, "
                f"rank 0 on {describe(here())} runs {mine}: install the same archzoo on "
                "every host")
    return None


def hosts_by_rank(root: int = 0) -> dict[str, Place]:
    """The root's own place and every place recorded, by rank (as strings, for JSON)."""
    out = {str(root): here()}
    out.update({str(r): p for r, p in sorted(_SEEN.items())})
    return out
