"""``--eps-ladder K``: the one-process DQN baseline explores as K actors of Ape-X's ladder
do (Horgan et al. 2018: ε_i = ε^(1 + α·i/(N−1))), env group by env group."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from runs import cli

from archzoo import builders
from archzoo.actors.transitions import TransitionActor, epsilon, ladder_over_envs
from archzoo.config import ApexConfig
from archzoo.envs import env_spec
from archzoo.learners.dqn import QNetwork


def test_the_ladder_over_envs_is_the_actors_ladder() -> None:
    eps = ladder_over_envs(32, 2, 0.4, 7.0)
    assert eps.tolist() == [epsilon(0, 2)] * 16 + [epsilon(1, 2)] * 16
    assert epsilon(1, 2) == pytest.approx(0.4 ** 8)
    three = ladder_over_envs(5, 3, 0.5, 2.0)  # groups of 2, 2 and 1 envs
    assert three.tolist() == [0.5, 0.5, 0.5 ** 2, 0.5 ** 2, 0.5 ** 3]
    assert ladder_over_envs(4, 1).tolist() == [0.4] * 4


def test_each_env_explores_at_its_own_rate() -> None:
    """Three envs at ε = 1 (uniform over CartPole's 2 actions: greedy half the time) and one
    at ε = 0 (always greedy): 5/8 of the transitions take argmax Q; one ε of 0.4 for all
    would take it 4/5 of the time."""
    spec = env_spec("CartPole-v1")
    cfg = ApexConfig(arch="apex", n_step=1, envs_per_actor=4, actor_batch=4000, hidden=16)
    torch.manual_seed(0)
    model = QNetwork(spec.obs_shape, spec.num_actions, 16, False)
    actor = TransitionActor(spec, 4, 1, 0.99, model, np.array([1.0, 1.0, 1.0, 0.0]), seed=0)
    msg = builders.replay_inserts(cfg, spec).new()
    n = actor.collect(msg, 4000)
    with torch.no_grad():
        greedy = model(torch.as_tensor(msg["obs"][:n])).numpy().argmax(-1)
    assert abs(np.mean(greedy == msg["action"][:n]) - 5 / 8) < 0.03
    actor.close()


def test_a_one_process_run_reports_its_ladder(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "apex", "--actors", "0", "--envs-per-actor", "4", "--eps-ladder", "2",
            "--total-steps", "3000", "--quiet", "--no-tensorboard", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((d / "summary.json").read_text())
    assert summary["epsilon"] == pytest.approx([0.4 ** 8, 0.4])


@pytest.mark.parametrize("flags, said", [
    (["--actors", "2", "--eps-ladder", "2"], "--eps-ladder 2 applies to --actors 0"),
    (["--actors", "0", "--envs-per-actor", "2", "--eps-ladder", "3"],
     "--eps-ladder 3 exceeds --envs-per-actor 2"),
])
def test_a_ladder_that_cannot_be_gives_one_line(flags: list[str], said: str) -> None:
    r = cli("run", "apex", *flags)
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1
