"""Ape-X (Horgan et al. 2018, Algorithms 1 and 2): distributed prioritized experience replay.

Role map: rank 0 is the learner; ranks 1..K are replay shards (``--replay-shards K``; with
K = 0 the replay lives in the learner); the remaining ranks are actors.

- Actor i explores with ε_i = ε^(1 + α·i/(N−1)), assembles n-step transitions, computes
  their initial priorities with its local Q-network and ships batches to its shard
  without waiting; it takes the newest parameters between batches and runs greedy
  evaluation episodes every ``--eval-interval`` seconds.
- A shard inserts, samples by priority and applies priority updates (replay/server.py).
- The learner samples (prefetching the next batch while it trains), takes a double-DQN
  step on n-step targets weighted by importance weights, and sends the new priorities
  back; it broadcasts parameters over the star. "Solved" uses the greedy evaluation.
- Reported (metrics.csv): the learner's update statistics (:func:`learners.dqn.update_stats`)
  and the actors' policy lag: the learner's version when an actor reports − the version it
  acts with, and how long ago the learner published that version.
"""

from __future__ import annotations

import time
from typing import Any

from actors.evaluation import GreedyEvaluator
from actors.transitions import TransitionActor, epsilon
from archzoo import builders, harness
from archzoo.comm import ControlChannel, Inbox, Message
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import APEX_EVAL_WINDOW, ApexConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.single_dqn import run_single_dqn
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.runlog import Timers, VersionClock
from archzoo.topology.broadcast import ParamsBroadcast, ParamsSubscriber, describe_broadcast
from archzoo.topology.star import params_schema
from replay.keeper import ReplayKeeper
from replay.server import (
    LocalReplayClient,
    RateLimiter,
    ReplayServer,
    ShardedReplayClient,
    insert,
)

STREAMS = "transitions actor->replay and samples replay<->learner point-to-point"


def applied(cfg: ApexConfig) -> str:
    """Where the chosen topology is used (summary.json's topology_applied)."""
    return (f"parameter broadcast learner->actors over "
            f"{describe_broadcast(cfg.topology, cfg.fanout, 'async')}; {STREAMS}")


def roles(cfg: ApexConfig, world_size: int) -> tuple[list[int], list[int]]:
    """(replay shard ranks, actor ranks)."""
    k = cfg.replay_shards
    return list(range(1, 1 + k)), list(range(1 + k, world_size))


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = builders.env_spec(ctx.cfg)
    if ctx.world_size == 1:
        return run_single_dqn(ctx, spec)
    shards, actors = roles(ctx.cfg, ctx.world_size)
    if ctx.rank == 0:
        return run_learner(ctx, spec, shards, actors)
    if ctx.rank in shards:
        run_shard(ctx, spec, shards, actors)
    else:
        run_actor(ctx, spec, shards, actors)
    return None


# -- learner ----------------------------------------------------------------------------


