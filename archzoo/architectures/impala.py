"""IMPALA (Espeholt et al. 2018; seed 004 §12.4.4): actors send unrolls, one learner trains.

Roles on the star topology: rank 0 is the learner, ranks 1..N are actors.

- Actors step E envs with a local copy of the policy (the behaviour policy μ) and send
  unrolls of T steps with μ's logits. ``--mode async`` (IMPALA's default): between unrolls
  an actor takes the newest parameters that have arrived, without blocking. ``--mode
  sync``: after each unroll it waits for the parameters that unroll produced.
- The learner trains with the V-trace loss on what has arrived (async) or on one unroll
  from every actor in rank order (sync, bit-for-bit reproducible with ``--seed``), then
  broadcasts the new parameters over the star. Policy lag = learner version − the
  version an unroll was acted with.
- ``--actors 0``: the same actor and learner code in one process, no transport.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from actors.unroll import TIMING, UnrollActor, unroll_schema
from archzoo.architectures.common import (
    TAG_CONTROL,
    TAG_PARAMS,
    TAG_TOPOLOGY,
    TAG_UNROLL,
    LeafControl,
    RankContext,
    StopRequested,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
    run_summary,
)
from archzoo.comm import ControlChannel, Inbox, Message
from archzoo.envs import EnvSpec, env_spec
from archzoo.nets import ActorCritic, get_flat, num_params, set_flat
from archzoo.runlog import Monitor, RunDir, Timers
from archzoo.topology.factory import make_topology
from archzoo.topology.star import StarPublisher, params_schema
from learners.impala import ImpalaLearner
from learners.vtrace import ImpalaLossConfig

NAME = "impala"
DESCRIPTION = "IMPALA: actors send unrolls with behaviour logits; a central V-trace learner"
STREAMS = "unrolls actor->learner point-to-point"


def topology_applied(cfg: argparse.Namespace) -> str:
    """Where the chosen topology is used (summary.json says so)."""
    name = cfg.topology + (f"(m={cfg.fanout})" if cfg.topology in ("tree", "butterfly") else "")
    how = "non-blocking, latest-wins" if cfg.topology == "star" else "synchronous collective"
    return f"parameter broadcast learner->actors over {name} ({how}); {STREAMS}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """IMPALA's hyper-parameters, with defaults that solve CartPole-v1 quickly."""
    add_vtrace_arguments(p, "IMPALA")


def add_vtrace_arguments(p: argparse.ArgumentParser, title: str) -> None:
    """The unroll and V-trace learner flags (IMPALA, SEED)."""
    g = p.add_argument_group(title)
    g.add_argument("--unroll-length", type=int, default=20, help="T, steps per unroll")
    g.add_argument("--batch-unrolls", type=int, default=0,
                   help="async: most unrolls per update (0 = one per actor)")
    g.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    g.add_argument("--optimizer", choices=("adam", "rmsprop"), default="adam")
    g.add_argument("--gamma", type=float, default=0.99, help="discount γ")
    g.add_argument("--rho-bar", type=float, default=1.0, help="ρ̄, importance-weight clip")
    g.add_argument("--c-bar", type=float, default=1.0, help="c̄, trace clip")
    g.add_argument("--baseline-coef", type=float, default=0.5, help="value-loss weight")
    g.add_argument("--entropy-coef", type=float, default=0.01, help="entropy-bonus weight")
    g.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient-norm clip")
    g.add_argument("--hidden", type=int, default=64, help="MLP width")


def validate(cfg: argparse.Namespace) -> str | None:
    """One line describing what is wrong with the IMPALA flags, or None."""
    if cfg.topology != "star" and cfg.mode == "async":
        return (f"--topology {cfg.topology} needs --mode sync: async IMPALA broadcasts "
                "parameters latest-wins over the star (--topology star)")
    return validate_vtrace(cfg)


