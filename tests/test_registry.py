"""Architectures from outside archzoo: ``package.module:NAME`` and the entry-point group
``archzoo.architectures`` (archzoo/architectures/__init__.py), with one-line errors, and the
child ranks that must import the same module (archzoo/launcher.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import archzoo
from archzoo import architectures
from archzoo.api import _config, config_argv
from archzoo.architectures import ARCHITECTURES, Architecture, dir_name, get, names
from archzoo.cli import build_parser, cmd_list, main
from archzoo.launcher import child_env
from archzoo.resolve import parse_run, validate_run
from examples.replay_impala import ReplayImpalaConfig

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = "examples.replay_impala:ARCH"


@pytest.fixture(autouse=True)
def _fresh_user_paths(monkeypatch) -> None:
    monkeypatch.setattr(architectures, "_USER_PATHS", [])


def test_builtin_names_resolve_as_before() -> None:
    assert names()[:len(ARCHITECTURES)] == list(ARCHITECTURES)
    for name, record in ARCHITECTURES.items():
        assert get(name) is record


def test_a_record_in_the_users_module() -> None:
    record = get(TUTORIAL)
    assert isinstance(record, Architecture) and record.config is ReplayImpalaConfig
    assert callable(record.load().run)
    assert architectures.user_paths() == [str(ROOT)]  # where `examples` was imported from
    assert child_env()["PYTHONPATH"].split(":")[0] == str(ROOT)


@pytest.mark.parametrize("ref,message", [
    ("no_such_module_xyz:ARCH", "cannot import module 'no_such_module_xyz': "
     "ModuleNotFoundError: No module named 'no_such_module_xyz' (is its directory the "
     "current one or on PYTHONPATH?)"),
    ("examples.no_such:ARCH", "cannot import module 'examples.no_such'"),
    ("examples.replay_impala:NOPE", "module 'examples.replay_impala' has no attribute 'NOPE'"),
    ("examples.replay_impala:ARCH.nope", "has no attribute 'ARCH.nope'"),
    ("examples.replay_impala:ReplayImpalaConfig", "is the class ReplayImpalaConfig, not an "
     "archzoo.architectures.Architecture record"),
    ("archzoo.config:MODES", "'archzoo.config:MODES' is a tuple, not an"),
    ("examples.replay_impala:", "expected package.module:NAME"),
    (":ARCH", "expected package.module:NAME"),
    ("nosucharch", "unknown architecture 'nosucharch' (known: a3c, apex, "),
])
def test_what_cannot_be_resolved_says_why_in_one_line(ref: str, message: str) -> None:
    with pytest.raises(KeyError) as e:
        get(ref)
    text = e.value.args[0]
    assert message in text and "\n" not in text, text
    assert architectures.user_paths() == []  # nothing half-resolved reaches the children


def test_a_module_whose_own_import_fails_is_named_without_the_path_hint(
        tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "needs_missing_dep.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyError, match="No module named 'no_such_dependency_xyz'") as e:
        get("needs_missing_dep:ARCH")
    assert "PYTHONPATH" not in e.value.args[0]


def test_the_command_line_takes_a_module_reference(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser(TUTORIAL).parse_args(["run", TUTORIAL, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--replay-ratio" in out and "--replay-capacity" in out and "--unroll-length" in out
    cfg, given = parse_run(["run", TUTORIAL, "--replay-ratio", "0.25", "--actors", "1"])
    assert isinstance(cfg, ReplayImpalaConfig) and cfg.arch == TUTORIAL
    assert (cfg.replay_ratio, given) == (0.25, {"replay_ratio", "actors"})
    assert parse_run(config_argv(cfg, given)) == (cfg, given)  # what a child rank parses
    _, _, resolved, world = validate_run(cfg, given)
    assert world == 2 and re.fullmatch(r"replay_impala-CartPole-v1-gloo-[\d-]+",
                                       Path(resolved.run_dir).name), resolved.run_dir
    assert _config(TUTORIAL, {"replay_ratio": 0.25, "actors": 1}) == cfg
    assert main(["run", TUTORIAL, "--replay-ratio", "2"]) == 2
    assert capsys.readouterr().err.strip() == \
        "archzoo: error: --replay-ratio must be in [0, 0.9], got 2.0"
    for bad in ("examples.replay_impala:NOPE", "no_such_module_xyz:ARCH"):
        for argv in (["run", bad], ["run", bad, "--help"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"archzoo: error: architecture '{bad}'") and \
                err.count("\n") == 1, err


def test_installed_packages_register_through_entry_points(tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    (tmp_path / "demo_archs.py").write_text(
        "import dataclasses\n"
        "from archzoo.architectures import ARCHITECTURES\n"
        "DEMO = dataclasses.replace(ARCHITECTURES['impala'], name='demo',\n"
        "                           description='IMPALA again, from an entry point')\n")
    dist = tmp_path / "demo_archs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-archs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[archzoo.architectures]\n"
        "demo = demo_archs:DEMO\n"
        "broken = demo_archs:NO_SUCH\n"
        "impala = demo_archs:DEMO\n")  # a built-in name cannot be taken over
    monkeypatch.syspath_prepend(str(tmp_path))
    assert names() == [*ARCHITECTURES, "broken", "demo"]
    assert get("demo").description == "IMPALA again, from an entry point"
    assert get("impala") is ARCHITECTURES["impala"]
    with pytest.raises(KeyError, match=r"'broken' \(entry point demo_archs:NO_SUCH\): cannot "
                                       "load it: AttributeError"):
        get("broken")
    cfg, _ = parse_run(["run", "demo", "--total-steps", "10"])
    assert (cfg.arch, cfg.total_steps) == ("demo", 10)
    assert cmd_list() == 0
    out = capsys.readouterr().out
    assert "demo     IMPALA again, from an entry point" in out
    assert "broken   (cannot be loaded: architecture 'broken'" in out
    assert out.count("\nimpala ") + out.startswith("impala ") == 1


def test_child_ranks_import_a_module_from_outside_their_directory(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """The module lives in a directory only this process has on sys.path: the children
    (``python -m archzoo`` in the current directory) find it through PYTHONPATH."""
    (tmp_path / "my_arch.py").write_text(
        "import dataclasses\n"
        "from archzoo.architectures import ARCHITECTURES\n"
        "ARCH = dataclasses.replace(ARCHITECTURES['impala'], name='mine')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    s = archzoo.run("my_arch:ARCH", actors=1, total_steps=1500, envs_per_actor=4,
                    unroll_length=10, quiet=True, run_dir=str(tmp_path / "run"))
    assert (s["arch"], s["world_size"]) == ("my_arch:ARCH", 2) and s["env_steps"] >= 1500


def test_dir_name() -> None:
    assert dir_name("examples.replay_impala:ARCH") == "examples_replay_impala_ARCH"
    assert dir_name("impala") == "impala" and dir_name("a-b_c") == "a-b_c"
