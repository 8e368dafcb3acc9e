"""Gorila (Nair et al. 2015; seed 004 §12.4.6): actors, a replay memory, several learners
and a sharded parameter server, each a separate role.

Ranks: 0..K−1 parameter-server shards (``--ps-shards K``; rank 0 also keeps the learning
curve and decides when to stop), rank K the replay memory (the Ape-X replay server,
uniform unless ``--prioritized``), then ``--learners L`` learners, then the actors.

- An actor acts ε-greedily (Ape-X's ladder) with parameters it pulls from the server every
  ``--param-sync-every`` batches, and sends n-step transitions to the replay.
- A learner samples the replay (prefetching), computes the double-DQN gradient with its
  copy of the server's parameters and a target network that it refreshes from them every
  ``--target-update`` steps, clips it, pushes it to every shard and takes the fresh
  parameters back. The shards apply gradients asynchronously (optionally dropping stale
  ones, ``--staleness``).
- Greedy evaluation (as in Ape-X) decides "solved".
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any

import numpy as np

from actors.evaluation import GreedyEvaluator
from actors.transitions import TransitionActor, epsilon
from archzoo.architectures import apex
from archzoo.architectures.common import (
    TAG_CONTROL,
    TAG_SAMPLE_REPLY,
    TAG_SAMPLE_REQUEST,
    TAG_TRANSITIONS,
    LeafControl,
    RankContext,
    StopRequested,
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
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.runlog import RunDir
from archzoo.topology.star import params_schema
from learners.dqn import QNetwork, dqn_gradient
from paramserver import ParamShard, PSClient, PSTags, make_optimizer, ps_schemas, shard_bounds
from replay.server import RateLimiter, ReplayServer, ShardedReplayClient, transitions_schema

NAME = "gorila"
DESCRIPTION = "Gorila: actors, a replay memory, L learners and a sharded parameter server"
PS_TAGS = PSTags.at(20)
TAG_FINAL_PARAMS = 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Gorila's flags: Ape-X's replay/actor/DQN flags plus the server and learners."""
    apex.add_arguments(p)
    g = p.add_argument_group("Gorila")
    g.add_argument("--ps-shards", type=int, default=1, help="parameter-server ranks")
    g.add_argument("--learners", type=int, default=1, help="learner ranks")
    g.add_argument("--prioritized", action="store_true",
                   help="prioritized replay (Gorila's is uniform by default)")
    g.add_argument("--staleness", type=int, default=None,
                   help="drop gradients computed on parameters more than S versions old")
    g.add_argument("--param-sync-every", type=int, default=1,
                   help="actor batches between parameter pulls")
    p.set_defaults(replay_shards=1)


def validate(cfg: argparse.Namespace) -> str | None:
    cfg.replay_shards = 1  # one replay memory; Ape-X's flag is not Gorila's
    if cfg.topology != "star":
        return (f"gorila cannot use --topology {cfg.topology}: gradients, parameters and "
                "transitions all stream point-to-point (--topology star)")
    if cfg.ps_shards < 1 or cfg.learners < 1:
        return "--ps-shards and --learners must be >= 1"
    if cfg.staleness is not None and cfg.staleness < 0:
        return f"--staleness must be >= 0, got {cfg.staleness}"
    if cfg.param_sync_every < 1:
        return "--param-sync-every must be >= 1"
    return apex.validate(cfg)


def world_size_for(cfg: argparse.Namespace, actors: int) -> int:
    """K shards + 1 replay + L learners + the actors; ``--actors 0`` is one process."""
    return cfg.ps_shards + 1 + cfg.learners + actors if actors > 0 else 1


def actors_for(cfg: argparse.Namespace, world_size: int) -> int:
    return world_size - cfg.ps_shards - 1 - cfg.learners


def roles(cfg: argparse.Namespace, world: int) -> tuple[list[int], int, list[int], list[int]]:
    """(PS shard ranks, replay rank, learner ranks, actor ranks)."""
    k, lrn = cfg.ps_shards, cfg.learners
    return (list(range(k)), k, list(range(k + 1, k + 1 + lrn)),
            list(range(k + 1 + lrn, world)))


def _qnet(cfg: argparse.Namespace, spec: EnvSpec) -> QNetwork:
    return apex._qnet(cfg, spec)


def _digests(cfg: argparse.Namespace, spec: EnvSpec, n: int) -> dict[str, str]:
    return {**apex._digests(cfg, spec, n), **{s.name: s.digest() for s in ps_schemas(n)}}


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return apex.run_single(ctx, spec, NAME)
    shards, replay, learners, actors = roles(ctx.cfg, ctx.world_size)
    if ctx.rank in shards:
        return run_shard(ctx, spec, shards, learners, actors)
    if ctx.rank == replay:
        run_replay(ctx, spec, learners, actors)
    elif ctx.rank in learners:
        run_learner(ctx, spec, shards, replay, learners)
    else:
        run_actor(ctx, spec, shards, replay, actors)
    return None


