"""The deciding rank's run directory: opened at the start, finished at every stop.

:func:`open_run` makes the run directory, the Monitor and the :class:`OpenRun` that holds
them and, given the architecture's stateful ``parts`` (its learner, ...), a checkpointer
that saves them with the Monitor's counters every ``--checkpoint-interval`` seconds; with
``--resume`` it first loads the latest checkpoint. With ``--record-video N`` it also holds
a recorder that films the policy every N seconds (archzoo/video.py). Both are due at a
metrics row (:meth:`OpenRun.on_row`, which the run's heartbeat calls:
:meth:`archzoo.harness.run.Run.tick`). :func:`finish_run` writes the last metrics row, a
last checkpoint, summary.json (the fields every architecture reports, plus its own) and
policy.pt, films the final policy, and closes the directory. When a rank fails,
:func:`abandon_run` does the same with what the deciding rank has, so a run that failed
after learning keeps what it learnt and can be resumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

from archzoo import checkpoint, envvars
from archzoo.comm import Transport
from archzoo.config import RunConfig, filled
from archzoo.harness import placement
from archzoo.harness.protocol import RankContext
from archzoo.records import ByeStats, ByteTotals, JSONObject, PolicyMeta, RunSummary, Summary
from archzoo.runlog import Monitor, RunDir
from archzoo.seeding import actor_seed, evaluator_seed  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from archzoo.nets import Weights
    from archzoo.video import Recorder

# the policy that policy.pt saves: the model (or a function that returns it up to date)
# and its metadata
Policy = tuple["Weights | Callable[[], Weights]", PolicyMeta]
Times = dict[str, dict[str, float]]  # summary.json's time_breakdown_s: part -> name -> s


class Stateful(Protocol):
    """A part of a run that a checkpoint keeps (a learner, a replay memory, ...); one with
    a true ``optional`` attribute may be missing from a checkpoint it resumes from. Its
    state is what torch.save pickles: tensors, arrays, numbers, nested dicts, which each
    part reads back itself (so their values are left untyped)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> object: ...


@dataclass
class OpenRun:
    """The deciding rank's run in progress: its directory and Monitor, the policy that a
    failed run saves (the model, or a function that returns it up to date, and its
    metadata), the checkpointer of its parts and the video recorder (None without
    ``--record-video``)."""

    ctx: RankContext[RunConfig]
    run_dir: RunDir
    mon: Monitor
    policy: Policy | None
    checkpointer: checkpoint.Checkpointer | None = None
    videos: Recorder | None = None

    def attach(self, parts: dict[str, Stateful], policy: Policy | None = None) -> None:
        """Checkpoint ``parts`` with the Monitor's counters from now on (for parts built
        after :func:`open_run`, such as a learner that reports into the Monitor); with
        ``--resume`` first load them from the latest checkpoint. ``policy``: as
        :func:`open_run`'s."""
        cfg, mon = self.ctx.cfg, self.mon
        self.checkpointer = checkpoint.Checkpointer(
            filled(cfg.run_dir, "--run-dir"), cfg.checkpoint_interval, cfg.keep_checkpoints,
            state=lambda: run_state(cfg, mon, parts), step=lambda: mon.env_steps)
        if cfg.resume is not None:
            mon.resumed_from = resume(cfg.resume, cfg.arch, mon, parts)
        self.policy = policy

    def on_row(self) -> None:
        """What is due at a metrics row, which comes between updates (a consistent state):
        a checkpoint every ``--checkpoint-interval`` seconds, a video every
        ``--record-video`` seconds (the policy saved here, filmed in the background)."""
        if self.checkpointer is not None:
            self.checkpointer.maybe_save()
        if self.videos is not None:
            self.videos.maybe_record(self.mon.env_steps)

    def current_policy(self) -> tuple[Weights, PolicyMeta] | None:
        """The policy as it is now (model, metadata), or None if the run registered none."""
        if self.policy is None:
            return None
        model, meta = self.policy
        if callable(model) and not hasattr(model, "state_dict"):  # a module is callable too
            return model(), meta
        return cast("Weights", model), meta


