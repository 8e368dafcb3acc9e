"""A3C and its synchronous twin A2C, on a sharded, versioned parameter server.

A3C is Mnih et al. 2016 (Algorithm S3 of the supplement): asynchronous actor-learners
that push gradients of the n-step actor-critic loss. Sync mode is the chief of DPPO
(Heess et al. 2017, Algorithm 2 of the supplement): each round waits for W − D of the W
workers' gradients.

Role map (its record's, archzoo/architectures/__init__.py): ranks 0..K−1 are
parameter-server shards (``--ps-shards K``; rank 0 also keeps the learning curve and
decides when to stop), ranks K.. are actor-learners.

- An actor-learner pulls θ′, acts for ``--t-max`` steps on E envs, computes the gradient
  of the A2C loss (policy term with (R − V) held constant, value term, entropy bonus),
  clips it, and pushes it to every shard; the shards answer with fresh parameters.
- ``--mode async`` (A3C): each shard applies every gradient as it arrives (optionally
  dropping those more than ``--staleness`` versions old). ``--mode sync`` (A2C): each
  round waits for W − ``--ps-drop`` workers, averages in rank order and applies once.
- ``--actors 0``: one actor-learner and the same update rule in one process.
- Reported (metrics.csv): shard 0 measures each gradient's staleness (its version when the
  gradient arrives − the version the worker acted and computed it with, in versions and
  seconds), which is both ``grad_staleness`` and ``policy_lag``; the workers add their A2C
  loss terms and gradient norms (before clipping) to their episode reports.
- ``--mode sync --topology ring|tree|butterfly|native``: A2C without a server, the workers
  all-reducing their gradients (archzoo/architectures/a2c_allreduce.py).
"""

from __future__ import annotations

import time

import numpy as np

from archzoo import builders, harness
from archzoo.actors.segment import SegmentActor
from archzoo.architectures import a2c_allreduce
from archzoo.architectures.rolemap import placement, play
from archzoo.config import A3CConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.ps_roles import param_shard, run_shards
from archzoo.learners.a2c import a2c_gradient
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.paramserver import PSClient, ShardState, ps_schemas
from archzoo.records import Summary
from archzoo.tags import PS_TAGS

APPLIED = "gradients worker->shards and parameters shards->worker point-to-point (star)"


def run(ctx: RankContext[A3CConfig]) -> Summary | None:
    """Every rank: the role its rank plays in the role map. Sync over ring, tree,
    butterfly or native, the map has no shard: every rank is an all-reducing worker."""
    worker = a2c_allreduce.play_worker if ctx.cfg.all_reduce else run_worker
    return play(ctx, run_single, shard=run_shard, worker=worker)


def run_single(ctx: RankContext[A3CConfig], spec: EnvSpec) -> Summary:
    """One actor-learner; the parameter server's update rule runs in-process."""
    cfg = ctx.cfg
    builders.learner_threads(cfg)  # the one process takes the learner's threads
    model = builders.actor_critic(cfg, spec)
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    state = ShardState(flat, builders.ps_optimizer(cfg), [0], mode=cfg.mode,
                       staleness=cfg.staleness)
    with harness.single(ctx, parts={"ps": state},
                        policy=(model, builders.policy_meta(cfg, spec))) as run:
        mon = run.mon
        set_flat(model, state.params)  # a resumed run acts with the checkpoint's parameters
        actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, model,
                             harness.actor_seed(cfg.seed, 0))
        a2c = builders.a2c_loss_config(cfg)
        lr = float(state.optimizer.lr)

        def on_push(worker: int, staleness: int, age_s: float | None) -> None:
            mon.add_staleness(staleness, age_s)  # 0 versions here: one actor-learner
            mon.add_lag(staleness, age_s)

        state.on_push = on_push
        first = time.time()
        while not run.stopped:
            seg = actor.collect()
            grad, stats = a2c_gradient(model, seg, a2c)
            mon.add_learner_stats({**stats, "lr": lr})
            state.push(0, state.version, grad)
            set_flat(model, state.params)
            mon.add_steps(seg.num_steps, first)
            mon.add_episodes(seg.ep_returns)
            run.tick(state.version)
        actor.close()
    timers = {"actor0": {"env": actor.env_s, "inference": actor.inference_s}}
    return run.finish(model, state.version, timers=timers, extra={"ps": state.stats.as_dict()})


def run_shard(ctx: RankContext[A3CConfig], spec: EnvSpec) -> Summary | None:
    """A parameter-server shard; shard 0 also keeps the learning curve and decides."""
    cfg, place = ctx.cfg, placement(ctx)
    shards, workers = place["shard"], place["worker"]
    model = builders.actor_critic(cfg, spec)  # every shard: the same initial parameters
    shard = param_shard(ctx, model, shards, workers, builders.ps_optimizer(cfg),
                        mode=cfg.mode, drop=cfg.ps_drop, staleness=cfg.staleness)
    digests = {s.name: s.digest() for s in ps_schemas(num_params(model))}
    meta = builders.policy_meta(cfg, spec)
    end = run_shards(ctx, shard, digests, model, meta, shards, actors=workers)
    if end is None:
        return None
    rule = ("async: apply each gradient as it arrives" if cfg.mode == "async"
            else f"sync: wait for W - D = {len(workers) - cfg.ps_drop} of {len(workers)}")
    return end.finish(model, meta, topology="star", applied=APPLIED, role=place.role,
                      extra={"mode_rule": rule})


def run_worker(ctx: RankContext[A3CConfig], spec: EnvSpec) -> None:
    """An actor-learner: act t_max steps with θ′, push the gradient, take the fresh θ."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards = place["shard"]
    model = builders.actor_critic(cfg, spec)
    n = num_params(model)
    with harness.leaf(ctx, {s.name: s.digest() for s in ps_schemas(n)}) as link:
        client = PSClient(t, shards, n, PS_TAGS)
        params, versions = client.sync()
        set_flat(model, params)
        actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, model,
                             a2c_allreduce.worker_seed(cfg.seed, place.index(ctx.rank)))
        a2c = builders.a2c_loss_config(cfg)
        first = time.time()
        update_s = comm_s = 0.0
        link.on_stop(client.close, actor.close, stats=lambda: {"timing": {
            "env": actor.env_s, "inference": actor.inference_s, "gradient": update_s,
            "push_pull": comm_s}})
        while not link.stopped:
            seg = actor.collect()
            t0 = time.perf_counter()
            grad, stats = a2c_gradient(model, seg, a2c)
            t1 = time.perf_counter()
            params, versions = client.exchange(grad)  # push θ′'s gradient, get fresh θ
            set_flat(model, params)
            update_s += t1 - t0
            comm_s += time.perf_counter() - t1
            link.reporter.add(seg.ep_returns)
            link.reporter.add_learner(stats)  # shard 0 adds its learning rate
            link.reporter.maybe_report(actor.env_steps, int(versions[0]), first)
