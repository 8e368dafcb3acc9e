"""Gorila (Nair et al. 2015): actors, a replay memory, several learners and a sharded
parameter server, each a separate role.

Role map (its record's, archzoo/architectures/__init__.py): 0..K−1 parameter-server
shards (``--ps-shards K``; rank 0 also keeps the learning curve and decides when to stop),
rank K the replay memory (the Ape-X replay server, uniform unless ``--prioritized``), then
``--learners L`` learners, then the actors.

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
  learners add their updates' statistics (:func:`archzoo.learners.dqn.update_stats`, as Ape-X's
  learner) and the replay lag of their batches (shard 0's version as the learner computes
  the gradient − the version that acted each item) to reports of their own.
"""

from __future__ import annotations

import copy
import time

import numpy as np
from torch import nn

from archzoo import builders, harness
from archzoo.architectures.rolemap import placement, play
from archzoo.config import APEX_EVAL_WINDOW, GorilaConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.ps_roles import param_shard, run_shards
from archzoo.harness.replay_role import serve_replay
from archzoo.harness.single_dqn import run_single_dqn
from archzoo.harness.transition_role import TransitionLeaf
from archzoo.learners.dqn import dqn_gradient, replay_lag_stats
from archzoo.nets import num_params, set_flat
from archzoo.paramserver import PSClient, make_optimizer, ps_schemas
from archzoo.records import Summary
from archzoo.replay.server import ShardedReplayClient
from archzoo.tags import PS_TAGS
from archzoo.topology.broadcast import ParamsBroadcast, ParamsSubscriber, describe_broadcast
from archzoo.topology.star import params_schema

STREAMS = ("gradients learner->shards, parameters shards->learners, transitions "
           "actor->replay, samples replay->learner: point-to-point")


def applied(cfg: GorilaConfig) -> str:
    """How parameters reach the actors (summary.json's topology_applied)."""
    if cfg.topology == "star":
        return f"parameters shards->actors point-to-point (pulled); {STREAMS}"
    return (f"parameters shard->actors pushed over "
            f"{describe_broadcast(cfg.topology_name, cfg.fanout, 'async')}; {STREAMS}")


def _digests(cfg: GorilaConfig, spec: EnvSpec,
             model: nn.Module | None = None) -> dict[str, str]:
    n = num_params(builders.q_network(cfg, spec) if model is None else model)
    return {**builders.replay_digests(cfg, spec, n),
            **{s.name: s.digest() for s in ps_schemas(n)}}


def _pull(ps: PSClient, model: nn.Module) -> np.ndarray:
    """The server's parameters into ``model``; returns every shard's version."""
    params, versions = ps.sync()
    set_flat(model, params)
    return versions


def run(ctx: RankContext[GorilaConfig]) -> Summary | None:
    """Every rank: the role its rank plays in the role map."""
    return play(ctx, run_single_dqn, shard=run_shard, replay=run_replay, learner=run_learner,
                actor=run_actor)