_OPEN: list[OpenRun] = []  # this process's run in progress (the deciding rank's)


def byte_totals(t: Transport | None) -> tuple[int, int]:
    if t is None:
        return 0, 0
    c = t.counters.totals()
    return c["bytes_sent"], c["bytes_recv"]


def open_run(ctx: RankContext[RunConfig], eval_window: int | None = None, *,
             parts: dict[str, Stateful] | None = None,
             policy: Policy | None = None) -> OpenRun:
    """The run directory (config.json, metrics.csv) and the Monitor of the deciding rank.

    ``parts``: what a checkpoint keeps besides the Monitor (with ``--resume`` they are
    loaded from the latest checkpoint here); ``policy``: the model (or a function that
    returns it up to date) and the metadata that :func:`abandon_run` saves as policy.pt
    if the run fails. The roles' contexts open it (:func:`archzoo.harness.root`,
    :func:`archzoo.harness.single`)."""
    cfg = ctx.cfg
    run_dir = RunDir(filled(cfg.run_dir, "--run-dir"), cfg.as_dict(), resume=cfg.resume is not None)
    backend = ctx.transport.backend if ctx.transport else "-"
    mon = Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                  cfg.log_interval, f"{cfg.arch}/{backend}", quiet=cfg.quiet,
                  eval_window=eval_window)
    if ctx.transport is not None:
        mon.last_heard = ctx.transport.counters.last_heard
    run = OpenRun(ctx, run_dir, mon, policy)
    _OPEN[:] = [run]
    envvars.mark_started()  # every rank has joined (open_run follows the handshake)
    if parts is not None:
        run.attach(parts, policy)
    if cfg.record_video > 0:
        from archzoo.video import Recorder

        run.videos = Recorder(run_dir.path, cfg.record_video, cfg.seed, run.current_policy)
    return run


def run_state(cfg: RunConfig, mon: Monitor, parts: dict[str, Stateful]) -> dict[str, Any]:
    """A checkpoint's contents (see :mod:`archzoo.checkpoint`)."""
    return {"arch": cfg.arch, "env": cfg.env, "saved_at": time.time(),
            "monitor": mon.state_dict(),
            "rng": checkpoint.rng_state(),
            "parts": {name: p.state_dict() for name, p in parts.items()}}


def resume(run_dir: str, arch: str, mon: Monitor, parts: dict[str, Stateful]) -> JSONObject:
    """Load the latest checkpoint of ``run_dir`` into the Monitor, the RNGs and ``parts``;
    returns what summary.json records as ``resumed_from``."""
    path = checkpoint.latest(run_dir)
    if path is None:
        raise checkpoint.CheckpointError(f"--resume {run_dir}: no checkpoint to resume from")
    state = checkpoint.load(path)
    if state.get("arch") != arch:
        raise checkpoint.CheckpointError(f"checkpoint {path}: written by {state.get('arch')!r}, "
                                         f"this run is {arch!r}")
    missing = sorted(n for n, p in parts.items()
                     if n not in state["parts"] and not getattr(p, "optional", False))
    if missing:
        raise checkpoint.CheckpointError(f"checkpoint {path}: has no {missing[0]!r}")
    mon.load_state_dict(state["monitor"])
    checkpoint.set_rng_state(state["rng"])
    for name, part in parts.items():
        if name in state["parts"]:
            part.load_state_dict(state["parts"][name])
    return {"checkpoint": str(path), "env_steps": mon.env_steps, "updates": mon.updates,
            "elapsed_s": state["monitor"]["elapsed_s"]}