def run_learner(ctx: RankContext, spec: EnvSpec, shards: list[int],
                actors: list[int]) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    leaves = shards + actors
    learner = builders.dqn_learner(cfg, spec)
    n_params = num_params(learner.model)
    control = ControlChannel(t, leaves, harness.TAG_CONTROL)
    publisher = ParamsBroadcast(t, cfg.topology, cfg.fanout, params_schema(n_params), actors,
                                harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async")
    inserts = memory = None
    limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert,
                          min_sample=cfg.batch_size)
    if shards:
        client: Any = ShardedReplayClient(t, shards, spec.obs_shape, cfg.batch_size, cfg.beta,
                                          True, harness.SAMPLE_TAGS, cfg.seed,
                                          obs_dtype=spec.obs_dtype)
    else:
        memory = builders.replay_memory(cfg, spec, cfg.replay_capacity, cfg.seed)
        inserts = Inbox(t, builders.transitions(cfg, spec), actors,
                        harness.TAG_TRANSITIONS, depth=2, what="transitions")
        client = LocalReplayClient(memory, cfg.batch_size, limiter)
    keeper = ReplayKeeper(cfg, ctx.rank, memory, limiter)  # --replay-shards 0
    harness.handshake_root(control, leaves, builders.replay_digests(cfg, spec, n_params),
                           cfg.startup_timeout)
    run_dir, mon = harness.open_run(ctx, eval_window=APEX_EVAL_WINDOW * cfg.eval_episodes,
                                    parts={"learner": learner},
                                    policy=(learner.model, builders.policy_meta(cfg, spec)))
    timers = Timers()
    get_flat(learner.model, publisher.latest["params"])
    published = VersionClock(learner.version)  # when each version went to the actors
    publisher.publish(learner.version)

    def take_inserts(force: bool = False) -> None:
        if inserts is not None:
            for p in inserts.ready():
                if not (force or limiter.can_insert()):
                    break
                limiter.inserted += insert(memory, inserts.poll(p))
                inserts.release(p)

    def take_stats() -> None:
        for _, msg in control.poll():
            harness.absorb_stats(mon, msg, learner.version, published.age)

    survivors = harness.Survivors(ctx.rank, actors, cfg.min_actors, mon.elapsed)
    for component in (control, publisher, inserts):
        if component is not None:
            survivors.on_drop(component.drop)

    def service() -> None:  # the learner's only contact with actors: a dead one is dropped
        with timers("comm"):
            survivors.guard(take_inserts, "taking transitions")
            survivors.guard(take_stats, "taking statistics")
            survivors.guard(publisher.pump, "sending parameters")
        c = t.counters.totals()
        mon.maybe_log(c["bytes_sent"], c["bytes_recv"])
        keeper.maybe_save()

    client.request(on_poll=service)
    stop = None
    while stop is None:
        batch = client.receive(on_poll=service)
        client.request(on_poll=service)  # prefetch the next batch while this one trains
        td, stats = learner.update(batch.data, batch.weights)
        mon.add_learner_stats(stats)
        client.update_priorities(batch, td)
        mon.updates = learner.version
        if learner.version % cfg.publish_every == 0:
            with timers("comm"):
                get_flat(learner.model, publisher.latest["params"])
                published.mark(learner.version)
                survivors.guard(lambda: publisher.publish(learner.version),
                                "sending parameters")
        service()
        stop = mon.check_stop()

    def drain() -> None:
        client.drain()
        take_inserts(force=True)
        publisher.pump()

    byes = harness.finish_root(ctx, control, leaves, drain,
                               outstanding=lambda: publisher.wait_all(on_poll=drain),
                               survivors=survivors)
    keeper.save()
    timers_0 = {"learner": {"update": learner.update_s, "comm": timers.s.get("comm", 0.0),
                            "wait": t.wait_s}}
    keys = ("inserted", "sampled", "priority_updates", "priorities_applied")
    extra = {"replay_shards": len(shards), "replay_size": client.size,
             "replay_inserted": client.inserted,
             "replay": {str(r): {k: byes.get(r, {}).get(k) for k in keys} for r in shards},
             "params_messages_root": publisher.messages(), **survivors.summary()}
    return harness.finish_run(ctx, run_dir, mon, stop, policy=learner.model,
                              meta=builders.policy_meta(cfg, spec), updates=learner.version,
                              device=learner.device, topology=cfg.topology,
                              applied=applied(cfg),
                              timers=timers_0, byes=byes,
                              role=lambda r: "shard" if r in shards else "actor", extra=extra)


# -- replay shard -----------------------------------------------------------------------


