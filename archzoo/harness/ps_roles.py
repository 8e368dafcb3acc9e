"""The parameter-server shards' roles, shared by A3C/A2C and Gorila.

Shard 0 also decides: it keeps the learning curve from the workers' statistics, runs the
stop protocol and writes the run directory. The other shards serve until every worker has
said BYE, then send shard 0 their slice, so policy.pt holds the server's final parameters.
Shard 0's slice is in the run's checkpoints; every other shard keeps its own
(:class:`SliceCheckpoint`).
In async mode an actor that dies is dropped (the shards stop serving it; shard 0 counts
it, :class:`~archzoo.harness.survivors.Survivors`) and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from torch import nn

from archzoo.checkpoint import OwnCheckpoint
from archzoo.comm import Message
from archzoo.config import RunConfig, filled
from archzoo.harness.protocol import RankContext
from archzoo.harness.roles import RootRun, leaf, root
from archzoo.nets import get_flat, num_params, set_flat
from archzoo.paramserver import ParamShard, shard_bounds
from archzoo.paramserver.optim import FlatOptimizer
from archzoo.records import LeafStats, PolicyMeta, Summary
from archzoo.tags import PS_TAGS, TAG_FINAL_PARAMS
from archzoo.topology.broadcast import ParamsBroadcast
from archzoo.topology.star import params_schema


@dataclass
class ShardRun:
    """What shard 0 holds once the run stopped: the run, the full final parameters with
    shard 0's version, and its shard among ``shards``."""

    run: RootRun
    final: Message
    shard: ParamShard
    shards: list[int]

    def finish(self, model: nn.Module, meta: PolicyMeta,
               extra: Mapping[str, object] | None = None, *, topology: str | None = None,
               applied: str = "", role: str | Callable[[int], str] = "actor") -> Summary:
        """The server's final parameters into ``model``, then :meth:`RootRun.finish` with
        the shards' counters (``ps_shards``, ``ps``, ``final_params_version``) in ``extra``."""
        set_flat(model, self.final["params"])
        extra = {"ps_shards": len(self.shards),
                 "ps": shard_stats(self.shard, self.shards, self.run.byes),
                 "final_params_version": int(self.final["version"]), **(extra or {})}
        return self.run.finish(model, self.shard.version, meta=meta, extra=extra,
                               topology=topology, applied=applied, role=role)


def param_shard(ctx: RankContext[RunConfig], model: nn.Module, shards: list[int],
                workers: list[int], optimizer: FlatOptimizer, *, mode: str = "async",
                drop: int = 0, staleness: int | None = None) -> ParamShard:
    """This rank's slice of ``model``'s parameters (every shard builds the same model),
    served to ``workers`` with ``optimizer``; ``mode``, ``drop``, ``staleness``: as
    :class:`ParamShard`'s."""
    flat = np.zeros(num_params(model), np.float32)
    get_flat(model, flat)
    lo, hi = shard_bounds(len(flat), len(shards))[shards.index(ctx.rank)]
    return ParamShard(ctx.net, flat[lo:hi], workers, optimizer, PS_TAGS, mode=mode, drop=drop,
                      staleness=staleness)


def run_shards(ctx: RankContext[RunConfig], shard: ParamShard, digests: dict[str, str],
               model: nn.Module, meta: PolicyMeta, shards: list[int], actors: list[int],
               eval_window: int | None = None, publisher: ParamsBroadcast | None = None,
               publish_every: int = 1, lag_from: str = "gradients") -> ShardRun | None:
    """Serve this rank's slice until the stop; on shard 0 return the run's outcome.

    ``model`` (with ``meta``) is the network the parameters belong to; ``actors`` the
    workers whose death an asynchronous run survives. With one shard, shard 0 holds the
    whole model: it checkpoints it (``--resume`` goes on from there) and a failed run
    keeps it as policy.pt. ``publisher`` (one shard only: a
    :class:`~archzoo.topology.broadcast.ParamsBroadcast`) also pushes the parameters to
    the actors every ``publish_every`` versions, over the run's topology (Gorila's actors
    with ``--topology tree``).

    Shard 0 measures every gradient's staleness (its version when the gradient arrives −
    the version it was computed on, and that version's age in seconds) into the Monitor's
    ``grad_staleness`` and reports its optimizer's learning rate per gradient. The policy
    lag comes, by ``lag_from``, from the ``"gradients"`` (A3C: a worker acts and computes
    its gradient with the same parameters, so its gradient's staleness is its policy lag)
    or from the ``"actors"``' reports (Gorila: the shard's version − the version an actor
    acts with, and that version's age)."""
    if lag_from not in ("gradients", "actors"):
        raise ValueError(f"lag_from must be 'gradients' or 'actors', got {lag_from!r}")
    if ctx.rank != 0:
        _serve_slice(ctx, shard, digests)
        return None
    n_params = num_params(model)
    cfg, t = ctx.cfg, ctx.net
    bounds = shard_bounds(n_params, len(shards))
    slices = {r: params_schema(hi - lo).new()
              for r, (lo, hi) in zip(shards, bounds, strict=True) if r != 0}
    reqs = {r: t.irecv(m.buffer, r, TAG_FINAL_PARAMS, "final parameters")
            for r, m in slices.items()}

    def policy() -> nn.Module:  # the server's parameters in the model
        set_flat(model, shard.params)
        return model

    with root(ctx, list(range(1, ctx.world_size)), digests,
              actors=actors if cfg.mode == "async" else [], eval_window=eval_window,
              parts={"ps": shard},  # shard 0's slice
              policy=(policy, meta) if len(shards) == 1 else None) as run:
        mon, lr = run.mon, getattr(shard.state.optimizer, "lr", None)

        def on_push(worker: int, staleness: int, age_s: float | None) -> None:
            mon.add_staleness(staleness, age_s)
            if lag_from == "gradients":
                mon.add_lag(staleness, age_s)
            if lr is not None:
                mon.add_learner_stats({"lr": float(lr)})

        shard.state.on_push = on_push
        serve, outstanding = shard.serve, lambda: shard.run(timeout_s=cfg.comm_timeout)
        if publisher is not None:
            run.survive(publisher)
            serve, outstanding = _publishing(run, shard, publisher, publish_every)
        run.on_stop(drain=serve, outstanding=outstanding)
        run.serve(serve, lambda: shard.version, age=lambda v: shard.state.clock.age(v),
                  lag=lag_from == "actors")
    final = params_schema(n_params).new()
    final["params"][slice(*bounds[0])] = shard.params
    final["version"][...] = shard.version
    for r, req in reqs.items():
        t.wait(req)
        final["params"][slice(*bounds[shards.index(r)])] = slices[r]["params"]
    return ShardRun(run, final, shard, shards)


