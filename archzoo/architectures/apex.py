"""Ape-X (Horgan et al. 2018; seed 004 §12.4.5, Algorithms 12.41 and 12.42).

Roles: rank 0 is the learner; ranks 1..K are replay shards (``--replay-shards K``; with
K = 0 the replay lives in the learner); the remaining ranks are actors.

- Actor i explores with ε_i = ε^(1 + α·i/(N−1)), assembles n-step transitions, computes
  their initial priorities with its local Q-network and ships batches to its shard
  without waiting; it takes the newest parameters between batches and runs greedy
  evaluation episodes every ``--eval-interval`` seconds.
- A shard inserts, samples by priority and applies priority updates (replay/server.py).
- The learner samples (prefetching the next batch while it trains), takes a double-DQN
  step on n-step targets weighted by importance weights, and sends the new priorities
  back; it broadcasts parameters over the star. "Solved" uses the greedy evaluation.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from actors.evaluation import GreedyEvaluator
from actors.transitions import TransitionActor, epsilon
from archzoo.architectures.common import (
    TAG_CONTROL,
    TAG_PARAMS,
    TAG_SAMPLE_REPLY,
    TAG_SAMPLE_REQUEST,
    TAG_TRANSITIONS,
    LeafControl,
    RankContext,
    StopRequested,
    absorb_stats,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
    run_summary,
    stats_message,
)
from archzoo.comm import ControlChannel, Inbox, Message
from archzoo.envs import EnvSpec, env_spec
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.runlog import Monitor, RunDir, Timers
from archzoo.topology.star import StarPublisher, params_schema
from learners.dqn import DQNConfig, DQNLearner, QNetwork
from replay.memory import PrioritizedReplay, UniformReplay
from replay.server import (
    LocalReplayClient,
    RateLimiter,
    ReplayServer,
    ShardedReplayClient,
    insert,
    memory_fields,
    reply_schema,
    request_schema,
    transitions_schema,
)

NAME = "apex"
DESCRIPTION = "Ape-X: ε-ladder actors feed a prioritized replay; one double-DQN learner"
TOPOLOGY_APPLIED = ("parameter broadcast learner->actors; transitions actor->replay and "
                    "samples replay<->learner point-to-point")
EVAL_WINDOW = 3  # evaluations (each --eval-episodes greedy episodes) that "solved" averages
SINGLE_PROCESS_SPI = 4.0  # --actors 0 with --samples-per-insert 0: a usual DQN replay ratio


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Ape-X's hyper-parameters, with defaults that solve CartPole-v1."""
    g = p.add_argument_group("Ape-X")
    g.add_argument("--replay-capacity", type=int, default=100_000, help="transitions, all shards")
    g.add_argument("--replay-shards", type=int, default=1,
                   help="replay ranks (0 = replay inside the learner process)")
    g.add_argument("--n-step", type=int, default=3, help="n of the n-step return")
    g.add_argument("--batch-size", type=int, default=128, help="learner batch")
    g.add_argument("--alpha", type=float, default=0.6, help="priority exponent α")
    g.add_argument("--beta", type=float, default=0.4, help="importance-weight exponent β")
    g.add_argument("--learning-starts", type=int, default=2000,
                   help="transitions in replay before sampling starts")
    g.add_argument("--samples-per-insert", type=float, default=4.0,
                   help="target samples per inserted item; sampling and inserting wait to "
                        "keep it (0 = no limit)")
    g.add_argument("--eps-base", type=float, default=0.4, help="ε of the ladder")
    g.add_argument("--eps-alpha", type=float, default=7.0, help="α of the ε ladder")
    g.add_argument("--actor-batch", type=int, default=256,
                   help="transitions per actor->replay message")
    g.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    g.add_argument("--gamma", type=float, default=0.99, help="discount γ")
    g.add_argument("--target-update", type=int, default=250,
                   help="learner updates between target-network refreshes")
    g.add_argument("--max-grad-norm", type=float, default=10.0, help="gradient-norm clip")
    g.add_argument("--hidden", type=int, default=128, help="MLP width")
    g.add_argument("--dueling", action=argparse.BooleanOptionalAction, default=True,
                   help="dueling head (Wang et al. 2016)")
    g.add_argument("--publish-every", type=int, default=10,
                   help="learner updates between parameter broadcasts")
    g.add_argument("--eval-interval", type=float, default=1.0,
                   help="seconds between an actor's greedy evaluations")
    g.add_argument("--eval-episodes", type=int, default=10,
                   help="greedy episodes per evaluation; solved = the mean of the last "
                        f"{EVAL_WINDOW} evaluations' episodes >= target")