def validate_vtrace(cfg: argparse.Namespace) -> str | None:
    """What is wrong with the unroll and V-trace learner flags, or None."""
    if cfg.unroll_length < 1:
        return f"--unroll-length must be >= 1, got {cfg.unroll_length}"
    if cfg.batch_unrolls < 0:
        return f"--batch-unrolls must be >= 0, got {cfg.batch_unrolls}"
    if not cfg.lr > 0:
        return f"--lr must be > 0, got {cfg.lr}"
    if not 0.0 <= cfg.gamma <= 1.0:
        return f"--gamma must be in [0, 1], got {cfg.gamma}"
    if not (cfg.rho_bar > 0 and cfg.c_bar > 0):
        return "--rho-bar and --c-bar must be > 0"
    if cfg.hidden < 1:
        return f"--hidden must be >= 1, got {cfg.hidden}"
    if not cfg.max_grad_norm > 0:
        return f"--max-grad-norm must be > 0, got {cfg.max_grad_norm}"
    return None


def world_size_for(cfg: argparse.Namespace, actors: int) -> int:
    """Processes for ``actors`` actors: one learner plus the actors (just one with 0)."""
    return actors + 1 if actors > 0 else 1


def actors_for(cfg: argparse.Namespace, world_size: int) -> int:
    return world_size - 1


# -- building blocks ------------------------------------------------------------------

STOP_VERSION = -1  # a parameters message with this version tells sync actors to stop


class ParamsBroadcast:
    """The learner's parameter broadcast: the non-blocking StarPublisher on the star, or a
    synchronous collective of the chosen topology (sync mode) where every actor relays."""

    def __init__(self, t, cfg: argparse.Namespace, schema, actors: list[int]) -> None:
        self.collective = None if cfg.topology == "star" else \
            make_topology(cfg.topology, t, cfg.fanout, TAG_TOPOLOGY)
        self.star = StarPublisher(t, schema, actors, TAG_PARAMS) if self.collective is None \
            else None
        self.latest = self.star.latest if self.star else schema.new()

    def publish(self, version: int) -> None:
        if self.star is not None:
            self.star.publish(version=version)
            return
        self.latest["version"][...] = version
        self.collective.broadcast(self.latest.buffer, 0)

    def pump(self) -> None:
        if self.star is not None:
            self.star.pump()

    def wait_all(self, timeout_s: float | None = None, on_poll=None) -> None:
        if self.star is not None:
            self.star.wait_all(timeout_s, on_poll)

    def rounds(self) -> int | None:
        return self.collective.rounds if self.collective is not None else None

    def messages(self) -> int | None:
        return self.star.messages if self.star is not None else None


def _model(cfg: argparse.Namespace, spec: EnvSpec) -> ActorCritic:
    torch.manual_seed(cfg.seed)
    return ActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden)


def _learner(cfg: argparse.Namespace, spec: EnvSpec, device: torch.device,
             cls: type[ImpalaLearner] = ImpalaLearner) -> ImpalaLearner:
    """The learner from the flags; ``cls`` picks the loss (GA3C's A3C variant)."""
    loss_cfg = ImpalaLossConfig(gamma=cfg.gamma, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar,
                                baseline_coef=cfg.baseline_coef, entropy_coef=cfg.entropy_coef)
    return cls(_model(cfg, spec), loss_cfg, cfg.lr, cfg.max_grad_norm, device, cfg.optimizer)


def _actor_seed(cfg: argparse.Namespace, rank: int) -> int:
    return cfg.seed * 1000 + rank


def _monitor(ctx: RankContext, run_dir: RunDir, arch: str = NAME) -> Monitor:
    """The deciding rank's Monitor (also SEED's and GA3C's, which pass their name)."""
    cfg = ctx.cfg
    return Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                   cfg.log_interval, f"{arch}/{ctx.transport.backend if ctx.transport else '-'}",
                   quiet=cfg.quiet)


def _account(mon: Monitor, msg: Message, learner_version: int) -> None:
    n = int(msg["ep_count"])
    mon.add_episodes(msg["ep_returns"][:n])
    mon.add_steps(int(msg["valid"].sum()), float(msg["first_step_time"]))
    mon.add_lag(learner_version - int(msg["version"]))


