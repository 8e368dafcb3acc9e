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
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

from actors.batched_policy import BatchedPolicy, InferenceStats
from archzoo.config import Ga3cConfig
from archzoo.runlog import Monitor
from learners.vtrace_learner import VTraceLearner

THREAD_POLL_S = 0.05  # how often an idle worker thread looks at the stop flag


class Ga3cServer:
    """The predictor and trainer threads around one model, and their bounded queues."""

    def __init__(self, cfg: Ga3cConfig, learner: VTraceLearner, mon: Monitor,
                 num_agents: int) -> None:
        self.cfg, self.mon = cfg, mon
        self.learner = learner
        self.policy = BatchedPolicy(learner.model, learner.device, cfg.seed,
                                    version_of=lambda: learner.version)
        self.learner.step_lock = self.policy.lock  # step and version bump, atomically
        self.num_agents = num_agents
        self.max_wait_s = cfg.max_wait_us * 1e-6
        self.batch_unrolls = cfg.batch_unrolls or num_agents
        self.published_at = {learner.version: time.time()}  # version -> when it first acted
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
