"""GALA / PALA: A2C agents that average their models by gossip over a ring.

Assran et al. 2019 (GALA, Algorithm 1): N agents, each an A2C learner with its own E
environments, take local n-step actor-critic steps (Mnih et al. 2016; learners/a2c.py)
and, every ``--gossip-every`` updates, replace their parameters with a doubly stochastic
average of their own and their two ring neighbours' (``gossip_average`` of
archzoo/topology/ring.py). No parameter server and no central learner: the only
communication is neighbour-to-neighbour on the ring, plus episode statistics to rank 0
and a one-element stop flag that rank 0 broadcasts along the ring at each gossip round
(so every agent leaves after the same round).

Role map: every rank is an agent; rank 0 also keeps the learning curve and decides when
to stop. ``--actors 0`` (or 1) is one agent with no transport.

Reported (metrics.csv): every agent's A2C loss terms (the others' ride with their episode
reports) and, at each gossip round, rank 0's consensus distance: the L2 distance between
its parameters and the mean of its ring neighbours' (:func:`neighbour_distance`, in
archzoo/topology/ring.py).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from archzoo import builders, eager, harness
from archzoo.actors.segment import SegmentActor
from archzoo.architectures.rolemap import play
from archzoo.config import GalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.learners.a2c import a2c_gradient
from archzoo.nets import get_flat, num_params, set_flat, set_flat_grad
from archzoo.records import Summary
from archzoo.runlog import Monitor, Timers
from archzoo.topology.factory import make_topology
from archzoo.topology.ring import NeighbourDistances, consensus_distance
from archzoo.topology.star import params_schema

APPLIED = "model averaging by gossip between ring neighbours; stop flag broadcast along the ring"


class Agent:
    """One A2C learner with its own envs (the same on every rank)."""

    def __init__(self, ctx: RankContext[GalaConfig], spec: EnvSpec) -> None:
        cfg: GalaConfig = ctx.cfg
        self.cfg, self.stop_flag = cfg, np.zeros(1, np.float64)  # rank 0's decision, shared
        self.model = builders.actor_critic(cfg, spec)  # every agent: the same parameters
        self.opt = builders.agent_optimizer(cfg, self.model)
        self.a2c = builders.a2c_loss_config(cfg)
        self.actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, self.model,
                                  harness.actor_seed(cfg.seed, ctx.rank))
        self.flat = np.zeros(num_params(self.model), np.float32)
        self.timers, self.first_step_time = Timers(), 0.0  # stamped by the first step
        self.updates = self.steps_last = 0
        self.stats: dict[str, float] = {}  # the last update's (learners/a2c.py), with lr
        self.distances = NeighbourDistances()  # rank 0's, for metrics.csv

    def step(self) -> np.ndarray:
        """One segment and one local A2C update; returns the finished episodes' returns."""
        self.first_step_time = self.first_step_time or time.time()  # after the handshake
        seg = self.actor.collect()
        with self.timers("update"):
            grad, stats = a2c_gradient(self.model, seg, self.a2c)
            set_flat_grad(self.model, grad)
            eager.step(self.opt)
        self.stats = {**stats, "lr": self.opt.param_groups[0]["lr"]}
        self.updates += 1
        self.steps_last = seg.num_steps
        return seg.ep_returns

    def gossip(self, ring, stop: bool = False, measure: bool = False) -> bool:
        """Every ``--gossip-every`` updates: average with the neighbours (GALA Algorithm 1,
        line 8) and learn rank 0's stop decision (``stop``, there). True when the run stops.
        ``measure``: keep the round's :func:`neighbour_distance` in ``distances``."""
        self.stop_flag[0] = 1.0 if stop else 0.0
        if self.updates % self.cfg.gossip_every:
            return False
        with self.timers("comm"):
            get_flat(self.model, self.flat)
            before = self.flat.copy() if measure else None
            ring.gossip_average(self.flat)
            set_flat(self.model, self.flat)
            ring.broadcast(self.stop_flag, 0)
        if before is not None:
            self.distances.add(before, self.flat, ring.size)
        return bool(self.stop_flag[0])

    # -- checkpoints: rank 0's agent --------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])

    def share_resumed(self, t) -> None:
        """``--resume``: rank 0 loaded its agent from the checkpoint; every agent takes its
        parameters and update count (so the gossip rounds stay aligned). The others'
        optimizer moments start afresh: a checkpoint keeps rank 0's agent only."""
        head = np.array([self.updates], np.int64)
        t.broadcast(head, 0)
        self.updates = int(head[0])
        get_flat(self.model, self.flat)
        t.broadcast(self.flat, 0)
        set_flat(self.model, self.flat)

    def timing(self, t) -> dict[str, float]:
        self.actor.close()
        return {"env": self.actor.env_s, "inference": self.actor.inference_s,
                "update": self.timers.s.get("update", 0.0),
                "comm": self.timers.s.get("comm", 0.0), "wait": t.wait_s if t else 0.0}


