"""Typed configs: the CLI is a view of the dataclasses, validation names flag, value and
rule, configs never change under validation, and the registry agrees with the rules."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from archzoo import config as C
from archzoo.architectures import ARCHITECTURES
from archzoo.cli import build_parser
from archzoo.config import MODES, TOPOLOGIES, flag_fields, flag_name
from archzoo.errors import UsageError
from archzoo.resolve import parse_run, validate_run


def _run_flags(arch: str) -> set[str]:
    run = build_parser(arch)._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
    return {s for a in run._actions for s in a.option_strings  # noqa: SLF001
            if s.startswith("--") and s != "--help" and not s.startswith("--no-")}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_cli_flags_are_the_config_fields(arch: str) -> None:
    fields = {flag_name(f.name) for f in flag_fields(ARCHITECTURES[arch].config)}
    assert _run_flags(arch) == fields


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_registry_modes_and_topologies_match_the_rules(arch: str) -> None:
    rec = ARCHITECTURES[arch]
    ok = {(m, t) for m in MODES for t in TOPOLOGIES
          if rec.config(arch=arch, mode=m, topology=t, actors=2).problem() is None}
    assert {m for m, _ in ok} == set(rec.modes), ok
    assert {t for _, t in ok} == set(rec.topologies), ok
    default = rec.config(arch=arch, actors=2)
    assert default.problem() is None
    assert default.default_topology in rec.topologies


@pytest.mark.parametrize("cls,field,value,rule", [
    (C.ImpalaConfig, "lr", -1.0, "> 0"),
    (C.ImpalaConfig, "gamma", 1.5, "in [0, 1]"),
    (C.A3CConfig, "t_max", 0, ">= 1"),
    (C.A3CConfig, "rms_eps", 0.0, "> 0"),
    (C.GalaConfig, "gossip_every", 0, ">= 1"),
    (C.ApexConfig, "beta", 2.0, "in [0, 1]"),
    (C.GorilaConfig, "learners", 0, ">= 1"),
    (C.Ga3cConfig, "trainers", 0, ">= 1"),
    (C.SeedConfig, "max_batch", 0, ">= 1"),
    (C.RunConfig, "fanout", 1, ">= 2"),
    (C.RunConfig, "learner_threads", -1, ">= 0"),
    (C.ImpalaConfig, "epochs", 0, ">= 1"),
    (C.SeedConfig, "minibatches", 0, ">= 1"),
])
def test_problem_names_flag_value_and_rule(cls, field: str, value, rule: str) -> None:
    problem = cls(**{field: value}).problem()
    assert problem is not None and flag_name(field) in problem
    assert str(value) in problem and rule in problem, problem


def test_configs_are_frozen_and_validation_does_not_change_them() -> None:
    cfg, given = parse_run(["run", "gorila", "--actors", "2", "--run-dir", "/tmp/x"])
    before = dataclasses.asdict(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]
    _, _, resolved, world = validate_run(cfg, given)
    assert dataclasses.asdict(cfg) == before
    assert resolved.backend == "gloo" and resolved.topology == "star" and world == 5
    assert resolved.target_return == 475.0 and cfg.target_return is None


def test_gorila_refuses_replay_shards_instead_of_overwriting_them() -> None:
    cfg, given = parse_run(["run", "gorila", "--replay-shards", "2", "--actors", "2"])
    with pytest.raises(UsageError, match="--replay-shards 2"):
        validate_run(cfg, given)


def test_help_shows_each_default_once() -> None:
    for arch in ARCHITECTURES:
        run = build_parser(arch)._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
        text = run.format_help()
        assert "(default: None)" not in text
        for a in run._actions:  # noqa: SLF001
            if a.help:
                assert len(re.findall(r"\(default:", a.help)) <= 1, a.help


def test_config_file_values_are_typed(tmp_path) -> None:
    f = tmp_path / "c.json"
    f.write_text('{"unroll_length": "seven"}')
    with pytest.raises(UsageError, match="unroll_length"):
        parse_run(["run", "impala", "--config", str(f)])
    f.write_text('{"lr": 1, "dueling": false}')
    with pytest.raises(UsageError, match="dueling"):  # not an IMPALA flag
        parse_run(["run", "impala", "--config", str(f)])
    cfg, _ = parse_run(["run", "apex", "--config", str(f)])
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and cfg.dueling is False


def test_flags_page_is_generated_from_the_configs() -> None:
    from pathlib import Path

    from archzoo.flagsdoc import flags_markdown

    page = Path(__file__).resolve().parents[1] / "docs" / "flags.md"
    want = flags_markdown({a.name: a.config for a in ARCHITECTURES.values()}) + "\n"
    assert page.read_text() == want, "regenerate: python -m archzoo.flagsdoc > docs/flags.md"


CONFIGS = sorted((Path(__file__).resolve().parents[1] / "archzoo" / "presets").glob("*/*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[f"{p.parent.name}/{p.stem}" for p in CONFIGS])
def test_shipped_configs_parse_and_validate(path: Path) -> None:
    """archzoo/presets/ENV/ARCH.toml is a valid flag set for ARCH (its keys are ARCH's flags)."""
    cfg, given = parse_run(["run", path.stem, "--config", str(path), "--run-dir", "/tmp/x"])
    _, _, resolved, _ = validate_run(cfg, given)
    assert resolved.env.startswith({"minatar": "MinAtar/", "atari": "ALE/"}[path.parent.name])


def test_straggler_scales_one_ranks_step_cost() -> None:
    from archzoo.config import ImpalaConfig

    c = ImpalaConfig(arch="impala", env="archzoo/Synthetic-v0", actors=2, straggler="2:4",
                     env_kwargs='{"step_cost_us": 50, "obs_bytes": 64}')
    assert c.problem() is None
    assert json.loads(c.for_rank(2).env_kwargs) == {"step_cost_us": 200.0, "obs_bytes": 64}
    assert c.for_rank(1) is c and c.for_rank(0) is c
    for bad, needle in [("2", "RANK:FACTOR"), ("2:0.5", "FACTOR >= 1")]:
        assert needle in c.replace(straggler=bad).problem()
    cfg, given = parse_run(["run", "impala", "--env", "archzoo/Synthetic-v0", "--actors", "2",
                            "--env-kwargs", '{"step_cost_us": 50}', "--straggler", "3:2"])
    with pytest.raises(UsageError, match="no rank 3 .--actors 2 makes 3 processes"):
        validate_run(cfg, given)  # the world size is the role map's, known at validation
    assert "Synthetic-v0" in ImpalaConfig(arch="impala", straggler="1:2").problem()


@pytest.mark.parametrize("arch", ["impala", "apex", "gorila"])
def test_the_learners_process_takes_learner_threads(arch: str) -> None:
    """Building the learner (V-trace, DQN, or Gorila's learner rank's Q-network) sets its
    process's torch threads to ``--learner-threads``; 0 leaves ``--threads``' setting alone."""
    import torch

    from archzoo import builders
    from archzoo.envs import env_spec

    spec, before = env_spec("CartPole-v1"), torch.get_num_threads()
    build = {"impala": builders.vtrace_learner, "apex": builders.dqn_learner,
             "gorila": builders.learner_q_network}[arch]
    rec = ARCHITECTURES[arch]
    try:
        torch.set_num_threads(1)
        build(rec.config(arch=arch, learner_threads=0, device="cpu"), spec)
        assert torch.get_num_threads() == 1
        build(rec.config(arch=arch, learner_threads=2, device="cpu"), spec)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