def validate(cfg: argparse.Namespace) -> str | None:
    checks = [
        (cfg.replay_capacity >= 1, f"--replay-capacity must be >= 1, got {cfg.replay_capacity}"),
        (cfg.batch_size >= 1, f"--batch-size must be >= 1, got {cfg.batch_size}"),
        (cfg.alpha >= 0, f"--alpha must be >= 0, got {cfg.alpha}"),
        (0 <= cfg.beta <= 1, f"--beta must be in [0, 1], got {cfg.beta}"),
        (cfg.replay_shards >= 0, f"--replay-shards must be >= 0, got {cfg.replay_shards}"),
        (cfg.n_step >= 1, f"--n-step must be >= 1, got {cfg.n_step}"),
        (cfg.learning_starts >= 0, "--learning-starts must be >= 0"),
        (cfg.samples_per_insert >= 0, "--samples-per-insert must be >= 0"),
        (0 < cfg.eps_base <= 1, f"--eps-base must be in (0, 1], got {cfg.eps_base}"),
        (cfg.actor_batch >= 1, f"--actor-batch must be >= 1, got {cfg.actor_batch}"),
        (cfg.lr > 0, f"--lr must be > 0, got {cfg.lr}"),
        (0 <= cfg.gamma <= 1, f"--gamma must be in [0, 1], got {cfg.gamma}"),
        (cfg.target_update >= 1, "--target-update must be >= 1"),
        (cfg.hidden >= 1, "--hidden must be >= 1"),
        (cfg.publish_every >= 1, "--publish-every must be >= 1"),
        (cfg.eval_interval > 0, "--eval-interval must be > 0"),
        (cfg.eval_episodes >= 1, "--eval-episodes must be >= 1"),
        (cfg.replay_capacity >= max(1, cfg.replay_shards) * cfg.batch_size,
         "--replay-capacity must hold at least one batch per shard"),
        (cfg.learning_starts <= cfg.replay_capacity,
         "--learning-starts exceeds --replay-capacity: sampling would never start"),
    ]
    if cfg.topology != "star":
        checks.append((False, f"apex cannot use --topology {cfg.topology}: its parameter "
                              "broadcast is asynchronous (latest-wins, over the star) and its "
                              "streams are point-to-point; use --topology star"))
    if cfg.mode == "sync":
        checks.append((False, "apex has no --mode sync: its actors, replay and learner "
                              "never wait for each other (use --mode async)"))
    if cfg.actors is not None and cfg.actors > 0 and cfg.replay_shards > cfg.actors:
        checks.append((False, f"--replay-shards {cfg.replay_shards} exceeds --actors "
                              f"{cfg.actors}: every shard needs an actor"))
    return next((msg for ok, msg in checks if not ok), None)


def world_size_for(cfg: argparse.Namespace, actors: int) -> int:
    """Learner + shards + actors; ``--actors 0`` is one process with the replay inside."""
    return 1 + cfg.replay_shards + actors if actors > 0 else 1


def actors_for(cfg: argparse.Namespace, world_size: int) -> int:
    return world_size - 1 - cfg.replay_shards


def roles(cfg: argparse.Namespace, world_size: int) -> tuple[list[int], list[int]]:
    """(replay shard ranks, actor ranks)."""
    k = cfg.replay_shards
    return list(range(1, 1 + k)), list(range(1 + k, world_size))


def _qnet(cfg: argparse.Namespace, spec: EnvSpec) -> QNetwork:
    torch.manual_seed(cfg.seed)
    return QNetwork(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.dueling)


def _learner(cfg: argparse.Namespace, spec: EnvSpec) -> DQNLearner:
    dqn = DQNConfig(lr=cfg.lr, target_update_period=cfg.target_update,
                    max_grad_norm=cfg.max_grad_norm)
    return DQNLearner(_qnet(cfg, spec), dqn, torch.device(cfg.device))


