"""SEED RL's learner side: unrolls assembled from the inference traffic, V-trace updates.

In SEED RL (Espeholt et al. 2020, §3) the learner answers every env step of every actor,
so it keeps one :class:`~learners.unroll_builder.UnrollBuilder` per actor and trains
whenever ``batch_unrolls`` unrolls are complete. The model that answers is the model that
trains: an update between two batches is in place for the next one.
"""

from __future__ import annotations

from archzoo.messages import Message, Schema
from archzoo.runlog import Monitor
from learners.unroll_builder import UnrollBuilder
from learners.vtrace_learner import VTraceLearner


class SeedLearner:
    """Unroll buffers per actor, the learning curve, and V-trace updates."""

    def __init__(self, learner: VTraceLearner, unroll_schema: Schema, unroll_length: int,
                 actors: list[int], batch_unrolls: int, mon: Monitor) -> None:
        self.learner, self.mon = learner, mon
        self.builders = {a: UnrollBuilder(unroll_schema, unroll_length) for a in actors}
        self.complete: list[Message] = []
        self.batch_unrolls = batch_unrolls or len(actors)

    def on_answer(self, actor: int, req: Message, rep: Message) -> None:
        """Account one answered request and grow that actor's unroll."""
        if not bool(req["first"]):
            n = int(req["ep_count"])
            self.mon.add_episodes(req["ep_returns"][:n])
            self.mon.add_steps(int(req["valid"].sum()), float(req["first_step_time"]))
        unroll = self.builders[actor].add(req, rep)
        if unroll is not None:
            self.complete.append(unroll)

    def maybe_update(self) -> bool:
        """One V-trace step once ``batch_unrolls`` unrolls are complete (oldest first)."""
        if len(self.complete) < self.batch_unrolls:
            return False
        batch = self.complete[: self.batch_unrolls]
        del self.complete[: self.batch_unrolls]
        for u in batch:
            self.mon.add_lag(self.learner.version - int(u["version"]))
        self.learner.update(batch)  # the next batch is answered by the new parameters
        self.mon.updates = self.learner.version
        return True

    def restarts(self) -> dict[str, int]:
        """Actors that came back under a new run id, and how often."""
        return {str(a): b.restarts for a, b in self.builders.items() if b.restarts}
