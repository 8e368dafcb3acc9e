"""The run harness: what every architecture's roles share.

- :mod:`archzoo.harness.protocol`: a rank's context, the start-up
  handshake (schema digests) and the stop-and-drain protocol;
- :mod:`archzoo.harness.stats`: episode statistics from the leaves to the Monitor;
- :mod:`archzoo.harness.finish`: the run directory, summary.json and policy.pt;
- :mod:`archzoo.harness.placement`: where each rank runs (host, namespace, version);
- :mod:`archzoo.harness.roles`: :func:`leaf` and :func:`root`, the run's lifecycle around a
  role's loop (handshake, run directory, survivors, stop protocol, summary).
"""

from archzoo.harness.finish import (
    abandon_run,
    actor_seed,
    attach_checkpoints,
    byte_totals,
    evaluator_seed,
    finish_run,
    finish_single,
    open_run,
    run_summary,
)
from archzoo.harness.protocol import LeafControl, RankContext, StopRequested, play_star_roles
from archzoo.harness.roles import LeafLink, RootRun, leaf, root
from archzoo.harness.stats import (
    StatsReporter,
    absorb_stats,
    account_unroll,
    stats_message,
    train_on_unrolls,
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
    "LeafControl", "LeafLink", "REPLAY_TAGS", "RankContext", "RootRun", "SAMPLE_TAGS",
    "StatsReporter", "StopRequested", "Survivors", "TooFewActors", "TAG_ACTIONS", "TAG_CONTROL",
    "TAG_INFER_REPLY", "TAG_INFER_REQUEST", "TAG_PARAMS",
    "TAG_SAMPLE_REPLY", "TAG_SAMPLE_REQUEST", "TAG_TOPOLOGY", "TAG_TRANSITIONS", "TAG_UNROLL",
    "abandon_run", "absorb_stats", "account_unroll", "actor_seed", "attach_checkpoints",
    "byte_totals", "evaluator_seed", "finish_run", "finish_single", "leaf", "open_run",
    "play_star_roles", "root", "run_summary", "stats_message", "train_on_unrolls",
]
