"""The actor of the DQN family (Ape-X, Gorila): ε-greedy, n-step transitions to a replay.

Actor i of N explores with Ape-X's ladder ε_i = ε^(1 + α·i/(N−1))
(:func:`archzoo.actors.transitions.epsilon`), sends its batches of transitions to one replay rank
without waiting (a double buffer: it collects one while the other is on the wire), and plays
greedy evaluation episodes (one evaluation at most every ``--eval-interval`` seconds, in
slices between its batches); its episodes and evaluations
go to rank 0. Where its parameters come from is the architecture's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from archzoo import builders
from archzoo.actors.evaluation import GreedyEvaluator
from archzoo.actors.transitions import epsilon
from archzoo.comm import Message
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import ApexConfig
from archzoo.envs import EnvSpec
from archzoo.harness.finish import actor_seed, evaluator_seed
from archzoo.harness.protocol import RankContext
from archzoo.harness.roles import LeafLink
from archzoo.nets import set_flat
from archzoo.records import LeafStats
from archzoo.runlog import Timers
from archzoo.tags import TAG_TRANSITIONS

if TYPE_CHECKING:
    from torch import nn


class TransitionLeaf:
    """This rank's ε-greedy :class:`TransitionActor` over ``model`` (``actor``), and from
    :meth:`start` its evaluator and its sends to the replay."""

    def __init__(self, ctx: RankContext[ApexConfig], spec: EnvSpec, model: nn.Module,
                 actors: list[int]) -> None:
        cfg = self.cfg = ctx.cfg
        self.ctx, self.spec, self.model = ctx, spec, model
        self.eps = epsilon(actors.index(ctx.rank), len(actors), cfg.eps_base, cfg.eps_alpha)
        self.actor = builders.transition_actor(cfg, spec, model, self.eps,
                                               actor_seed(cfg.seed, ctx.rank))
        self.timers = Timers()

    def load(self, msg: Message) -> None:
        """Parameters from a broadcast (``params``, ``version``) into the model."""
        set_flat(self.model, msg["params"])
        self.actor.version = int(msg["version"])

    def start(self, link: LeafLink, dest: int) -> None:
        """Once joined: the greedy evaluator, and the transitions' way to replay rank
        ``dest``; episodes go to ``link``'s root."""
        cfg, rank = self.cfg, self.ctx.rank
        self.link = link
        self.acted = self.actor.tracker.env_steps  # env steps when the last report came
        self.evaluator = GreedyEvaluator(self.spec, cfg.eval_episodes,
                                         evaluator_seed(cfg.seed, rank))
        self.out = DoubleBuffer(self.ctx.net, builders.replay_inserts(cfg, self.spec),
                                dest, TAG_TRANSITIONS, builders.insert_name(cfg))

    def step(self, on_poll: Callable[[], object]) -> None:
        """Collect a batch (``on_poll`` while the free buffer is still on the wire), send it."""
        self.actor.collect(self.out.next(on_poll=on_poll), self.cfg.actor_batch)
        with self.timers("comm"):
            self.out.send()

    def report(self) -> None:
        """The finished episodes and any evaluation due, to the root when it is time."""
        reporter, actor = self.link.reporter, self.actor
        acted = actor.tracker.env_steps - self.acted
        self.acted = actor.tracker.env_steps
        reporter.add(actor.take_finished(),  # as many evaluation steps as it just acted
                     self.evaluator.maybe_advance(actor.greedy, self.cfg.eval_interval,
                                                  acted // self.cfg.envs_per_actor))
        reporter.maybe_report(actor.tracker.env_steps, actor.version, actor.first_step_time)

    def stats(self, params: dict[str, int | float | None] | None = None) -> LeafStats:
        """Its BYE statistics (with ``params``: the parameter versions it loaded)."""
        a = self.actor
        stats: LeafStats = {"timing": {"env": a.env_s, "inference": a.inference_s,
                                       "comm": self.timers.s.get("comm", 0.0)},
                            "env_steps": a.tracker.env_steps, "epsilon": self.eps}
        if params is not None:
            stats["params"] = params
        return stats

    def close(self) -> None:
        self.actor.close()
        self.evaluator.close()
