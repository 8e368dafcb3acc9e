"""SEED RL's learner side: unrolls assembled from the inference traffic, V-trace updates.

In SEED RL (Espeholt et al. 2020, §3) the learner answers every env step of every actor,
so it keeps one :class:`~archzoo.learners.unroll_builder.UnrollBuilder` per actor and trains
whenever ``batch_unrolls`` unrolls are complete. The model that answers is the model that
trains: an update between two batches is in place for the next one.

In ``--mode sync`` and with ``--actors 0`` it is also a checkpoint part: the unrolls in
progress, those complete but not yet trained on, and every actor's actions
(:class:`~archzoo.actors.action_log.ActionLog`), so that a resumed run goes on bit for bit.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from archzoo.actors.action_log import ActionLog
from archzoo.actors.core_states import CoreStates
from archzoo.learners.unroll_builder import UnrollBuilder
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.messages import Message, Schema
from archzoo.runlog import Monitor


class SeedLearner:
    """Unroll buffers per actor, the learning curve, and V-trace updates; with ``log`` (an
    :class:`ActionLog`: ``--mode sync``, ``--actors 0``) every completed unroll's actions
    are kept."""

    optional = True  # as a checkpoint part: without it a run resumes with fresh envs

    def __init__(self, learner: VTraceLearner, unroll_schema: Schema, unroll_length: int,
                 actors: list[int], batch_unrolls: int, mon: Monitor,
                 log: ActionLog | None = None, states: CoreStates | None = None) -> None:
        """``states``: with a recurrent core, the server's state per env
        (actors/core_states.py); each unroll starts with the state of its first step."""
        self.learner, self.mon, self.log, self.states = learner, mon, log, states
        self.schema = unroll_schema
        self.builders = {a: UnrollBuilder(unroll_schema, unroll_length) for a in actors}
        self.complete: list[Message] = []
        self.batch_unrolls = batch_unrolls or len(actors)
        self.published_at = {learner.version: time.time()}  # version -> when it answered first

    def on_answer(self, actor: int, req: Message, rep: Message) -> None:
        """Account one answered request and grow that actor's unroll."""
        if not bool(req["first"]):
            n = int(req["ep_count"])
            self.mon.add_episodes(req["ep_returns"][:n])
            self.mon.add_steps(int(req["valid"].sum()), float(req["first_step_time"]))
        core = self.states.before.get(actor) if self.states is not None else None
        unroll = self.builders[actor].add(req, rep, core)
        if unroll is not None:
            self.complete.append(unroll)
            if self.log is not None:
                self.log.record(actor, unroll["actions"])

    def maybe_update(self) -> bool:
        """One V-trace step once ``batch_unrolls`` unrolls are complete (oldest first)."""
        if len(self.complete) < self.batch_unrolls:
            return False
        batch = self.complete[: self.batch_unrolls]
        del self.complete[: self.batch_unrolls]
        now = time.time()
        for u in batch:  # in versions, and the behaviour version's age in seconds
            v = int(u["version"])
            self.mon.add_lag(self.learner.version - v,
                             now - self.published_at[v] if v in self.published_at else None)
        # the next batch is answered by the new parameters
        self.mon.add_learner_stats(self.learner.update(batch))
        self.published_at[self.learner.version] = time.time()
        self.published_at.pop(self.learner.version - 10_000, None)
        self.mon.updates = self.learner.version
        return True

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {"builders": {str(a): b.state_dict() for a, b in self.builders.items()},
                "complete": [torch.from_numpy(m.buffer.copy()) for m in self.complete],
                "actions": self.log.state_dict() if self.log is not None else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for a, b in state["builders"].items():
            if int(a) in self.builders:
                self.builders[int(a)].load_state_dict(b)
        self.complete = [Message(self.schema, t.numpy().astype(np.uint8).copy())
                         for t in state["complete"]]
        if self.log is not None:
            self.log.load_state_dict(state["actions"])

    def actions_to_replay(self) -> ActionLog:
        """Every actor's actions so far: its completed unrolls', then the one in progress's;
        what a resumed actor takes again before it asks for more."""
        if self.log is None:
            raise RuntimeError("this SEED learner keeps no action log (async mode)")
        return self.log.plus({a: b.logged_actions() for a, b in self.builders.items()})

    def restarts(self) -> dict[str, int]:
        """Actors that came back under a new run id, and how often."""
        return {str(a): b.restarts for a, b in self.builders.items() if b.restarts}
