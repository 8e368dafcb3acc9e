"""GA3C (Babaeizadeh et al. 2017; seed 004 §12.4.2): A3C on one model, with batched prediction.

Roles: rank 0 is the server, ranks 1..N are agents (actors).

- Agents step E envs; for every step they send the observations to the server's
  prediction queue and wait for the actions (actors/remote.py: RemoteUnrollActor). Every
  T steps they send the finished experience, an unroll with the predictor's behaviour
  logits, to the server's training queue.
- In the server process, one model is shared by threads:
    * one communication thread (the main thread) owns the Transport: it moves requests
      into the prediction queue, unrolls into the training queue, and replies out;
    * ``--predictors`` predictor threads take up to ``--max-batch`` requests from the
      prediction queue (waiting at most ``--max-wait-us`` after the first), run one forward
      pass and queue the replies;
    * ``--trainers`` trainer threads take up to ``--batch-unrolls`` unrolls from the training
      queue and take one gradient step (A3C's loss, or ``--loss vtrace``).
  Both queues are bounded: when one is full the communication thread stops taking that kind
  of message, so agents block on their sends (back-pressure, no loss). Queue lengths are
  in metrics.csv. The optimiser step holds the model's lock, which predictors hold for a
  whole forward pass: no batch sees half an update, and each reply names the version that
  answered. Trainers serialise their updates (an in-place step would corrupt another
  trainer's backward pass), and forward passes are serialised by the same lock, so more
  trainers or predictors overlap only the gathering of batches, not the model's work.
- ``--actors 0``: one process, the agent asks the model directly and trains inline.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from actors.inference import BatchedPolicy, InferenceStats, reply_schema, request_schema
from actors.remote import LocalPolicyClient, PolicyClient, RemoteUnrollActor, new_run_id
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
from archzoo.comm import ControlChannel, Inbox, Message, Request
from archzoo.envs import EnvSpec, env_spec
from archzoo.runlog import Monitor, RunDir, Timers
from learners.ga3c import A3CUnrollLearner
from learners.impala import ImpalaLearner

NAME = "ga3c"
DESCRIPTION = "GA3C: agents ask batched predictor threads; trainer threads update one model"
THREAD_POLL_S = 0.05  # how often an idle worker thread looks at the stop flag


def add_arguments(p: argparse.ArgumentParser) -> None:
    impala.add_vtrace_arguments(p, "GA3C (trainer)")
    g = p.add_argument_group("GA3C threads and queues")
    g.add_argument("--loss", choices=("a3c", "vtrace"), default="a3c",
                   help="trainer loss: A3C's n-step advantage (GA3C) or V-trace (IMPALA)")
    g.add_argument("--predictors", type=int, default=1, help="predictor threads")
    g.add_argument("--trainers", type=int, default=1, help="trainer threads")
    g.add_argument("--prediction-queue", type=int, default=64,
                   help="bound of the prediction queue (requests)")
    g.add_argument("--training-queue", type=int, default=8,
                   help="bound of the training queue (unrolls)")
    add_inference_arguments(p)


def validate(cfg: argparse.Namespace) -> str | None:
    for flag, v in (("--predictors", cfg.predictors), ("--trainers", cfg.trainers),
                    ("--prediction-queue", cfg.prediction_queue),
                    ("--training-queue", cfg.training_queue)):
        if v < 1:
            return f"{flag} must be >= 1, got {v}"
    if cfg.mode == "sync":
        return ("--mode sync: GA3C is asynchronous by design (agents, predictors and trainers "
                "run freely); use --mode async, or seed/impala for a sync mode")
    return validate_inference(cfg) or impala.validate_vtrace(cfg)


world_size_for = impala.world_size_for  # one server plus the agents
actors_for = impala.actors_for


def topology_applied(cfg: argparse.Namespace) -> str:
    return ("none: inference is central, so there is no parameter broadcast; requests and "
            "unrolls agent->server, replies server->agent, point-to-point")


def _learner(cfg: argparse.Namespace, spec: EnvSpec) -> ImpalaLearner:
    cls = A3CUnrollLearner if cfg.loss == "a3c" else ImpalaLearner
    return impala._learner(cfg, spec, torch.device(cfg.device), cls)


def run(ctx: RankContext) -> dict[str, Any] | None:
    spec = env_spec(ctx.cfg.env)
    if ctx.world_size == 1:
        return run_single(ctx, spec)
    if ctx.rank == 0:
        return run_server(ctx, spec)
    run_agent(ctx, spec)
    return None


def run_single(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """``--actors 0``: the agent asks the model directly and the trainer runs inline."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = impala._monitor(ctx, run_dir, NAME)
    learner = _learner(cfg, spec)
    policy = BatchedPolicy(learner.model, learner.device, cfg.seed,
                           version_of=lambda: learner.version)
    E = cfg.envs_per_actor
    client = LocalPolicyClient(policy, request_schema(spec, E), reply_schema(spec, E),
                               new_run_id(0))
    agent = RemoteUnrollActor(spec, E, cfg.unroll_length, client, impala._actor_seed(cfg, 0))
    msg = unroll_schema(spec, cfg.unroll_length, E).new()
    stop = None
    while stop is None:
        agent.collect(msg)
        impala._account(mon, msg, learner.version)
        learner.update([msg])
        mon.updates = learner.version
        mon.maybe_log()
        stop = mon.check_stop()
    mon.maybe_log(force=True)
    agent.close()
    timers = {"actor0": {"env": agent.env_s, "inference": agent.inference_s},
              "learner": {"update": learner.update_s}}
    summary = run_summary(ctx, mon, stop, NAME, "none", "single process, no transport",
                          learner.device, learner.version, timers,
                          {"inference": inference_summary(None, client)})
    run_dir.write_summary(summary)
    impala._save(ctx, run_dir, learner, spec, NAME)
    run_dir.close()
    return summary


