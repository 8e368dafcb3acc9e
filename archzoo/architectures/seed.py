"""SEED RL (Espeholt et al. 2020): inference moves onto the learner.

Role map: rank 0 is the learner, ranks 1..N are actors.

- Actors only step their E envs. Every step is one request (x_t of all E envs, plus the
  reward and episode-end flags of the step that produced it) and one reply (a_t ~ π, the
  behaviour logits μ(·|x_t)); they hold no policy.
- The learner is one loop that alternates serving inference and training: it answers a
  batch of requests with one forward pass (actors/inference.py), appends each answered
  step to that actor's unroll buffer (learners/seed.py), and whenever enough unrolls of T
  steps are complete takes one V-trace step on them (the learner IMPALA uses).
  The model that answers is the model that trains, so new parameters are in place for the
  next batch, never within one; an unroll's steps may span versions, and V-trace corrects
  with each step's own μ. Policy lag = learner version − the version of an unroll's first step.
- ``--mode sync``: every batch holds one request from every actor, in rank order, so all
  unrolls complete together and each update takes one from every actor (reproducible
  with ``--seed``). The checkpoint then also keeps every actor's actions, the unrolls in
  progress and the sampling generator: a resumed actor takes its logged steps again
  (actors/action_log.py) and the run goes on bit for bit.
- ``--actors 0``: one process; the same actor code asks the policy directly.

MPI is the recommended backend: every env step is a round trip, and MPI's is ~100× shorter
than gloo's here (docs/seed.md).
"""

from __future__ import annotations

from archzoo import builders, harness
from archzoo.actors.action_log import ActionLog, catch_up
from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
from archzoo.actors.core_states import CoreStates
from archzoo.actors.inference import InferenceServer, inference_summary
from archzoo.actors.remote import LocalPolicyClient, PolicyClient, SeedActor, new_run_id
from archzoo.architectures.rolemap import placement, play
from archzoo.comm import Schema
from archzoo.comm.base import Backoff
from archzoo.config import SeedConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.finish import Stateful
from archzoo.learners.seed import SeedLearner
from archzoo.records import Summary
from archzoo.runlog import Monitor

POLL_CONTROL_EVERY = 16  # actor steps between looks at the control channel
APPLIED = ("none: inference is central, so there is no parameter broadcast; "
           "observations actor->learner and actions learner->actor point-to-point every step")


def _learner(cfg: SeedConfig, spec: EnvSpec, mon: Monitor,
             actors: list[int]) -> tuple[SeedLearner, BatchedPolicy]:
    """The V-trace learner with its unroll builders (``--mode sync`` and ``--actors 0``:
    and the action log), and the policy that answers requests."""
    learner = builders.vtrace_learner(cfg, spec)
    log = ActionLog(spec.num_actions) if cfg.mode == "sync" or actors == [0] else None
    states = CoreStates(learner.model, actors, cfg.envs_per_actor) \
        if builders.core(cfg)[0] else None  # --core lstm: each env's state on the server
    sl = SeedLearner(learner, builders.unrolls(cfg, spec), cfg.unroll_length, actors,
                     cfg.batch_unrolls, mon, log, states)
    return sl, BatchedPolicy(learner.model, learner.device, cfg.seed,
                             version_of=lambda: learner.version)


def run(ctx: RankContext[SeedConfig]) -> Summary | None:
    """Entry point on every rank; returns the summary on rank 0."""
    return play(ctx, run_single, learner=run_learner, actor=run_actor)


def run_single(ctx: RankContext[SeedConfig], spec: EnvSpec) -> Summary:
    """``--actors 0``: the actor asks the learner's policy directly, a batch of one."""
    cfg = ctx.cfg
    with harness.single(ctx) as run:
        sl, policy = _learner(cfg, spec, run.mon, [0])
        run.attach({"learner": sl.learner, "unrolls": sl, "sampler": policy},
                   (sl.learner.model, builders.policy_meta(cfg, spec)))
        E = cfg.envs_per_actor
        client = LocalPolicyClient(policy, request_schema(spec, E), reply_schema(spec, E),
                                   new_run_id(0), on_answer=sl.on_answer, states=sl.states)
        actor = SeedActor(spec, E, client, harness.actor_seed(cfg.seed, 0))
        actor.fast_forward(sl.actions_to_replay().actions(0), spec.num_actions)  # if resumed
        while not run.stopped:
            actor.step()
            if sl.maybe_update():
                run.tick()
        actor.close()
    timers = {"actor0": {"env": actor.env_s, "inference": client.round_trip_s},
              "learner": {"update": sl.learner.update_s}}
    return run.finish(sl.learner.model, sl.learner.version, device=sl.learner.device,
                      timers=timers, extra={"inference": inference_summary(None, client)})