def _checkpoint_summary(run: OpenRun) -> JSONObject:
    c = run.checkpointer
    if c is None:
        return {}
    last = checkpoint.latest(c.run_dir)
    return {"checkpoints": {"saved": c.saved, "save_s": round(c.save_s, 3),
                            "latest": None if last is None else str(last),
                            "resumed_from": run.mon.resumed_from}}


def abandon_run(reason: str, error: bool = True) -> list[str]:
    """A failed run's deciding rank: a last checkpoint (where the architecture keeps them),
    policy.pt and summary.json with ``stop_reason`` "error: ...", written from what it
    holds; returns what it wrote (empty if this process has no run). A run stopped by a
    signal (``error`` False) gets ``reason`` itself ("signal: SIGTERM", "interrupted")."""
    if not _OPEN:
        return []
    run = _OPEN.pop()
    policy = run.current_policy()
    mon = run.mon
    mon.close()
    if run.videos is not None:  # no background video outlives the run
        run.videos.abort()
    wrote = []
    if run.checkpointer is not None:
        run.checkpointer.save()
        wrote.append("a checkpoint")
    if policy is not None:  # before summary.json, as a finished run's: the summary comes last
        run.run_dir.save_policy(*policy)
        wrote.append("policy.pt")
    cfg = run.ctx.cfg
    stop = f"error: {reason}" if error else reason
    summary = run_summary(run.ctx, mon, stop, cfg.topology or "star", "",
                          cfg.device, mon.updates, {}, _checkpoint_summary(run))
    if run.videos is not None:
        summary.update(run.videos.summary())
    run.run_dir.write_summary(summary)
    wrote.append("summary.json")
    run.run_dir.close()
    return wrote


class LeafReports(TypedDict):
    """What the leaves' BYEs give summary.json (:func:`leaf_reports`)."""
    time_breakdown_s: Times
    per_rank_bytes: dict[str, ByteTotals]
    params_by_rank: dict[str, dict[str, int | float | None]]


def leaf_reports(byes: dict[int, ByeStats],
                 role: str | Callable[[int], str] = "actor") -> LeafReports:
    """summary.json's per-role time breakdown and per-rank bytes from the leaves' BYEs;
    ``role`` is a name or a function of the rank."""
    name = role if callable(role) else (lambda r: role)
    return {"time_breakdown_s": {f"{name(r)}{r}": b.get("timing", {}) for r, b in byes.items()},
            "per_rank_bytes": {str(r): b["bytes"] for r, b in byes.items()},
            "params_by_rank": {str(r): b["params"] for r, b in byes.items() if "params" in b}}


def torch_threads() -> int:
    """The torch threads of this process (the deciding rank's: the learner's, or the one
    process's with ``--actors 0``)."""
    import torch

    return torch.get_num_threads()


