"""The architecture × topology × mode matrix (archzoo/matrix.py) against the code it
describes: the CLI's own answer for every cell, and docs/topologies.md (tests/test_config.py
holds `archzoo list`'s records to the same rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from archzoo import matrix
from archzoo.architectures import ARCHITECTURES
from archzoo.config import MODES, TOPOLOGIES

ROOT = Path(__file__).resolve().parent.parent


def test_docs_hold_the_matrix_the_code_gives() -> None:
    doc = (ROOT / "docs" / "topologies.md").read_text()
    a, b = doc.index("<!-- matrix -->"), doc.index("<!-- /matrix -->")
    assert doc[a + len("<!-- matrix -->"):b].strip() == matrix.markdown().strip(), \
        "docs/topologies.md is stale: paste `archzoo list --matrix` between the markers"


CELLS = [(a, t, m) for a in ARCHITECTURES for t in TOPOLOGIES for m in MODES]


@pytest.mark.parametrize("arch,topology,mode", CELLS)
def test_every_cell_is_what_archzoo_run_says(arch: str, topology: str, mode: str,
                                             capsys) -> None:
    """A cell that does not run is one line and exit 2 from `archzoo run`, with the
    matrix's reason; one that runs passes the checks (its run is in the architecture's
    tests and tests/test_async_broadcast.py)."""
    from archzoo.cli import main

    why = matrix.verdict(arch, topology, mode)
    if why == matrix.RUNS:
        assert matrix.verdict(arch, topology, mode, actors=2) == matrix.RUNS
        return
    assert main(["run", arch, "--topology", topology, "--mode", mode, "--actors", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"archzoo: error: {why}"], err
