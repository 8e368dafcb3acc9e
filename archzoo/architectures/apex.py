"""Ape-X (Horgan et al. 2018, Algorithms 1 and 2): distributed prioritized experience replay.

Role map (its record's, archzoo/architectures/__init__.py): rank 0 is the learner; ranks
1..K are replay shards (``--replay-shards K``; with K = 0 the replay lives in the learner);
the remaining ranks are actors. R2D2 plays the same roles with its own parts
(:class:`archzoo.architectures.r2d2.R2D2Builder`).

- Actor i explores with ε_i = ε^(1 + α·i/(N−1)), assembles n-step transitions, computes
  their initial priorities with its local Q-network and ships batches to its shard
  without waiting; it takes the newest parameters between batches and plays greedy
  evaluation episodes in slices between batches (one evaluation at most every
  ``--eval-interval`` seconds).
- A shard inserts, samples by priority and applies priority updates (replay/server.py).
- The learner samples (prefetching the next batch while it trains), takes a double-DQN
  step on n-step targets weighted by importance weights, and sends the new priorities
  back; it broadcasts parameters over the star. "Solved" uses the greedy evaluation.
- Reported (metrics.csv): the learner's update statistics
  (:func:`archzoo.learners.dqn.update_stats`), the replay lag of the batches it trains on
  (the learner's version − the version that acted each item,
  :func:`archzoo.learners.dqn.replay_lag_stats`) and the actors' policy lag: the learner's
  version when an actor reports − the version it acts with, and how long ago the learner
  published that version.
"""

from __future__ import annotations

from torch import nn

from archzoo import builders, harness
from archzoo.architectures.rolemap import placement, play
from archzoo.config import APEX_EVAL_WINDOW, ApexConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.replay_role import LearnerReplay, replay_summary, serve_replay
from archzoo.harness.single_dqn import run_single_dqn
from archzoo.harness.transition_role import TransitionLeaf
from archzoo.learners.dqn import replay_lag_stats
from archzoo.nets import get_flat, num_params
from archzoo.records import Summary
from archzoo.runlog import Timers, VersionClock
from archzoo.topology.broadcast import ParamsBroadcast, ParamsSubscriber, describe_broadcast
from archzoo.topology.star import params_schema


def applied(cfg: ApexConfig) -> str:
    """Where the chosen topology is used (summary.json's topology_applied); what the actors
    send is the builder's (transitions, or R2D2's sequences)."""
    return (f"parameter broadcast learner->actors over "
            f"{describe_broadcast(cfg.topology_name, cfg.fanout, 'async')}; "
            f"{builders.insert_name(cfg)} actor->replay and samples replay<->learner "
            "point-to-point")


def run(ctx: RankContext[ApexConfig]) -> Summary | None:
    """Every rank (Ape-X's and R2D2's): the role its rank plays in the role map."""
    return play(ctx, run_single_dqn, learner=run_learner, shard=run_shard, actor=run_actor)


def _digests(cfg: ApexConfig, spec: EnvSpec, model: nn.Module | None = None) -> dict[str, str]:
    model = builders.q_network(cfg, spec) if model is None else model
    return builders.replay_digests(cfg, spec, num_params(model))


