"""Append-only stores of benchmark records: one JSON object per line.

Appending a line is the only write (flushed to disk), so an interrupted sweep loses at most
the run it was in; readers skip a line cut short. The learning benchmark
(archzoo/benchlearn/) and ``archzoo study --store`` keep their records this way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def append(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line and flush it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read(path: Path) -> list[dict[str, Any]]:
    """Every record of the store, oldest first (none when there is no store yet); a line cut
    short is skipped."""
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
