"""A3C and its synchronous twin A2C, on a sharded, versioned parameter server.

Mnih et al. 2016 (Algorithm S3) and seed 004 §12.4.1, Algorithm 12.37 as corrected in
DESIGN.md; sync mode is DPPO's chief (Algorithm 12.38): wait for W − D of W gradients.

Roles: ranks 0..K−1 are parameter-server shards (``--ps-shards K``; rank 0 also keeps
the learning curve and decides when to stop), ranks K.. are actor-learners.

- An actor-learner pulls θ′, acts for ``--t-max`` steps on E envs, computes the gradient
  of the A2C loss (policy term with (R − V) held constant, value term, entropy bonus),
  clips it, and pushes it to every shard; the shards answer with fresh parameters.
- ``--mode async`` (A3C): each shard applies every gradient as it arrives (optionally
  dropping those more than ``--staleness`` versions old). ``--mode sync`` (A2C): each
  round waits for W − ``--ps-drop`` workers, averages in rank order and applies once.
- ``--actors 0``: one actor-learner and the same update rule in one process.
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
    LeafControl,
    RankContext,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
    run_summary,
    serve_and_monitor,
    stats_message,
)
from archzoo.comm import ControlChannel
from archzoo.envs import EnvSpec, env_spec
from archzoo.nets import ActorCritic, get_flat, num_params, set_flat
from archzoo.runlog import Monitor, RunDir
from archzoo.topology.star import params_schema
from learners.a2c import A2CConfig, a2c_gradient
from paramserver import (
    ParamShard,
    PSClient,
    PSTags,
    ShardState,
    make_optimizer,
    ps_schemas,
    shard_bounds,
)

NAME = "a3c"
DESCRIPTION = "A3C (async) / A2C (--mode sync): actor-learners push gradients to a sharded PS"
PS_TAGS = PSTags.at(20)
TAG_FINAL_PARAMS = 8  # the first worker's last parameters, for the run directory's policy


def add_arguments(p: argparse.ArgumentParser) -> None:
    """A3C's hyper-parameters, with defaults that solve CartPole-v1."""
    g = p.add_argument_group("A3C / A2C")
    g.add_argument("--ps-shards", type=int, default=1, help="parameter-server ranks")
    g.add_argument("--ps-drop", type=int, default=0,
                   help="sync: D, gradients a round may go without (it waits for W - D)")
    g.add_argument("--staleness", type=int, default=None,
                   help="async: drop gradients computed on parameters more than S versions old")
    g.add_argument("--t-max", type=int, default=5, help="steps per segment before a push")
    g.add_argument("--optimizer", choices=("rmsprop", "adam"), default="rmsprop",
                   help="the shards' optimizer (shared RMSProp as in A3C)")
    g.add_argument("--lr", type=float, default=7e-4, help="learning rate")
    g.add_argument("--rms-eps", type=float, default=1e-5, help="RMSProp ε")
    g.add_argument("--gamma", type=float, default=0.99, help="discount γ")
    g.add_argument("--value-coef", type=float, default=0.5, help="value-loss weight")
    g.add_argument("--entropy-coef", type=float, default=0.01, help="entropy-bonus weight")
    g.add_argument("--max-grad-norm", type=float, default=0.5,
                   help="gradient-norm clip, applied on the client")
    g.add_argument("--hidden", type=int, default=64, help="MLP width")


def validate(cfg: argparse.Namespace) -> str | None:
    if cfg.topology != "star":
        return (f"a3c cannot use --topology {cfg.topology}: gradients stream to the "
                "parameter server point-to-point (--topology star)")
    if cfg.ps_shards < 1:
        return f"--ps-shards must be >= 1, got {cfg.ps_shards}"
    if cfg.staleness is not None and cfg.staleness < 0:
        return f"--staleness must be >= 0, got {cfg.staleness}"
    if cfg.ps_drop < 0:
        return f"--ps-drop must be >= 0, got {cfg.ps_drop}"
    workers = max(1, cfg.actors or 0)
    if cfg.ps_drop >= workers:
        return (f"--ps-drop {cfg.ps_drop} must be < the number of actor-learners W = "
                f"{workers} (a round waits for W - D of them)")
    for flag, ok in (("--t-max", cfg.t_max >= 1), ("--lr", cfg.lr > 0),
                     ("--gamma", 0 <= cfg.gamma <= 1), ("--hidden", cfg.hidden >= 1),
                     ("--max-grad-norm", cfg.max_grad_norm > 0), ("--rms-eps", cfg.rms_eps > 0)):
        if not ok:
            return f"{flag}: bad value"
    return None


