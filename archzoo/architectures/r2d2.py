"""R2D2 (Kapturowski et al., ICLR 2019): recurrent experience replay in distributed RL.

R2D2 keeps Ape-X's distributed prioritized replay (Horgan et al. 2018) and its roles
(archzoo/architectures/apex.py: rank 0 is the learner, ranks 1..K replay shards,
``--replay-shards K``, 0 = in the learner, the rest actors) and changes what is replayed and
how it is learnt. :class:`R2D2Builder` builds those parts in place of Ape-X's
(:class:`archzoo.builders.ApexBuilder`; the record names it):

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

import torch

from archzoo.actors.sequences import SequenceActor, sequence_fields
from archzoo.architectures.apex import run
from archzoo.builders import ApexBuilder, core, lr_schedule
from archzoo.config import R2D2Config
from archzoo.envs import EnvSpec
from archzoo.learners.r2d2 import R2D2Learner, R2D2LossConfig
from archzoo.nets import RecurrentQNetwork
from archzoo.replay.frames import FrameLayout
from archzoo.replay.memory import FieldSpec

__all__ = ["R2D2Builder", "run"]  # run: Ape-X's roles, with this builder's parts


class R2D2Builder(ApexBuilder):
    """R2D2's parts: the recurrent Q-network, the sequence actor, sequences as replay items
    and the R2D2 learner; the roles, the replay server and the priority updates are
    Ape-X's."""

    inserts = "sequences"
    cfg: R2D2Config

    def loss(self) -> R2D2LossConfig:
        cfg = self.cfg
        return R2D2LossConfig(gamma=cfg.gamma, n_step=cfg.n_step, burn_in=cfg.burn_in,
                              eta=cfg.priority_eta, rescale_eps=cfg.rescale_eps)

    def q_network(self, spec: EnvSpec) -> RecurrentQNetwork:
        """The recurrent Q-network (``--core lstm[:SIZE]``), its initial parameters drawn
        from ``cfg.seed``."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        size, prev = core(cfg)
        return RecurrentQNetwork(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.model,
                                 spec.obs_dtype, size, prev)

    def learner(self, spec: EnvSpec) -> R2D2Learner:
        cfg = self.cfg
        return R2D2Learner(self.q_network(spec), self.loss(), cfg.lr, cfg.target_update,
                           cfg.max_grad_norm, torch.device(cfg.device),
                           schedule=lr_schedule(cfg))

    def actor(self, spec: EnvSpec, model: Any, eps: float | Any, seed: int) -> SequenceActor:
        """An actor that adds a sequence every length − ``--sequence-overlap`` steps."""
        cfg = self.cfg
        return SequenceActor(spec, cfg.envs_per_actor, cfg.sequence_length,
                             cfg.sequence_length - cfg.sequence_overlap, model, eps, seed,
                             self.loss())

    def items(self, spec: EnvSpec) -> FieldSpec:
        """A sequence, with the recurrent state it starts from."""
        size, prev = core(self.cfg)
        return sequence_fields(spec, self.cfg.sequence_length, size, prev)

    def frames(self, frame_ndim: int) -> FrameLayout:
        """A new sequence every stride steps: about stride frames stored per sequence."""
        stride = self.cfg.sequence_length - self.cfg.sequence_overlap
        return FrameLayout(("obs",), frame_ndim, stride + 3)