def _memory(cfg: argparse.Namespace, spec: EnvSpec, capacity: int, seed: int) -> UniformReplay:
    """Prioritized (Ape-X; Gorila with --prioritized) or uniform (Gorila's default) replay."""
    if not getattr(cfg, "prioritized", True):
        return UniformReplay(capacity, memory_fields(spec.obs_shape), seed=seed)
    return PrioritizedReplay(capacity, memory_fields(spec.obs_shape), alpha=cfg.alpha,
                             beta=cfg.beta, seed=seed)


def _insert_cap(cfg: argparse.Namespace) -> int:
    return cfg.actor_batch + cfg.envs_per_actor * cfg.n_step


def _digests(cfg: argparse.Namespace, spec: EnvSpec, n_params: int) -> dict[str, str]:
    return {"params": params_schema(n_params).digest(),
            "transitions": transitions_schema(spec.obs_shape, _insert_cap(cfg)).digest(),
            "request": request_schema(cfg.batch_size).digest(),
            "reply": reply_schema(spec.obs_shape, cfg.batch_size).digest()}


def _monitor(ctx: RankContext, run_dir: RunDir, name: str = NAME) -> Monitor:
    cfg = ctx.cfg
    backend = ctx.transport.backend if ctx.transport else "-"
    return Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                   cfg.log_interval, f"{name}/{backend}", quiet=cfg.quiet,
                   eval_window=EVAL_WINDOW * cfg.eval_episodes)


def _save(run_dir: RunDir, learner: DQNLearner, cfg: argparse.Namespace,
          spec: EnvSpec, name: str = NAME) -> None:
    run_dir.save_policy(learner.model, {"arch": name, "net": "q", "env": spec.env_id,
                                        "obs_shape": list(spec.obs_shape),
                                        "num_actions": spec.num_actions,
                                        "hidden": cfg.hidden, "dueling": cfg.dueling})


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return run_single(ctx, spec)
    shards, actors = roles(ctx.cfg, ctx.world_size)
    if ctx.rank == 0:
        return run_learner(ctx, spec, shards, actors)
    if ctx.rank in shards:
        run_shard(ctx, spec, shards, actors)
    else:
        run_actor(ctx, spec, shards, actors)
    return None


# -- one process: the baseline ----------------------------------------------------------


