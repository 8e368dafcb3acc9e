"""GALA / PALA: A2C agents that average their models by gossip over a ring.

Assran et al. 2019 (GALA, Algorithm 1) and seed 002 (PALA, Algorithm 2): N agents, each
an A2C learner with its own E environments, take local n-step actor-critic steps
(Mnih et al. 2016; learners/a2c.py) and, every ``--gossip-every`` updates, replace their
parameters with a doubly stochastic average of their own and their two ring neighbours'
(archzoo/topology/ring.py, ``gossip_average``). No parameter server and no central
learner: the only communication is neighbour-to-neighbour on the ring, plus episode
statistics to rank 0 and a one-element stop flag that rank 0 broadcasts along the ring
at each gossip round (so every agent leaves after the same round).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from actors.segment import SegmentActor
from archzoo.architectures.common import (
    TAG_CONTROL,
    TAG_TOPOLOGY,
    LeafControl,
    RankContext,
    absorb_stats,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
    run_summary,
    stats_message,
)
from archzoo.comm import ControlChannel
from archzoo.envs import env_spec
from archzoo.nets import ActorCritic, get_flat, num_params, set_flat, set_flat_grad
from archzoo.runlog import Monitor, RunDir, Timers
from archzoo.topology.factory import make_topology
from archzoo.topology.star import params_schema
from learners.a2c import A2CConfig, a2c_gradient

NAME = "gala"
DESCRIPTION = "GALA/PALA: A2C agents averaging their models by gossip over a ring"
DEFAULT_TOPOLOGY = "ring"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """GALA's hyper-parameters, with defaults that solve CartPole-v1."""
    g = p.add_argument_group("GALA")
    g.add_argument("--t-max", type=int, default=5, help="steps per A2C segment")
    g.add_argument("--lr", type=float, default=7e-4, help="RMSProp learning rate")
    g.add_argument("--gamma", type=float, default=0.99, help="discount γ")
    g.add_argument("--value-coef", type=float, default=0.5, help="value-loss weight")
    g.add_argument("--entropy-coef", type=float, default=0.01, help="entropy-bonus weight")
    g.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient-norm clip")
    g.add_argument("--hidden", type=int, default=64, help="MLP width")
    g.add_argument("--gossip-every", type=int, default=1,
                   help="local updates between gossip rounds")


def validate(cfg: argparse.Namespace) -> str | None:
    if cfg.topology != "ring":
        return (f"gala cannot use --topology {cfg.topology}: its agents gossip with their "
                "ring neighbours (--topology ring)")
    if cfg.mode != "async":
        return "gala has no --mode sync: its agents step on their own between gossip rounds"
    for flag, ok in (("--t-max", cfg.t_max >= 1), ("--lr", cfg.lr > 0),
                     ("--gamma", 0 <= cfg.gamma <= 1), ("--hidden", cfg.hidden >= 1),
                     ("--gossip-every", cfg.gossip_every >= 1),
                     ("--max-grad-norm", cfg.max_grad_norm > 0)):
        if not ok:
            return f"{flag}: bad value"
    return None


def world_size_for(cfg: argparse.Namespace, actors: int) -> int:
    """One process per agent (``--actors`` counts agents; 0 = one agent, no gossip)."""
    return max(1, actors)


def actors_for(cfg: argparse.Namespace, world_size: int) -> int:
    return world_size


