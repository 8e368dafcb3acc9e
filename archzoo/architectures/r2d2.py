"""R2D2 (Kapturowski et al., ICLR 2019): recurrent experience replay in distributed RL.

R2D2 keeps Ape-X's distributed prioritized replay (Horgan et al. 2018) and its roles
(archzoo/architectures/apex.py: rank 0 is the learner, ranks 1..K replay shards,
``--replay-shards K``, 0 = in the learner, the rest actors) and changes what is replayed and
how it is learnt. :class:`archzoo.builders.R2D2Builder` builds those parts in place of
Ape-X's (:class:`archzoo.builders.ApexBuilder`; R2D2's config names it):

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

from archzoo.architectures.apex import run
from archzoo.builders import R2D2Builder

__all__ = ["R2D2Builder", "run"]  # run: Ape-X's roles, with R2D2's parts