def run_single(ctx: RankContext, spec: EnvSpec, name: str = NAME) -> dict[str, Any]:
    """``--actors 0``: actor, replay and learner in one process (also Gorila's baseline)."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir, name)
    learner = _learner(cfg, spec)
    cpu = learner.device.type == "cpu"
    policy = learner.model if cpu else _qnet(cfg, spec)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, policy,
                            cfg.eps_base, cfg.seed * 1000)
    evaluator = GreedyEvaluator(cfg.env, cfg.eval_episodes, cfg.seed * 1000 + 1)
    memory = _memory(cfg, spec, cfg.replay_capacity, cfg.seed)
    limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert or SINGLE_PROCESS_SPI,
                          min_sample=cfg.batch_size)
    client = LocalReplayClient(memory, cfg.batch_size, limiter)
    msg = transitions_schema(spec.obs_shape, _insert_cap(cfg)).new()
    flat = np.zeros(num_params(policy), np.float32)
    last_eval = time.time()
    stop = None
    while stop is None:
        steps0 = actor.tracker.env_steps
        actor.collect(msg, cfg.actor_batch)
        limiter.inserted += insert(memory, msg)
        mon.add_steps(actor.tracker.env_steps - steps0, actor.first_step_time)
        mon.add_episodes(actor.take_finished())
        while limiter.can_sample(len(memory), cfg.batch_size):
            batch = client.receive()
            td, _ = learner.update(batch.data, batch.weights)
            client.update_priorities(batch, td)
        if not cpu:
            get_flat(learner.model, flat)
            set_flat(policy, flat)
        if time.time() - last_eval >= cfg.eval_interval:
            mon.add_eval(evaluator.run(actor.greedy))
            last_eval = time.time()
        mon.updates = learner.version
        mon.maybe_log()
        stop = mon.check_stop()
    mon.maybe_log(force=True)
    actor.close()
    evaluator.close()
    timers = {"actor0": {"env": actor.env_s, "inference": actor.inference_s},
              "learner": {"update": learner.update_s}}
    summary = run_summary(ctx, mon, stop, name, "none", "single process, no transport",
                          learner.device, learner.version, timers,
                          {"replay_size": len(memory), "replay_inserted": limiter.inserted})
    run_dir.write_summary(summary)
    _save(run_dir, learner, cfg, spec, name)
    run_dir.close()
    return summary


# -- learner ----------------------------------------------------------------------------


def run_learner(ctx: RankContext, spec: EnvSpec, shards: list[int],
                actors: list[int]) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    leaves = shards + actors
    learner = _learner(cfg, spec)
    n_params = num_params(learner.model)
    control = ControlChannel(t, leaves, TAG_CONTROL)
    publisher = StarPublisher(t, params_schema(n_params), actors, TAG_PARAMS)
    inserts = None
    limiter = RateLimiter(cfg.learning_starts, cfg.samples_per_insert,
                          min_sample=cfg.batch_size)
    if shards:
        client: Any = ShardedReplayClient(t, shards, spec.obs_shape, cfg.batch_size, cfg.beta,
                                          True, (TAG_SAMPLE_REQUEST, TAG_SAMPLE_REPLY),
                                          cfg.seed)
    else:
        memory = _memory(cfg, spec, cfg.replay_capacity, cfg.seed)
        inserts = Inbox(t, transitions_schema(spec.obs_shape, _insert_cap(cfg)), actors,
                        TAG_TRANSITIONS, depth=2, what="transitions")
        client = LocalReplayClient(memory, cfg.batch_size, limiter)
    handshake_root(control, leaves, _digests(cfg, spec, n_params), cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir)
    timers = Timers()
    get_flat(learner.model, publisher.latest["params"])
    publisher.publish(version=0)

    def take_inserts(force: bool = False) -> None:
        if inserts is not None:
            for p in inserts.ready():
                if not (force or limiter.can_insert()):
                    break
                limiter.inserted += insert(memory, inserts.poll(p))
                inserts.release(p)

    def take_stats() -> None:
        for _, msg in control.poll():
            absorb_stats(mon, msg, learner.version)

    def service() -> None:
        with timers("comm"):
            take_inserts()
            take_stats()
            publisher.pump()
        c = t.counters.totals()
        mon.maybe_log(c["bytes_sent"], c["bytes_recv"])

    client.request(on_poll=service)
    stop = None
    while stop is None:
        batch = client.receive(on_poll=service)
        client.request(on_poll=service)  # prefetch the next batch while this one trains
        td, _ = learner.update(batch.data, batch.weights)
        client.update_priorities(batch, td)
        mon.updates = learner.version
        if learner.version % cfg.publish_every == 0:
            with timers("comm"):
                get_flat(learner.model, publisher.latest["params"])
                publisher.publish(version=learner.version)
        service()
        stop = mon.check_stop()

    def drain() -> None:
        client.drain()
        take_inserts(force=True)
        publisher.pump()

    byes = finish_root(ctx, control, leaves, drain,
                       outstanding=lambda: publisher.wait_all(on_poll=drain))
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    breakdown: dict[str, Any] = {"learner": {"update": learner.update_s,
                                             "comm": timers.s.get("comm", 0.0),
                                             "wait": t.wait_s}}
    for r in leaves:
        role = "shard" if r in shards else "actor"
        breakdown[f"{role}{r}"] = byes[r].get("timing", {})
    extra = {"replay_shards": len(shards), "replay_size": client.size,
             "replay_inserted": client.inserted,
             "per_rank_bytes": {"0": c, **{str(r): byes[r].get("bytes", {}) for r in leaves}}}
    summary = run_summary(ctx, mon, stop, NAME, "star", TOPOLOGY_APPLIED, learner.device,
                          learner.version, breakdown, extra)
    run_dir.write_summary(summary)
    _save(run_dir, learner, cfg, spec)
    run_dir.close()
    return summary


# -- replay shard -----------------------------------------------------------------------


def run_shard(ctx: RankContext, spec: EnvSpec, shards: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    k = shards.index(ctx.rank)
    mine = [a for j, a in enumerate(actors) if j % len(shards) == k]
    control = ControlChannel(t, [0], TAG_CONTROL)
    memory = _memory(cfg, spec, cfg.replay_capacity // len(shards), cfg.seed * 1000 + ctx.rank)
    limiter = RateLimiter(-(-cfg.learning_starts // len(shards)), cfg.samples_per_insert,
                          min_sample=cfg.batch_size)
    server = ReplayServer(t, memory, spec.obs_shape, mine, 0, _insert_cap(cfg),
                          cfg.batch_size, limiter,
                          (TAG_TRANSITIONS, TAG_SAMPLE_REQUEST, TAG_SAMPLE_REPLY))
    n_params = num_params(_qnet(cfg, spec))
    handshake_leaf(control, 0, _digests(cfg, spec, n_params), cfg.startup_timeout)
    lc = LeafControl(control, 0)
    busy_s = 0.0
    while not lc.stopped:
        lc.poll()
        t0 = time.perf_counter()
        if server.serve():
            busy_s += time.perf_counter() - t0
        else:
            t.idle(2e-4)
    def drain() -> None:
        server.drain_inserts(force=True)

    server.flush(on_poll=drain)
    stats = {"timing": {"serve": busy_s, "wait": t.wait_s}, "inserted": limiter.inserted,
             "sampled": limiter.sampled, "size": len(memory), "bytes": t.counters.totals()}
    finish_leaf(ctx, control, lc, 0, stats, drain=drain)


# -- actor ------------------------------------------------------------------------------


def run_actor(ctx: RankContext, spec: EnvSpec, shards: list[int], actors: list[int]) -> None:
    cfg, t = ctx.cfg, ctx.transport
    i = actors.index(ctx.rank)
    dest = shards[i % len(shards)] if shards else 0
    model = QNetwork(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.dueling)
    n_params = num_params(model)
    control = ControlChannel(t, [0], TAG_CONTROL)
    params_in = Inbox(t, params_schema(n_params), [0], TAG_PARAMS, depth=1, what="parameters")
    handshake_leaf(control, 0, _digests(cfg, spec, n_params), cfg.startup_timeout)
    lc = LeafControl(control, 0)
    eps = epsilon(i, len(actors), cfg.eps_base, cfg.eps_alpha)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, eps,
                            cfg.seed * 1000 + ctx.rank)
    evaluator = GreedyEvaluator(cfg.env, cfg.eval_episodes, cfg.seed * 1000 + 500 + ctx.rank)
    schema = transitions_schema(spec.obs_shape, _insert_cap(cfg))
    out = [schema.new(), schema.new()]
    sending: list = [None, None]
    comm = Timers()

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])
        params_in.release(0)

    def take_newest() -> None:
        while (msg := params_in.poll(0)) is not None:
            load(msg)

    reported = 0
    pending_eval: list[float] = []

    def report() -> None:
        nonlocal reported
        steps = actor.tracker.env_steps
        control.send(0, stats_message(steps - reported, actor.take_finished(), actor.version,
                                      actor.first_step_time, pending_eval))
        reported = steps
        pending_eval.clear()

    def between_polls() -> None:  # while blocked on a send: stay current, notice STOP
        take_newest()
        lc.raise_if_stopped()

    load(params_in.recv_from(0, cfg.startup_timeout))
    last_report = last_eval = time.time()
    n = 0
    try:
        while True:
            lc.raise_if_stopped()
            with comm("comm"):
                take_newest()
            j = n % 2
            if sending[j] is not None:
                t.wait(sending[j], on_poll=between_polls)
            actor.collect(out[j], cfg.actor_batch)
            with comm("comm"):
                sending[j] = t.isend(out[j].buffer, dest, TAG_TRANSITIONS, "transitions")
            n += 1
            now = time.time()
            if now - last_eval >= cfg.eval_interval:
                pending_eval.extend(evaluator.run(actor.greedy).tolist())
                last_eval = time.time()
            if now - last_report >= 0.25 or len(actor.finished) > 300 or pending_eval:
                report()
                last_report = now
    except StopRequested:
        pass
    for req in sending:
        if req is not None:
            t.wait(req, on_poll=take_newest)
    stats = {"timing": {"env": actor.env_s, "inference": actor.inference_s,
                        "comm": comm.s.get("comm", 0.0), "wait": t.wait_s},
             "env_steps": actor.tracker.env_steps, "epsilon": eps,
             "bytes": t.counters.totals()}
    finish_leaf(ctx, control, lc, 0, stats, drain=take_newest)
    actor.close()
    evaluator.close()
