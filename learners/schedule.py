"""The learning-rate schedule of every learner: constant, or IMPALA's linear decay to 0 over
the run's budget (Espeholt et al. 2018, Appendix G), and the budgets it follows.

A learner holds a :class:`Schedule` and calls :meth:`Schedule.after_update` at the end of
every update: the next update's rate is ``lr · max(0, 1 − spent)``, ``spent`` the fraction
of a :class:`Budget` used so far. Which budget a learner follows is the one thing that
differs between learners:

- the V-trace learner (IMPALA, SEED RL, GA3C) follows its own :class:`TrainingBudget`: the
  env steps it trained on and its seconds of training since its first update (what it sees
  alone, GA3C's trainer threads included);
- the DQN learners (Ape-X, R2D2) follow the run's: the deciding rank's Monitor
  (archzoo/runlog.py: every actor's env steps and the run's clock), given with
  :meth:`Schedule.follow` once the run is open.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


def decay_lr(opt: torch.optim.Optimizer, lr: float, spent: float) -> float:
    """Set every parameter group's learning rate to ``lr · max(0, 1 − spent)``, where
    ``spent`` is the fraction of the budget used so far; returns the rate set."""
    now = lr * max(0.0, 1.0 - spent)
    for g in opt.param_groups:
        g["lr"] = now
    return now


def fraction_spent(*parts: tuple[float, float | None]) -> float:
    """The fraction of a budget used: the largest ``used / budget`` over the ``(used,
    budget)`` parts that have a budget (env steps, seconds, ...); 0 when none has one."""
    return max((used / budget for used, budget in parts if budget), default=0.0)


class Budget(Protocol):
    """What a schedule follows: the fraction of a budget spent so far."""

    def budget_spent(self) -> float: ...


class Schedule:
    """A learner's learning rate: ``lr``, or with ``decay`` ``lr · max(0, 1 − spent)`` of the
    budget it follows, set after every update for the next one. Until it has a budget the
    rate stays ``lr``."""

    def __init__(self, lr: float, decay: bool = False) -> None:
        self.lr, self.decay = lr, decay
        self.budget: Budget | None = None

    def follow(self, budget: Budget) -> Schedule:
        """Follow ``budget`` (a learner's own, or the run's Monitor) from now on."""
        self.budget = budget
        return self

    def after_update(self, opt: torch.optim.Optimizer) -> None:
        """An update is done: set the next update's rate in every parameter group."""
        if self.decay and self.budget is not None:
            decay_lr(opt, self.lr, self.budget.budget_spent())


class TrainingBudget:
    """A learner's own budget: the env steps it trained on of ``steps``, or its seconds of
    training (from its first update, earlier runs' included on resume) of ``seconds``,
    whichever is spent faster."""

    def __init__(self, steps: int | None = None, seconds: float | None = None) -> None:
        self.steps, self.seconds = steps, seconds
        self.steps_trained = 0  # valid env steps in the batches so far
        self.trained_s = 0.0  # wall time since the first update (of earlier runs, on resume)
        self._resumed_s = 0.0
        self._first_update: float | None = None

    def start(self, now: float) -> None:
        """An update begins at ``now`` (``time.perf_counter()``); the first one starts the
        clock."""
        if self._first_update is None:
            self._first_update = now

    def trained(self, steps: int, now: float) -> None:
        """An update that began after :meth:`start` trained on ``steps`` env steps and ended
        at ``now``."""
        if self._first_update is None:
            raise RuntimeError("TrainingBudget.trained() before start(): no update began")
        self.steps_trained += steps
        self.trained_s = self._resumed_s + now - self._first_update

    def budget_spent(self) -> float:
        return fraction_spent((self.steps_trained, self.steps),
                              (self.trained_s, self.seconds))

    def state_dict(self) -> dict[str, Any]:
        return {"steps_trained": self.steps_trained, "trained_s": self.trained_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A resumed learner goes on from the steps and seconds it had trained."""
        self.steps_trained = int(state.get("steps_trained", 0))
        self.trained_s = self._resumed_s = float(state.get("trained_s", 0.0))
        self._first_update = None
