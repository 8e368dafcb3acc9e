"""GA3C (Babaeizadeh et al. 2017): A3C on one model, with batched prediction.

Role map: rank 0 is the server, ranks 1..N are agents (actors).

- Agents step E envs; for every step they send the observations to the server's
  prediction queue and wait for the actions (actors/remote.py: RemoteUnrollActor). Every
  T steps they send the finished experience, an unroll with the predictor's behaviour
  logits, to the server's training queue.
- In the server process, one model is shared by threads (learners/ga3c_server.py):
    * one communication thread (this module's ``run_server`` loop) owns the Transport: it
      moves requests into the prediction queue, unrolls into the training queue, and
      replies out;
    * ``--predictors`` predictor threads answer batches of requests with one forward pass;
    * ``--trainers`` trainer threads take one gradient step on up to ``--batch-unrolls``
      unrolls (A3C's loss, or ``--loss vtrace``).
  Both queues are bounded: when one is full the communication thread stops taking that kind
  of message, so agents block on their sends (back-pressure, no loss). Queue lengths are
  in metrics.csv.
- ``--core lstm``: the predictors keep every env's core state (actors/core_states.py); the
  communication thread stamps each arriving unroll with the state its first step was
  answered from, so the trainer replays the core over it as IMPALA's learner does.
- ``--actors 0``: one process, the agent asks the model directly and trains inline.
"""

from __future__ import annotations

from typing import Any

from archzoo import builders, harness
from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
from archzoo.actors.core_states import CoreStates
from archzoo.actors.inference import inference_summary
from archzoo.actors.remote import LocalPolicyClient, PolicyClient, RemoteUnrollActor, new_run_id
from archzoo.actors.unroll import unroll_schema
from archzoo.architectures.rolemap import placement, play
from archzoo.comm import Inbox, Message, Request
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import Ga3cConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.learners.ga3c_server import Ga3cServer
from archzoo.nets import Locked
from archzoo.records import Summary
from archzoo.runlog import Timers

APPLIED = ("none: inference is central, so there is no parameter broadcast; requests and "
           "unrolls agent->server, replies server->agent, point-to-point")


def _learner(cfg: Ga3cConfig, spec: EnvSpec):
    return builders.vtrace_learner(cfg, spec, loss=cfg.loss)


def run(ctx: RankContext[Ga3cConfig]) -> Summary | None:
    """Entry point on every rank; returns the summary on rank 0."""
    return play(ctx, run_single, server=run_server, actor=run_agent)


def _schemas(cfg: Ga3cConfig, spec: EnvSpec):
    """The request, reply and unroll messages (an agent's unroll carries no core state: the
    server adds it), and their digests for the start-up check."""
    E = cfg.envs_per_actor
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    u_schema = unroll_schema(spec, cfg.unroll_length, E)
    return req_s, rep_s, u_schema, {"request": req_s.digest(), "reply": rep_s.digest(),
                                    "unroll": u_schema.digest()}


def _core_states(cfg: Ga3cConfig, learner: Any, agents: list[int]) -> CoreStates | None:
    """With ``--core lstm``, the predictors' state of every env of every agent."""
    if not builders.core(cfg)[0]:
        return None
    return CoreStates(learner.model, agents, cfg.envs_per_actor, cfg.unroll_length)


