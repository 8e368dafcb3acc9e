"""What every learner is to the rest of archzoo: the :class:`Learner` protocol.

A learner owns a model and its optimiser, versions its parameters (one version per
update), keeps its learning rate on a :class:`~archzoo.learners.schedule.Schedule`, reports
each update's statistics (metrics.csv's ``learner/`` columns) and the seconds it spent
updating, and saves and restores itself for a checkpoint. Two kinds take different
batches:

- :class:`UnrollLearner` (V-trace: IMPALA, SEED RL, GA3C) trains on a list of unrolls and
  returns the update's statistics;
- :class:`ReplayLearner` (double DQN: Ape-X; R2D2 on sequences) trains on a replay batch
  with its importance weights and returns the items' new priorities and the statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from archzoo.learners.schedule import Schedule


@runtime_checkable
class Learner(Protocol):
    """A learner, whatever it trains on."""

    model: nn.Module  # the online network: what actors act with and policy.pt keeps
    device: torch.device
    version: int  # updates applied: the parameters' version
    update_s: float  # seconds spent in update(), for summary.json's time breakdown
    schedule: Schedule  # its learning rate

    def update(self, *batch: Any, **kw: Any) -> Any:
        """One update (a version) on a batch; what it trained reported with its statistics
        (the kinds below say which batch and what they return)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of it (tensors and plain types)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class UnrollLearner(Learner, Protocol):
    """A learner on unrolls (``[T(+1), E, ...]`` messages of actors)."""

    def update(self, unrolls: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """One update on these unrolls; its statistics (``lr`` among them)."""
        ...


@runtime_checkable
class ReplayLearner(Learner, Protocol):
    """A learner on replay batches, with a target network."""

    target: nn.Module

    def update(self, batch: Mapping[str, Any], weights: np.ndarray | torch.Tensor | None = None
               ) -> tuple[np.ndarray, dict[str, float]]:
        """One update on a sampled batch (``weights``: prioritized replay's importance
        weights); the items' new priorities and the update's statistics."""
        ...
