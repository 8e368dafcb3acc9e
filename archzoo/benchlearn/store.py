"""The learning benchmark's record store (an :mod:`archzoo.jsonl` store): one JSON object
per line, appended, never rewritten.

A record is one finished run of the learning benchmark (``kind: "learning"``), one preset
choice (``kind: "preset-choice"``), or the withdrawal of a cell's runs so far (``kind:
"withdrawn"``, with why). Appending a line is the only write, so an interrupted
grid loses at most the run it was in, and the store's history is its git history. A cell
run again appends a newer record; readers take the newest record of each cell.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from archzoo.jsonl import append, read

__all__ = ["Record", "append", "cell_key", "newest", "read"]

Record = dict[str, Any]


def cell_key(record: Record) -> tuple[str, str, str, str, int, float]:
    """What makes two learning records the same cell: purpose, preset, setup, game, seed,
    minutes."""
    return (record["purpose"], record["preset"], record["setup"], record["game"],
            int(record["seed"]), float(record["minutes"]))


def newest(records: Iterable[Record], kind: str = "learning") -> dict[tuple, Record]:
    """The newest record of every cell among ``records`` of ``kind``; a ``withdrawn``
    record drops its cell's runs before it (a run whose conditions were broken: it ran beside
    other work, say), so that the grid runs the cell again and no page counts it."""
    out: dict[tuple, Record] = {}
    for r in records:
        if r.get("kind") == kind:
            out[cell_key(r)] = r
        elif r.get("kind") == "withdrawn" and kind == "learning":
            out.pop(cell_key(r), None)
    return out