def world_size_for(cfg: argparse.Namespace, actors: int) -> int:
    """K shards + the actor-learners; ``--actors 0`` is one process."""
    return cfg.ps_shards + actors if actors > 0 else 1


def actors_for(cfg: argparse.Namespace, world_size: int) -> int:
    return world_size - cfg.ps_shards


def _optimizer(cfg: argparse.Namespace):
    if cfg.optimizer == "rmsprop":
        return make_optimizer("rmsprop", cfg.lr, alpha=0.99, eps=cfg.rms_eps)
    return make_optimizer("adam", cfg.lr)


def _a2c(cfg: argparse.Namespace) -> A2CConfig:
    return A2CConfig(gamma=cfg.gamma, t_max=cfg.t_max, value_coef=cfg.value_coef,
                     entropy_coef=cfg.entropy_coef, max_grad_norm=cfg.max_grad_norm)


def _model(cfg: argparse.Namespace, spec: EnvSpec) -> ActorCritic:
    torch.manual_seed(cfg.seed)
    return ActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden)


def _monitor(ctx: RankContext, run_dir: RunDir) -> Monitor:
    cfg, t = ctx.cfg, ctx.transport
    return Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                   cfg.log_interval, f"{NAME}/{t.backend if t else '-'}", quiet=cfg.quiet)