def run_shard(ctx: RankContext, spec: EnvSpec, shards: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    k = shards.index(ctx.rank)
    mine = [a for j, a in enumerate(actors) if j % len(shards) == k]
    control = ControlChannel(t, [0], harness.TAG_CONTROL)
    memory = builders.replay_memory(cfg, spec, cfg.replay_capacity // len(shards),
                                    harness.actor_seed(cfg.seed, ctx.rank))
    limiter = RateLimiter(-(-cfg.learning_starts // len(shards)), cfg.samples_per_insert,
                          min_sample=cfg.batch_size)
    server = ReplayServer(t, memory, spec.obs_shape, mine, 0, cfg.insert_capacity(),
                          cfg.batch_size, limiter, harness.REPLAY_TAGS, spec.obs_dtype)
    keeper = ReplayKeeper(cfg, ctx.rank, memory, limiter)  # --checkpoint-replay
    n_params = num_params(builders.q_network(cfg, spec))
    harness.handshake_leaf(control, 0, builders.replay_digests(cfg, spec, n_params),
                           cfg.startup_timeout)
    lc = harness.LeafControl(control, 0)
    busy_s = 0.0
    while not lc.stopped:
        lc.poll()
        t0 = time.perf_counter()
        if server.serve():
            busy_s += time.perf_counter() - t0
        else:
            t.idle(2e-4)
        keeper.maybe_save()

    def drain() -> None:
        server.drain_inserts(force=True)

    server.flush(on_poll=drain)
    keeper.save()
    stats = {"timing": {"serve": busy_s, "wait": t.wait_s}, "inserted": limiter.inserted,
             "sampled": limiter.sampled, "size": len(memory), "bytes": t.counters.totals(),
             "priority_updates": server.priority_updates,
             "priorities_applied": server.priorities_applied}
    harness.finish_leaf(ctx, control, lc, 0, stats, drain=drain)


# -- actor ------------------------------------------------------------------------------


def run_actor(ctx: RankContext, spec: EnvSpec, shards: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    i = actors.index(ctx.rank)
    dest = shards[i % len(shards)] if shards else 0
    model = builders.q_network(cfg, spec)  # its weights come from the learner
    n_params = num_params(model)
    control = ControlChannel(t, [0], harness.TAG_CONTROL)
    eps = epsilon(i, len(actors), cfg.eps_base, cfg.eps_alpha)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, eps,
                            harness.actor_seed(cfg.seed, ctx.rank))

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])

    params = ParamsSubscriber(t, cfg.topology, cfg.fanout, params_schema(n_params), 0, load,
                              harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async", [0, *actors])
    harness.handshake_leaf(control, 0, builders.replay_digests(cfg, spec, n_params),
                           cfg.startup_timeout)
    lc = harness.LeafControl(control, 0)
    evaluator = GreedyEvaluator(spec, cfg.eval_episodes,
                                harness.evaluator_seed(cfg.seed, ctx.rank))
    out = DoubleBuffer(t, builders.transitions(cfg, spec), dest,
                       harness.TAG_TRANSITIONS, "transitions")
    reporter = harness.StatsReporter(control, 0)
    comm = Timers()

    def between_polls() -> None:  # while blocked on a send: stay current, notice STOP
        params.take_newest()
        lc.raise_if_stopped()

    params.next(cfg.startup_timeout)
    try:
        while True:
            lc.raise_if_stopped()
            with comm("comm"):
                params.take_newest()
            actor.collect(out.next(on_poll=between_polls), cfg.actor_batch)
            with comm("comm"):
                out.send()
            reporter.add(actor.take_finished(), evaluator.maybe_run(actor.greedy,
                                                                    cfg.eval_interval))
            reporter.maybe_report(actor.tracker.env_steps, actor.version, actor.first_step_time)
    except harness.StopRequested:
        pass
    out.flush(on_poll=params.take_newest)
    stats = harness.leaf_stats(t, {"env": actor.env_s, "inference": actor.inference_s,
                                   "comm": comm.s.get("comm", 0.0)},
                               env_steps=actor.tracker.env_steps, epsilon=eps,
                               params=params.stats())
    harness.finish_leaf(ctx, control, lc, 0, stats, drain=params.take_newest,
                        settle=params.settle)
    actor.close()
    evaluator.close()
