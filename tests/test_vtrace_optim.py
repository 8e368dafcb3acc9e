"""The V-trace learner's optimiser as the IMPALA paper uses it: RMSProp on the loss summed
over the batch's valid steps (its eps 0.01 assumes that scale), and linear learning-rate
decay over the env-step or wall-time budget."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch

from archzoo.learners.schedule import Schedule, TrainingBudget
from archzoo.learners.vtrace import ImpalaLossConfig, impala_loss
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.nets import ActorCritic

T, E, OBS, A = 6, 4, 3, 2


def unroll(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    valid = np.ones((T, E), bool)
    valid[2, 1] = valid[0, 3] = False  # autoreset steps
    terminated = np.zeros((T, E), bool)
    terminated[1, 1] = True
    return {"obs": rng.normal(size=(T + 1, E, OBS)).astype(np.float32),
            "actions": rng.integers(0, A, (T, E)),
            "behaviour_logits": rng.normal(size=(T, E, A)).astype(np.float32),
            "rewards": rng.normal(size=(T, E)).astype(np.float32),
            "terminated": terminated, "truncated": np.zeros((T, E), bool), "valid": valid}


def mean_loss_grads(model: torch.nn.Module, u: dict[str, np.ndarray]) -> list[torch.Tensor]:
    """Gradients of the per-step mean IMPALA loss, computed here from the model."""
    obs = torch.as_tensor(u["obs"])
    logits, values = model(obs.reshape((T + 1) * E, OBS))
    loss, _ = impala_loss(logits=logits.reshape(T + 1, E, A)[:-1],
                          values=values.reshape(T + 1, E),
                          actions=torch.as_tensor(u["actions"]),
                          behaviour_logits=torch.as_tensor(u["behaviour_logits"]),
                          rewards=torch.as_tensor(u["rewards"]),
                          terminated=torch.as_tensor(u["terminated"]),
                          truncated=torch.as_tensor(u["truncated"]),
                          valid=torch.as_tensor(u["valid"]), cfg=ImpalaLossConfig())
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_rmsprop_steps_on_the_loss_summed_over_valid_steps() -> None:
    torch.manual_seed(0)
    model = ActorCritic((OBS,), A, 8)
    want = mean_loss_grads(copy.deepcopy(model), u := unroll(1))
    n_valid = int(u["valid"].sum())
    learner = VTraceLearner(model, ImpalaLossConfig(), 6e-4, 1e9, torch.device("cpu"),
                            optimizer="rmsprop")
    learner.update([u])
    for p, g in zip(learner.model.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, g * n_valid, rtol=1e-4, atol=1e-6)
    adam = VTraceLearner(copy.deepcopy(model), ImpalaLossConfig(), 6e-4, 1e9,
                         torch.device("cpu"))
    assert not adam.sum_loss  # Adam is scale-free: the per-step mean stays


def test_linear_learning_rate_decay_over_the_step_budget() -> None:
    torch.manual_seed(0)
    u = unroll(2)
    n_valid = int(u["valid"].sum())
    budget = 3 * n_valid
    learner = VTraceLearner(ActorCritic((OBS,), A, 8), ImpalaLossConfig(), 1e-3, 1.0,
                            torch.device("cpu"), schedule=Schedule(1e-3, decay=True),
                            budget=TrainingBudget(steps=budget))
    seen = [learner.update([u])["lr"] for _ in range(4)]
    assert seen == pytest.approx([1e-3, 1e-3 * 2 / 3, 1e-3 / 3, 0.0])
    assert learner.state_dict()["steps_trained"] == 4 * n_valid
    constant = VTraceLearner(ActorCritic((OBS,), A, 8), ImpalaLossConfig(), 1e-3, 1.0,
                             torch.device("cpu"))
    assert [constant.update([u])["lr"] for _ in range(3)] == [1e-3] * 3


def test_linear_learning_rate_decay_over_the_time_budget() -> None:
    """A budget of seconds: the schedule follows seconds of training from the first update
    (the run's --time-limit); with a step budget too, whichever is spent faster. Sleeps only
    lengthen the time spent, so every bound below holds on a loaded machine."""
    torch.manual_seed(0)
    u = unroll(3)
    learner = VTraceLearner(ActorCritic((OBS,), A, 8), ImpalaLossConfig(), 1e-3, 1.0,
                            torch.device("cpu"), schedule=Schedule(1e-3, decay=True),
                            budget=TrainingBudget(seconds=0.6))
    first = learner.update([u])["lr"]
    assert first == pytest.approx(1e-3)  # the first step trains at the full rate
    time.sleep(0.3)
    learner.update([u])
    half = learner.opt.param_groups[0]["lr"]
    assert 0.0 <= half <= 0.5e-3 + 1e-9  # at least half of 0.6 s spent
    saved = learner.state_dict()
    assert saved["trained_s"] >= 0.3 and saved["trained_s"] == learner.training.trained_s
    time.sleep(0.35)
    learner.update([u])
    assert learner.opt.param_groups[0]["lr"] == 0.0  # the budget is spent: lr stays at 0
    # a resumed learner goes on from the seconds it had trained
    resumed = VTraceLearner(ActorCritic((OBS,), A, 8), ImpalaLossConfig(), 1e-3, 1.0,
                            torch.device("cpu"), schedule=Schedule(1e-3, decay=True),
                            budget=TrainingBudget(seconds=0.6))
    resumed.load_state_dict(saved)
    resumed.update([u])
    assert resumed.training.trained_s >= saved["trained_s"]
    assert resumed.opt.param_groups[0]["lr"] <= 0.5e-3 + 1e-9
    # both budgets: the step budget is spent first when the seconds are plentiful
    n_valid = int(u["valid"].sum())
    both = VTraceLearner(ActorCritic((OBS,), A, 8), ImpalaLossConfig(), 1e-3, 1.0,
                         torch.device("cpu"), schedule=Schedule(1e-3, decay=True),
                         budget=TrainingBudget(steps=2 * n_valid, seconds=1e9))
    both.update([u])
    assert both.opt.param_groups[0]["lr"] == pytest.approx(0.5e-3, rel=1e-6)
    assert both.training.budget_spent() == pytest.approx(0.5, rel=1e-6)
