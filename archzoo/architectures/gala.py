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
its parameters and the mean of its ring neighbours' (:func:`neighbour_distance`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from actors.segment import SegmentActor
from archzoo import builders, harness
from archzoo.comm import ControlChannel
from archzoo.config import GalaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.nets import get_flat, num_params, set_flat, set_flat_grad
from archzoo.runlog import Monitor, Timers
from archzoo.topology.factory import make_topology
from archzoo.topology.star import params_schema
from learners.a2c import a2c_gradient

APPLIED = "model averaging by gossip between ring neighbours; stop flag broadcast along the ring"


class Agent:
    """One A2C learner with its own envs (the same on every rank)."""

    def __init__(self, ctx: RankContext, spec: EnvSpec) -> None:
        cfg: GalaConfig = ctx.cfg
        self.cfg = cfg
        self.model = builders.actor_critic(cfg, spec)  # every agent: the same parameters
        self.opt = torch.optim.RMSprop(self.model.parameters(), lr=cfg.lr, alpha=0.99,
                                       eps=1e-5)
        self.a2c = builders.a2c_loss_config(cfg)
        self.actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, self.model,
                                  harness.actor_seed(cfg.seed, ctx.rank))
        self.flat = np.zeros(num_params(self.model), np.float32)
        self.timers = Timers()
        self.updates = 0
        self.steps_last = 0
        self.first_step_time = time.time()
        self.stats: dict[str, float] = {}  # the last update's (learners/a2c.py), with lr
        self.distances: list[float] = []  # measured consensus distances not yet logged

    def step(self) -> np.ndarray:
        """One segment and one local A2C update; returns the finished episodes' returns."""
        seg = self.actor.collect()
        with self.timers("update"):
            grad, stats = a2c_gradient(self.model, seg, self.a2c)
            set_flat_grad(self.model, grad)
            self.opt.step()
        self.stats = {**stats, "lr": self.opt.param_groups[0]["lr"]}
        self.updates += 1
        self.steps_last = seg.num_steps
        return seg.ep_returns

    def gossip(self, ring, stop_flag: np.ndarray, root: int, measure: bool = False) -> bool:
        """Every ``--gossip-every`` updates: average with the neighbours (GALA Algorithm 1,
        line 8) and learn rank 0's stop decision. True when the run stops. ``measure``:
        keep the round's :func:`neighbour_distance` in ``distances``."""
        if self.updates % self.cfg.gossip_every:
            return False
        with self.timers("comm"):
            get_flat(self.model, self.flat)
            before = self.flat.copy() if measure else None
            ring.gossip_average(self.flat)
            set_flat(self.model, self.flat)
            ring.broadcast(stop_flag, root)
        if before is not None and ring.size > 1:
            self.distances.append(neighbour_distance(before, self.flat,
                                                     ring_neighbours(ring.size)))
        return bool(stop_flag[0])

    def window(self) -> dict[str, float | None]:
        """The metrics row's ``consensus_distance``: the mean over the rounds since the
        last row."""
        d, self.distances = self.distances, []
        return {"consensus_distance": round(float(np.mean(d)), 6) if d else None}

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
        RMSProp moments start afresh: a checkpoint keeps rank 0's agent only."""
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


def ring_neighbours(n: int) -> int:
    """How many distinct neighbours an agent has on a ring of ``n``: 2, or 1 for two agents,
    or none alone."""
    return min(2, n - 1)


def neighbour_distance(before: np.ndarray, after: np.ndarray, neighbours: int) -> float:
    """‖x − m‖₂: the L2 distance between an agent's parameters x (``before`` a gossip round)
    and the mean m of its ``neighbours`` ring neighbours' x_j, taken from the round's
    average x' = (x + Σ_j x_j)/(k + 1) (``after``; k = ``neighbours``) with no other message:
    x − m = (k + 1)/k · (x − x'). Exact up to the float32 rounding of x'."""
    if neighbours < 1:
        raise ValueError(f"neighbours must be >= 1, got {neighbours}")
    diff = np.asarray(before, np.float64) - np.asarray(after, np.float64)
    return float((neighbours + 1) / neighbours * np.linalg.norm(diff))


def consensus_distance(ring, model: torch.nn.Module) -> float | None:
    """At the end, on rank 0: max_i ‖x_i − x̄‖ / ‖x̄‖ over the agents' parameters x_i (GALA's
    consensus distance; after a gossip round on a ring of 2 or 3 agents it is 0 up to
    rounding, since every agent then holds the mean). Collective: every agent calls it."""
    x = np.zeros(num_params(model), np.float32)
    get_flat(model, x)
    xs = ring.gather(x, 0)
    if xs is None:
        return None
    mean = xs.astype(np.float64).mean(0)
    return float(np.linalg.norm(xs - mean, axis=1).max() / max(np.linalg.norm(mean), 1e-12))


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = builders.env_spec(ctx.cfg)
    if ctx.transport is None:
        return run_single(ctx, spec)
    if ctx.rank == 0:
        return run_deciding_agent(ctx, spec)
    run_agent(ctx, spec)
    return None