def run(ctx: RankContext) -> dict[str, Any] | None:
    cfg, t = ctx.cfg, ctx.transport
    spec = env_spec(cfg.env)
    root, n = 0, ctx.world_size
    torch.manual_seed(cfg.seed)  # every agent starts from the same parameters
    model = ActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden)
    opt = torch.optim.RMSprop(model.parameters(), lr=cfg.lr, alpha=0.99, eps=1e-5)
    a2c = A2CConfig(gamma=cfg.gamma, t_max=cfg.t_max, value_coef=cfg.value_coef,
                    entropy_coef=cfg.entropy_coef, max_grad_norm=cfg.max_grad_norm)
    leaves = list(range(1, n))
    control = ring = lc = None
    if t is not None:
        control = ControlChannel(t, leaves if ctx.rank == root else [root], TAG_CONTROL)
        digests = {"params": params_schema(num_params(model)).digest()}
        if ctx.rank == root:
            handshake_root(control, leaves, digests, cfg.startup_timeout)
        else:
            handshake_leaf(control, root, digests, cfg.startup_timeout)
            lc = LeafControl(control, root)
        ring = make_topology("ring", t, tag=TAG_TOPOLOGY)
    run_dir = mon = None
    if ctx.rank == root:
        run_dir = RunDir(cfg.run_dir, vars(cfg))
        mon = Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                      cfg.log_interval, f"{NAME}/{t.backend if t else '-'}", quiet=cfg.quiet)
    actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, model, cfg.seed * 1000 + ctx.rank)
    flat = np.zeros(num_params(model), np.float32)
    stop_flag = np.zeros(1, np.float64)
    timers = Timers()
    first_step_time = time.time()
    updates, reported, last_report = 0, 0, time.time()
    pending: list[float] = []
    stop = None
    while True:
        seg = actor.collect()
        with timers("update"):
            grad, _ = a2c_gradient(model, seg, a2c)
            set_flat_grad(model, grad)
            opt.step()
        updates += 1
        if mon is not None:
            mon.add_steps(seg.num_steps, first_step_time)
            mon.add_episodes(seg.ep_returns)
            mon.updates = updates
            if control is not None:
                for _, msg in control.poll():
                    absorb_stats(mon, msg, updates)
            mon.maybe_log(*_bytes(t))
            stop = mon.check_stop()
        elif time.time() - last_report >= 0.25:
            pending.extend(seg.ep_returns.tolist())
            control.send(root, stats_message(actor.env_steps - reported, pending, updates,
                                             first_step_time))
            reported, pending, last_report = actor.env_steps, [], time.time()
        else:
            pending.extend(seg.ep_returns.tolist())
        if ring is None:
            if stop is not None:
                break
            continue
        if updates % cfg.gossip_every == 0:
            with timers("comm"):
                get_flat(model, flat)
                ring.gossip_average(flat)  # GALA Algorithm 1: average with the neighbours
                set_flat(model, flat)
                stop_flag[0] = 1.0 if stop is not None else 0.0
                ring.broadcast(stop_flag, root)
            if stop_flag[0]:
                break
    actor.close()
    timing = {"env": actor.env_s, "inference": actor.inference_s,
              "update": timers.s.get("update", 0.0), "comm": timers.s.get("comm", 0.0),
              "wait": t.wait_s if t else 0.0}
    if ctx.rank != root:
        finish_leaf(ctx, control, lc, root, {"timing": timing, "bytes": t.counters.totals(),
                                             "updates": updates}, drain=lambda: None)
        return None
    byes = finish_root(ctx, control, leaves, lambda: None, lambda: None) if t else {}
    mon.maybe_log(*_bytes(t), force=True)
    breakdown = {"agent0": timing, **{f"agent{r}": b.get("timing", {}) for r, b in byes.items()}}
    extra = {"agents": n, "gossip_rounds": ring.rounds if ring else 0,
             "per_rank_bytes": {"0": t.counters.totals() if t else {},
                                **{str(r): b.get("bytes", {}) for r, b in byes.items()}}}
    applied = ("model averaging by gossip between ring neighbours; stop flag broadcast "
               "along the ring" if ring else "single agent, no transport")
    summary = run_summary(ctx, mon, stop, NAME, "ring" if ring else "none", applied, "cpu",
                          updates, breakdown, extra)
    run_dir.write_summary(summary)
    run_dir.save_policy(model, {"arch": NAME, "env": spec.env_id,
                                "obs_shape": list(spec.obs_shape),
                                "num_actions": spec.num_actions, "hidden": cfg.hidden})
    run_dir.close()
    return summary


def _bytes(t) -> tuple[int, int]:
    if t is None:
        return 0, 0
    c = t.counters.totals()
    return c["bytes_sent"], c["bytes_recv"]
