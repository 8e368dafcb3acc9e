"""The deciding rank's run directory: opened at the start, finished at every stop.

:func:`open_run` makes the run directory and the Monitor; :func:`finish_run` writes the
last metrics row, summary.json (the fields every architecture reports, plus its own) and
policy.pt, and closes the directory. It is called on every way out of a run that still has
a model, so a run that failed after learning keeps what it learnt.
"""

from __future__ import annotations

from typing import Any

from archzoo.comm import Transport
from archzoo.harness.protocol import RankContext
from archzoo.runlog import Monitor, RunDir


def actor_seed(seed: int, rank: int) -> int:
    """The env and sampling seed of the actor on ``rank`` (rank 0 in one process)."""
    return seed * 1000 + rank


def evaluator_seed(seed: int, rank: int) -> int:
    """The seed of ``rank``'s greedy-evaluation envs, apart from its training envs."""
    return seed * 1000 + 500 + rank


def byte_totals(t: Transport | None) -> tuple[int, int]:
    if t is None:
        return 0, 0
    c = t.counters.totals()
    return c["bytes_sent"], c["bytes_recv"]


def open_run(ctx: RankContext, eval_window: int | None = None) -> tuple[RunDir, Monitor]:
    """The run directory (config.json, metrics.csv) and the Monitor of the deciding rank."""
    cfg = ctx.cfg
    run_dir = RunDir(cfg.run_dir, cfg.as_dict())
    backend = ctx.transport.backend if ctx.transport else "-"
    mon = Monitor(run_dir, cfg.target_return, cfg.total_steps, cfg.time_limit,
                  cfg.log_interval, f"{cfg.arch}/{backend}", quiet=cfg.quiet,
                  eval_window=eval_window)
    if ctx.transport is not None:
        mon.last_heard = ctx.transport.counters.last_heard
    return run_dir, mon


def leaf_reports(byes: dict[int, dict[str, Any]], role: Any = "actor") -> dict[str, Any]:
    """summary.json's per-role time breakdown and per-rank bytes from the leaves' BYEs;
    ``role`` is a name or a function of the rank."""
    name = role if callable(role) else (lambda r: role)
    return {"time_breakdown_s": {f"{name(r)}{r}": b.get("timing", {}) for r, b in byes.items()},
            "per_rank_bytes": {str(r): b.get("bytes", {}) for r, b in byes.items()}}


def run_summary(ctx: RankContext, mon: Monitor, stop: str | None, topology: str,
                topology_applied: str, device: Any, updates: int, timers: dict[str, Any],
                extra: dict[str, Any]) -> dict[str, Any]:
    """The fields of summary.json every architecture writes."""
    cfg, t = ctx.cfg, ctx.transport
    totals = t.counters.totals() if t else {"bytes_sent": 0, "bytes_recv": 0}
    elapsed = mon.elapsed()
    return {
        "arch": cfg.arch, "env": cfg.env, "backend": t.backend if t else "none",
        "launcher": ctx.launch.launcher, "topology": topology,
        "topology_applied": topology_applied, "mode": cfg.mode,
        "world_size": ctx.world_size, "actors": cfg.actors,
        "envs_per_actor": cfg.envs_per_actor, "device": str(device), "seed": cfg.seed,
        "solved": mon.time_to_target_s is not None, "stop_reason": stop,
        "target_return": cfg.target_return,
        "time_to_target_s": mon.time_to_target_s, "env_steps_to_target": mon.steps_to_target,
        "startup_s": (mon.first_step_time - ctx.t_launch) if mon.first_step_time else None,
        "wall_s": elapsed, "final_mean_return": mon.mean_return,
        "eval_mean_return": mon.eval_mean_return, "episodes": mon.episodes,
        "env_steps": mon.env_steps, "learner_updates": updates,
        "fps": mon.env_steps / elapsed if elapsed > 0 else 0.0,
        "policy_lag_mean": mon.lag_mean,
        "bytes_sent": totals["bytes_sent"], "bytes_recv": totals["bytes_recv"],
        "bytes_sent_per_env_step": sum(  # every rank's sends, per env step of the run
            b.get("bytes_sent", 0) for b in extra.get("per_rank_bytes", {"0": totals}).values()
        ) / max(1, mon.env_steps),
        "time_breakdown_s": timers, **extra,
    }


def finish_run(ctx: RankContext, run_dir: RunDir, mon: Monitor, stop: str | None, *,
               policy: Any, meta: dict[str, Any], updates: int, device: Any = "cpu",
               topology: str | None = None, applied: str = "",
               timers: dict[str, Any] | None = None, byes: dict[int, Any] | None = None,
               role: Any = "actor", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The last metrics row, summary.json and policy.pt; returns the summary.

    ``timers`` is the deciding rank's own time breakdown; the leaves' come from ``byes``
    (their BYE statistics), named by ``role``. Without a transport the topology is
    "none" and the run is "single process, no transport".
    """
    t = ctx.transport
    mon.maybe_log(*byte_totals(t), force=True)
    breakdown, per_rank = dict(timers or {}), {}
    if t is not None:
        reports = leaf_reports(byes or {}, role)
        breakdown.update(reports["time_breakdown_s"])
        per_rank = {"per_rank_bytes": {"0": t.counters.totals(),
                                       **reports["per_rank_bytes"]}}
    if t is None:
        topology, applied = "none", "single process, no transport"
    summary = run_summary(ctx, mon, stop, topology or ctx.cfg.topology or "star", applied,
                          device, updates, breakdown, {**(extra or {}), **per_rank})
    mon.close()
    run_dir.write_summary(summary)
    run_dir.save_policy(policy, meta)
    run_dir.close()
    return summary


def finish_single(ctx: RankContext, run_dir: RunDir, mon: Monitor, stop: str | None,
                  learner: Any, actor_timing: dict[str, float], meta: dict[str, Any],
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`finish_run` for ``--actors 0``: one actor and one learner in this process."""
    timers = {"actor0": actor_timing, "learner": {"update": learner.update_s}}
    return finish_run(ctx, run_dir, mon, stop, policy=learner.model, meta=meta,
                      updates=learner.version, device=learner.device, timers=timers,
                      extra=extra)