def _serve_slice(ctx: RankContext[RunConfig], shard: ParamShard, digests: dict[str, str]) -> None:
    """A shard other than 0: serve until every worker said BYE (they stop on rank 0's STOP;
    the run's own limit plus the stop protocol's deadline bound a silent worker), then send
    shard 0 the slice. Between requests it sends shard 0 an empty report now and then, as
    nothing else it sends reaches shard 0 before the end."""
    cfg, t = ctx.cfg, ctx.net
    with leaf(ctx, digests) as link:
        link.on_stop(stats=lambda: {"ps": shard.stats.as_dict()})
        own = SliceCheckpoint(ctx, shard)

        def between_requests() -> bool:  # an empty report, so rank 0 hears it live
            link.reporter.maybe_report(0, None, None)
            return own.maybe_save()

        shard.run(timeout_s=cfg.time_limit + 2 * cfg.comm_timeout,
                  should_stop=between_requests)
        own.save()
        mine = params_schema(shard.params.size).new()
        mine["params"][:] = shard.params
        mine["version"][...] = shard.version
        t.wait(t.isend(mine.buffer, 0, TAG_FINAL_PARAMS, "final parameters"))


def _publishing(run: RootRun, shard: ParamShard, publisher: ParamsBroadcast,
                publish_every: int) -> tuple[Callable[[], bool], Callable[[], None]]:
    """``serve`` and ``outstanding`` for a shard that also pushes its parameters down the
    actors' broadcast every ``publish_every`` versions (and its final version too)."""
    published: list[int | None] = [None]

    def serve() -> bool:
        busy = shard.serve()
        v = shard.version
        if published[0] is None or v >= published[0] + publish_every:
            publisher.latest["params"][:] = shard.params
            run.guard(lambda: publisher.publish(v), "sending parameters")
            published[0] = v
        run.guard(publisher.pump, "sending parameters")
        return busy

    def outstanding() -> None:
        shard.run(timeout_s=run.ctx.cfg.comm_timeout)
        publisher.wait_all(run.ctx.cfg.comm_timeout)

    return serve, outstanding


class SliceCheckpoint:
    """The slice of a shard other than 0 in its own file (``ps-rank<r>.pt``), which
    ``--resume`` loads; shard 0's slice is in the run's checkpoint. Async: every
    ``--checkpoint-interval`` seconds and at the stop (the slices may then be some updates
    apart, as they are while the shards serve); sync: at the stop only, since the shards'
    clocks are apart and periodic saves would mix rounds."""

    def __init__(self, ctx: RankContext[RunConfig], shard: ParamShard) -> None:
        cfg = ctx.cfg
        self.shard, self.periodic = shard, cfg.mode == "async"
        self.file = OwnCheckpoint(filled(cfg.run_dir, "--run-dir"), f"ps-rank{ctx.rank}",
                                  "ps-slice", cfg.checkpoint_interval)
        if cfg.resume is not None:
            shard.load_state_dict(self.file.load()["ps"])

    def maybe_save(self) -> bool:
        """For :meth:`ParamShard.run`'s ``should_stop``: save when due; never stop."""
        if self.periodic and self.file.due():
            self.save()
        return False

    def save(self) -> None:
        self.file.save({"ps": self.shard.state_dict()})


def shard_stats(shard: ParamShard, shards: list[int],
                byes: Mapping[int, LeafStats]) -> dict[str, dict[str, int]]:
    """summary.json's "ps": every shard's counters."""
    return {"0": shard.stats.as_dict(), **{str(r): byes[r]["ps"] for r in shards[1:]}}


