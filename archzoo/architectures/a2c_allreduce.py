"""A2C without a parameter server: synchronous data parallelism by all-reduce.

``archzoo run a3c --mode sync --topology ring|tree|butterfly|native``. Every rank is an
actor-learner with its own envs (the n-step actor-critic loss of Mnih et al. 2016;
learners/a2c.py). In each round:

1. every rank computes the clipped gradient of its segment;
2. the ranks all-reduce the gradients over the topology (float64 sums);
3. every rank applies the same mean with the same optimizer to its own copy of the
   parameters, so the copies stay equal without ever being sent.

This is the decentralised data parallelism of Horovod (Sergeev & Del Balso 2018, ring
all-reduce) and DD-PPO (Wijmans et al. 2020). The mean is the parameter server's
(:func:`archzoo.paramserver.average_gradients`): with the same seeds, every round equals a round
of the server-based sync A2C (``--topology star --ps-drop 0``) bit for bit. Worker i's
envs are seeded as the server's worker i (rank 1 + i behind one shard). Only the
communication differs, which is what a study compares.

Rank 0 also keeps the learning curve: it counts the round's env steps (W segments) itself
and takes the others' episode returns from the control channel. Its stop decision rides
in the all-reduce as one extra element, so every rank leaves after the same round.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import numpy as np

from archzoo import builders, harness
from archzoo.actors.segment import SegmentActor
from archzoo.comm import Transport
from archzoo.config import A3CConfig
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.learners.a2c import a2c_gradient
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.paramserver import average_gradients
from archzoo.records import Summary
from archzoo.runlog import Timers
from archzoo.topology.factory import make_topology
from archzoo.topology.star import params_schema


def worker_seed(seed: int, worker: int) -> int:
    """Env seed of worker ``worker`` (0-based): that of rank 1 + worker, where it runs
    behind a one-shard parameter server."""
    return harness.actor_seed(seed, 1 + worker)


def applied(topology: str, fanout: int) -> str:
    name = topology + (f"(m={fanout})" if topology in ("tree", "butterfly") else "")
    return (f"gradient all-reduce over {name} among the actor-learners (no parameter "
            "server); episode statistics to rank 0 point-to-point")


class Worker:
    """One actor-learner: its envs, its copy of the parameters, its optimizer."""

    def __init__(self, ctx: RankContext[A3CConfig], spec: EnvSpec) -> None:
        cfg = ctx.cfg
        self.model = builders.actor_critic(cfg, spec)  # the same parameters on every rank
        n = num_params(self.model)
        self.params = np.zeros(n, np.float32)
        get_flat(self.model, self.params)
        self.opt = builders.ps_optimizer(cfg)
        self.a2c = builders.a2c_loss_config(cfg)
        self.actor = SegmentActor(spec, cfg.envs_per_actor, cfg.t_max, self.model,
                                  worker_seed(cfg.seed, ctx.rank))
        self.topo = make_topology(cfg.topology_name, ctx.net, cfg.fanout,
                                  harness.TAG_TOPOLOGY)
        self.workers = ctx.world_size
        self.total = np.zeros(n + 1, np.float64)  # the gradient sum, then the stop flag
        self.mean = np.zeros(n, np.float32)
        self.grad = np.zeros(n, np.float32)  # this rank's last gradient (clipped)
        self.updates = 0
        self.env_steps = 0
        self.first_step_time = 0.0  # stamped by the first round, after the handshake
        self.timers = Timers()
        self.stats: dict[str, float] = {}  # the last gradient's (learners/a2c.py), with lr

    def round(self, stop: bool) -> tuple[np.ndarray, int, bool]:
        """Collect a segment, all-reduce its gradient (with rank 0's ``stop``) and apply the
        mean. Returns (finished episodes' returns, env steps, whether the run stopped); a
        stopped round applies nothing."""
        self.first_step_time = self.first_step_time or time.time()
        seg = self.actor.collect()
        self.env_steps += seg.num_steps
        with self.timers("gradient"):
            self.grad, stats = a2c_gradient(self.model, seg, self.a2c)
        self.stats = {**stats, "lr": float(self.opt.lr)}
        self.total[:-1] = self.grad
        self.total[-1] = 1.0 if stop else 0.0
        with self.timers("all_reduce"):
            self.topo.all_reduce(self.total)
        if self.total[-1] > 0:
            return seg.ep_returns, seg.num_steps, True
        with self.timers("gradient"):
            average_gradients(self.total[:-1], self.workers, out=self.mean)
            self.opt.step(self.params, self.mean)
            set_flat(self.model, self.params)
        self.updates += 1
        return seg.ep_returns, seg.num_steps, False

    # -- checkpoints: the copies are equal, so rank 0's is the run's ------------------------
    def state_dict(self) -> dict[str, Any]:
        import torch

        return {"params": torch.from_numpy(self.params.copy()), "updates": self.updates,
                "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.params[:] = state["params"].numpy()
        self.updates = int(state["updates"])
        self.opt.load_state_dict(state["optimizer"])
        set_flat(self.model, self.params)

    def share_resumed(self, t: Transport) -> None:
        """``--resume``: rank 0 loaded the checkpoint; every rank takes its parameters,
        update count and optimizer state (native broadcasts), so the copies are equal again."""
        head = np.array([self.updates, self.opt.steps, self.opt.size or 0], np.int64)
        t.broadcast(head, 0)
        self.updates = int(head[0])
        if t.rank != 0 and head[2]:
            self.opt.load_state_dict({"steps": int(head[1]), "size": int(head[2]),
                                      **{k: _zeros(int(head[2])) for k in self.opt.STATE}})
        for buf in (self.params, *(getattr(self.opt, k) for k in self.opt.STATE if head[2])):
            t.broadcast(buf, 0)
        set_flat(self.model, self.params)

    def crc32(self) -> int:
        """A checksum of this copy of the parameters (every rank's must be equal)."""
        return zlib.crc32(self.params.tobytes())

    def timing(self, t: Transport) -> dict[str, float]:
        self.actor.close()
        return {"env": self.actor.env_s, "inference": self.actor.inference_s,
                **self.timers.s, "wait": t.wait_s}


def play_worker(ctx: RankContext[A3CConfig], spec: EnvSpec) -> Summary | None:
    """Every rank (a3c's role map has only workers here): a worker, which on rank 0 also
    decides."""
    worker = Worker(ctx, spec)
    digests = {"params": params_schema(num_params(worker.model)).digest()}
    if ctx.rank == 0:
        return run_deciding(ctx, spec, worker, digests)
    run_other(ctx, worker, digests)
    return None


def run_deciding(ctx: RankContext[A3CConfig], spec: EnvSpec, worker: Worker,
                 digests: dict[str, str]) -> Summary:
    """Rank 0: a worker that also keeps the learning curve and decides the stop."""
    t, cfg = ctx.net, ctx.cfg
    with harness.root(ctx, list(range(1, ctx.world_size)), digests, parts={"worker": worker},
                      policy=(worker.model, builders.policy_meta(cfg, spec))) as run:
        if cfg.resume is not None:
            worker.share_resumed(t)
        while True:
            returns, steps, stopped = worker.round(run.stopped)
            if stopped:
                break
            run.mon.add_steps(steps * worker.workers, worker.first_step_time)  # every rank's
            run.mon.add_episodes(returns)
            run.mon.add_learner_stats(worker.stats)
            run.absorb(worker.updates)
            run.tick(worker.updates)
        rounds, timing = worker.topo.rounds, worker.timing(t)
    return run.finish(worker.model, worker.updates, topology=cfg.topology,
                      applied=applied(cfg.topology_name, cfg.fanout), timers={"worker0": timing},
                      role="worker", extra={"workers": worker.workers, "all_reduce_rounds": rounds,
                                            "parameter_server": None,
                                            "params_crc32_rank0": worker.crc32()})


def run_other(ctx: RankContext[A3CConfig], worker: Worker, digests: dict[str, str]) -> None:
    """Ranks 1..W−1: a worker that reports its episodes to rank 0 (rank 0 counts the steps
    of every round itself)."""
    with harness.leaf(ctx, digests) as link:
        if ctx.cfg.resume is not None:
            worker.share_resumed(ctx.net)
        link.on_stop(stats=lambda: {"timing": worker.timing(ctx.net),
                                    "updates": worker.updates, "env_steps": worker.env_steps,
                                    "params": {"crc32": worker.crc32()}})
        while True:
            returns, _, stopped = worker.round(False)
            if stopped:
                break
            link.reporter.add(returns)
            link.reporter.add_learner(worker.stats)
            link.reporter.maybe_report(0, worker.updates, worker.first_step_time)


def _zeros(n: int):
    import torch

    return torch.zeros(n, dtype=torch.float32)