def run_server(ctx: RankContext[Ga3cConfig], spec: EnvSpec) -> Summary:
    """Rank 0's communication thread: requests and unrolls into the bounded queues, replies
    out; the predictor and trainer threads do the rest (learners/ga3c_server.py)."""
    cfg, t, place = ctx.cfg, ctx.net, placement(ctx)
    agents = place["actor"]
    req_s, rep_s, u_schema, digests = _schemas(cfg, spec)
    requests = Inbox(t, req_s, agents, harness.TAG_INFER_REQUEST, depth=1,
                     what="prediction request")
    unrolls = Inbox(t, u_schema, agents, harness.TAG_UNROLL, depth=1, what="unroll")
    with harness.root(ctx, agents, digests) as run:
        mon = run.mon
        learner = _learner(cfg, spec)
        srv = Ga3cServer(cfg, learner, mon, len(agents), _core_states(cfg, learner, agents))
        train_s = builders.unrolls(cfg, spec)  # the agent's unroll, and its core state
        run.attach({"learner": srv.learner},  # the policy read under the trainers' lock
                   (Locked(srv.learner.model, srv.learner.step_lock),
                    builders.policy_meta(cfg, spec)))
        mon.extra = srv.window
        replies = {a: rep_s.new() for a in agents}
        sending: dict[int, Request | None] = dict.fromkeys(agents)
        timers = Timers()
        srv.start()
        nap = 2.5e-5
        try:
            while not run.stopped:
                srv.check()
                with timers("comm"):
                    moved = srv.take_requests(requests)
                    moved += srv.send_replies(t, replies, sending, harness.TAG_INFER_REPLY)
                    moved += srv.take_unrolls(unrolls, train_s)
                srv.sample_queues()
                with srv.mon_lock:
                    run.tick()
                if moved:
                    nap = 2.5e-5
                else:
                    srv.wake.wait(nap)  # a predictor's replies end the nap at once
                    srv.wake.clear()
                    nap = min(1e-4, nap * 2)
        finally:
            srv.shutdown()
        srv.check()
        alive = [th.name for th in srv.threads if th.is_alive()]
        if alive:
            raise RuntimeError(f"GA3C threads did not stop within 30 s: {', '.join(alive)}")

        def drain() -> None:
            for p in requests.ready():
                requests.release(p)
            for p in unrolls.ready():
                unrolls.release(p)

        def outstanding() -> None:
            for r in sending.values():
                if r:
                    t.wait(r)

        run.on_stop(drain, outstanding=outstanding)
    timers_0 = {"server": {"update": srv.learner.update_s, "inference": srv.stats.forward_s,
                           "comm": timers.s.get("comm", 0.0), "wait": t.wait_s}}
    extra = {"inference": {**srv.stats.summary(), "max_batch": cfg.max_batch,
                           "max_wait_us": cfg.max_wait_us, "predictors": cfg.predictors,
                           "trainers": cfg.trainers},
             "queues": srv.queue_summary()}
    return run.finish(srv.learner.model, srv.learner.version, device=srv.learner.device,
                      applied=APPLIED, timers=timers_0, role=place.role, extra=extra)


def run_agent(ctx: RankContext[Ga3cConfig], spec: EnvSpec) -> None:
    """An agent: ask the server for every step's actions, send it every unroll."""
    cfg, t = ctx.cfg, ctx.net
    req_s, rep_s, u_schema, digests = _schemas(cfg, spec)
    with harness.leaf(ctx, digests) as link:
        client = PolicyClient(t, 0, req_s, rep_s, harness.TAG_INFER_REQUEST,
                              harness.TAG_INFER_REPLY, new_run_id(ctx.rank),
                              on_poll=link.raise_if_stopped)
        agent = RemoteUnrollActor(spec, cfg.envs_per_actor, cfg.unroll_length, client,
                                  harness.actor_seed(cfg.seed, ctx.rank))
        out = DoubleBuffer(t, u_schema, 0, harness.TAG_UNROLL, "unroll")  # collect, send
        link.on_stop(out.flush, stats=lambda: {
            "timing": {"env": agent.env_s, "inference": agent.inference_s},
            "env_steps": agent.env_steps, "episodes": agent.episodes})
        while True:
            link.raise_if_stopped()
            agent.collect(out.next(on_poll=link.raise_if_stopped))
            out.send()
    agent.close()


def run_single(ctx: RankContext[Ga3cConfig], spec: EnvSpec) -> Summary:
    """``--actors 0``: the agent asks the model directly and the trainer runs inline."""
    cfg = ctx.cfg
    learner = _learner(cfg, spec)
    with harness.single(ctx, parts={"learner": learner},
                        policy=(learner.model, builders.policy_meta(cfg, spec))) as run:
        policy = BatchedPolicy(learner.model, learner.device, cfg.seed,
                               version_of=lambda: learner.version)
        E = cfg.envs_per_actor
        states = _core_states(cfg, learner, [0])
        client = LocalPolicyClient(policy, request_schema(spec, E), reply_schema(spec, E),
                                   new_run_id(0), states=states)
        agent = RemoteUnrollActor(spec, E, cfg.unroll_length, client,
                                  harness.actor_seed(cfg.seed, 0))

        def collect(msg: Message) -> None:
            agent.collect(msg)
            if states is not None:
                states.unroll_start(0, msg)

        harness.train_on_unrolls(run, collect, builders.unrolls(cfg, spec).new(), learner)
        agent.close()
    timers = {"actor0": {"env": agent.env_s, "inference": agent.inference_s},
              "learner": {"update": learner.update_s}}
    return run.finish(learner.model, learner.version, device=learner.device, timers=timers,
                      extra={"inference": inference_summary(None, client)})