class Ga3cServer:
    """The predictor and trainer threads around one model, and their bounded queues."""

    def __init__(self, cfg: argparse.Namespace, spec: EnvSpec, mon: Monitor,
                 num_agents: int) -> None:
        self.cfg, self.mon = cfg, mon
        self.learner = _learner(cfg, spec)
        self.policy = BatchedPolicy(self.learner.model, self.learner.device, cfg.seed,
                                    version_of=lambda: self.learner.version)
        self.learner.step_lock = self.policy.lock  # step and version bump, atomically
        self.num_agents = num_agents
        self.max_wait_s = cfg.max_wait_us * 1e-6
        self.batch_unrolls = cfg.batch_unrolls or num_agents
        # (agent, seq, obs, time seen) -> predictors -> (agent, seq, a, logits, v, version,
        # batch id, batch size, time seen) -> communication thread
        self.prediction_q: queue.Queue = queue.Queue(cfg.prediction_queue)
        self.reply_q: queue.SimpleQueue = queue.SimpleQueue()
        self.training_q: queue.Queue = queue.Queue(cfg.training_queue)
        self.stats = InferenceStats()
        self.stats_lock = threading.Lock()   # predictors record batches concurrently
        self.train_lock = threading.Lock()   # one update at a time (see the module doc)
        self.mon_lock = threading.Lock()     # trainers report lag and updates
        self.stop = threading.Event()
        self.wake = threading.Event()        # set when replies are queued
        self.errors: list[BaseException] = []
        self.queue_samples = 0
        self.queue_sums = [0, 0]
        self._window = [0, 0, 0]
        self.threads = [threading.Thread(target=self._guard, args=(self._predictor,),
                                         name=f"predictor{i}", daemon=True)
                        for i in range(cfg.predictors)]
        self.threads += [threading.Thread(target=self._guard, args=(self._trainer,),
                                          name=f"trainer{i}", daemon=True)
                         for i in range(cfg.trainers)]

    def start(self) -> None:
        for th in self.threads:
            th.start()

    def _guard(self, body) -> None:
        try:
            body()
        except BaseException as e:  # noqa: BLE001 - handed to the communication thread
            self.errors.append(e)
            self.stop.set()

    def check(self) -> None:
        """Re-raise a worker thread's error in the communication thread."""
        if self.errors:
            e = self.errors[0]
            raise RuntimeError(f"GA3C worker thread failed: {type(e).__name__}: {e}") from e

    def _predictor(self) -> None:
        q = self.prediction_q
        while not self.stop.is_set():
            try:
                first = q.get(timeout=THREAD_POLL_S)
            except queue.Empty:
                continue
            batch = [first]
            deadline = first[3] + self.max_wait_s
            while len(batch) < min(self.cfg.max_batch, self.num_agents):
                remaining = deadline - time.perf_counter()
                try:
                    batch.append(q.get(timeout=remaining) if remaining > 0 else q.get_nowait())
                except queue.Empty:
                    break
            obs = np.concatenate([b[2] for b in batch]) if len(batch) > 1 else batch[0][2]
            t0 = time.perf_counter()
            actions, logits, values, version = self.policy.forward(obs)
            t1 = time.perf_counter()
            with self.stats_lock:
                batch_id = self.stats.batches
                self.stats.record(len(batch), t1 - t0,
                                  sum(t1 - b[3] for b in batch))
            row = 0
            for agent, seq, o, _ in batch:
                n = len(o)
                self.reply_q.put((agent, seq, actions[row:row + n], logits[row:row + n],
                                  values[row:row + n], version, batch_id, len(batch)))
                row += n
            self.wake.set()

    def _trainer(self) -> None:
        q = self.training_q
        while not self.stop.is_set():
            try:
                batch = [q.get(timeout=THREAD_POLL_S)]
            except queue.Empty:
                continue
            while len(batch) < self.batch_unrolls:
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            with self.train_lock:
                version = self.learner.version
                self.learner.update(batch)
            with self.mon_lock:
                for u in batch:
                    self.mon.add_lag(version - int(u["version"]))
                self.mon.updates = self.learner.version

    def sample_queues(self) -> None:
        self.queue_samples += 1
        self.queue_sums[0] += self.prediction_q.qsize()
        self.queue_sums[1] += self.training_q.qsize()

    def window(self) -> dict[str, Any]:
        """Metrics columns: inference batch/latency and mean queue lengths since last row."""
        with self.stats_lock:
            row = self.stats.window()
        n = self.queue_samples - self._window[0]
        row["prediction_queue"] = round((self.queue_sums[0] - self._window[1]) / n, 2) \
            if n else None
        row["training_queue"] = round((self.queue_sums[1] - self._window[2]) / n, 2) \
            if n else None
        self._window = [self.queue_samples, *self.queue_sums]
        return row

    def shutdown(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(timeout=30)


def run_server(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    cfg, t = ctx.cfg, ctx.transport
    agents = list(range(1, ctx.world_size))
    E = cfg.envs_per_actor
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    u_schema = unroll_schema(spec, cfg.unroll_length, E)
    control = ControlChannel(t, agents, TAG_CONTROL)
    requests = Inbox(t, req_s, agents, TAG_INFER_REQUEST, depth=1, what="prediction request")
    unrolls = Inbox(t, u_schema, agents, TAG_UNROLL, depth=1, what="unroll")
    handshake_root(control, agents, {"request": req_s.digest(), "reply": rep_s.digest(),
                                     "unroll": u_schema.digest()}, cfg.startup_timeout)
    run_dir = RunDir(cfg.run_dir, vars(cfg))
    mon = impala._monitor(ctx, run_dir, NAME)
    srv = Ga3cServer(cfg, spec, mon, len(agents))
    mon.extra = srv.window
    replies = {a: rep_s.new() for a in agents}
    sending: dict[int, Request | None] = dict.fromkeys(agents)
    timers = Timers()
    srv.start()
    nap = 2.5e-5
    stop = None
    try:
        while stop is None:
            srv.check()
            moved = 0
            with timers("comm"):
                for p in requests.ready():  # requests -> prediction queue (bounded)
                    if srv.prediction_q.full():
                        break
                    req = requests.poll(p)
                    srv.prediction_q.put_nowait((p, int(req["seq"]), req["obs"].copy(),
                                                 time.perf_counter()))
                    requests.release(p)
                    requests.advance(p)  # fairness when the queue fills before all are in
                    moved += 1
                while True:  # replies -> agents
                    try:
                        agent, seq, a, lg, v, version, batch_id, size = srv.reply_q.get_nowait()
                    except queue.Empty:
                        break
                    if sending[agent] is not None:
                        t.wait(sending[agent])
                    rep = replies[agent]
                    rep["actions"][:], rep["logits"][:], rep["values"][:] = a, lg, v
                    rep["seq"][...], rep["version"][...] = seq, version
                    rep["batch"][...], rep["batch_size"][...] = batch_id, size
                    sending[agent] = t.isend(rep.buffer, agent, TAG_INFER_REPLY,
                                             "prediction reply")
                    moved += 1
                for p in unrolls.ready():  # unrolls -> training queue (bounded)
                    if srv.training_q.full():
                        break
                    msg = u_schema.new()
                    msg.copy_from(unrolls.poll(p))
                    unrolls.release(p)
                    with srv.mon_lock:
                        n = int(msg["ep_count"])
                        mon.add_episodes(msg["ep_returns"][:n])
                        mon.add_steps(int(msg["valid"].sum()), float(msg["first_step_time"]))
                    srv.training_q.put_nowait(msg)
                    unrolls.advance(p)
                    moved += 1
            srv.sample_queues()
            with srv.mon_lock:
                c = t.counters.totals()
                mon.maybe_log(c["bytes_sent"], c["bytes_recv"])
                stop = mon.check_stop()
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

    byes = finish_root(ctx, control, agents, drain,
                       outstanding=lambda: [t.wait(r) for r in sending.values() if r])
    c = t.counters.totals()
    mon.maybe_log(c["bytes_sent"], c["bytes_recv"], force=True)
    breakdown: dict[str, Any] = {
        "server": {"update": srv.learner.update_s, "inference": srv.stats.forward_s,
                   "comm": timers.s.get("comm", 0.0), "wait": t.wait_s},
    }
    for a in agents:
        breakdown[f"actor{a}"] = byes[a].get("timing", {})
    q_n = max(1, srv.queue_samples)
    extra = {"inference": {**srv.stats.summary(), "max_batch": cfg.max_batch,
                           "max_wait_us": cfg.max_wait_us, "predictors": cfg.predictors,
                           "trainers": cfg.trainers},
             "queues": {"prediction_mean": srv.queue_sums[0] / q_n,
                        "training_mean": srv.queue_sums[1] / q_n,
                        "prediction_bound": cfg.prediction_queue,
                        "training_bound": cfg.training_queue},
             "per_rank_bytes": {"0": c}}
    extra["per_rank_bytes"].update({str(a): byes[a].get("bytes", {}) for a in agents})
    summary = run_summary(ctx, mon, stop, NAME, cfg.topology, topology_applied(cfg),
                          srv.learner.device, srv.learner.version, breakdown, extra)
    run_dir.write_summary(summary)
    impala._save(ctx, run_dir, srv.learner, spec, NAME)
    run_dir.close()
    return summary


def run_agent(ctx: RankContext, spec: EnvSpec) -> None:
    cfg, t = ctx.cfg, ctx.transport
    root = 0
    E = cfg.envs_per_actor
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    u_schema = unroll_schema(spec, cfg.unroll_length, E)
    control = ControlChannel(t, [root], TAG_CONTROL)
    handshake_leaf(control, root, {"request": req_s.digest(), "reply": rep_s.digest(),
                                   "unroll": u_schema.digest()}, cfg.startup_timeout)
    lc = LeafControl(control, root)
    client = PolicyClient(t, root, req_s, rep_s, TAG_INFER_REQUEST, TAG_INFER_REPLY,
                          new_run_id(ctx.rank), on_poll=lc.raise_if_stopped)
    agent = RemoteUnrollActor(spec, E, cfg.unroll_length, client,
                              impala._actor_seed(cfg, ctx.rank))
    out: list[Message] = [u_schema.new(), u_schema.new()]  # collect one while one is sent
    sending: list[Request | None] = [None, None]
    i = 0
    try:
        while True:
            lc.raise_if_stopped()
            if sending[i % 2] is not None:
                t.wait(sending[i % 2], on_poll=lc.raise_if_stopped)
            agent.collect(out[i % 2])
            sending[i % 2] = t.isend(out[i % 2].buffer, root, TAG_UNROLL, "unroll")
            i += 1
    except StopRequested:
        pass
    lc.stopped = True
    for req in sending:
        if req is not None:
            t.wait(req)
    stats = {
        "timing": {"env": agent.env_s, "inference": agent.inference_s, "wait": t.wait_s},
        "env_steps": agent.env_steps, "episodes": agent.episodes,
        "bytes": t.counters.totals(),
    }
    finish_leaf(ctx, control, lc, root, stats, drain=lambda: None)
    agent.close()
