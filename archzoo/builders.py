"""Models, learners and replay memories built from a run's config.

Every rank that needs the same network builds it here, so the learner, the actors and a
parameter server start from the same parameters (``torch.manual_seed(cfg.seed)`` first).
policy.pt's ``meta`` (:func:`policy_meta`) records what ``archzoo eval`` needs to rebuild it.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from archzoo import eager, envs
from archzoo.actors.sequences import SequenceActor, sequence_fields
from archzoo.actors.transitions import TransitionActor
from archzoo.actors.unroll import unroll_schema
from archzoo.config import (
    A2CRunConfig,
    ApexConfig,
    CoreFlags,
    R2D2Config,
    RunConfig,
    VTraceConfig,
)
from archzoo.envs import EnvSpec
from archzoo.learners.a2c import A2CConfig
from archzoo.learners.dqn import DQNConfig, DQNLearner, QNetwork
from archzoo.learners.ga3c import A3CUnrollLearner
from archzoo.learners.r2d2 import R2D2Learner, R2D2LossConfig
from archzoo.learners.schedule import Schedule, TrainingBudget
from archzoo.learners.vtrace import ImpalaLossConfig
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.messages import Schema
from archzoo.model_shapes import core_size
from archzoo.nets import ActorCritic, RecurrentActorCritic, RecurrentQNetwork
from archzoo.paramserver import make_optimizer
from archzoo.records import PolicyMeta
from archzoo.replay.frames import FrameLayout
from archzoo.replay.memory import FieldSpec, PrioritizedReplay, UniformReplay
from archzoo.replay.server import insert_schema, memory_fields, reply_schema, request_schema
from archzoo.topology.star import params_schema


def env_spec(cfg: RunConfig) -> EnvSpec:
    """The environment as the flags make it (id, kwargs, episodic life, reward clipping,
    the latency of an actor's vector step)."""
    from archzoo.latency import EnvLatency

    latency = EnvLatency(cfg.env_latency_ms, cfg.env_latency_jitter_ms, cfg.env_latency_spin)
    return envs.env_spec(cfg.env, cfg.env_kwargs, episodic_life=cfg.episodic_life,
                         clip_rewards=cfg.clip_rewards, imports=cfg.env_import,
                         latency=latency)


def core(cfg: RunConfig) -> tuple[int, bool]:
    """The recurrent core of ``--core`` (IMPALA's flag; none elsewhere): its width (0: none)
    and whether it takes the previous action and reward."""
    size = core_size(getattr(cfg, "core", "none"), getattr(cfg, "hidden", 0))
    return size, bool(size and getattr(cfg, "core_prev_action_reward", False))


def actor_critic(cfg: VTraceConfig | A2CRunConfig,
                 spec: EnvSpec) -> ActorCritic | RecurrentActorCritic:
    """The policy/value network, its initial parameters drawn from ``cfg.seed``: feed-forward,
    or with ``--core lstm`` the recurrent IMPALA agent."""
    torch.manual_seed(cfg.seed)
    size, prev = core(cfg)
    if size:
        return RecurrentActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.model,
                                    spec.obs_dtype, size, prev)
    return ActorCritic(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.model, spec.obs_dtype)


def unrolls(cfg: VTraceConfig, spec: EnvSpec) -> Schema:
    """The unroll message of ``cfg``: with a recurrent core, its initial state too."""
    size, prev = core(cfg)
    return unroll_schema(spec, cfg.unroll_length, cfg.envs_per_actor, size, prev)


def learner_threads(cfg: RunConfig) -> None:
    """The learner's process takes ``--learner-threads`` torch threads (if set): its updates
    are what bounds a learner-bound run, and its actors wait while it trains."""
    if cfg.learner_threads:
        torch.set_num_threads(cfg.learner_threads)


def vtrace_learner(cfg: VTraceConfig, spec: EnvSpec, loss: str = "vtrace") -> VTraceLearner:
    """The actor-critic learner: V-trace (IMPALA, SEED) or A3C's loss (GA3C's default)."""
    learner_threads(cfg)
    loss_cfg = ImpalaLossConfig(gamma=cfg.gamma, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar,
                                baseline_coef=cfg.baseline_coef, entropy_coef=cfg.entropy_coef,
                                clip_ratio=cfg.clip_ratio,
                                normalize_advantages=cfg.normalize_advantages)
    cls = A3CUnrollLearner if loss == "a3c" else VTraceLearner
    return cls(actor_critic(cfg, spec), loss_cfg, cfg.lr, cfg.max_grad_norm,
               torch.device(cfg.device), cfg.optimizer, epochs=cfg.epochs,
               minibatches=cfg.minibatches, schedule=lr_schedule(cfg),
               budget=TrainingBudget(cfg.total_steps, cfg.time_limit))