def run_learner(ctx: RankContext[ApexConfig], spec: EnvSpec) -> Summary:
    """Rank 0: sample, one double-DQN step, new priorities back, publish every so often
    (R2D2's too: ``builders.dqn_learner`` is its builder's)."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards, actors = place["shard"], place["actor"]
    learner = builders.dqn_learner(cfg, spec)
    publisher = ParamsBroadcast(t, cfg.topology_name, cfg.fanout,
                                params_schema(num_params(learner.model)), actors,
                                harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async")
    replay = LearnerReplay(ctx, spec, shards, actors)  # --replay-shards 0: in this process
    with harness.root(ctx, shards + actors, _digests(cfg, spec, learner.model), actors=actors,
                      eval_window=APEX_EVAL_WINDOW * cfg.eval_episodes,
                      parts={"learner": learner},
                      policy=(learner.model, builders.policy_meta(cfg, spec))) as run:
        run.survive(publisher, replay)
        run.keep(replay.keeper)  # --checkpoint-replay: when due, and at the finish
        learner.schedule.follow(run.mon)  # --lr-decay: over the run's budget
        timers, published = Timers(), VersionClock(learner.version)  # when each went out

        def publish() -> None:
            with timers("comm"):
                get_flat(learner.model, publisher.latest["params"])
                published.mark(learner.version)
                run.guard(lambda: publisher.publish(learner.version), "sending parameters")

        def service() -> None:  # the learner's only contact with actors: a dead one is dropped
            with timers("comm"):
                run.guard(replay.take_inserts, "taking transitions")
                run.absorb(learner.version, published.age)
                run.guard(publisher.pump, "sending parameters")
            run.log()  # and, when due, a checkpoint, a video, the replay's own checkpoint

        def drain() -> None:
            replay.drain()
            publisher.pump()

        run.on_stop(drain, outstanding=lambda: publisher.wait_all(on_poll=drain))
        publish()  # version 0 (or the resumed one)
        replay.client.request(on_poll=service)
        while not run.stopped:
            batch = replay.client.receive(on_poll=service)
            replay.client.request(on_poll=service)  # prefetch the next batch while this trains
            lag = replay_lag_stats(learner.version, batch.data)  # the version it trains
            td, stats = learner.update(batch.data, batch.weights)
            run.mon.add_learner_stats({**stats, **lag})
            replay.client.update_priorities(batch, td)
            run.mon.updates = learner.version
            if learner.version % cfg.publish_every == 0:
                publish()
            service()
            run.tick()
    timers_0 = {"learner": {"update": learner.update_s, "comm": timers.s.get("comm", 0.0),
                            "wait": t.wait_s}}
    return run.finish(learner.model, learner.version, device=learner.device,
                      topology=cfg.topology, timers=timers_0,
                      applied=applied(cfg), role=place.role,
                      extra={"replay_shards": len(shards), "replay_size": replay.client.size,
                             "replay_inserted": replay.client.inserted,
                             "replay": replay_summary(run.byes, shards),
                             "params_messages_root": publisher.messages()})


def run_shard(ctx: RankContext[ApexConfig], spec: EnvSpec) -> None:
    """A replay shard: its share of the actors (round robin) and of the capacity."""
    cfg, place = ctx.cfg, placement(ctx)
    shards, actors = place["shard"], place["actor"]
    k = len(shards)
    mine = [a for j, a in enumerate(actors) if j % k == place.index(ctx.rank)]
    serve_replay(ctx, spec, _digests(cfg, spec), actors=mine, learners=0,
                 capacity=cfg.replay_capacity // k, learning_starts=-(-cfg.learning_starts // k))


def run_actor(ctx: RankContext[ApexConfig], spec: EnvSpec) -> None:
    """An ε_i-greedy actor: batches to its shard, the newest parameters before each."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    shards, actors = place["shard"], place["actor"]
    model = builders.q_network(cfg, spec)  # its weights come from the learner
    me = TransitionLeaf(ctx, spec, model, actors)
    params = ParamsSubscriber(t, cfg.topology_name, cfg.fanout, params_schema(num_params(model)), 0,
                              me.load, harness.TAG_PARAMS, harness.TAG_TOPOLOGY, "async",
                              [0, *actors])
    with harness.leaf(ctx, _digests(cfg, spec, model)) as link:
        me.start(link, shards[place.index(ctx.rank) % len(shards)] if shards else 0)
        link.on_stop(lambda: me.out.flush(on_poll=params.take_newest),
                     stats=lambda: me.stats(params=params.stats()),
                     drain=params.take_newest, settle=params.settle)

        def between_polls() -> None:  # while blocked on a send: stay current, notice STOP
            params.take_newest()
            link.raise_if_stopped()

        params.next(cfg.startup_timeout)
        while True:
            link.raise_if_stopped()
            with me.timers("comm"):
                params.take_newest()
            me.step(on_poll=between_polls)
            me.report()
    me.close()
