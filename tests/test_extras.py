"""The optional parts (archzoo/extras.py): each extra of pyproject.toml is what
archzoo.extras names, and a part asked for without its extra ends in one line that names
the extra, in a process where its module really cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from archzoo.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]


def _without(modules: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``archzoo ARGV`` in a process where importing ``modules`` fails."""
    code = ("import sys\n"
            f"for m in {modules!r}: sys.modules[m] = None\n"
            "from archzoo.cli import main\n"
            f"sys.exit(main({argv!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_pyproject_declares_every_extra_and_all_of_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(EXTRAS) | {"all", "test"} == set(extras)
    assert extras["all"] == [f"archzoo[{','.join(EXTRAS)}]"]
    assert "archzoo[all]" in extras["test"]


@pytest.mark.parametrize("modules,argv,extra", [
    (["ale_py"], ["run", "impala", "--env", "ALE/Pong-v5", "--actors", "0"], "atari"),
    (["cv2"], ["run", "apex", "--env", "ALE/Breakout-v5", "--actors", "0"], "atari"),
    (["minatar"], ["run", "seed", "--env", "MinAtar/Breakout-v1", "--actors", "0"], "minatar"),
    (["mpi4py"], ["run", "impala", "--backend", "mpi"], "mpi"),
])
def test_a_missing_extra_is_named_in_one_line(tmp_path: Path, modules: list[str],
                                              argv: list[str], extra: str) -> None:
    r = _without(modules, argv, tmp_path)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(err) == 1 and f"pip install 'archzoo[{extra}]'" in err[0], err


def test_without_tensorboard_a_run_says_so_and_goes_on(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = _without(["tensorboard"], ["run", "impala", "--actors", "0", "--total-steps", "2000",
                                   "--quiet", "--run-dir", str(d)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "archzoo[tensorboard]" in r.stderr
    assert (d / "summary.json").is_file() and not (d / "tensorboard").exists()


def test_a_video_without_the_video_extra_is_refused_in_one_line(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = _without([], ["run", "impala", "--actors", "0", "--total-steps", "2000", "--quiet",
                      "--no-tensorboard", "--run-dir", str(d)], tmp_path)
    assert r.returncode == 0, r.stderr
    ev = _without(["imageio"], ["eval", str(d), "--episodes", "1", "--video",
                                str(tmp_path / "v.mp4")], tmp_path)
    err = ev.stderr.strip().splitlines()
    assert ev.returncode == 2 and len(err) == 1 and "archzoo[video]" in err[0], ev.stderr
    assert not (tmp_path / "v.mp4").exists()
