"""A model beside the measurement: agent steps/s against actors N and env latency L.

Each architecture is a closed loop of N actors around one or more central processes. An
actor's vector step of E envs takes

    t(N, L) = L + σ·(c_env + c_actor) + r(N)

(the latency L, its own CPU: the env step and, where inference is local, a forward pass, its
messages; r: waiting on a central service, SEED RL's and GA3C's inference round trip or A3C's
push-pull of a gradient). Every central process i (learner, inference server, replay shard,
parameter server) spends k_i seconds of CPU per env step, on one core. So the agent steps/s

    X = min( N·E / t ,  1 / (σ·k_i) for each i ,  B / bytes_root(N) )

with σ >= 1 the slowdown of CPU work when the processes want more than the C cores they
have: the smallest σ at which the CPU they use, X·(k_actors + Σ k_i), fits in C. Every cost
is measured on this machine in a run with one actor (its summary's time breakdown: env step,
forward pass, update; message costs from ``archzoo bench comm``'s α–β fit) and calibrated to
that run's steps/s (:func:`calibrate`); the forward pass per batch size by
:func:`measure_forward` (central inference: a batch of b requests of E observations costs
f0 + f1·b·E, so SEED RL's and GA3C's batching pays where f0 is large). C, the cores the
processes really had (the machine's, less what else ran on it), is fitted to a second
measured point (:func:`fit_cores`). A cost that grows with the number of processes (polling,
context switches) is not in the model: where the measured steps/s fall with N, it levels off.

The bound that sets X names why an architecture stops scaling: ``actors`` (it still scales:
every actor adds its steps), ``learner`` or ``inference`` (a central process is busy all the
time), ``replay`` or ``ps``, ``root broadcast`` (the root's process spends more on sending
parameters to every actor than on learning), ``root bandwidth`` (the root's link is full),
``cores`` (the cores are shared out: every process slows down, the learner with the actors),
or ``updates`` (SEED RL's actors wait behind the learner's updates longer than they compute).

A batched server's mean batch follows from the requests that arrive while it waits
(``--max-wait-us`` w) and computes: b = min(N, 1 + (N − 1)·(w + σ·f(b·E))/t). SEED RL's
learner answers and trains in one loop, so a request also waits behind an update u for
ρ·u/2 on average, ρ the share of time it trains: r grows with X (a fixed point).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ACTOR_ROLES = ("actor", "worker")  # time_breakdown_s keys of the actors: actor3, worker1
BROADCAST = ("impala", "apex", "r2d2")  # the root broadcasts parameters to every actor
BATCHED = ("seed", "ga3c")  # central batched inference
ARCHS = ("impala", "seed", "ga3c", "apex", "r2d2", "a3c")
SATURATED = 0.9  # a central process this busy is named as the bound
FIT_JSON = Path(__file__).resolve().parent.parent / "docs" / "figures" / "bench-comm-fit.json"


@dataclass(frozen=True)
class AlphaBeta:
    """A message of n bytes costs ``alpha_s + n·inv_beta`` seconds (archzoo/benchcomm/fit.py)."""

    alpha_s: float = 0.0
    inv_beta: float = 0.0

    def cost(self, messages: float, nbytes: float) -> float:
        return self.alpha_s * messages + self.inv_beta * nbytes


def load_alpha_beta(engine: str = "gloo", path: Path | str = FIT_JSON) -> AlphaBeta:
    """The α–β fit of ``archzoo bench comm`` for ``engine`` (its fit JSON; no cost when the
    file or the engine is missing)."""
    try:
        fit = json.loads(Path(path).read_text())[engine]
    except (OSError, KeyError, ValueError):
        return AlphaBeta()
    return AlphaBeta(float(fit["alpha_s"]), float(fit["inv_beta_s_per_byte"]))


@dataclass(frozen=True)
class Costs:
    """What one architecture costs on this machine, in seconds (CPU unless said otherwise).

    ``env_s`` and ``actor_s``: an actor's CPU per vector step of ``envs`` envs, in the env
    (its latency taken out) and besides (local forward pass, A3C's gradient, its messages);
    ``service_s``: per vector step, its wait on a central service with no other actor there
    (SEED RL's and GA3C's round trip, less the forward pass when ``forward`` is known; A3C's
    push-pull); ``central``: (process, CPU per env step) of every central process, not
    counting batched inference, which ``forward`` (f0, f1: a pass over n observations takes
    f0 + f1·n) and ``max_wait_s`` model; ``root_in`` and ``root_out``: bytes into and out of
    rank 0 per env step, ``root_out`` per actor where the root broadcasts to each
    (``broadcast``), with ``root_msgs_out`` its messages; ``servers``: processes that are not
    actors; ``cores``: the cores the processes had (the machine's until fitted);
    ``serial_update_s``: SEED RL's update, during which its learner answers no request
    (inference and training take turns in one loop: a request waits, on average, half an
    update times the share of time the learner trains)."""

    arch: str
    envs: int
    env_s: float
    actor_s: float
    service_s: float = 0.0
    central: tuple[tuple[str, float], ...] = ()
    forward: tuple[float, float] | None = None
    max_wait_s: float = 0.0
    root_in: float = 0.0
    root_out: float = 0.0
    root_msgs_out: float = 0.0
    broadcast: bool = False
    servers: int = 1
    cores: float = 2.0
    serial_update_s: float = 0.0
    messages: AlphaBeta = field(default_factory=AlphaBeta)

    @property
    def cpu_per_step(self) -> float:
        """CPU seconds per env step of the actors and the central processes (batched
        inference, which depends on the batch, aside)."""
        return (self.env_s + self.actor_s) / self.envs + sum(k for _, k in self.central)

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Costs:
        d = dict(d)
        d["central"] = tuple((str(n), float(k)) for n, k in d.get("central", ()))
        d["forward"] = tuple(d["forward"]) if d.get("forward") else None
        d["messages"] = AlphaBeta(**d.get("messages", {}))
        return cls(**d)


@dataclass(frozen=True)
class Prediction:
    """The model at one point: agent steps/s, the bound that sets it, the CPU slowdown σ,
    the inference batch (requests per forward pass; 1 without central inference), and each
    bound's steps/s."""

    steps_per_s: float
    bound: str
    sigma: float
    batch: float
    bounds: dict[str, float]


def root_fan(n: int, topology: str = "star", fanout: int = 2) -> int:
    """Messages the root sends per parameter broadcast to n actors: n over a star, its
    children in the k-nomial tree of n + 1 ranks otherwise (archzoo/topology/counts.py)."""
    if topology == "star" or n <= 1:
        return n
    from archzoo.topology.counts import tree_broadcast_counts

    return tree_broadcast_counts(0, n + 1, fanout)[0]


def _forward(c: Costs, n_obs: float) -> float:
    f0, f1 = c.forward or (0.0, 0.0)
    return f0 + f1 * n_obs


def predict(c: Costs, n: int, latency_s: float, *, topology: str = "star", fanout: int = 2,
            link_Bps: float | None = None, cores: float | None = None) -> Prediction:
    """Agent steps/s of ``n`` actors whose vector steps wait ``latency_s``: the model of the
    module's docstring. ``cores`` (default: the measured machine's; ``math.inf``: every
    process on its own machine), ``link_Bps``: the root's link (None: no bound but the CPU of
    its messages), ``topology``/``fanout``: the parameter broadcast of IMPALA, Ape-X and R2D2.
    """
    C = c.cores if cores is None else cores
    E = c.envs
    fan = root_fan(n, topology, fanout) if c.broadcast else 1
    out = c.root_out * fan
    msg_out = c.root_msgs_out * fan
    root_extra = c.messages.cost(msg_out - c.root_msgs_out, out - c.root_out) if c.broadcast \
        else 0.0  # the root's messages grow with its fan-out beyond the measured one actor
    upd = c.central[0][1] if c.central else 0.0

    def at(sigma: float) -> tuple[float, str, float, dict[str, float], float]:
        """The model at slowdown σ; with updates that stop the inference server (SEED RL),
        at the fixed point of steps/s and the actors' wait behind an update."""
        stall = 0.0
        out = rates(sigma, stall)
        if c.serial_update_s > 0:
            for _ in range(200):
                x = out[0]
                busy = min(1.0, x * sigma * upd)  # the share of time the server trains
                new = 0.5 * stall + 0.5 * busy * sigma * c.serial_update_s / 2.0
                if abs(new - stall) < 1e-9:
                    break
                stall = new
                out = rates(sigma, stall)
            if out[1] == "actors" and stall > sigma * (c.env_s + c.actor_s):
                out = (out[0], "updates", *out[2:])  # actors wait behind updates the most
        return out

    def rates(sigma: float, stall: float) -> tuple[float, str, float, dict[str, float], float]:
        base = latency_s + sigma * (c.env_s + c.actor_s)
        b, r = 1.0, sigma * c.service_s + stall
        central = dict(c.central)
        if c.forward is not None:
            for _ in range(50):  # the batch's fixed point (a contraction for these sizes)
                f = sigma * _forward(c, b * E)
                wait = c.max_wait_s * (1.0 - (b - 1.0) / (n - 1.0)) if n > 1 else 0.0
                t = base + sigma * c.service_s + stall + wait + f
                nb = min(float(n), 1.0 + (n - 1.0) * (c.max_wait_s + f) / t) if n > 1 else 1.0
                if abs(nb - b) < 1e-9:
                    break
                b = nb
            f = sigma * _forward(c, b * E)
            wait = c.max_wait_s * (1.0 - (b - 1.0) / (n - 1.0)) if n > 1 else 0.0
            r = sigma * c.service_s + stall + wait + f
            name = next(iter(central), "inference")
            central[name] = central.get(name, 0.0) + _forward(c, b * E) / (b * E)
        if central:
            root = next(iter(central))
            central[root] += root_extra
        bounds = {"actors": n * E / max(1e-12, base + r)}
        for name, k in central.items():
            if k > 0:
                bounds[name] = 1.0 / (sigma * k)
        if link_Bps:
            bounds["root bandwidth"] = link_Bps / max(1e-12, c.root_in + out)
        x = min(bounds.values())
        bound = min(bounds, key=lambda k: bounds[k])
        busiest = max((k for k in bounds if k != "actors"), key=lambda k: x / bounds[k],
                      default=None)
        if bound == "actors" and busiest and x / bounds[busiest] >= SATURATED:
            bound = busiest  # its queue sets the actors' round trip: it is what bounds them
        cpu = x * (c.cpu_per_step + sum(central.values()) - sum(k for _, k in c.central))
        return x, bound, b, bounds, cpu

    x, bound, b, bounds, cpu = at(1.0)
    sigma = 1.0
    if cpu > C:
        lo, hi = 1.0, 1e6
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            if at(mid)[4] > C:
                lo = mid
            else:
                hi = mid
        sigma = hi
        x, bound, b, bounds, _ = at(sigma)
        bound = "cores"
    if bound in ("learner", "server") and c.forward is not None:
        upd = dict(c.central).get(bound, 0.0)
        if _forward(c, b * E) / (b * E) > upd:
            bound = "inference"
    if c.central and bound == c.central[0][0] and root_extra > c.central[0][1]:
        bound = "root broadcast"  # the root's process spends more on its sends than on learning
    return Prediction(x, bound, sigma, b, bounds)


# -- costs from a measured run ----------------------------------------------------------------


def _actors(timers: dict[str, dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for role, t in timers.items():
        if role.startswith(ACTOR_ROLES):
            for k, v in t.items():
                total[k] = total.get(k, 0.0) + v
    return total


def costs_from_summary(summary: dict[str, Any], config: dict[str, Any],
                       messages: AlphaBeta | None = None,
                       forward: tuple[float, float] | None = None,
                       cores: float | None = None) -> Costs:
    """The costs of ``summary.json`` and ``config.json`` of one run (best: one actor, no
    contention), with the α–β costs of messages and, for SEED RL and GA3C, the forward pass
    per batch size (:func:`measure_forward`)."""
    import os

    arch = summary["arch"]
    if arch not in ARCHS:
        raise ValueError(f"no scaling model for {arch} (models: {', '.join(ARCHS)})")
    ab = messages or AlphaBeta()
    E, n = int(summary["envs_per_actor"]), int(summary["actors"] or 1)
    steps = float(summary["env_steps"])
    vsteps = (steps + float(summary.get("episodes", 0))) / E  # autoreset steps included
    timers = summary["time_breakdown_s"]
    act = _actors(timers)
    per = summary.get("per_rank_bytes", {})
    lat = float(config.get("env_latency_ms", 0.0)) * 1e-3
    env_s = max(0.0, act.get("env", 0.0) / vsteps - lat)
    actor_msgs = sum(ab.cost(v.get("msgs_sent", 0) + v.get("msgs_recv", 0),
                         v.get("bytes_sent", 0) + v.get("bytes_recv", 0))
                     for r, v in per.items() if r != "0") / vsteps
    root = per.get("0", {})
    root_in = root.get("bytes_recv", 0) / steps
    root_out = root.get("bytes_sent", 0) / steps
    root_msgs_out = root.get("msgs_sent", 0) / steps
    service = serial = 0.0
    actor_s = actor_msgs
    central: list[tuple[str, float]] = []
    f_e = (forward[0] + forward[1] * E) if forward else 0.0
    if arch in ("impala", "apex", "r2d2"):
        actor_s += act.get("inference", 0.0) / vsteps
        lt = timers.get("learner", {})
        central.append(("learner", (lt.get("update", 0.0) + lt.get("comm", 0.0)) / steps))
        for role, t in timers.items():
            if role.startswith("shard"):
                central.append(("replay", t.get("serve", 0.0) / steps))
    elif arch in BATCHED:
        role = "learner" if arch == "seed" else "server"
        t = timers.get(role, {})
        infer = t.get("inference", 0.0)
        central.append((role, (sum(v for k, v in t.items() if k not in ("wait", "inference"))
                               + (0.0 if forward else infer)) / steps))
        service = act.get("inference", 0.0) / vsteps - f_e
        if arch == "seed" and summary.get("learner_updates"):
            serial = t.get("update", 0.0) / summary["learner_updates"]
            busy = t.get("update", 0.0) / max(1e-9, float(summary.get("wall_s") or 0.0))
            service -= min(1.0, busy) * serial / 2.0
        service = max(0.0, service)
    else:  # a3c: the actor-learners compute gradients; the shards apply them
        actor_s += (act.get("inference", 0.0) + act.get("gradient", 0.0)) / vsteps
        pushes = max(1, int(summary.get("learner_updates") or 1))
        params = root.get("bytes_sent", 0) / max(1, root.get("msgs_sent", 1))
        ps = max(0.0, act.get("push_pull", 0.0) - ab.cost(2 * pushes, 2 * pushes * params))
        central.append(("ps", ps / steps))
        service = act.get("push_pull", 0.0) / vsteps
    # the root broadcasts to every actor at a rate per env step that does not fall with N
    # (IMPALA with --batch-unrolls 0 trains on one unroll of each actor: it does)
    broadcast = arch in BROADCAST and not (arch == "impala" and not config.get("batch_unrolls"))
    if broadcast:  # per actor reached
        root_out, root_msgs_out = root_out / n, root_msgs_out / n
    servers = int(summary.get("world_size", n + 1)) - n
    return Costs(arch=arch, envs=E, env_s=env_s, actor_s=actor_s, service_s=service,
                 central=tuple(central), forward=forward if arch in BATCHED else None,
                 max_wait_s=float(config.get("max_wait_us", 0.0)) * 1e-6 if arch in BATCHED
                 else 0.0, root_in=root_in, root_out=root_out, root_msgs_out=root_msgs_out,
                 broadcast=broadcast, servers=servers, serial_update_s=serial,
                 cores=float(cores or os.cpu_count() or 1), messages=ab)


def _bisect(make, target: float, lo: float, hi: float) -> float:
    """The x in [lo, hi] at which ``predict`` of ``make(x)`` (falling in x) gives ``target``
    steps/s (lo when even lo gives less, hi when even hi gives more)."""
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if make(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def calibrate(c: Costs, n: int, latency_s: float, measured: float) -> Costs:
    """``c`` made to give ``measured`` steps/s at its measured point: the cost of the bound
    that sets it there is fitted (an actor's CPU per vector step besides its env, where the
    actors or the cores bound it, which holds what the actors' timers miss: bookkeeping,
    handing over data; a central process's CPU per env step where that one bounds it)."""
    p = predict(c, n, latency_s)
    central = dict(c.central)
    if p.bound in central:
        central[p.bound] = 1.0 / measured
        return replace(c, central=tuple(central.items()))
    if p.bound == "inference":
        return c  # batched inference: the forward pass is measured, not fitted
    hi = max(1.0, 10 * (c.actor_s + c.env_s + latency_s))
    x = _bisect(lambda a: predict(replace(c, actor_s=a), n, latency_s).steps_per_s,
                measured, 0.0, hi)
    return replace(c, actor_s=x)


def fit_cores(c: Costs, n: int, latency_s: float, measured: float) -> Costs:
    """``c`` with the cores C fitted so that the model gives ``measured`` steps/s at ``n``
    actors and ``latency_s``, between 0.05 and the machine's (C stays the machine's where
    the cores do not bound that point)."""
    if predict(c, n, latency_s).steps_per_s <= measured:
        return c
    lo, hi = 0.05, c.cores
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if predict(c, n, latency_s, cores=mid).steps_per_s > measured:
            hi = mid
        else:
            lo = mid
    return replace(c, cores=0.5 * (lo + hi))


def fit(first: dict[str, Any], second: dict[str, Any] | None,
        messages: AlphaBeta | None = None, forward: tuple[float, float] | None = None,
        cores: float | None = None) -> Costs:
    r"""The model of one architecture from two measured points (records of ``archzoo study
    --store``: their ``summary``, ``config`` and ``metrics``): its costs from the first (one
    actor), :func:`calibrate`\ d to its steps/s, and the cores fitted to the second's."""
    c = costs_from_summary(first["summary"], first["config"], messages, forward, cores)
    n1, l1 = _where(first)
    c = calibrate(c, n1, l1, first["metrics"]["agent_steps_per_s"])
    if second is not None:
        n2, l2 = _where(second)
        c = fit_cores(c, n2, l2, second["metrics"]["agent_steps_per_s"])
    return c


def _where(record: dict[str, Any]) -> tuple[int, float]:
    """(actors, latency in seconds) of a study record."""
    return int(record["point"]["actors"]), \
        float(record["config"].get("env_latency_ms", 0.0)) * 1e-3


def knee(c: Costs, latency_s: float, efficiency: float = 0.8, n_max: int = 256,
         **kw: Any) -> tuple[int, str]:
    """The last N at which the model still gives ``efficiency`` of N × its one-actor steps/s,
    and the bound just beyond it (why it stops scaling)."""
    one = predict(c, 1, latency_s, **kw).steps_per_s
    for n in range(2, n_max + 1):
        p = predict(c, n, latency_s, **kw)
        if p.steps_per_s < efficiency * n * one:
            return n - 1, p.bound
    return n_max, predict(c, n_max, latency_s, **kw).bound


def measure_forward(argv: list[str], sizes: tuple[int, ...] = (1, 2, 4, 8, 16),
                    repeats: int = 30) -> tuple[float, float]:
    """(f0, f1): a forward pass of the policy of ``archzoo run ARGV`` over n observations
    takes f0 + f1·n seconds on one thread (least squares over n = E·sizes, the best of
    ``repeats`` per size)."""
    import numpy as np
    import torch

    from archzoo import builders
    from archzoo.config import A2CRunConfig, VTraceConfig
    from archzoo.nets import RecurrentActorCritic
    from archzoo.resolve import parse_run

    cfg = parse_run(["run", *argv])[0]
    if not isinstance(cfg, VTraceConfig | A2CRunConfig):
        raise ValueError(f"{cfg.arch}: the forward-pass model is an actor-critic's "
                         "(IMPALA, SEED, GA3C, A3C, GALA)")
    spec = builders.env_spec(cfg)
    torch.set_num_threads(1)
    model = builders.actor_critic(cfg, spec)
    model.eval()
    ns, ts = [], []
    dtype = torch.float32 if np.dtype(spec.obs_dtype).kind == "f" else torch.uint8
    for s in sizes:
        n = s * cfg.envs_per_actor
        x = torch.zeros((n, *spec.obs_shape), dtype=dtype)
        if np.dtype(spec.obs_dtype).kind == "b":
            x = x.bool()
        with torch.no_grad():
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                if isinstance(model, RecurrentActorCritic):  # --core lstm: one step from a state
                    model(x, model.initial_state(n), torch.zeros(n, dtype=torch.bool))
                else:
                    model(x)
                best = min(best, time.perf_counter() - t0)
        ns.append(n)
        ts.append(best)
    f1, f0 = np.polyfit(np.asarray(ns, float), np.asarray(ts, float), 1)
    return max(0.0, float(f0)), max(0.0, float(f1))
