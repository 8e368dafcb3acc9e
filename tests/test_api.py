"""The Python API: ``archzoo.run`` checks its keyword flags as the command line does, runs
the ranks as child processes and returns the summary; ``archzoo.load_policy`` acts as the
run's own model does; the command line's config round-trips through ``config_argv``."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import archzoo
from archzoo.api import config_argv
from archzoo.architectures import ARCHITECTURES
from archzoo.config import flag_fields
from archzoo.errors import UsageError
from archzoo.resolve import parse_run

FAST = {"envs_per_actor": 2, "quiet": True, "log_interval": 0.5}


def _other_value(f, default):
    """A value of field ``f`` that differs from its default (and survives a command line)."""
    kind = str(f.type).split("|")[0].strip()
    choices = f.metadata.get("choices")
    if kind == "bool":
        return not default
    if choices:
        return next(c for c in reversed(choices) if c != default)
    if kind == "int":
        return (default or 2) + 1
    if kind == "float":
        return (default or 1.0) * 1.5 + 0.1
    return {"env_kwargs": '{"step_cost_us": 5, "name": "a b"}', "model": "impala-cnn",
            "run_dir": "/tmp/a dir/with spaces", "env": "MinAtar/Breakout-v1"}.get(f.name, "x")


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_config_argv_parses_back_into_the_same_config(arch: str) -> None:
    """What a child rank parses equals what the parent resolved, for every flag."""
    cls = ARCHITECTURES[arch].config
    # config reads a file; resume reads a run directory (tests/test_checkpoint.py)
    fields = [f for f in flag_fields(cls) if f.name not in ("config", "resume")]
    for pick in (lambda f: f.default, lambda f: _other_value(f, f.default)):
        values = {f.name: pick(f) for f in fields}
        values = {k: v for k, v in values.items() if v is not None}
        cfg = cls(arch=arch, **values)
        back, given = parse_run(config_argv(cfg, values))
        assert back == cfg
        # a None is not spelled; no preset on a MinAtar env
        # is spelled --config none (else the child would take the family's preset)
        assert given - {"config"} <= set(values)


def test_the_api_takes_the_env_familys_preset_as_the_command_line_does() -> None:
    """``archzoo.run(env=\"MinAtar/...\")`` runs the MinAtar preset, as ``archzoo run`` does;
    ``config=\"none\"`` runs the flags alone, and its child ranks parse the same config."""
    from archzoo.api import _config

    env = "MinAtar/Breakout-v1"
    api = _config("impala", {"env": env})
    assert api == parse_run(["run", "impala", "--env", env])[0] and api.config == "minatar"
    plain = _config("impala", {"env": env, "config": "none"})
    assert plain.config is None and plain.model == type(plain)().model
    assert parse_run(config_argv(plain, {"env"}))[0] == plain


def test_the_api_keeps_its_names_where_they_moved() -> None:
    """load_policy and Policy live in archzoo/policy.py, config_argv and restart_argv in
    archzoo/resolve.py; archzoo.api still has them."""
    from archzoo import api, policy, resolve

    assert api.load_policy is policy.load_policy and api.Policy is policy.Policy
    assert api.config_argv is resolve.config_argv and api.restart_argv is resolve.restart_argv
    assert set(api.__all__) <= set(vars(api))


def test_bad_input_raises_the_command_lines_message() -> None:
    with pytest.raises(UsageError, match="--lr must be > 0, got -1.0"):
        archzoo.run("impala", lr=-1.0)
    with pytest.raises(UsageError, match="impala has no option 'learning_rate'"):
        archzoo.run("impala", learning_rate=0.1)
    with pytest.raises(UsageError, match="no_such_arch"):
        archzoo.run("no_such_arch")
    with pytest.raises(UsageError, match="no_such_env"):
        archzoo.run("impala", env="no_such_env-v0")
    with pytest.raises(UsageError, match="no policy.pt"):
        archzoo.load_policy("/nonexistent/run")


def test_run_returns_the_summary_and_load_policy_acts_as_the_model(tmp_path: Path) -> None:
    d = tmp_path / "run"
    s = archzoo.run("impala", actors=1, total_steps=3000, unroll_length=5, seed=3,
                    run_dir=str(d), **FAST)
    assert (s["arch"], s["backend"], s["world_size"]) == ("impala", "gloo", 2)
    assert s["env_steps"] >= 3000 and s["run_dir"] == str(d)
    assert s == dict(json.loads((d / "summary.json").read_text()), run_dir=str(d))
    assert "--total-steps" in json.loads((d / "config.json").read_text())["argv"]
    _tensorboard_equals_the_run_files(d, s)

    envs = gym.make_vec("CartPole-v1", num_envs=5)
    obs, _ = envs.reset(seed=0)
    greedy = archzoo.load_policy(d, greedy=True)
    saved = torch.load(d / "policy.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], v) for k, v in greedy.model.state_dict().items())
    with torch.no_grad():
        logits, _ = greedy.model(torch.as_tensor(obs))
    np.testing.assert_array_equal(greedy(obs), logits.argmax(-1).numpy())
    # sampling: a ~ π(·|x) by Gumbel-max; the same seed gives the same actions
    a, b = archzoo.load_policy(d, seed=1), archzoo.load_policy(d, seed=1)
    draws = np.stack([a(obs) for _ in range(200)])
    np.testing.assert_array_equal(draws, np.stack([b(obs) for _ in range(200)]))
    assert set(np.unique(draws)) <= {0, 1}
    envs.close()


def test_one_process_run_and_a_q_network_policy(tmp_path: Path) -> None:
    """``actors=0`` runs in one child process; Ape-X's Q-network acts greedily."""
    d = tmp_path / "run"
    s = archzoo.run("apex", actors=0, total_steps=3000, learning_starts=500, batch_size=32,
                    run_dir=str(d), tensorboard=False, **FAST)
    assert (s["arch"], s["world_size"]) == ("apex", 1) and s["env_steps"] >= 3000
    assert not (d / "tensorboard").exists()  # --no-tensorboard
    policy = archzoo.load_policy(d)
    assert policy.greedy and policy.meta["net"] == "q"
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    with torch.no_grad():
        q = policy.model(torch.as_tensor(obs))
    np.testing.assert_array_equal(policy(obs), q.argmax(-1).numpy())


def _tensorboard_equals_the_run_files(d: Path, summary: dict) -> None:
    """The event file holds every metrics.csv column against env steps, the learner's
    diagnostics among them, and summary.json as text only: its constants (pids, hosts,
    settings) are no curves (written only by the deciding rank: one event file)."""
    import csv

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list((d / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    ea = EventAccumulator(str(d / "tensorboard"), size_guidance={"scalars": 0})
    ea.Reload()
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    for col in ("fps", "mean_return_100", "policy_lag", "policy_lag_p90", "learner_updates",
                "bytes_sent", "learner/entropy", "learner/grad_norm", "learner/lr"):
        want = [(int(r["env_steps"]), np.float32(r[col])) for r in rows if r[col]]
        got = [(e.step, np.float32(e.value)) for e in ea.Scalars(f"metrics/{col}")]
        assert got == want and want, col
    assert not [t for t in ea.Tags()["scalars"] if t.startswith("summary/")]
    (text,) = ea.Tensors("summary/text_summary")
    assert json.dumps(summary["policy_lag_mean"]) in text.tensor_proto.string_val[0].decode()