def run_shard(ctx: RankContext, spec: EnvSpec, shards: list[int], learners: list[int],
              actors: list[int]) -> dict[str, Any] | None:
    cfg, t = ctx.cfg, ctx.transport
    model = _qnet(cfg, spec)
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    lo, hi = shard_bounds(len(flat), len(shards))[shards.index(ctx.rank)]
    shard = ParamShard(t, flat[lo:hi], learners + actors, make_optimizer("adam", cfg.lr),
                       PS_TAGS, mode="async", staleness=cfg.staleness)
    digests = _digests(cfg, spec, len(flat))
    leaves = list(range(1, ctx.world_size))
    if ctx.rank != 0:
        control = ControlChannel(t, [0], TAG_CONTROL)
        handshake_leaf(control, 0, digests, cfg.startup_timeout)
        lc = LeafControl(control, 0)
        shard.run(timeout_s=cfg.time_limit + 2 * cfg.comm_timeout)  # bounds a silent worker
        lc.poll()
        finish_leaf(ctx, control, lc, 0, {"ps": shard.stats.as_dict(),
                                          "bytes": t.counters.totals()}, drain=lambda: None)
        return None
    control = ControlChannel(t, leaves, TAG_CONTROL)
    final = params_schema(len(flat)).new()
    final_req = t.irecv(final.buffer, learners[0], TAG_FINAL_PARAMS, "final parameters")
    handshake_root(control, leaves, digests, cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = apex._monitor(ctx, run_dir, NAME)
    stop = serve_and_monitor(ctx, control, mon, shard.serve, lambda: shard.version)
    byes = finish_root(ctx, control, leaves, drain=shard.serve,
                       outstanding=lambda: shard.run(timeout_s=cfg.comm_timeout))
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    t.wait(final_req)
    set_flat(model, final["params"])
    ps = {"0": shard.stats.as_dict(), **{str(r): byes[r]["ps"] for r in shards[1:]}}
    roles_of = {r: ("learner" if r in learners else "actor" if r in actors else
                    "replay" if r == shards[-1] + 1 else "shard") for r in leaves}
    timers = {f"{roles_of[r]}{r}": b.get("timing", {}) for r, b in byes.items()}
    extra = {"ps_shards": len(shards), "learners": len(learners), "ps": ps,
             "replay": byes[shards[-1] + 1].get("replay", {}),
             "final_params_version": int(final["version"]),
             "per_rank_bytes": {"0": c, **{str(r): b.get("bytes", {}) for r, b in byes.items()}}}
    summary = run_summary(ctx, mon, stop, NAME, "star",
                          "gradients learner->shards, parameters shards->learners/actors, "
                          "transitions actor->replay, samples replay->learner: point-to-point",
                          "cpu", shard.version, timers, extra)
    run_dir.write_summary(summary)
    apex._save(run_dir, _Holder(model), cfg, spec, NAME)
    run_dir.close()
    return summary


class _Holder:
    """What RunDir.save_policy reads from a learner: its ``model``."""

    def __init__(self, model) -> None:
        self.model = model


def run_replay(ctx: RankContext, spec: EnvSpec, learners: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    control = ControlChannel(t, [0], TAG_CONTROL)
    memory = apex._memory(cfg, spec, cfg.replay_capacity, cfg.seed * 1000 + ctx.rank)
    limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert, min_sample=cfg.batch_size)
    server = ReplayServer(t, memory, spec.obs_shape, actors, learners, apex._insert_cap(cfg),
                          cfg.batch_size, limiter,
                          (TAG_TRANSITIONS, TAG_SAMPLE_REQUEST, TAG_SAMPLE_REPLY))
    handshake_leaf(control, 0, _digests(cfg, spec, num_params(_qnet(cfg, spec))),
                   cfg.startup_timeout)
    lc = LeafControl(control, 0)
    while not lc.stopped:
        lc.poll()
        if not server.serve():
            t.idle(2e-4)

    def drain() -> None:
        server.drain_inserts(force=True)

    server.flush(on_poll=drain)
    finish_leaf(ctx, control, lc, 0, {"replay": {"inserted": limiter.inserted,
                                                 "sampled": limiter.sampled,
                                                 "size": len(memory)},
                                      "bytes": t.counters.totals()}, drain=drain)


def run_learner(ctx: RankContext, spec: EnvSpec, shards: list[int], replay: int,
                learners: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    online = _qnet(cfg, spec)
    n = num_params(online)
    control = ControlChannel(t, [0], TAG_CONTROL)
    handshake_leaf(control, 0, _digests(cfg, spec, n), cfg.startup_timeout)
    lc = LeafControl(control, 0)
    ps = PSClient(t, shards, n, PS_TAGS)
    params, versions = ps.sync()
    set_flat(online, params)
    target = copy.deepcopy(online).requires_grad_(False)
    samples = ShardedReplayClient(t, [replay], spec.obs_shape, cfg.batch_size, cfg.beta,
                                  cfg.prioritized, (TAG_SAMPLE_REQUEST, TAG_SAMPLE_REPLY),
                                  cfg.seed * 1000 + ctx.rank)
    steps = 0
    grad_s = 0.0
    try:
        samples.request(on_poll=lc.raise_if_stopped)
        while True:
            lc.raise_if_stopped()
            batch = samples.receive(on_poll=lc.raise_if_stopped)
            samples.request(on_poll=lc.raise_if_stopped)  # prefetch while computing
            t0 = time.perf_counter()
            grad, td, _ = dqn_gradient(online, target, batch.data, batch.weights,
                                       max_grad_norm=cfg.max_grad_norm)
            grad_s += time.perf_counter() - t0
            samples.update_priorities(batch, td)
            params, versions = ps.exchange(grad)
            set_flat(online, params)
            steps += 1
            if steps % cfg.target_update == 0:  # the target follows the server
                target.load_state_dict(online.state_dict())
    except StopRequested:
        pass
    ps.close()
    if ctx.rank == learners[0]:
        final = params_schema(n).new()
        final["params"][:] = params
        final["version"][...] = int(np.min(versions))
        t.wait(t.isend(final.buffer, 0, TAG_FINAL_PARAMS, "final parameters"))
    finish_leaf(ctx, control, lc, 0, {"timing": {"gradient": grad_s, "wait": t.wait_s},
                                      "steps": steps, "bytes": t.counters.totals()},
                drain=samples.drain)


def run_actor(ctx: RankContext, spec: EnvSpec, shards: list[int], replay: int,
              actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    i = actors.index(ctx.rank)
    model = _qnet(cfg, spec)
    n = num_params(model)
    control = ControlChannel(t, [0], TAG_CONTROL)
    handshake_leaf(control, 0, _digests(cfg, spec, n), cfg.startup_timeout)
    lc = LeafControl(control, 0)
    ps = PSClient(t, shards, n, PS_TAGS)
    params, versions = ps.sync()
    set_flat(model, params)
    eps = epsilon(i, len(actors), cfg.eps_base, cfg.eps_alpha)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, eps,
                            cfg.seed * 1000 + ctx.rank)
    evaluator = GreedyEvaluator(cfg.env, cfg.eval_episodes, cfg.seed * 1000 + 500 + ctx.rank)
    schema = transitions_schema(spec.obs_shape, apex._insert_cap(cfg))
    out = [schema.new(), schema.new()]
    sending: list = [None, None]
    reported, pending_eval = 0, []
    last_report = last_eval = time.time()
    k = 0
    try:
        while True:
            lc.raise_if_stopped()
            j = k % 2
            if sending[j] is not None:
                t.wait(sending[j], on_poll=lc.raise_if_stopped)
            actor.collect(out[j], cfg.actor_batch)
            sending[j] = t.isend(out[j].buffer, replay, TAG_TRANSITIONS, "transitions")
            k += 1
            if k % cfg.param_sync_every == 0:
                params, versions = ps.sync()
                set_flat(model, params)
                actor.version = int(versions[0])
            now = time.time()
            if now - last_eval >= cfg.eval_interval:
                pending_eval.extend(evaluator.run(actor.greedy).tolist())
                last_eval = time.time()
            if now - last_report >= 0.25 or pending_eval:
                steps = actor.tracker.env_steps
                control.send(0, stats_message(steps - reported, actor.take_finished(),
                                              actor.version, actor.first_step_time,
                                              pending_eval))
                reported, last_report = steps, now
                pending_eval = []
    except StopRequested:
        pass
    for req in sending:
        if req is not None:
            t.wait(req)
    ps.close()
    finish_leaf(ctx, control, lc, 0, {"timing": {"env": actor.env_s,
                                                 "inference": actor.inference_s,
                                                 "wait": t.wait_s},
                                      "epsilon": eps, "bytes": t.counters.totals()},
                drain=lambda: None)
    actor.close()
    evaluator.close()