def _save(ctx: RankContext, run_dir: RunDir, learner: ImpalaLearner, spec: EnvSpec,
          arch: str = NAME) -> None:
    """policy.pt of an actor-critic learner (also SEED's and GA3C's)."""
    run_dir.save_policy(learner.model, {"arch": arch, "env": spec.env_id,
                                        "obs_shape": list(spec.obs_shape),
                                        "num_actions": spec.num_actions,
                                        "hidden": ctx.cfg.hidden})


# -- roles --------------------------------------------------------------------------


def run(ctx: RankContext) -> dict[str, Any] | None:
    """Entry point on every rank; returns the summary on rank 0."""
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return run_single(ctx, spec)
    if ctx.rank == 0:
        return run_learner(ctx, spec)
    run_actor(ctx, spec)
    return None


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """``--actors 0``: actor and learner code in one process, no transport (the baseline)."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir)
    learner = _learner(cfg, spec, torch.device(cfg.device))
    cpu = learner.device.type == "cpu"
    policy = learner.model if cpu else _model(cfg, spec)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, policy,
                        _actor_seed(cfg, 0))
    schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
    msg = schema.new()
    flat = np.zeros(num_params(policy), np.float32)
    stop = None
    while stop is None:
        actor.collect(msg)
        _account(mon, msg, learner.version)
        learner.update([msg])
        actor.version = learner.version
        if not cpu:
            get_flat(learner.model, flat)
            set_flat(policy, flat)
        mon.updates = learner.version
        mon.maybe_log()
        stop = mon.check_stop()
    mon.maybe_log(force=True)
    actor.close()
    timers = {"actor0": dict(zip(TIMING, (actor.env_s, actor.inference_s), strict=True)),
              "learner": {"update": learner.update_s}}
    summary = run_summary(ctx, mon, stop, NAME, "none", "single process, no transport",
                          learner.device, learner.version, timers, {})
    run_dir.write_summary(summary)
    _save(ctx, run_dir, learner, spec)
    run_dir.close()
    return summary


def run_learner(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    actors = list(range(1, ctx.world_size))
    timers = Timers()
    learner = _learner(cfg, spec, torch.device(cfg.device))
    u_schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
    p_schema = params_schema(num_params(learner.model))
    control = ControlChannel(t, actors, TAG_CONTROL)
    inbox = Inbox(t, u_schema, actors, TAG_UNROLL, depth=1, what="unroll")
    publisher = ParamsBroadcast(t, cfg, p_schema, actors)
    handshake_root(control, actors, {"unroll": u_schema.digest(), "params": p_schema.digest()},
                   cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = _monitor(ctx, run_dir)
    get_flat(learner.model, publisher.latest["params"])
    publisher.publish(version=0)  # every actor starts from the learner's initial parameters
    max_batch = cfg.batch_unrolls or len(actors)
    stop = None
    while stop is None:
        if cfg.mode == "sync":
            # rank order: reproducible
            batch = [(a, inbox.recv_from(a, on_poll=publisher.pump)) for a in actors]
        else:
            peer, msg = inbox.recv_any(on_poll=publisher.pump)
            batch = [(peer, msg)]
            for p in inbox.ready():
                if len(batch) >= max_batch:
                    break
                if p != peer:
                    batch.append((p, inbox.poll(p)))
        for _, msg in batch:
            _account(mon, msg, learner.version)
        learner.update([m for _, m in batch])
        with timers("comm"):
            for p, _ in batch:
                inbox.release(p)
        mon.updates = learner.version
        stop = mon.check_stop()
        if stop is None:
            with timers("comm"):
                get_flat(learner.model, publisher.latest["params"])
                publisher.publish(version=learner.version)
                if cfg.mode == "sync":
                    publisher.wait_all()  # every actor waits for exactly this version
        elif publisher.collective is not None:
            publisher.publish(version=STOP_VERSION)  # actors blocked in the collective stop
        c = t.counters.totals()
        mon.maybe_log(c["bytes_sent"], c["bytes_recv"])

    def drain() -> None:
        for p in inbox.ready():
            inbox.release(p)  # unrolls in flight after STOP are received and dropped
        publisher.pump()

    byes = finish_root(ctx, control, actors, drain,
                       outstanding=lambda: publisher.wait_all(on_poll=drain))
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    breakdown: dict[str, Any] = {
        "learner": {"update": learner.update_s, "comm": timers.s.get("comm", 0.0),
                    "wait": t.wait_s},
    }
    for a in actors:
        breakdown[f"actor{a}"] = byes[a].get("timing", {})
    extra = {"per_rank_bytes": {"0": c}, "topology_rounds": publisher.rounds(),
             "params_messages_root": publisher.messages()}
    extra["per_rank_bytes"].update({str(a): byes[a].get("bytes", {}) for a in actors})
    summary = run_summary(ctx, mon, stop, NAME, cfg.topology, topology_applied(cfg),
                          learner.device, learner.version, breakdown, extra)
    run_dir.write_summary(summary)
    _save(ctx, run_dir, learner, spec)
    run_dir.close()
    return summary


def run_actor(ctx: RankContext, spec: EnvSpec) -> None:
    cfg, t = ctx.cfg, ctx.transport
    root = 0
    model = ActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden)  # weights come from 0
    u_schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
    p_schema = params_schema(num_params(model))
    control = ControlChannel(t, [root], TAG_CONTROL)
    collective = None if cfg.topology == "star" else \
        make_topology(cfg.topology, t, cfg.fanout, TAG_TOPOLOGY)
    params_in = Inbox(t, p_schema, [root], TAG_PARAMS, depth=1, what="parameters") \
        if collective is None else None
    handshake_leaf(control, root, {"unroll": u_schema.digest(), "params": p_schema.digest()},
                   cfg.startup_timeout)
    lc = LeafControl(control, root)
    actor = UnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, model,
                        _actor_seed(cfg, ctx.rank))
    out = [u_schema.new(), u_schema.new()]  # double buffer: collect one while one is sent
    sending: list = [None, None]
    comm = Timers()

    def load(msg: Message) -> None:
        set_flat(model, msg["params"])
        actor.version = int(msg["version"])
        params_in.release(root)

    def take_newest() -> None:
        while params_in is not None and (msg := params_in.poll(root)) is not None:
            load(msg)

    relay = p_schema.new()

    def next_params() -> None:
        """Sync mode: the parameters this unroll produced (or STOP)."""
        if collective is None:
            load(params_in.recv_from(root, on_poll=lc.raise_if_stopped))
            return
        collective.broadcast(relay.buffer, root)  # relays to this rank's children too
        if int(relay["version"]) == STOP_VERSION:
            raise StopRequested
        set_flat(model, relay["params"])
        actor.version = int(relay["version"])

    if collective is None:
        load(params_in.recv_from(root, cfg.startup_timeout))
    else:
        next_params()
    i = 0
    try:
        while True:
            lc.raise_if_stopped()
            buf = out[i % 2]
            if sending[i % 2] is not None:
                t.wait(sending[i % 2], on_poll=lc.raise_if_stopped)
            actor.collect(buf)
            with comm("comm"):
                sending[i % 2] = t.isend(buf.buffer, root, TAG_UNROLL, "unroll")
            i += 1
            if cfg.mode == "sync":
                expected = actor.version + 1
                next_params()
                if actor.version != expected:
                    raise RuntimeError(f"rank {ctx.rank}: expected parameters version "
                                       f"{expected}, got {actor.version}")
            else:
                with comm("comm"):
                    take_newest()
    except StopRequested:
        pass
    lc.stopped = True
    for req in sending:
        if req is not None:
            t.wait(req, on_poll=take_newest)
    stats = {
        "timing": {"env": actor.env_s, "inference": actor.inference_s,
                   "comm": comm.s.get("comm", 0.0), "wait": t.wait_s},
        "env_steps": actor.env_steps, "episodes": actor.episodes,
        "bytes": t.counters.totals(),
    }
    finish_leaf(ctx, control, lc, root, stats, drain=take_newest)
    actor.close()