def _finish(ctx: RankContext, run_dir: RunDir, mon: Monitor, stop: str, model, spec: EnvSpec,
            updates: int, timers: dict, extra: dict, applied: str) -> dict[str, Any]:
    summary = run_summary(ctx, mon, stop, NAME, "star" if ctx.transport else "none", applied,
                          "cpu", updates, timers, extra)
    run_dir.write_summary(summary)
    run_dir.save_policy(model, {"arch": NAME, "env": spec.env_id,
                                "obs_shape": list(spec.obs_shape),
                                "num_actions": spec.num_actions, "hidden": ctx.cfg.hidden})
    run_dir.close()
    return summary


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return run_single(ctx, spec)
    k = ctx.cfg.ps_shards
    shards, workers = list(range(k)), list(range(k, ctx.world_size))
    if ctx.rank in shards:
        return run_shard(ctx, spec, shards, workers)
    run_worker(ctx, spec, shards, workers)
    return None


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """One actor-learner; the parameter server's update rule runs in-process."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir)
    model = _model(cfg, spec)
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    state = ShardState(flat, _optimizer(cfg), [0], mode=cfg.mode, staleness=cfg.staleness)
    actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, model, cfg.seed * 1000)
    a2c = _a2c(cfg)
    first = time.time()
    stop = None
    while stop is None:
        seg = actor.collect()
        grad, _ = a2c_gradient(model, seg, a2c)
        state.push(0, state.version, grad)
        set_flat(model, state.params)
        mon.add_steps(seg.num_steps, first)
        mon.add_episodes(seg.ep_returns)
        mon.updates = state.version
        mon.maybe_log()
        stop = mon.check_stop()
    mon.maybe_log(force=True)
    actor.close()
    timers = {"actor0": {"env": actor.env_s, "inference": actor.inference_s}}
    return _finish(ctx, run_dir, mon, stop, model, spec, state.version, timers,
                   {"ps": state.stats.as_dict()}, "single process, no transport")


def run_shard(ctx: RankContext, spec: EnvSpec, shards: list[int],
              workers: list[int]) -> dict[str, Any] | None:
    cfg, t = ctx.cfg, ctx.transport
    model = _model(cfg, spec)  # every shard starts from the same initial parameters
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    lo, hi = shard_bounds(len(flat), len(shards))[shards.index(ctx.rank)]
    shard = ParamShard(t, flat[lo:hi], workers, _optimizer(cfg), PS_TAGS, mode=cfg.mode,
                       drop=cfg.ps_drop, staleness=cfg.staleness)
    digests = {s.name: s.digest() for s in ps_schemas(len(flat))}
    leaves = [r for r in range(ctx.world_size) if r != 0]
    if ctx.rank != 0:
        control = ControlChannel(t, [0], TAG_CONTROL)
        handshake_leaf(control, 0, digests, cfg.startup_timeout)
        lc = LeafControl(control, 0)
        # serve until every worker said BYE (they stop on rank 0's STOP); the run's
        # own limit plus the stop protocol's deadline bound a silent worker
        shard.run(timeout_s=cfg.time_limit + 2 * cfg.comm_timeout)
        lc.poll()
        finish_leaf(ctx, control, lc, 0, {"ps": shard.stats.as_dict(),
                                          "bytes": t.counters.totals()}, drain=lambda: None)
        return None
    control = ControlChannel(t, leaves, TAG_CONTROL)
    final = params_schema(len(flat)).new()
    final_req = t.irecv(final.buffer, workers[0], TAG_FINAL_PARAMS, "final parameters")
    handshake_root(control, leaves, digests, cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir)
    stop = serve_and_monitor(ctx, control, mon, shard.serve, lambda: shard.version)
    byes = finish_root(ctx, control, leaves, drain=shard.serve,
                       outstanding=lambda: shard.run(timeout_s=cfg.comm_timeout))
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    ps = {"0": shard.stats.as_dict(), **{str(r): byes[r]["ps"] for r in shards[1:]}}
    timers = {f"worker{r}": byes[r].get("timing", {}) for r in workers}
    extra = {"ps_shards": len(shards), "ps": ps, "mode_rule": (
        "async: apply each gradient as it arrives" if cfg.mode == "async"
        else f"sync: wait for W - D = {len(workers) - cfg.ps_drop} of {len(workers)}"),
        "per_rank_bytes": {"0": c, **{str(r): b.get("bytes", {}) for r, b in byes.items()}}}
    t.wait(final_req)
    set_flat(model, final["params"])
    extra["final_params_version"] = int(final["version"])
    applied = "gradients worker->shards and parameters shards->worker point-to-point (star)"
    return _finish(ctx, run_dir, mon, stop, model, spec, shard.version, timers, extra, applied)


def run_worker(ctx: RankContext, spec: EnvSpec, shards: list[int], workers: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    model = _model(cfg, spec)
    n = num_params(model)
    control = ControlChannel(t, [0], TAG_CONTROL)
    handshake_leaf(control, 0, {s.name: s.digest() for s in ps_schemas(n)},
                   cfg.startup_timeout)
    lc = LeafControl(control, 0)
    client = PSClient(t, shards, n, PS_TAGS)
    params, versions = client.sync()
    set_flat(model, params)
    actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, model,
                         cfg.seed * 1000 + ctx.rank)
    a2c = _a2c(cfg)
    first = time.time()
    reported, pending, last = 0, [], time.time()
    update_s = comm_s = 0.0
    while True:
        lc.poll()
        if lc.stopped:
            break
        seg = actor.collect()
        t0 = time.perf_counter()
        grad, _ = a2c_gradient(model, seg, a2c)
        t1 = time.perf_counter()
        params, versions = client.exchange(grad)  # push θ′'s gradient, get fresh θ
        set_flat(model, params)
        update_s += t1 - t0
        comm_s += time.perf_counter() - t1
        pending.extend(seg.ep_returns.tolist())
        if time.time() - last >= 0.25:
            control.send(0, stats_message(actor.env_steps - reported, pending,
                                          int(versions[0]), first))
            reported, pending, last = actor.env_steps, [], time.time()
    client.close()
    actor.close()
    final = None
    if ctx.rank == workers[0]:
        final = params_schema(n).new()
        final["params"][:] = params
        final["version"][...] = int(versions.min())
        final_req = t.isend(final.buffer, 0, TAG_FINAL_PARAMS, "final parameters")
        t.wait(final_req)
    stats = {"timing": {"env": actor.env_s, "inference": actor.inference_s,
                        "gradient": update_s, "push_pull": comm_s, "wait": t.wait_s},
             "bytes": t.counters.totals()}
    finish_leaf(ctx, control, lc, 0, stats, drain=lambda: None)