def a2c_loss_config(cfg: A2CRunConfig) -> A2CConfig:
    return A2CConfig(gamma=cfg.gamma, t_max=cfg.t_max, value_coef=cfg.value_coef,
                     entropy_coef=cfg.entropy_coef, max_grad_norm=cfg.max_grad_norm)


def agent_optimizer(cfg: A2CRunConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """A GALA agent's own update rule: RMSProp as in A3C (alpha 0.99, ``--rms-eps``), or
    Adam (Kingma & Ba 2015) with ``--optimizer adam``."""
    if cfg.optimizer == "rmsprop":
        return eager.optimizer(torch.optim.RMSprop, model.parameters(), lr=cfg.lr,
                               alpha=0.99, eps=cfg.rms_eps)
    return eager.optimizer(torch.optim.Adam, model.parameters(), lr=cfg.lr)


def ps_optimizer(cfg: A2CRunConfig) -> Any:
    """The parameter server's update rule: A3C's shared RMSProp, or Adam."""
    if cfg.optimizer == "rmsprop":
        return make_optimizer("rmsprop", cfg.lr, alpha=0.99, eps=cfg.rms_eps)
    return make_optimizer("adam", cfg.lr)


class ApexBuilder:
    """The parts of a DQN-family architecture, built from its config (as Acme's agent
    builders): Ape-X's and Gorila's are a feed-forward (dueling) Q-network, the
    double-DQN learner, the ε-greedy actor of n-step transitions and replay items that are
    transitions. A config class names its builder (``builder``, archzoo/config.py);
    R2D2's (:class:`R2D2Builder`) changes the parts and keeps Ape-X's roles."""

    inserts = "transitions"  # what the actors' messages to replay carry

    def __init__(self, cfg: ApexConfig) -> None:
        self.cfg = cfg

    def q_network(self, spec: EnvSpec) -> QNetwork | RecurrentQNetwork:
        """The Q-network, its initial parameters drawn from ``cfg.seed``."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        return QNetwork(spec.obs_shape, spec.num_actions, cfg.hidden, cfg.dueling, cfg.model,
                        spec.obs_dtype)

    def learner(self, spec: EnvSpec) -> DQNLearner:
        """The double-DQN learner (Horgan et al. 2018, Algorithm 2), its learning rate on
        ``--lr-decay``'s schedule."""
        cfg = self.cfg
        dqn = DQNConfig(lr=cfg.lr, target_update_period=cfg.target_update,
                        max_grad_norm=cfg.max_grad_norm)
        return DQNLearner(self.q_network(spec), dqn, torch.device(cfg.device),
                          schedule=lr_schedule(cfg))

    def actor(self, spec: EnvSpec, model: Any, eps: float | Any,
              seed: int) -> TransitionActor | SequenceActor:
        """The ε-greedy actor of n-step transitions with initial priorities."""
        cfg = self.cfg
        return TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, eps,
                               seed)

    def items(self, spec: EnvSpec) -> FieldSpec:
        """What one replay item holds: an n-step transition."""
        return memory_fields(spec.obs_shape, spec.obs_dtype)

    def frames(self, frame_ndim: int) -> FrameLayout:
        """How replay keeps an image item's observations: frames stored once, the
        transition's ``obs`` and ``next_obs`` rebuilt from them."""
        return FrameLayout(("obs", "next_obs"), frame_ndim)

    def policy_meta(self) -> dict[str, Any]:
        """What policy.pt's meta adds for a Q-network."""
        return {"net": "q", "dueling": self.cfg.dueling}


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


def dqn_builder(cfg: ApexConfig) -> ApexBuilder:
    """The builder of ``cfg``'s DQN-family parts: the one its config class names
    (``builder``, ``module:NAME``)."""
    if cfg.builder is None:
        raise TypeError(f"{type(cfg).__name__} names no builder of DQN-family parts")
    module, _, name = cfg.builder.partition(":")
    return getattr(importlib.import_module(module), name)(cfg)


