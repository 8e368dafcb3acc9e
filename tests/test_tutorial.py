"""The tutorial's architecture, IMPALA with experience replay (docs/tutorial.md,
examples/replay_impala.py), runs as a user runs it: ``archzoo run
examples.replay_impala:ARCH`` embedded over gloo, under mpiexec over MPI (sync) and under
torchrun, from the repository root and without an edit of archzoo. The tutorial shows the
example's code, all of it and nothing else, so neither can drift from the other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.mp import describe, run_mpi
from tests.runs import cli, load_run, torchrun

ROOT = Path(__file__).resolve().parents[1]
ARCH = "examples.replay_impala:ARCH"
SHORT = ["--total-steps", "3000", "--envs-per-actor", "8", "--log-interval", "0.5",
         "--quiet", "--seed", "1", "--comm-timeout", "30"]


@pytest.fixture(autouse=True)
def _at_the_repository_root(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # where `examples` is importable, as the tutorial runs it


def check_run(d: Path, *, backend: str, launcher: str, mode: str = "async") -> dict:
    """A complete run directory; env steps reached; updates mixed fresh and replayed unrolls
    at --replay-ratio 0.5 (one replayed per fresh one, none in the first update)."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["launcher"], s["world_size"], s["mode"]) == \
        (ARCH, backend, launcher, 3, mode)
    assert s["env_steps"] >= 3000 and s["learner_updates"] > 0
    r = s["replay"]
    assert r["ratio"] == 0.5 and r["replayed_unrolls"] > 0, r
    first = r["fresh_unrolls"] - r["replayed_unrolls"]  # the first update's fresh unrolls
    assert (first == 2) if mode == "sync" else (1 <= first <= 2), r
    assert r["memory_unrolls"] == min(r["fresh_unrolls"], 500)
    assert {"learner", "actor1", "actor2"} <= set(s["time_breakdown_s"])
    return s


def test_embedded_gloo(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", ARCH, "--actors", "2", "--run-dir", str(d), *SHORT)
    assert r.returncode == 0, r.stdout + r.stderr
    check_run(d, backend="gloo", launcher="embedded")


def test_mpiexec_mpi_sync(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", ARCH, "--backend", "mpi", "--mode", "sync",
                      "--run-dir", str(d), *SHORT], timeout_s=180, cwd=ROOT)
    assert job.returncode == 0, describe(job)
    s = check_run(d, backend="mpi", launcher="mpiexec", mode="sync")
    assert s["replay"]["fresh_unrolls"] == 2 * s["learner_updates"]


def test_torchrun(tmp_path: Path) -> None:
    d = tmp_path / "run"
    torchrun(3, "run", ARCH, "--run-dir", str(d), *SHORT)
    check_run(d, backend="gloo", launcher="torchrun")


def code_blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)


def test_the_tutorial_shows_the_example_file_in_order() -> None:
    """docs/tutorial.md's python blocks, put together, are examples/replay_impala.py (blank
    lines aside): the page cannot show code that the tests do not run."""
    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.splitlines() if line.strip()]

    page = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    shown = [line for block in code_blocks(page, "python") for line in lines(block)]
    source = lines((ROOT / "examples" / "replay_impala.py").read_text(encoding="utf-8"))
    assert shown == source, "docs/tutorial.md's python blocks differ from the example"
    assert len(source) <= 100  # "an architecture in under ~100 lines"
