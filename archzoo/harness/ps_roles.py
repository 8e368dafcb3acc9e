"""The parameter-server shards' roles, shared by A3C/A2C and Gorila.

Shard 0 also decides: it keeps the learning curve from the workers' statistics, runs the
stop protocol and writes the run directory, with the final parameters that the first
worker sends it (a shard holds only its slice). The other shards serve until every
worker has said BYE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archzoo.comm import ControlChannel, Message
from archzoo.harness.finish import open_run
from archzoo.harness.protocol import (
    TAG_CONTROL,
    LeafControl,
    RankContext,
    finish_leaf,
    finish_root,
    handshake_leaf,
    handshake_root,
)
from archzoo.harness.stats import serve_and_monitor
from archzoo.runlog import Monitor, RunDir
from archzoo.topology.star import params_schema
from paramserver import ParamShard

TAG_FINAL_PARAMS = 8  # the first worker's last parameters, for the run directory's policy


@dataclass
class ShardRun:
    """What shard 0 holds once the run stopped."""

    run_dir: RunDir
    mon: Monitor
    stop: str
    byes: dict[int, Any]
    final: Message  # the full final parameters and their version


def run_shards(ctx: RankContext, shard: ParamShard, digests: dict[str, str], n_params: int,
               final_from: int, eval_window: int | None = None) -> ShardRun | None:
    """Serve this rank's slice until the stop; on shard 0 return the run's outcome."""
    cfg, t = ctx.cfg, ctx.transport
    if ctx.rank != 0:
        control = ControlChannel(t, [0], TAG_CONTROL)
        handshake_leaf(control, 0, digests, cfg.startup_timeout)
        lc = LeafControl(control, 0)
        # serve until every worker said BYE (they stop on rank 0's STOP); the run's own
        # limit plus the stop protocol's deadline bound a silent worker
        shard.run(timeout_s=cfg.time_limit + 2 * cfg.comm_timeout)
        lc.poll()
        finish_leaf(ctx, control, lc, 0, {"ps": shard.stats.as_dict(),
                                          "bytes": t.counters.totals()}, drain=lambda: None)
        return None
    leaves = list(range(1, ctx.world_size))
    control = ControlChannel(t, leaves, TAG_CONTROL)
    final = params_schema(n_params).new()
    final_req = t.irecv(final.buffer, final_from, TAG_FINAL_PARAMS, "final parameters")
    handshake_root(control, leaves, digests, cfg.startup_timeout)
    run_dir, mon = open_run(ctx, eval_window)
    stop = serve_and_monitor(ctx, control, mon, shard.serve, lambda: shard.version)
    byes = finish_root(ctx, control, leaves, drain=shard.serve,
                       outstanding=lambda: shard.run(timeout_s=cfg.comm_timeout))
    t.wait(final_req)
    return ShardRun(run_dir, mon, stop, byes, final)


def shard_stats(shard: ParamShard, shards: list[int], byes: dict[int, Any]) -> dict[str, Any]:
    """summary.json's "ps": every shard's counters."""
    return {"0": shard.stats.as_dict(), **{str(r): byes[r]["ps"] for r in shards[1:]}}


def send_final_params(ctx: RankContext, params: Any, versions: Any) -> None:
    """The first worker's last parameters to shard 0, for policy.pt."""
    t = ctx.transport
    final = params_schema(len(params)).new()
    final["params"][:] = params
    final["version"][...] = int(min(versions))
    t.wait(t.isend(final.buffer, 0, TAG_FINAL_PARAMS, "final parameters"))
