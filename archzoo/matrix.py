"""The architecture × topology × mode matrix: which combinations run, and why the others
do not, read from the configs' own checks (so it cannot disagree with ``archzoo run``).

``archzoo list --matrix`` prints it; docs/topologies.md holds the same table (a test keeps
them equal).
"""

from __future__ import annotations

from archzoo.architectures import ARCHITECTURES
from archzoo.config import MODES, TOPOLOGIES

RUNS = "runs"


def verdict(arch: str, topology: str, mode: str, actors: int = 4) -> str:
    """``"runs"``, or the one line ``archzoo run ARCH --topology T --mode M`` exits 2 with."""
    cls = ARCHITECTURES[arch].config
    return cls(arch=arch, topology=topology, mode=mode, actors=actors).problem() or RUNS


def matrix() -> dict[tuple[str, str, str], str]:
    """(architecture, topology, mode) -> verdict, for every built-in architecture."""
    return {(a, t, m): verdict(a, t, m) for a in ARCHITECTURES for t in TOPOLOGIES
            for m in MODES}


def markdown() -> str:
    """The matrix as a Markdown table: one row per architecture and mode, one column per
    topology; a cell is "runs" or the number of its reason, listed below the table (the
    line ``archzoo run`` exits 2 with, the topology written T)."""
    cells = matrix()
    head = ["architecture", "mode", *TOPOLOGIES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    reasons: list[str] = []
    for a in ARCHITECTURES:
        for m in MODES:
            row = []
            for t in TOPOLOGIES:
                v = cells[a, t, m]
                if v == RUNS:
                    row.append(RUNS)
                    continue
                why = v.replace(f"--topology {t}", "--topology T", 1)
                if why not in reasons:
                    reasons.append(why)
                row.append(f"— ({reasons.index(why) + 1})")
            lines.append("| " + " | ".join([a, m, *row]) + " |")
    lines += ["", "Why not (the line `archzoo run` exits 2 with):", ""]
    lines += [f"{i}. {why}" for i, why in enumerate(reasons, 1)]
    return "\n".join(lines)


def main() -> int:
    print(markdown())
    return 0
