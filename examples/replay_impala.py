"""IMPALA with experience replay: every update mixes fresh unrolls with replayed ones.

IMPALA (Espeholt et al. 2018) trains on the unrolls its actors just sent. CLEAR (Rolnick et
al. 2019) and LASER (Schmitt, Hessel & Simonyan 2020) also keep the unrolls in a replay
memory and train on a mixture of fresh and replayed ones; V-trace's clipped importance
weights correct for the older policies that acted in the replayed unrolls. This module is
that architecture, built from archzoo's components without editing archzoo:

    archzoo run examples.replay_impala:ARCH --replay-ratio 0.5

The actors, the one-process baseline (``--actors 0``, no replay) and the learner's end of
the wire (:class:`~archzoo.harness.unroll_link.LearnerLink`) are IMPALA's; only the
learner loop and the config below are new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archzoo import builders, harness
from archzoo.architectures import STAR, Architecture, impala, play
from archzoo.config import ImpalaConfig, Rules, opt
from archzoo.envs import EnvSpec
from archzoo.harness import RankContext
from archzoo.harness.unroll_link import LearnerLink
from archzoo.replay.unrolls import UnrollReplay


@dataclass(frozen=True)
class ReplayImpalaConfig(ImpalaConfig):
    """IMPALA's flags, plus the replay memory's."""

    replay_ratio: float = opt(0.5, "fraction of each update's unrolls replayed from memory "
                              "(0.5: CLEAR's even split of new and replayed)", group="replay")
    replay_capacity: int = opt(500, "unrolls the replay memory keeps (oldest evicted first)",
                               group="replay")

    def check(self, r: Rules) -> None:
        super().check(r)
        r.within(self, "replay_ratio", 0.0, 0.9)
        r.at_least(self, "replay_capacity", 1)


def run(ctx: RankContext) -> dict[str, Any] | None:
    """Every rank: IMPALA's role map, with the learner loop below on rank 0."""
    return play(ctx, impala.run_single, learner=run_learner, actor=impala.run_actor)


def run_learner(ctx: RankContext, spec: EnvSpec) -> dict[str, Any]:
    """Rank 0: V-trace updates on the actors' fresh unrolls plus replayed ones."""
    cfg = ctx.cfg
    learner = builders.vtrace_learner(cfg, spec)
    link = LearnerLink(ctx, spec, learner)  # unroll inbox, parameter broadcast
    memory = UnrollReplay(link.unroll_schema, cfg.replay_capacity, seed=cfg.seed)
    lag = 0  # summed over replayed unrolls, in learner versions
    with link:  # handshake; checkpoints; --resume loads
        run = link.run
        link.send_params()  # version 0: every actor starts from the learner's weights
        while not run.stopped:
            fresh = link.next_batch()  # 1. the unrolls that have arrived
            for msg in fresh:  # only fresh unrolls are new env steps and episodes
                harness.account_unroll(run.mon, msg, learner.version)
            # 2. replayed unrolls, so that they make up --replay-ratio of the update
            n = round(len(fresh) * cfg.replay_ratio / (1 - cfg.replay_ratio))
            replayed = memory.sample(n)  # none until the memory holds something
            lag += sum(learner.version - int(u["version"]) for u in replayed)
            memory.add(fresh)  # 3. copies: the inbox overwrites fresh's buffers after release
            learner.update(fresh + replayed)  # 4. one V-trace step on the mixture
            link.release()
            run.tick(learner.version)  # 5. a metrics row, a checkpoint when due; stop?
            link.send_params()  # the new parameters, or STOP
    return link.finish(extra={"replay": {  # after STOP and the drain: summary.json
        "ratio": cfg.replay_ratio, "fresh_unrolls": memory.added,
        "replayed_unrolls": memory.sampled, "memory_unrolls": len(memory),
        "replayed_lag_mean": lag / max(1, memory.sampled)}})


ARCH = Architecture(
    name="replay_impala", module=__name__, config=ReplayImpalaConfig,
    description="IMPALA whose learner mixes fresh unrolls with replayed ones (CLEAR, LASER)",
    roles=STAR, modes=("async", "sync"),
    topologies=("star", "tree", "butterfly", "ring", "native"))