def run(ctx: RankContext[GalaConfig]) -> Summary | None:
    """Every rank: an agent (the role map has no other role)."""
    return play(ctx, lambda ctx, spec: run_single(ctx, spec, Agent(ctx, spec)),
                agent=play_agent)


def play_agent(ctx: RankContext[GalaConfig], spec: EnvSpec) -> Summary | None:
    """An agent that gossips; rank 0's also keeps the learning curve and decides."""
    agent = Agent(ctx, spec)
    digests = {"params": params_schema(num_params(agent.model)).digest()}
    if ctx.rank == 0:
        return run_deciding_agent(ctx, spec, agent, digests)
    run_agent(ctx, agent, digests)
    return None


def _feed(mon: Monitor, agent: Agent, returns: np.ndarray) -> None:
    mon.add_steps(agent.steps_last, agent.first_step_time)
    mon.add_episodes(returns)
    mon.add_learner_stats(agent.stats)
    mon.updates = agent.updates


def _summary(ctx: RankContext[GalaConfig], agent: Agent, timing: dict[str, float], rounds: int,
             consensus: float | None = None) -> dict[str, Any]:
    """What summary.json and policy.pt hold of GALA (``run.finish``'s keywords)."""
    return {"policy": agent.model, "updates": agent.updates, "timers": {"agent0": timing},
            "topology": "ring", "applied": APPLIED, "role": "agent",
            "extra": {"agents": ctx.world_size, "gossip_rounds": rounds,
                      "consensus_distance": consensus}}


def run_single(ctx: RankContext[GalaConfig], spec: EnvSpec, agent: Agent) -> Summary:
    """One agent, no gossip: the A2C baseline (with the learner's threads)."""
    builders.learner_threads(ctx.cfg)
    with harness.single(ctx, parts={"agent": agent},
                        policy=(agent.model, builders.policy_meta(ctx.cfg, spec))) as run:
        while not run.stopped:
            _feed(run.mon, agent, agent.step())
            run.tick()
    return run.finish(**_summary(ctx, agent, agent.timing(None), 0))


def run_deciding_agent(ctx: RankContext[GalaConfig], spec: EnvSpec, agent: Agent,
                       digests: dict[str, str]) -> Summary:
    """Rank 0: an agent that also folds the others' statistics into the learning curve."""
    t = ctx.net
    with harness.root(ctx, list(range(1, ctx.world_size)), digests, parts={"agent": agent},
                      policy=(agent.model, builders.policy_meta(ctx.cfg, spec))) as run:
        ring = make_topology("ring", t, tag=harness.TAG_TOPOLOGY)
        if ctx.cfg.resume is not None:
            agent.share_resumed(t)
        run.mon.extra = agent.distances.window
        while True:
            _feed(run.mon, agent, agent.step())
            run.absorb(agent.updates)
            if agent.gossip(ring, run.tick() is not None, measure=True):
                break
        rounds = ring.rounds
        get_flat(agent.model, agent.flat)  # every agent's parameters, gathered on rank 0
        consensus, timing = consensus_distance(ring, agent.flat), agent.timing(t)
    return run.finish(**_summary(ctx, agent, timing, rounds, consensus))


def run_agent(ctx: RankContext[GalaConfig], agent: Agent, digests: dict[str, str]) -> None:
    """Ranks 1..N−1: an agent that reports its episodes to rank 0."""
    t = ctx.net
    with harness.leaf(ctx, digests) as link:
        ring = make_topology("ring", t, tag=harness.TAG_TOPOLOGY)
        if ctx.cfg.resume is not None:
            agent.share_resumed(t)
        link.on_stop(stats=lambda: {"timing": agent.timing(t), "updates": agent.updates})
        while True:
            link.reporter.add(agent.step())
            link.reporter.add_learner(agent.stats)
            link.reporter.maybe_report(agent.actor.env_steps, agent.updates,
                                       agent.first_step_time)
            if agent.gossip(ring):
                break
        get_flat(agent.model, agent.flat)
        consensus_distance(ring, agent.flat)
