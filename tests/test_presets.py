"""Bundled presets (``--config minatar``) and the one-line errors of ``--config`` and the
Python API's keywords: from any directory, with the names listed when one is wrong."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from runs import cli

import archzoo
from archzoo import presets
from archzoo.architectures import ARCHITECTURES
from archzoo.cli import main
from archzoo.errors import UsageError
from archzoo.resolve import config_argv, parse_run, validate_run


def test_the_presets_ship_for_every_architecture() -> None:
    assert presets.names() == ["atari", "minatar"]
    for name in presets.names():
        assert presets.archs(name) == sorted(ARCHITECTURES)
    assert presets.envs("minatar") == ["MinAtar/Breakout-v1"]
    assert presets.envs("atari") == ["ALE/Pong-v5"]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_a_preset_name_resolves_outside_the_repository(arch: str, tmp_path: Path,
                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no configs/ or archzoo/presets/ here
    cfg, given = parse_run(["run", arch, "--config", "minatar", "--run-dir", "r"])
    assert cfg.env == "MinAtar/Breakout-v1" and cfg.config == "minatar"
    assert validate_run(cfg, given)[2].env == "MinAtar/Breakout-v1"
    flags = ["run", arch, "--config", "minatar", "--env", "MinAtar/Asterix-v1"]
    assert parse_run(flags)[0].env == "MinAtar/Asterix-v1"  # a flag overrides the preset


def test_a_switch_the_preset_turns_on_can_be_turned_off(tmp_path: Path) -> None:
    """Every boolean flag has a --no- form, so a preset's true is not final (a preset file of
    its own: the bundled presets' switches are chosen by the learning benchmark)."""
    preset, replay = tmp_path / "impala.toml", tmp_path / "gorila.toml"
    preset.write_text("lr-decay = true\nbatch-unrolls = 1\n")
    replay.write_text("prioritized = true\n")
    cfg = parse_run(["run", "impala", "--config", str(preset)])[0]
    assert cfg.lr_decay and cfg.batch_unrolls == 1
    off, given = parse_run(["run", "impala", "--config", str(preset), "--no-lr-decay"])
    assert not off.lr_decay and "lr_decay" in given
    # the child ranks parse what the launcher resolved: the --no- survives into their argv
    assert parse_run(config_argv(off, given))[0] == off
    assert parse_run(["run", "gorila", "--config", str(replay)])[0].prioritized
    assert not parse_run(["run", "gorila", "--config", str(replay),
                          "--no-prioritized"])[0].prioritized
    assert parse_run(["run", "impala", "--lr-decay"])[0].lr_decay  # off by default


def test_a_path_still_works_and_a_name_does_not_shadow_a_file(tmp_path: Path,
                                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text('env = "MinAtar/Freeway-v1"\n')
    assert parse_run(["run", "impala", "--config", "mine.toml"])[0].env == "MinAtar/Freeway-v1"
    (tmp_path / "minatar").write_text('{"env": "MinAtar/Seaquest-v1"}')  # a file by that name
    assert parse_run(["run", "impala", "--config", "minatar"])[0].env == "MinAtar/Seaquest-v1"


def test_an_unknown_name_lists_the_bundled_presets(capsys) -> None:
    assert main(["run", "apex", "--config", "moon"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--config moon" in err and "atari, minatar" in err, err
    with pytest.raises(UsageError, match="atari, minatar"):
        archzoo.run("apex", config="moon")
    with pytest.raises(UsageError, match=r"\(did you mean 'minatar'\?\); the bundled"):
        parse_run(["run", "apex", "--config", "minatr"])


def test_an_unsupported_extension_names_the_formats(tmp_path: Path, capsys) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("env: CartPole-v1\n")
    assert main(["run", "impala", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert "TOML (.toml) or JSON (.json)" in err and "Expecting value" not in err, err


def test_a_misspelt_key_or_keyword_gets_a_suggestion(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("lerning-starts = 100\n")
    with pytest.raises(UsageError, match=r"'lerning-starts' \(did you mean 'learning-starts'"):
        parse_run(["run", "apex", "--config", str(f)])
    f = tmp_path / "c.json"
    f.write_text('{"unroll_lenght": 5}')
    with pytest.raises(UsageError, match=r"'unroll_lenght' \(did you mean 'unroll_length'"):
        parse_run(["run", "impala", "--config", str(f)])
    with pytest.raises(UsageError, match=r"'lerning_starts' \(did you mean 'learning_starts'"):
        archzoo.run("apex", lerning_starts=100)


def test_list_configs_and_version(capsys) -> None:
    assert main(["list", "--configs"]) == 0
    out = capsys.readouterr().out
    minatar = next(ln for ln in out.splitlines() if ln.startswith("minatar"))
    assert "MinAtar/Breakout-v1" in minatar and "impala" in minatar and "apex" in minatar
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"archzoo {archzoo.__version__}"


def test_a_run_from_outside_the_repository_applies_the_preset(tmp_path: Path) -> None:
    """A tiny run of the installed command in an empty directory: config.json holds the
    preset's env and model."""
    r = cli("run", "impala", "--config", "minatar", "--actors", "0", "--time-limit", "3",
            "--envs-per-actor", "2", "--quiet", "--run-dir", "r", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["env"] == "MinAtar/Breakout-v1" and cfg["model"] == "impala-cnn"
    assert cfg["config"] == "minatar"


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_a_family_id_without_config_takes_the_family_preset(arch: str) -> None:
    """``--env MinAtar/...`` alone runs the MinAtar preset's flags (not the CartPole-tuned
    defaults), but not its limits; ``--config none`` runs the defaults; a flag still wins."""
    env = ["--env", "MinAtar/Asterix-v1"]
    auto = parse_run(["run", arch, *env])[0]
    preset = parse_run(["run", arch, "--config", "minatar", *env])[0]
    plain = parse_run(["run", arch, "--config", "none", *env])[0]
    default = type(auto)(arch=arch)
    for f in dataclasses.fields(auto):
        want = getattr(default if f.name in ("total_steps", "time_limit") else preset, f.name)
        assert getattr(auto, f.name) == want, f.name
    assert auto.config == "minatar" and auto.env == "MinAtar/Asterix-v1"
    assert auto.model != default.model and plain.model == default.model
    assert plain.envs_per_actor == default.envs_per_actor
    assert parse_run(["run", arch, *env, "--model", "mlp"])[0].model == "mlp"
    cartpole = parse_run(["run", arch])[0]
    assert cartpole.config is None and cartpole.model == default.model


def test_help_says_which_ids_take_a_preset(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "impala", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a MinAtar/ or ALE/ id takes its family's preset" in text and "none: no preset" in text