def run_shard(ctx: RankContext[GorilaConfig], spec: EnvSpec) -> Summary | None:
    """A parameter-server shard (Adam, async); shard 0 also pushes to the actors' tree."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards, learners, actors = place["shard"], place["learner"], place["actor"]
    model, meta = builders.q_network(cfg, spec), builders.policy_meta(cfg, spec)
    shard = param_shard(ctx, model, shards, learners + actors,
                        make_optimizer("adam", cfg.lr), mode="async", staleness=cfg.staleness)
    publisher = None
    if cfg.topology != "star" and ctx.rank == 0:  # one shard: push to the actors' tree
        publisher = ParamsBroadcast(t, cfg.topology_name, cfg.fanout,
                                    params_schema(num_params(model)), actors,
                                    harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async")
    end = run_shards(ctx, shard, _digests(cfg, spec, model), model, meta, shards,
                     actors=actors, eval_window=APEX_EVAL_WINDOW * cfg.eval_episodes,
                     publisher=publisher, publish_every=cfg.publish_every, lag_from="actors")
    if end is None:
        return None
    replay, = place["replay"]
    return end.finish(model, meta, topology=cfg.topology, applied=applied(cfg),
                      role=place.role, extra={
                          "learners": len(learners),
                          "replay": end.run.byes[replay].get("replay", {}),
                          "params_messages_root": publisher.messages() if publisher else None})


def run_replay(ctx: RankContext[GorilaConfig], spec: EnvSpec) -> None:
    """The replay memory: every actor inserts, every learner samples."""
    cfg, place = ctx.cfg, placement(ctx)
    serve_replay(ctx, spec, _digests(cfg, spec), actors=place["actor"],
                 learners=place["learner"],
                 capacity=cfg.replay_capacity, learning_starts=cfg.learning_starts)


def run_learner(ctx: RankContext[GorilaConfig], spec: EnvSpec) -> None:
    """Sample, the double-DQN gradient on the server's parameters, push it, take theirs."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards, replay = place["shard"], place["replay"]
    online = builders.learner_q_network(cfg, spec)  # --learner-threads
    with harness.leaf(ctx, _digests(cfg, spec, online)) as link:
        ps = PSClient(t, shards, num_params(online), PS_TAGS)
        version = int(_pull(ps, online)[0])  # shard 0's, as the actors' versions are
        target = copy.deepcopy(online).requires_grad_(False)
        samples = ShardedReplayClient(t, replay, spec.obs_shape, cfg.batch_size, cfg.beta,
                                      cfg.prioritized, harness.SAMPLE_TAGS,
                                      harness.actor_seed(cfg.seed, ctx.rank),
                                      obs_dtype=spec.obs_dtype)
        steps, grad_s = 0, 0.0
        link.on_stop(ps.close, drain=samples.drain,
                     stats=lambda: {"timing": {"gradient": grad_s}, "steps": steps})
        samples.request(on_poll=link.raise_if_stopped)
        while True:
            link.raise_if_stopped()
            batch = samples.receive(on_poll=link.raise_if_stopped)
            samples.request(on_poll=link.raise_if_stopped)  # prefetch while computing
            t0 = time.perf_counter()
            grad, td, stats = dqn_gradient(online, target, batch.data, batch.weights,
                                           max_grad_norm=cfg.max_grad_norm)
            grad_s += time.perf_counter() - t0
            # its updates' statistics and replay lag; shard 0 adds the lr
            link.reporter.add_learner({**stats, **replay_lag_stats(version, batch.data)})
            link.reporter.maybe_report(0, None, None)
            samples.update_priorities(batch, td)
            params, versions = ps.exchange(grad)
            version = int(versions[0])
            set_flat(online, params)
            steps += 1
            if steps % cfg.target_update == 0:  # the target follows the server
                target.load_state_dict(online.state_dict())


def run_actor(ctx: RankContext[GorilaConfig], spec: EnvSpec) -> None:
    """An ε_i-greedy actor: transitions to the replay, the server's parameters pulled every
    ``--param-sync-every`` batches (or pushed down the actors' tree)."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards, (replay,), actors = place["shard"], place["replay"], place["actor"]
    model = builders.q_network(cfg, spec)
    with harness.leaf(ctx, _digests(cfg, spec, model)) as link:
        ps = PSClient(t, shards, num_params(model), PS_TAGS)
        versions = _pull(ps, model)
        me = TransitionLeaf(ctx, spec, model, actors)
        me.actor.version = int(versions[0])  # shard 0's: its clock gives the lag's age
        me.start(link, replay)
        pushed = None  # --topology tree|butterfly|ring: shard 0 pushes, the actors relay
        if cfg.topology != "star":
            pushed = ParamsSubscriber(t, cfg.topology_name, cfg.fanout,
                                      params_schema(num_params(model)), 0, me.load,
                                      harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async",
                                      [0, *actors])
        link.on_stop(me.out.flush, ps.close,
                     stats=lambda: me.stats(pushed.stats() if pushed else None),
                     drain=None if pushed is None else pushed.take_newest,
                     settle=None if pushed is None else pushed.settle)
        k = 0
        while True:
            link.raise_if_stopped()
            me.step(on_poll=link.raise_if_stopped)
            k += 1
            if pushed is not None:
                pushed.take_newest()
            elif k % cfg.param_sync_every == 0:
                me.actor.version = int(_pull(ps, model)[0])
            me.report()
    me.close()
