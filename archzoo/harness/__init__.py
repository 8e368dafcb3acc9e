"""The run harness: what every architecture's roles share.

- :mod:`archzoo.harness.protocol`: a rank's context, the start-up
  handshake (schema digests) and the stop-and-drain protocol;
- :mod:`archzoo.harness.stats`: episode statistics from the leaves to the Monitor;
- :mod:`archzoo.harness.finish`: the run directory, checkpoints, summary.json and policy.pt;
- :mod:`archzoo.harness.placement`: where each rank runs (host, namespace, version);
- :mod:`archzoo.harness.run`: :func:`single` (``--actors 0``) and the :class:`Run` that it
  and :func:`root` yield: the heartbeat (metrics rows, checkpoints, videos, the stop
  decision) and the finish;
- :mod:`archzoo.harness.roles`: :func:`leaf` and :func:`root`, the run's lifecycle around a
  role's loop (handshake, run directory, survivors, stop protocol, summary).
"""

from archzoo.harness.finish import (
    abandon_run,
    actor_seed,
    byte_totals,
    evaluator_seed,
    run_summary,
)
from archzoo.harness.protocol import LeafControl, RankContext, StopRequested, play_star_roles
from archzoo.harness.roles import LeafLink, RootRun, leaf, root
from archzoo.harness.run import Run, single, train_on_unrolls
from archzoo.harness.stats import (
    StatsReporter,
    absorb_stats,
    account_unroll,
    stats_message,
)
from archzoo.harness.survivors import Survivors, TooFewActors
from archzoo.tags import (
    REPLAY_TAGS,
    SAMPLE_TAGS,
    TAG_ACTIONS,
    TAG_CONTROL,
    TAG_INFER_REPLY,
    TAG_INFER_REQUEST,
    TAG_PARAMS,
    TAG_SAMPLE_REPLY,
    TAG_SAMPLE_REQUEST,
    TAG_TOPOLOGY,
    TAG_TRANSITIONS,
    TAG_UNROLL,
)

__all__ = [
    "LeafControl", "LeafLink", "REPLAY_TAGS", "RankContext", "RootRun", "Run", "SAMPLE_TAGS",
    "StatsReporter", "StopRequested", "Survivors", "TooFewActors", "TAG_ACTIONS", "TAG_CONTROL",
    "TAG_INFER_REPLY", "TAG_INFER_REQUEST", "TAG_PARAMS",
    "TAG_SAMPLE_REPLY", "TAG_SAMPLE_REQUEST", "TAG_TOPOLOGY", "TAG_TRANSITIONS", "TAG_UNROLL",
    "abandon_run", "absorb_stats", "account_unroll", "actor_seed", "byte_totals",
    "evaluator_seed", "leaf", "play_star_roles", "root", "run_summary", "single",
    "stats_message", "train_on_unrolls",
]