def lr_schedule(cfg: VTraceConfig | ApexConfig) -> Schedule:
    """Every learner's learning rate: ``--lr``, with ``--lr-decay`` decayed linearly to 0
    over the budget that the learner follows (learners/schedule.py)."""
    return Schedule(cfg.lr, decay=cfg.lr_decay)


def q_network(cfg: ApexConfig, spec: EnvSpec) -> QNetwork | RecurrentQNetwork:
    """The Q-network of ``cfg``'s builder (R2D2's: the recurrent one)."""
    return dqn_builder(cfg).q_network(spec)


def learner_q_network(cfg: ApexConfig, spec: EnvSpec) -> QNetwork | RecurrentQNetwork:
    """The Q-network of a learner that is not a :func:`dqn_learner` (Gorila's learner ranks,
    which push gradients to a parameter server); its process takes ``--learner-threads``."""
    learner_threads(cfg)
    return q_network(cfg, spec)


def dqn_learner(cfg: ApexConfig, spec: EnvSpec) -> DQNLearner:
    """The learner of ``cfg``'s builder: Ape-X's and Gorila's double-DQN learner, or R2D2's
    on sequences; its process takes ``--learner-threads``."""
    learner_threads(cfg)
    return dqn_builder(cfg).learner(spec)


def transition_actor(cfg: ApexConfig, spec: EnvSpec, model: Any, eps: float | Any,
                     seed: int) -> TransitionActor | SequenceActor:
    """The ε-greedy actor of ``cfg``'s builder: n-step transitions (Ape-X, Gorila) or
    sequences (R2D2)."""
    return dqn_builder(cfg).actor(spec, model, eps, seed)


def replay_items(cfg: ApexConfig, spec: EnvSpec) -> FieldSpec:
    """What one replay item holds: an n-step transition, or R2D2's sequence."""
    return dqn_builder(cfg).items(spec)


def replay_memory(cfg: ApexConfig, spec: EnvSpec, capacity: int, seed: int) -> UniformReplay:
    """Prioritized (Ape-X, R2D2; Gorila with --prioritized) or uniform (Gorila's default)
    replay."""
    family = dqn_builder(cfg)
    fields = family.items(spec)
    # images are kept as frames stored once: an Atari stack is 4 frames of 84×84, any
    # other image one frame (the builder says how its items' observations are kept)
    frames = None
    if spec.image:
        frames = family.frames(2 if spec.atari else len(spec.obs_shape))
    if not cfg.prioritized:
        return UniformReplay(capacity, fields, seed=seed, frames=frames)
    return PrioritizedReplay(capacity, fields, alpha=cfg.alpha, frames=frames,
                             beta=cfg.beta, seed=seed)


def replay_digests(cfg: ApexConfig, spec: EnvSpec, n_params: int) -> dict[str, str]:
    """Schema digests of the parameters, inserts and sample messages (start-up check)."""
    return {"params": params_schema(n_params).digest(),
            "transitions": replay_inserts(cfg, spec).digest(),
            "request": request_schema(cfg.batch_size).digest(),
            "reply": reply_schema(replay_items(cfg, spec), cfg.batch_size).digest()}


def insert_name(cfg: ApexConfig) -> str:
    """What the actors' messages to replay carry: transitions or sequences."""
    return dqn_builder(cfg).inserts


def replay_inserts(cfg: ApexConfig, spec: EnvSpec) -> Schema:
    """The actor->replay message: a batch of items with their initial priorities."""
    return insert_schema(replay_items(cfg, spec), cfg.insert_capacity(), insert_name(cfg))


def policy_meta(cfg: VTraceConfig | A2CRunConfig | ApexConfig, spec: EnvSpec) -> PolicyMeta:
    """What ``archzoo eval`` needs to rebuild the policy saved in policy.pt."""
    meta: PolicyMeta = {"arch": cfg.arch, "env": spec.env_id, "obs_shape": list(spec.obs_shape),
            "obs_dtype": spec.obs_dtype, "num_actions": spec.num_actions,
            "hidden": cfg.hidden, "model": cfg.model, "env_kwargs": dict(spec.kwargs),
            "episodic_life": spec.episodic_life, "env_import": list(spec.imports)}
    if isinstance(cfg, ApexConfig) and cfg.builder is not None:  # the DQN family: a Q-net
        meta.update(dqn_builder(cfg).policy_meta())
    if core(cfg)[0] and isinstance(cfg, CoreFlags):
        meta.update(core=cfg.core, core_prev_action_reward=cfg.core_prev_action_reward)
    return meta
