"""Byte-compile the project once before the tests start.

The suite starts a few thousand Python processes (every rank of every run). Where
``PYTHONDONTWRITEBYTECODE`` is set (as on the CI machine), none of them writes the .pyc files
it compiles, so each one compiled archzoo's sources again: about 0.35 s of CPU per process
here. The interpreter still reads .pyc files it finds, and checks each against its source's
modification time and size, so a stale one is never used.

The README's test command runs the suite on two pytest-xdist workers (``-n 2 --dist
loadgroup``): most tests wait on processes they started (start-up, heartbeats, a dead peer's
timeout) and keep under one of the machine's two cores busy. The slow learning tests go
first, all on one worker, while the other worker takes the rest."""

from __future__ import annotations

import compileall
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("archzoo", "actors", "learners", "replay", "paramserver", "tests", "benchmarks")


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller compiled
        return
    for name in PACKAGES:
        if (ROOT / name).is_dir():
            compileall.compile_dir(ROOT / name, quiet=1, rx=re.compile(r"__pycache__"))


def pytest_itemcollected(item: pytest.Item) -> None:
    """The slow tests in one xdist group: under ``--dist loadgroup`` they run one after the
    other on one worker, as each is a learning run that takes both cores, with a wall-time
    limit. (Marked here, as each test is collected, before xdist reads the marks.)"""
    if item.get_closest_marker("slow") is not None:
        item.add_marker(pytest.mark.xdist_group("learning"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow first (a stable sort: otherwise in their collection order)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
