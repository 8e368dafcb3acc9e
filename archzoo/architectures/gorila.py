"""Gorila (Nair et al. 2015): actors, a replay memory, several learners and a sharded
parameter server, each a separate role.

Role map: 0..K−1 parameter-server shards (``--ps-shards K``; rank 0 also keeps the learning
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
- Reported (metrics.csv): shard 0 measures each learner gradient's staleness
  (``grad_staleness``: its version when the gradient arrives − the version the learner
  computed it on, in versions and seconds); ``policy_lag`` is the actors' (shard 0's
  version when an actor reports − the version it acts with, and that version's age); the
  learners add their updates' statistics (:func:`learners.dqn.update_stats`, as Ape-X's
  learner) to reports of their own.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from actors.evaluation import GreedyEvaluator
from actors.transitions import TransitionActor, epsilon
from archzoo import builders, harness
from archzoo.comm import ControlChannel, Message
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import APEX_EVAL_WINDOW, GorilaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.ps_roles import run_shards, shard_stats
from archzoo.harness.single_dqn import run_single_dqn
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.tags import PS_TAGS
from archzoo.topology.broadcast import ParamsBroadcast, ParamsSubscriber, describe_broadcast
from archzoo.topology.star import params_schema
from learners.dqn import dqn_gradient
from paramserver import ParamShard, PSClient, make_optimizer, ps_schemas, shard_bounds
from replay.keeper import ReplayKeeper
from replay.server import RateLimiter, ReplayServer, ShardedReplayClient

STREAMS = ("gradients learner->shards, parameters shards->learners, transitions "
           "actor->replay, samples replay->learner: point-to-point")


def applied(cfg: GorilaConfig) -> str:
    """How parameters reach the actors (summary.json's topology_applied)."""
    if cfg.topology == "star":
        return f"parameters shards->actors point-to-point (pulled); {STREAMS}"
    return (f"parameters shard->actors pushed over "
            f"{describe_broadcast(cfg.topology, cfg.fanout, 'async')}; {STREAMS}")


def roles(cfg: GorilaConfig, world: int) -> tuple[list[int], int, list[int], list[int]]:
    """(PS shard ranks, replay rank, learner ranks, actor ranks)."""
    k, lrn = cfg.ps_shards, cfg.learners
    return (list(range(k)), k, list(range(k + 1, k + 1 + lrn)),
            list(range(k + 1 + lrn, world)))


def _digests(cfg: GorilaConfig, spec: EnvSpec, n: int) -> dict[str, str]:
    return {**builders.replay_digests(cfg, spec, n),
            **{s.name: s.digest() for s in ps_schemas(n)}}


def _join(ctx: RankContext, spec: EnvSpec, shards: list[int], model):
    """A learner's or actor's start: handshake with rank 0, then the server's parameters."""
    control = ControlChannel(ctx.transport, [0], harness.TAG_CONTROL)
    n = num_params(model)
    harness.handshake_leaf(control, 0, _digests(ctx.cfg, spec, n), ctx.cfg.startup_timeout)
    ps = PSClient(ctx.transport, shards, n, PS_TAGS)
    params, versions = ps.sync()
    set_flat(model, params)
    return control, harness.LeafControl(control, 0), ps, params, versions


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = builders.env_spec(ctx.cfg)
    if ctx.world_size == 1:
        return run_single_dqn(ctx, spec)
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
    model = builders.q_network(cfg, spec)
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    lo, hi = shard_bounds(len(flat), len(shards))[shards.index(ctx.rank)]
    shard = ParamShard(t, flat[lo:hi], learners + actors, make_optimizer("adam", cfg.lr),
                       PS_TAGS, mode="async", staleness=cfg.staleness)
    publisher = None
    if cfg.topology != "star" and ctx.rank == 0:  # one shard: push to the actors' tree
        publisher = ParamsBroadcast(t, cfg.topology, cfg.fanout, params_schema(len(flat)),
                                    actors, harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async")
    end = run_shards(ctx, shard, _digests(cfg, spec, len(flat)), model,
                     builders.policy_meta(cfg, spec), shards,
                     actors=actors, eval_window=APEX_EVAL_WINDOW * cfg.eval_episodes,
                     publisher=publisher, publish_every=cfg.publish_every,
                     lag_from="actors")
    if end is None:
        return None
    set_flat(model, end.final["params"])
    replay = shards[-1] + 1
    extra = {"ps_shards": len(shards), "learners": len(learners),
             "ps": shard_stats(shard, shards, end.run.byes),
             "replay": end.run.byes[replay].get("replay", {}),
             "final_params_version": int(end.final["version"]),
             "params_messages_root": publisher.messages() if publisher else None}
    role = {r: ("learner" if r in learners else "actor" if r in actors else
                "replay" if r == replay else "shard") for r in end.run.byes}
    return end.run.finish(model, shard.version, meta=builders.policy_meta(cfg, spec),
                          topology=cfg.topology, applied=applied(cfg), role=role.get,
                          extra=extra)


def run_replay(ctx: RankContext, spec: EnvSpec, learners: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    control = ControlChannel(t, [0], harness.TAG_CONTROL)
    memory = builders.replay_memory(cfg, spec, cfg.replay_capacity,
                                    harness.actor_seed(cfg.seed, ctx.rank))
    limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert, min_sample=cfg.batch_size)
    server = ReplayServer(t, memory, spec.obs_shape, actors, learners, cfg.insert_capacity(),
                          cfg.batch_size, limiter, harness.REPLAY_TAGS, spec.obs_dtype)
    keeper = ReplayKeeper(cfg, ctx.rank, memory, limiter)  # --checkpoint-replay
    n_params = num_params(builders.q_network(cfg, spec))
    harness.handshake_leaf(control, 0, _digests(cfg, spec, n_params),
                           cfg.startup_timeout)
    lc = harness.LeafControl(control, 0)
    while not lc.stopped:
        lc.poll()
        if not server.serve():
            t.idle(2e-4)
        keeper.maybe_save()

    def drain() -> None:
        server.drain_inserts(force=True)

    server.flush(on_poll=drain)
    keeper.save()
    harness.finish_leaf(ctx, control, lc, 0, {"replay": {"inserted": limiter.inserted,
                                                         "sampled": limiter.sampled,
                                                         "size": len(memory)},
                                              "bytes": t.counters.totals()}, drain=drain)


def run_learner(ctx: RankContext, spec: EnvSpec, shards: list[int], replay: int,
                learners: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    online = builders.q_network(cfg, spec)
    control, lc, ps, params, versions = _join(ctx, spec, shards, online)
    target = copy.deepcopy(online).requires_grad_(False)
    samples = ShardedReplayClient(t, [replay], spec.obs_shape, cfg.batch_size, cfg.beta,
                                  cfg.prioritized, harness.SAMPLE_TAGS,
                                  harness.actor_seed(cfg.seed, ctx.rank),
                                  obs_dtype=spec.obs_dtype)
    reporter = harness.StatsReporter(control, 0)  # its updates' statistics (no episodes)
    steps = 0
    grad_s = 0.0
    try:
        samples.request(on_poll=lc.raise_if_stopped)
        while True:
            lc.raise_if_stopped()
            batch = samples.receive(on_poll=lc.raise_if_stopped)
            samples.request(on_poll=lc.raise_if_stopped)  # prefetch while computing
            t0 = time.perf_counter()
            grad, td, stats = dqn_gradient(online, target, batch.data, batch.weights,
                                           max_grad_norm=cfg.max_grad_norm)
            grad_s += time.perf_counter() - t0
            reporter.add_learner(stats)  # shard 0 adds its learning rate
            reporter.maybe_report(0, None, None)
            samples.update_priorities(batch, td)
            params, versions = ps.exchange(grad)
            set_flat(online, params)
            steps += 1
            if steps % cfg.target_update == 0:  # the target follows the server
                target.load_state_dict(online.state_dict())
    except harness.StopRequested:
        pass
    ps.close()
    harness.finish_leaf(ctx, control, lc, 0, {"timing": {"gradient": grad_s, "wait": t.wait_s},
                                              "steps": steps, "bytes": t.counters.totals()},
                        drain=samples.drain)


def run_actor(ctx: RankContext, spec: EnvSpec, shards: list[int], replay: int,
              actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    i = actors.index(ctx.rank)
    model = builders.q_network(cfg, spec)
    control, lc, ps, _, versions = _join(ctx, spec, shards, model)
    eps = epsilon(i, len(actors), cfg.eps_base, cfg.eps_alpha)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, eps,
                            harness.actor_seed(cfg.seed, ctx.rank))
    actor.version = int(versions[0])  # shard 0's version: its clock gives the lag's age
    evaluator = GreedyEvaluator(spec, cfg.eval_episodes,
                                harness.evaluator_seed(cfg.seed, ctx.rank))
    out = DoubleBuffer(t, builders.transitions(cfg, spec), replay,
                       harness.TAG_TRANSITIONS, "transitions")
    reporter = harness.StatsReporter(control, 0)
    pushed = None  # --topology tree|butterfly|ring: shard 0 pushes, the actors relay

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])

    if cfg.topology != "star":
        pushed = ParamsSubscriber(t, cfg.topology, cfg.fanout, params_schema(num_params(model)),
                                  0, load, harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async",
                                  [0, *actors])
    k = 0
    try:
        while True:
            lc.raise_if_stopped()
            actor.collect(out.next(on_poll=lc.raise_if_stopped), cfg.actor_batch)
            out.send()
            k += 1
            if pushed is not None:
                pushed.take_newest()
            elif k % cfg.param_sync_every == 0:
                params, versions = ps.sync()
                set_flat(model, params)
                actor.version = int(versions[0])
            reporter.add(actor.take_finished(), evaluator.maybe_run(actor.greedy,
                                                                    cfg.eval_interval))
            reporter.maybe_report(actor.tracker.env_steps, actor.version, actor.first_step_time)
    except harness.StopRequested:
        pass
    out.flush()
    ps.close()
    stats = {"timing": {"env": actor.env_s, "inference": actor.inference_s, "wait": t.wait_s},
             "epsilon": eps, "bytes": t.counters.totals()}
    if pushed is not None:
        stats["params"] = pushed.stats()
    harness.finish_leaf(ctx, control, lc, 0, stats,
                        drain=pushed.take_newest if pushed else lambda: None,
                        settle=pushed.settle if pushed else None)
    actor.close()
    evaluator.close()