def run_summary(ctx: RankContext[RunConfig], mon: Monitor, stop: str | None, topology: str,
                topology_applied: str, device: object, updates: int, timers: Times,
                extra: Mapping[str, object], per_rank_bytes: dict[str, ByteTotals] | None = None
                ) -> Summary:
    """The fields of summary.json every architecture writes (:class:`RunSummary`), and
    ``extra``; ``per_rank_bytes``: every rank's traffic, as ``extra`` holds it (None: this
    rank's is all)."""
    cfg, t = ctx.cfg, ctx.transport
    totals = t.counters.totals() if t else ByteTotals(msgs_sent=0, bytes_sent=0, msgs_recv=0,
                                                      bytes_recv=0)
    elapsed = mon.elapsed()
    every_rank = per_rank_bytes or {"0": totals}
    common: RunSummary = {
        "arch": cfg.arch, "env": cfg.env, "backend": t.backend if t else "none",
        "launcher": ctx.launch.launcher, "topology": topology,
        "topology_applied": topology_applied, "mode": cfg.mode,
        "world_size": ctx.world_size, "actors": filled(cfg.actors, "--actors"),
        "envs_per_actor": cfg.envs_per_actor, "device": str(device), "seed": cfg.seed,
        "solved": mon.time_to_target_s is not None, "stop_reason": stop,
        "target_return": cfg.target_return,
        "time_to_target_s": mon.time_to_target_s, "env_steps_to_target": mon.steps_to_target,
        "startup_s": (mon.first_step_time - ctx.t_launch)
        if mon.first_step_time and mon.resumed_from is None else None,
        "wall_s": elapsed, "final_mean_return": mon.mean_return,
        "eval_mean_return": mon.eval_mean_return, "episodes": mon.episodes,
        "env_steps": mon.env_steps, "learner_updates": updates,
        "fps": mon.env_steps / elapsed if elapsed > 0 else 0.0,
        "policy_lag_mean": mon.lag_mean, "policy_lag": mon.lag_summary(),
        "grad_staleness": mon.staleness_summary(),
        "learner_stats": mon.learner_means(),
        "bytes_sent": totals["bytes_sent"], "bytes_recv": totals["bytes_recv"],
        "bytes_sent_per_env_step": sum(  # every rank's sends, per env step of the run
            b["bytes_sent"] for b in every_rank.values()) / max(1, mon.env_steps),
        "time_breakdown_s": timers,
        "hosts_by_rank": placement.hosts_by_rank() if t else {},
        "torch_threads": torch_threads(),
    }
    return {**common, **extra}


def finish_run(run: OpenRun, stop: str | None, *, policy: Weights, meta: PolicyMeta | None,
               updates: int, device: object = "cpu", topology: str | None = None,
               applied: str = "", timers: Times | None = None,
               byes: dict[int, ByeStats] | None = None,
               role: str | Callable[[int], str] = "actor",
               extra: Mapping[str, object] | None = None) -> Summary:
    """The last metrics row, summary.json and policy.pt of ``run``; returns the summary.

    ``timers`` is the deciding rank's own time breakdown; the leaves' come from ``byes``
    (their BYE statistics), named by ``role``. Without a transport the topology is
    "none" and the run is "single process, no transport".
    """
    ctx, run_dir, mon = run.ctx, run.run_dir, run.mon
    t = ctx.transport
    mon.updates = updates  # updates applied while draining count (a server's stragglers)
    mon.maybe_log(*byte_totals(t), force=True)
    mon.close()
    if run.checkpointer is not None:
        run.checkpointer.save()  # the last one: a later --resume goes on from here
    breakdown: Times = dict(timers or {})
    per_rank: dict[str, ByteTotals] | None = None
    traffic: JSONObject = {}
    if t is not None:
        reports = leaf_reports(byes or {}, role)
        breakdown.update(reports["time_breakdown_s"])
        per_rank = {"0": t.counters.totals(), **reports["per_rank_bytes"]}
        traffic = {"per_rank_bytes": per_rank}
        if reports["params_by_rank"]:  # what each actor loaded (and relayed)
            traffic["params_by_rank"] = reports["params_by_rank"]
    if t is None:
        topology, applied = "none", "single process, no transport"
    summary = run_summary(ctx, mon, stop, topology or ctx.cfg.topology or "star", applied,
                          device, updates, breakdown,
                          {**(extra or {}), **traffic, **_checkpoint_summary(run)}, per_rank)
    run_dir.save_policy(policy, meta)
    run_dir.write_summary(summary)
    _OPEN.clear()  # the run is finished: a stop signal from now on rewrites nothing
    videos = run.videos
    if videos is not None:  # after the summary's clock: filming is no part of the run
        try:
            summary.update(videos.finish(run_dir.path / "policy.pt", mon.env_steps))
        except BaseException:  # stopped while filming: keep only the videos made
            videos.abort()
            videos.errors.append("stopped while filming the final policy")
            run_dir.write_summary({**summary, **videos.summary()})
            run_dir.close()
            raise
        run_dir.write_summary(summary)
    run_dir.close()
    return summary