def _feed(mon: Monitor, agent: Agent, returns: np.ndarray) -> None:
    mon.add_steps(agent.steps_last, agent.first_step_time)
    mon.add_episodes(returns)
    mon.add_learner_stats(agent.stats)
    mon.updates = agent.updates


def _finish(ctx: RankContext, spec: EnvSpec, run_dir, mon: Monitor, stop: str | None,
            agent: Agent, timing: dict[str, float], byes: dict[int, Any],
            rounds: int, consensus: float | None = None) -> dict[str, Any]:
    return harness.finish_run(ctx, run_dir, mon, stop, policy=agent.model,
                              meta=builders.policy_meta(ctx.cfg, spec), updates=agent.updates,
                              topology="ring", applied=APPLIED, timers={"agent0": timing},
                              byes=byes, role="agent",
                              extra={"agents": ctx.world_size, "gossip_rounds": rounds,
                                     "consensus_distance": consensus})


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """One agent, no gossip: the A2C baseline."""
    agent = Agent(ctx, spec)
    run_dir, mon = harness.open_run(ctx, parts={"agent": agent},
                                    policy=(agent.model, builders.policy_meta(ctx.cfg, spec)))
    stop = None
    while stop is None:
        _feed(mon, agent, agent.step())
        mon.maybe_log()
        stop = mon.check_stop()
    return _finish(ctx, spec, run_dir, mon, stop, agent, agent.timing(None), {}, 0)


def _handshake(ctx: RankContext, spec: EnvSpec, control: ControlChannel, leaves: list[int]):
    model = builders.actor_critic(ctx.cfg, spec)
    digests = {"params": params_schema(num_params(model)).digest()}
    if ctx.rank == 0:
        harness.handshake_root(control, leaves, digests, ctx.cfg.startup_timeout)
    else:
        harness.handshake_leaf(control, 0, digests, ctx.cfg.startup_timeout)
    return make_topology("ring", ctx.transport, tag=harness.TAG_TOPOLOGY)


def run_deciding_agent(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """Rank 0: an agent that also folds the others' statistics into the learning curve."""
    t = ctx.transport
    leaves = list(range(1, ctx.world_size))
    control = ControlChannel(t, leaves, harness.TAG_CONTROL)
    ring = _handshake(ctx, spec, control, leaves)
    agent = Agent(ctx, spec)
    run_dir, mon = harness.open_run(ctx, parts={"agent": agent},
                                    policy=(agent.model, builders.policy_meta(ctx.cfg, spec)))
    if ctx.cfg.resume is not None:
        agent.share_resumed(t)
    mon.extra = agent.window
    stop_flag = np.zeros(1, np.float64)
    while True:
        _feed(mon, agent, agent.step())
        for _, msg in control.poll():
            harness.absorb_stats(mon, msg, agent.updates)
        mon.maybe_log(*harness.byte_totals(t))
        stop = mon.check_stop()
        stop_flag[0] = 1.0 if stop is not None else 0.0
        if agent.gossip(ring, stop_flag, 0, measure=True):
            break
    rounds = ring.rounds
    consensus = consensus_distance(ring, agent.model)
    timing = agent.timing(t)
    byes = harness.finish_root(ctx, control, leaves, lambda: None, lambda: None)
    return _finish(ctx, spec, run_dir, mon, stop, agent, timing, byes, rounds, consensus)


def run_agent(ctx: RankContext, spec: EnvSpec) -> None:
    """Ranks 1..N−1: an agent that reports its episodes to rank 0."""
    t = ctx.transport
    control = ControlChannel(t, [0], harness.TAG_CONTROL)
    ring = _handshake(ctx, spec, control, [])
    lc = harness.LeafControl(control, 0)
    agent = Agent(ctx, spec)
    if ctx.cfg.resume is not None:
        agent.share_resumed(t)
    reporter = harness.StatsReporter(control, 0)
    stop_flag = np.zeros(1, np.float64)
    while True:
        reporter.add(agent.step())
        reporter.add_learner(agent.stats)
        reporter.maybe_report(agent.actor.env_steps, agent.updates, agent.first_step_time)
        if agent.gossip(ring, stop_flag, 0):
            break
    consensus_distance(ring, agent.model)
    timing = agent.timing(t)
    harness.finish_leaf(ctx, control, lc, 0, {"timing": timing, "bytes": t.counters.totals(),
                                              "updates": agent.updates}, drain=lambda: None)

