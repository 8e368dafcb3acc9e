"""``--lr-decay`` for the double-DQN learners (Ape-X, R2D2): the learning rate falls
linearly to 0 over the run's budget as the Monitor counts it (env steps of all actors, or
seconds), IMPALA's schedule (Espeholt et al. 2018, Appendix G); Gorila refuses it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from archzoo import builders
from archzoo.errors import UsageError
from archzoo.learners.dqn import DQNConfig, DQNLearner, QNetwork
from archzoo.learners.r2d2 import R2D2Learner
from archzoo.learners.schedule import Schedule
from archzoo.resolve import parse_run, validate_run
from archzoo.runlog import Monitor
from tests.runs import cli, filled, load_run
from tests.test_dqn import CPU, random_batch


def flat(m: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in m.parameters()])


def test_the_learning_rate_follows_the_budget_spent() -> None:
    """After each update the schedule reads the run's budget (a Monitor counting 1000 env
    steps): the next update takes lr · (1 − spent); past the budget the rate is 0."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    learner = DQNLearner(QNetwork((3,), 3, hidden=8), DQNConfig(lr=1e-3), CPU,
                         schedule=Schedule(1e-3, decay=True))
    run = Monitor(None, None, 1000, None, 1.0, "x", quiet=True)
    learner.schedule.follow(run)
    seen = []
    for steps in (250, 250, 400, 300):  # spent after each update: 0.25, 0.5, 0.9, 1.2
        run.add_steps(steps)
        seen.append(learner.update(random_batch(rng))[1]["lr"])
    assert seen == pytest.approx([1e-3, 7.5e-4, 5e-4, 1e-4])
    before = flat(learner.model)  # past the budget (the stop comes at the next check)
    assert learner.update(random_batch(rng))[1]["lr"] == 0.0
    assert torch.equal(flat(learner.model), before)  # no step at all
    constant = DQNLearner(QNetwork((3,), 3, hidden=8), DQNConfig(lr=1e-3), CPU)
    constant.schedule.follow(run)
    assert [constant.update(random_batch(rng))[1]["lr"] for _ in range(2)] == [1e-3] * 2


def test_the_budget_spent_is_steps_or_seconds_whichever_is_further() -> None:
    steps = Monitor(None, None, 1000, None, 1.0, "x", quiet=True)
    assert steps.budget_spent() == 0.0
    steps.add_steps(250)
    assert steps.budget_spent() == pytest.approx(0.25)
    both = Monitor(None, None, 1000, 100.0, 1.0, "x", quiet=True)
    both.t_start = time.time() - 50.0  # half the time limit gone, a quarter of the steps
    both.add_steps(250)
    assert both.budget_spent() == pytest.approx(0.5, abs=0.01)
    both.add_steps(500)
    assert both.budget_spent() == pytest.approx(0.75)
    assert Monitor(None, None, None, None, 1.0, "x", quiet=True).budget_spent() == 0.0


def test_the_flag_reaches_ape_x_and_r2d2_learners_and_gorila_refuses_it() -> None:
    def learner(*argv: str) -> DQNLearner:
        cfg = validate_run(*parse_run(["run", *argv, "--device", "cpu"]))[2]
        return builders.dqn_learner(cfg, builders.env_spec(cfg))

    for arch in ("apex", "r2d2"):
        on = learner(arch, "--lr-decay")
        assert on.schedule.decay and isinstance(on, R2D2Learner) == (arch == "r2d2")
        assert not learner(arch).schedule.decay
    cfg, given = parse_run(["run", "gorila", "--lr-decay"])
    with pytest.raises(UsageError, match="--lr-decay: gorila's parameter-server shards"):
        validate_run(cfg, given)


@pytest.mark.parametrize("actors", [0, 2])
def test_an_ape_x_run_decays_to_zero_over_its_steps(tmp_path: Path, actors: int) -> None:
    """A CartPole run of 30k agent steps: the learner's rate starts near --lr and falls
    row by row to under a fifth of it (the last row's mean; the actors overshoot the
    budget by what they had in flight)."""
    d = tmp_path / "run"
    r = cli("run", "apex", "--actors", str(actors), "--lr-decay", "--total-steps", "30000",
            "--learning-starts", "1000", "--log-interval", "0.5", "--quiet", "--seed", "1",
            "--comm-timeout", "30", "--run-dir", str(d))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    s = load_run(d)
    assert s["env_steps"] >= 30000
    lr = filled(d, "learner/lr")
    assert len(lr) >= 3, lr
    assert 0.7e-3 < lr[0] <= 1e-3 and lr[-1] < 0.2e-3, lr
    assert all(b <= a for a, b in zip(lr, lr[1:], strict=False)), lr  # it only falls