def _schemas(spec: EnvSpec, cfg: SeedConfig) -> tuple[Schema, Schema, dict[str, str]]:
    """The request and reply messages, and their digests for the start-up check."""
    req_s, rep_s = request_schema(spec, cfg.envs_per_actor), reply_schema(spec, cfg.envs_per_actor)
    return req_s, rep_s, {"request": req_s.digest(), "reply": rep_s.digest()}


def run_learner(ctx: RankContext[SeedConfig], spec: EnvSpec) -> Summary:
    """Rank 0: answer batches of requests, build the unrolls, train on them when complete."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    actors = place["actor"]
    req_s, rep_s, digests = _schemas(spec, cfg)
    # a stop protocol that fails (an actor silent) still writes the summary, with stop_error
    with harness.root(ctx, actors, digests, actors=actors, keep_stop_error=True) as run:
        sl, policy = _learner(cfg, spec, run.mon, actors)
        sync: dict[str, Stateful] = \
            {"unrolls": sl, "sampler": policy} if cfg.mode == "sync" else {}
        run.attach({"learner": sl.learner, **sync},
                   (sl.learner.model, builders.policy_meta(cfg, spec)))
        if sync:  # empty unless resumed: the actors take their logged steps again first
            sl.actions_to_replay().send_all(t, actors, harness.TAG_ACTIONS, cfg.startup_timeout)
        survivors = run.survivors
        assert survivors is not None  # actors= makes them
        server = InferenceServer(t, req_s, rep_s, actors, policy, cfg.max_batch,
                                 cfg.max_wait_us * 1e-6, harness.TAG_INFER_REQUEST,
                                 harness.TAG_INFER_REPLY, mode=cfg.mode, on_answer=sl.on_answer,
                                 on_drop=lambda _, e: survivors.drop(e, "inference"),
                                 states=sl.states)
        run.mon.extra = server.stats.window
        run.on_stop(server.drop_pending, outstanding=lambda: server.flush())
        backoff = Backoff(t.idle, t.spin_s)  # the learner has nothing else to do: spin first
        while not run.stopped:
            served = server.serve()
            updated = sl.maybe_update()
            if served or updated:
                backoff.reset()
            else:
                backoff.pause()
            run.tick()
    timers = {"learner": {"update": sl.learner.update_s, "inference": server.stats.forward_s,
                          "wait": t.wait_s}}
    return run.finish(sl.learner.model, sl.learner.version, device=sl.learner.device,
                      applied=APPLIED, timers=timers, role=place.role,
                      extra={"inference": inference_summary(server),
                             "actor_restarts": sl.restarts()})


def run_actor(ctx: RankContext[SeedConfig], spec: EnvSpec) -> None:
    """An actor: step the envs with the actions the learner answers, nothing else."""
    cfg, t = ctx.cfg, ctx.net
    req_s, rep_s, digests = _schemas(spec, cfg)
    with harness.leaf(ctx, digests) as link:
        client = PolicyClient(t, 0, req_s, rep_s, harness.TAG_INFER_REQUEST,
                              harness.TAG_INFER_REPLY, new_run_id(ctx.rank),
                              on_poll=link.raise_if_stopped)
        actor = SeedActor(spec, cfg.envs_per_actor, client, harness.actor_seed(cfg.seed, ctx.rank))
        if cfg.mode == "sync":  # a resumed run's actor takes its logged steps again
            catch_up(t, actor, 0, harness.TAG_ACTIONS, spec.num_actions, cfg.startup_timeout)
        link.on_stop(stats=lambda: {
            "timing": {"env": actor.env_s, "inference": client.round_trip_s},
            "env_steps": actor.env_steps, "episodes": actor.episodes})
        i = 0
        while True:
            if i % POLL_CONTROL_EVERY == 0:
                link.raise_if_stopped()
            actor.step()
            i += 1
    actor.close()
