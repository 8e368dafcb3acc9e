"""The single-process DQN-family baseline (``--actors 0`` of Ape-X and Gorila).

One ε-greedy actor, a replay memory and a double-DQN learner in one process, with the
same components and the same greedy evaluation as the distributed runs. With
``--eps-ladder K`` its envs explore as K actors of Ape-X's ladder would (the
equal-exploration baseline of a K-actor run).
"""

from __future__ import annotations

import numpy as np

from archzoo import builders
from archzoo.actors.evaluation import GreedyEvaluator
from archzoo.actors.transitions import ladder_over_envs
from archzoo.config import APEX_EVAL_WINDOW, ApexConfig
from archzoo.envs import EnvSpec
from archzoo.harness.finish import actor_seed, evaluator_seed
from archzoo.harness.protocol import RankContext
from archzoo.harness.run import single
from archzoo.learners.dqn import replay_lag_stats
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.records import Summary
from archzoo.replay.keeper import ReplayKeeper
from archzoo.replay.server import LocalReplayClient, RateLimiter, insert

SINGLE_PROCESS_SPI = 4.0  # with --samples-per-insert 0: a usual DQN replay ratio


def run_single_dqn(ctx: RankContext[ApexConfig], spec: EnvSpec) -> Summary:
    """Collect a batch, insert it, train while the replay ratio allows, evaluate, repeat."""
    cfg: ApexConfig = ctx.cfg
    learner = builders.dqn_learner(cfg, spec)
    with single(ctx, eval_window=APEX_EVAL_WINDOW * cfg.eval_episodes,
                parts={"learner": learner},
                policy=(learner.model, builders.policy_meta(cfg, spec))) as run:
        mon = run.mon
        learner.schedule.follow(mon)  # --lr-decay: over the run's budget
        cpu = learner.device.type == "cpu"
        policy = learner.model if cpu else builders.q_network(cfg, spec)
        eps = (ladder_over_envs(cfg.envs_per_actor, cfg.eps_ladder, cfg.eps_base, cfg.eps_alpha)
               if cfg.eps_ladder else cfg.eps_base)  # --eps-ladder K: the exploration of K actors
        actor = builders.transition_actor(cfg, spec, policy, eps, actor_seed(cfg.seed, 0))
        evaluator = GreedyEvaluator(spec, cfg.eval_episodes, evaluator_seed(cfg.seed, 0))
        memory = builders.replay_memory(cfg, spec, cfg.replay_capacity, cfg.seed)
        limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert or SINGLE_PROCESS_SPI,
                              min_sample=cfg.batch_size)
        client = LocalReplayClient(memory, cfg.batch_size, limiter)
        keeper = ReplayKeeper(cfg, 0, memory, limiter)  # --checkpoint-replay
        msg = builders.replay_inserts(cfg, spec).new()
        flat = np.zeros(num_params(policy), np.float32)

        def follow() -> None:  # the actor's copy on the CPU follows the learner's on the device
            if not cpu:
                get_flat(learner.model, flat)
                set_flat(policy, flat)

        run.keep(keeper)  # saved when due at every tick, and at the finish
        follow()  # a resumed run acts with the checkpoint's parameters
        while not run.stopped:
            steps0 = actor.tracker.env_steps
            actor.version = learner.version  # it acts with the learner's parameters
            actor.collect(msg, cfg.actor_batch)
            limiter.inserted += insert(memory, msg)
            mon.add_steps(actor.tracker.env_steps - steps0, actor.first_step_time)
            mon.add_episodes(actor.take_finished())
            while limiter.can_sample(len(memory), cfg.batch_size):
                batch = client.receive()
                lag = replay_lag_stats(learner.version, batch.data)
                td, stats = learner.update(batch.data, batch.weights)
                mon.add_learner_stats({**stats, **lag})
                client.update_priorities(batch, td)
            follow()
            mon.add_eval(evaluator.maybe_advance(  # as many evaluation steps as it just acted
                actor.greedy, cfg.eval_interval,
                (actor.tracker.env_steps - steps0) // cfg.envs_per_actor))
            run.tick(learner.version)
        actor.close()
        evaluator.close()
    timers = {"actor0": {"env": actor.env_s, "inference": actor.inference_s},
              "learner": {"update": learner.update_s}}
    return run.finish(learner.model, learner.version, device=learner.device, timers=timers,
                      extra={"replay_size": len(memory), "replay_inserted": limiter.inserted,
                             "epsilon": np.unique(eps).tolist()})
