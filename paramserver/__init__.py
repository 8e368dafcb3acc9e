"""Parameter server: the flat parameter vector sharded over K ranks, versioned.

Clients push gradients of the loss and pull parameters shard by shard, concurrently
(:class:`PSClient`); each shard (:class:`ParamShard`) holds its slice and that slice's
optimizer state (:class:`SharedRMSProp` as in A3C, or :class:`Adam`) and counts versions.
async mode applies each gradient as it arrives (A3C, Mnih et al. 2016, Algorithm S3), optionally
dropping gradients more than S versions stale; sync mode waits for W − D of W workers,
averages (a float64 sum, :func:`average_gradients`) and applies once (DPPO's chief, Heess
et al. 2017). K shards
give bit-for-bit the parameters of one (Gorila's sharded server, Nair et al. 2015).
"""

from archzoo.paramserver.client import PSClient, clip_grad_norm
from archzoo.paramserver.optim import Adam, SharedRMSProp, make_optimizer
from archzoo.paramserver.shard import (
    STAT_FIELDS,
    Outcome,
    ParamShard,
    PSTags,
    Settled,
    ShardState,
    ShardStats,
    average_gradients,
    ps_schemas,
    shard_bounds,
)

__all__ = [
    "STAT_FIELDS", "Adam", "Outcome", "PSClient", "PSTags", "ParamShard", "Settled",
    "SharedRMSProp", "ShardState", "ShardStats", "average_gradients", "clip_grad_norm",
    "make_optimizer",
    "ps_schemas", "shard_bounds",
]
