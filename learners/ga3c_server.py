"""GA3C's server (Babaeizadeh et al. 2017, §4): predictor and trainer threads around one
model, fed through bounded queues.

``--predictors`` predictor threads take up to ``--max-batch`` requests from the prediction
queue (waiting at most ``--max-wait-us`` after the first), run one forward pass and queue
the replies; ``--trainers`` trainer threads take up to ``--batch-unrolls`` unrolls from the
training queue and take one gradient step. The optimiser step holds the model's lock,
which predictors hold for a whole forward pass: no batch sees half an update, and each
reply names the version that answered. Trainers serialise their updates (an in-place step
would corrupt another trainer's backward pass), so more trainers or predictors overlap
only the gathering of batches, not the model's work. The thread that owns the transport
(the architecture's communication loop) moves messages in and out of the queues.

With ``--core lstm`` the predictors answer every env of every agent from its own core state
(actors/core_states.py), as SEED RL's inference server does.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

from archzoo.actors.batched_policy import BatchedPolicy, InferenceStats
from archzoo.actors.core_states import CoreStates
from archzoo.comm import Inbox, Request, Transport
from archzoo.config import Ga3cConfig
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.messages import Message, Schema
from archzoo.runlog import Monitor

THREAD_POLL_S = 0.05  # how often an idle worker thread looks at the stop flag


class Ga3cServer:
    """The predictor and trainer threads around one model, and their bounded queues."""

    def __init__(self, cfg: Ga3cConfig, learner: VTraceLearner, mon: Monitor,
                 num_agents: int, states: CoreStates | None = None) -> None:
        """``states``: with a recurrent model, every agent's env states."""
        self.cfg, self.mon = cfg, mon
        self.learner = learner
        self.policy = BatchedPolicy(learner.model, learner.device, cfg.seed,
                                    version_of=lambda: learner.version)
        self.learner.step_lock = self.policy.lock  # step and version bump, atomically
        self.states = states
        self.num_agents = num_agents
        self.max_wait_s = cfg.max_wait_us * 1e-6
        self.batch_unrolls = cfg.batch_unrolls or num_agents
        self.published_at = {learner.version: time.time()}  # version -> when it first acted
        # (agent, seq, request: obs, first, valid, rewards, time seen) -> predictors ->
        # (agent, seq, a, logits, v, version, batch id, batch size) -> communication thread
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
            t0 = time.perf_counter()
            if self.states is not None:  # every env from its own core state
                actions, logits, values, version = self.states.answer(
                    self.policy, [b[0] for b in batch], [b[2] for b in batch])
            else:
                obs = np.concatenate([b[2]["obs"] for b in batch]) if len(batch) > 1 \
                    else batch[0][2]["obs"]
                actions, logits, values, version = self.policy.forward(obs)
            t1 = time.perf_counter()
            with self.stats_lock:
                batch_id = self.stats.batches
                self.stats.record(len(batch), t1 - t0,
                                  sum(t1 - b[3] for b in batch))
            row = 0
            for agent, seq, req, _ in batch:
                n = len(req["obs"])
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
                stats = self.learner.update(batch)
                self.published_at[self.learner.version] = time.time()
                self.published_at.pop(self.learner.version - 10_000, None)
            now = time.time()
            with self.mon_lock:
                self.mon.add_learner_stats(stats)
                for u in batch:  # lag in versions, and the behaviour version's age
                    v = int(u["version"])
                    self.mon.add_lag(version - v, now - self.published_at[v]
                                     if v in self.published_at else None)
                self.mon.updates = self.learner.version

    # -- the communication thread's moves (it owns the transport) --------------------------
    def take_requests(self, requests: Inbox) -> int:
        """Arrived prediction requests into the prediction queue while it has room; how many
        moved."""
        moved = 0
        for p in requests.ready():
            if self.prediction_q.full():
                break
            req = requests.take(p)
            ask = {k: req[k].copy() for k in ("obs", "first", "valid", "rewards")}
            self.prediction_q.put_nowait((p, int(req["seq"]), ask, time.perf_counter()))
            requests.release(p)
            requests.advance(p)  # fairness when the queue fills before all are in
            moved += 1
        return moved

    def send_replies(self, t: Transport, replies: dict[int, Message],
                     sending: dict[int, Request | None], tag: int) -> int:
        """The predictors' answers out to their agents (each agent's previous reply has
        arrived: it asked again); how many were sent."""
        moved = 0
        while True:
            try:
                agent, seq, a, lg, v, version, batch_id, size = self.reply_q.get_nowait()
            except queue.Empty:
                return moved
            pending = sending[agent]
            if pending is not None:
                t.wait(pending)
            rep = replies[agent]
            rep["actions"][:], rep["logits"][:], rep["values"][:] = a, lg, v
            rep["seq"][...], rep["version"][...] = seq, version
            rep["batch"][...], rep["batch_size"][...] = batch_id, size
            sending[agent] = t.isend(rep.buffer, agent, tag, "prediction reply")
            moved += 1

    def take_unrolls(self, unrolls: Inbox, schema: Schema) -> int:
        """Arrived unrolls into the training queue while it has room, as ``schema``
        messages (with a core: stamped with their initial state); their episodes and steps
        counted. How many moved."""
        moved = 0
        for p in unrolls.ready():
            if self.training_q.full():
                break
            msg, got = schema.new(), unrolls.take(p)
            for k in got:
                msg[k][...] = got[k]
            unrolls.release(p)
            if self.states is not None:
                self.states.unroll_start(p, msg)
            with self.mon_lock:
                n = int(msg["ep_count"])
                self.mon.add_episodes(msg["ep_returns"][:n])
                self.mon.add_steps(int(msg["valid"].sum()), float(msg["first_step_time"]))
            self.training_q.put_nowait(msg)
            unrolls.advance(p)
            moved += 1
        return moved

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

    def queue_summary(self) -> dict[str, Any]:
        """summary.json's "queues": mean lengths over the run, and the bounds."""
        n = max(1, self.queue_samples)
        return {"prediction_mean": self.queue_sums[0] / n, "training_mean": self.queue_sums[1] / n,
                "prediction_bound": self.prediction_q.maxsize,
                "training_bound": self.training_q.maxsize}
