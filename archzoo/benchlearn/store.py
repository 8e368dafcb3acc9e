"""The record store: one JSON object per line, appended, never rewritten.

A record is one finished run of the learning benchmark (``kind: "learning"``) or one preset
choice (``kind: "preset-choice"``). Appending a line is the only write, so an interrupted
grid loses at most the run it was in, and the store's history is its git history. A cell
run again appends a newer record; readers take the newest record of each cell.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def append(path: Path, record: Record) -> None:
    """Append ``record`` as one line and flush it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read(path: Path) -> list[Record]:
    """Every record of the store, oldest first (none when there is no store yet). A
    truncated last line (a write cut short) is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def cell_key(record: Record) -> tuple[str, str, str, str, int, float]:
    """What makes two learning records the same cell: purpose, preset, setup, game, seed,
    minutes."""
    return (record["purpose"], record["preset"], record["setup"], record["game"],
            int(record["seed"]), float(record["minutes"]))


def newest(records: Iterable[Record], kind: str = "learning") -> dict[tuple, Record]:
    """The newest record of every cell among ``records`` of ``kind``."""
    out: dict[tuple, Record] = {}
    for r in records:
        if r.get("kind") == kind:
            out[cell_key(r)] = r
    return out
