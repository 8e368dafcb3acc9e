"""R2D2 (Kapturowski et al., ICLR 2019): recurrent experience replay in distributed RL.

R2D2 keeps Ape-X's distributed prioritized replay (Horgan et al. 2018) — and here its roles
(archzoo/architectures/apex.py): rank 0 is the learner, ranks 1..K replay shards
(``--replay-shards K``; 0 = in the learner), the rest actors — and changes what is
replayed and how it is learnt:

- **the network** has an LSTM core after the torso and a dueling head
  (archzoo/nets.py ``RecurrentQNetwork``; ``--core lstm[:SIZE]``);
- **an actor** (actors/sequences.py ``SequenceActor``) acts ε_i-greedily on Ape-X's
  ladder and adds sequences of ``--sequence-length`` steps, a new one every length −
  ``--sequence-overlap`` steps, each stored with the recurrent state it had before the
  sequence's first step and an initial priority from its own network; it takes the newest
  parameters between batches;
- **a replay shard** stores sequences as Ape-X's stores transitions (same server, same
  sampling, same priority updates; replay/server.py);
- **the learner** (learners/r2d2.py ``R2D2Learner``) unrolls the online and target networks
  from each sequence's stored state, spends ``--burn-in`` steps without loss or gradient,
  and takes an Adam step on n-step double-Q targets under the value rescaling h; the new
  sequence priorities η·max|δ| + (1 − η)·mean|δ| go back to the shards.

"Solved" and the reported returns use greedy evaluation episodes, as in Ape-X.
"""

from __future__ import annotations

from typing import Any

from archzoo import builders
from archzoo.architectures import apex
from archzoo.config import R2D2Config
from archzoo.harness import RankContext
from archzoo.harness.single_dqn import run_single_dqn
from archzoo.topology.broadcast import describe_broadcast


def applied(cfg: R2D2Config) -> str:
    """Where the chosen topology is used (summary.json's topology_applied)."""
    return (f"parameter broadcast learner->actors over "
            f"{describe_broadcast(cfg.topology, cfg.fanout, 'async')}; sequences "
            "actor->replay and samples replay<->learner point-to-point")


def run(ctx: RankContext) -> dict[str, Any] | None:
    """Ape-X's roles with R2D2's parts: builders.py picks the recurrent Q-network, the
    sequence actor, the sequence replay and the R2D2 learner from ``R2D2Config``."""
    spec = builders.env_spec(ctx.cfg)
    if ctx.world_size == 1:
        return run_single_dqn(ctx, spec)
    shards, actors = apex.roles(ctx.cfg, ctx.world_size)
    if ctx.rank == 0:
        return apex.run_learner(ctx, spec, shards, actors, topology_applied=applied(ctx.cfg))
    if ctx.rank in shards:
        apex.run_shard(ctx, spec, shards, actors)
    else:
        apex.run_actor(ctx, spec, shards, actors)
    return None
