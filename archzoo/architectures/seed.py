"""SEED RL (Espeholt et al. 2020; seed 004 §12.4.4): inference moves onto the learner.

Roles: rank 0 is the learner, ranks 1..N are actors.

- Actors only step their E envs. Every step is one request (x_t of all E envs, plus the
  reward and episode-end flags of the step that produced it) and one reply (a_t ~ π, the
  behaviour logits μ(·|x_t)); they hold no policy.
- The learner is one loop that alternates serving inference and training: it answers a
  batch of requests with one forward pass (actors/inference.py), appends each answered
  step to that actor's unroll buffer (learners/unroll_builder.py), and whenever enough
  unrolls of T steps are complete takes one V-trace step on them (the IMPALA learner).
  The model that answers is the model that trains, so new parameters are in place for the
  next batch, never within one; an unroll's steps may span versions, and V-trace corrects
  with each step's own μ. Policy lag = learner version − the version of an unroll's first step.
- ``--mode sync``: every batch holds one request from every actor, in rank order, so all
  unrolls complete together and each update takes one from every actor (reproducible
  with ``--seed``).
- ``--actors 0``: one process; the same actor code asks the policy directly.

MPI is the recommended backend: every env step is a round trip, and MPI's is ~100× shorter
than gloo's here (docs/seed.md).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from actors.inference import BatchedPolicy, InferenceServer, reply_schema, request_schema
from actors.remote import LocalPolicyClient, PolicyClient, SeedActor, new_run_id
from actors.unroll import unroll_schema
from archzoo.architectures import impala
from archzoo.architectures.batched import (
    add_inference_arguments,
    inference_summary,
    validate_inference,
)
from archzoo.architectures.common import (
    TAG_CONTROL,
    TAG_INFER_REPLY,
    TAG_INFER_REQUEST,
    LeafControl,
    RankContext,
    StopRequested,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
    run_summary,
)
from archzoo.comm import CommError, ControlChannel, Message
from archzoo.comm.base import Backoff
from archzoo.envs import EnvSpec, env_spec
from archzoo.runlog import Monitor, RunDir
from learners.unroll_builder import UnrollBuilder

NAME = "seed"
DESCRIPTION = "SEED RL: actors only step envs; the learner batches their inference and trains"
POLL_CONTROL_EVERY = 16  # actor steps between looks at the control channel


def add_arguments(p: argparse.ArgumentParser) -> None:
    impala.add_vtrace_arguments(p, "SEED (V-trace learner)")
    add_inference_arguments(p)


def validate(cfg: argparse.Namespace) -> str | None:
    return validate_inference(cfg) or impala.validate_vtrace(cfg)


world_size_for = impala.world_size_for  # one learner plus the actors
actors_for = impala.actors_for


def topology_applied(cfg: argparse.Namespace) -> str:
    return ("none: inference is central, so there is no parameter broadcast; "
            "observations actor->learner and actions learner->actor point-to-point every step")


class SeedLearner:
    """The learner's bookkeeping: unroll buffers per actor, the Monitor, V-trace updates."""

    def __init__(self, cfg: argparse.Namespace, spec: EnvSpec, mon: Monitor,
                 actors: list[int]) -> None:
        self.cfg, self.mon = cfg, mon
        self.learner = impala._learner(cfg, spec, torch.device(cfg.device))
        self.policy = BatchedPolicy(self.learner.model, self.learner.device, cfg.seed,
                                    version_of=lambda: self.learner.version)
        u_schema = unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor)
        self.builders = {a: UnrollBuilder(u_schema, cfg.unroll_length) for a in actors}
        self.complete: list[Message] = []
        self.batch_unrolls = cfg.batch_unrolls or len(actors)

    def on_answer(self, actor: int, req: Message, rep: Message) -> None:
        """Account one answered request and grow that actor's unroll."""
        if not bool(req["first"]):
            n = int(req["ep_count"])
            self.mon.add_episodes(req["ep_returns"][:n])
            self.mon.add_steps(int(req["valid"].sum()), float(req["first_step_time"]))
        unroll = self.builders[actor].add(req, rep)
        if unroll is not None:
            self.complete.append(unroll)

    def maybe_update(self) -> bool:
        """One V-trace step once ``batch_unrolls`` unrolls are complete (oldest first)."""
        if len(self.complete) < self.batch_unrolls:
            return False
        batch = self.complete[: self.batch_unrolls]
        del self.complete[: self.batch_unrolls]
        for u in batch:
            self.mon.add_lag(self.learner.version - int(u["version"]))
        self.learner.update(batch)  # the next batch is answered by the new parameters
        self.mon.updates = self.learner.version
        return True

    def restarts(self) -> dict[str, int]:
        return {str(a): b.restarts for a, b in self.builders.items() if b.restarts}


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return run_single(ctx, spec)
    if ctx.rank == 0:
        return run_learner(ctx, spec)
    run_actor(ctx, spec)
    return None


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """``--actors 0``: the actor asks the learner's policy directly, a batch of one."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = impala._monitor(ctx, run_dir, NAME)
    sl = SeedLearner(cfg, spec, mon, [0])
    E = cfg.envs_per_actor
    client = LocalPolicyClient(sl.policy, request_schema(spec, E), reply_schema(spec, E),
                               new_run_id(0), on_answer=sl.on_answer)
    actor = SeedActor(spec, E, client, impala._actor_seed(cfg, 0))
    stop = None
    while stop is None:
        actor.step()
        if sl.maybe_update():
            mon.maybe_log()
            stop = mon.check_stop()
    mon.maybe_log(force=True)
    actor.close()
    timers = {"actor0": {"env": actor.env_s, "inference": client.round_trip_s},
              "learner": {"update": sl.learner.update_s}}
    summary = run_summary(ctx, mon, stop, NAME, "none", "single process, no transport",
                          sl.learner.device, sl.learner.version, timers,
                          {"inference": inference_summary(None, client)})
    run_dir.write_summary(summary)
    impala._save(ctx, run_dir, sl.learner, spec, NAME)
    run_dir.close()
    return summary


def run_learner(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    actors = list(range(1, ctx.world_size))
    E = cfg.envs_per_actor
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    control = ControlChannel(t, actors, TAG_CONTROL)
    handshake_root(control, actors, {"request": req_s.digest(), "reply": rep_s.digest()},
                   cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = impala._monitor(ctx, run_dir, NAME)
    sl = SeedLearner(cfg, spec, mon, actors)
    server = InferenceServer(t, req_s, rep_s, actors, sl.policy, cfg.max_batch,
                             cfg.max_wait_us * 1e-6, TAG_INFER_REQUEST, TAG_INFER_REPLY,
                             mode=cfg.mode, on_answer=sl.on_answer)
    mon.extra = server.stats.window
    backoff = Backoff(t.idle, t.spin_s)  # the learner has nothing else to do: spin first
    stop = None
    while stop is None:
        served = server.serve()
        updated = sl.maybe_update()
        if served or updated:
            backoff.reset()
        else:
            backoff.pause()
        c = t.counters.totals()
        mon.maybe_log(c["bytes_sent"], c["bytes_recv"])
        stop = mon.check_stop()

    try:
        byes = finish_root(ctx, control, actors, server.drop_pending,
                           outstanding=lambda: server.flush())
    except CommError as e:
        # an actor died (the server dropped it) or went silent: keep what was learnt in the
        # run directory, then fail with the error that names it
        _finish(ctx, run_dir, mon, stop, sl, server, spec, {}, str(e))
        raise
    return _finish(ctx, run_dir, mon, stop, sl, server, spec, byes, None)


def _finish(ctx: RankContext, run_dir: RunDir, mon: Monitor, stop: str, sl: SeedLearner,
            server: InferenceServer, spec: EnvSpec, byes: dict[int, Any],
            error: str | None) -> dict[str, Any]:
    """Write summary.json and the policy (also when the stop protocol failed)."""
    cfg, t = ctx.cfg, ctx.transport
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    breakdown: dict[str, Any] = {
        "learner": {"update": sl.learner.update_s, "inference": server.stats.forward_s,
                    "wait": t.wait_s},
    }
    for a, bye in byes.items():
        breakdown[f"actor{a}"] = bye.get("timing", {})
    extra = {"inference": inference_summary(server), "actor_restarts": sl.restarts(),
             "per_rank_bytes": {"0": c}, "stop_error": error}
    extra["per_rank_bytes"].update({str(a): bye.get("bytes", {}) for a, bye in byes.items()})
    summary = run_summary(ctx, mon, stop, NAME, cfg.topology, topology_applied(cfg),
                          sl.learner.device, sl.learner.version, breakdown, extra)
    run_dir.write_summary(summary)
    impala._save(ctx, run_dir, sl.learner, spec, NAME)
    run_dir.close()
    return summary


def run_actor(ctx: RankContext, spec: EnvSpec) -> None:
    cfg, t = ctx.cfg, ctx.transport
    root = 0
    E = cfg.envs_per_actor
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    control = ControlChannel(t, [root], TAG_CONTROL)
    handshake_leaf(control, root, {"request": req_s.digest(), "reply": rep_s.digest()},
                   cfg.startup_timeout)
    lc = LeafControl(control, root)
    client = PolicyClient(t, root, req_s, rep_s, TAG_INFER_REQUEST, TAG_INFER_REPLY,
                          new_run_id(ctx.rank), on_poll=lc.raise_if_stopped)
    actor = SeedActor(spec, E, client, impala._actor_seed(cfg, ctx.rank))
    i = 0
    try:
        while True:
            if i % POLL_CONTROL_EVERY == 0:
                lc.raise_if_stopped()
            actor.step()
            i += 1
    except StopRequested:
        pass
    lc.stopped = True
    stats = {
        "timing": {"env": actor.env_s, "inference": client.round_trip_s, "wait": t.wait_s},
        "env_steps": actor.env_steps, "episodes": actor.episodes,
        "bytes": t.counters.totals(),
    }
    finish_leaf(ctx, control, lc, root, stats, drain=lambda: None)
    actor.close()
