"""Typed run configurations: one frozen dataclass per architecture.

Each field is one flag (``unroll_length`` is ``--unroll-length``); its ``help`` metadata is
the text that ``archzoo run ARCH --help`` and the docs show. The command line, ``--config``
files and the Python API are views of these classes. :meth:`RunConfig.problem` checks a
config in one place, never changes it, and names the flag, the value and the rule.

This module imports neither torch nor gymnasium, so the CLI can build parsers quickly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from archzoo.model_shapes import core_size

T = TypeVar("T")

MODES = ("sync", "async")
TOPOLOGIES = ("star", "tree", "butterfly", "ring", "native")


def opt(default: T, help: str, *, choices: tuple[str, ...] | None = None,  # noqa: A002
        group: str | None = None, flag: bool = True, repeat: bool = False) -> T:
    """A config field: its default, its help text and (optionally) its allowed values.
    ``repeat``: a str field whose flag may be given several times (values joined by
    commas)."""
    return field(default=default, metadata={"help": help, "choices": choices, "group": group,
                                            "flag": flag, "repeat": repeat})


def filled(value: T | None, flag: str) -> T:
    """A field that archzoo.resolve fills in before any rank starts (``--topology``,
    ``--actors``, ``--run-dir``, ...): its value, or an error naming ``flag`` if unfilled."""
    if value is None:
        raise ValueError(f"{flag} is not resolved (archzoo.resolve fills it in)")
    return value


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


class Rules:
    """Collects the first broken rule of a config, phrased as flag, value and rule."""

    def __init__(self) -> None:
        self.problem: str | None = None

    def need(self, ok: bool, message: str) -> None:
        if not ok and self.problem is None:
            self.problem = message

    def at_least(self, cfg: object, name: str, low: float) -> None:
        v = getattr(cfg, name)
        self.need(v >= low, f"{flag_name(name)} must be >= {low:g}, got {v}")

    def positive(self, cfg: object, name: str) -> None:
        v = getattr(cfg, name)
        self.need(v > 0, f"{flag_name(name)} must be > 0, got {v}")

    def within(self, cfg: object, name: str, low: float, high: float) -> None:
        v = getattr(cfg, name)
        self.need(low <= v <= high, f"{flag_name(name)} must be in [{low:g}, {high:g}], got {v}")


@dataclass(frozen=True)
class RunConfig:
    """What every architecture takes: the environment, the launch, the limits, the logs."""

    arch: str = opt("", "architecture name", flag=False)
    env: str = opt("CartPole-v1", "gymnasium environment id (ALE/Pong-v5 and MinAtar/"
                   "Breakout-v1 style ids included), module:Id (module registers Id), or "
                   "package.module:make_env (a factory returning a gymnasium env)",
                   group="environment and model")
    env_kwargs: str = opt("", "JSON object of keyword arguments for gym.make (for ALE ids: "
                          "for AtariVectorEnv), e.g. '{\"repeat_action_probability\": 0.0}'",
                          group="environment and model")
    env_import: str = opt("", "module to import before the env is made, on every rank (one "
                          "of yours that registers --env's id); repeatable, or comma-separated",
                          group="environment and model", repeat=True)
    episodic_life: bool = opt(False, "ALE: a lost life ends the episode for the losses "
                              "(logged returns stay whole games)", group="environment and model")
    clip_rewards: bool | None = opt(None, "clip rewards to [-1, 1] inside the losses (default: "
                                    "on for ALE ids); logged returns stay raw game scores",
                                    group="environment and model")
    env_latency_ms: float = opt(0.0, "every vector step of an actor waits this many ms in a "
                                "sleep (no CPU), once for all its envs: a model of a remote or "
                                "slow simulator (archzoo/latency.py)",
                                group="environment and model")
    env_latency_jitter_ms: float = opt(0.0, "each wait drawn uniformly from --env-latency-ms "
                                       "± this (<= --env-latency-ms)",
                                       group="environment and model")
    env_latency_spin: float = opt(0.0, "fraction of each wait spent as CPU work instead of a "
                                  "sleep (a partly local simulator)",
                                  group="environment and model")
    model: str = opt("auto", "torso: mlp, nature-cnn, impala-cnn, impala-cnn-no-residual "
                     "(its residual blocks dropped), minatar-cnn (the MinAtar paper's) or "
                     "package.module:factory "
                     "(auto: a CNN for images, the MLP for vectors)",
                     group="environment and model")
    actors: int | None = opt(None, "actor processes (default 2; 0 = learner and actor in one "
                             "process, no transport; under a launcher it follows from the "
                             "world size)", group="run")
    envs_per_actor: int = opt(16, "vector envs per actor", group="run")
    backend: str | None = opt(None, "transport engine (default: mpi under mpiexec, else gloo)",
                              choices=("gloo", "mpi"), group="run")
    mode: str = opt("async", "sync: lock-step rounds, reproducible with --seed; async: no "
                    "rank waits for another", choices=MODES, group="run")
    topology: str | None = opt(None, "schedule of parameter broadcasts and reductions "
                               "(default: the architecture's own)", choices=TOPOLOGIES,
                               group="run")
    fanout: int = opt(2, "tree fan-out / butterfly radix m", group="run")
    servers_on: str = opt("first", "under torchrun or mpiexec: the ranks the launcher started "
                          "first (first) or last (last) hold the servers (learner, replay "
                          "and parameter-server shards, inference server): with several "
                          "nodes, node 0 or the last node", choices=("first", "last"),
                          group="run")
    total_steps: int = opt(2_000_000, "env-step budget", group="run")
    target_return: float | None = opt(None, "stop when the mean return of the last 100 "
                                      "episodes reaches this (default: the env's reward "
                                      "threshold, 475 for CartPole-v1)", group="run")
    time_limit: float = opt(600.0, "seconds", group="run")
    seed: int = opt(0, "seed of models, envs and sampling", group="run")
    run_dir: str | None = opt(None, "default runs/ARCH-ENV-BACKEND-TIME", group="run")
    device: str = opt("auto", "learner device", choices=("auto", "cpu", "cuda"), group="run")
    config: str | None = opt(None, "TOML or JSON file of flag values, or the name of a "
                             "bundled preset: minatar, atari (archzoo list --configs); "
                             "default: a MinAtar/ or ALE/ id takes its family's preset "
                             "(all but env, --total-steps and --time-limit); none: no preset",
                             group="run")
    comm_timeout: float = opt(60.0, "deadline (s) of every wait on a peer", group="run")
    startup_timeout: float = opt(120.0, "deadline (s) for all ranks to join", group="run")
    log_interval: float = opt(2.0, "seconds between metrics rows", group="run")
    threads: int = opt(1, "torch threads per process", group="run")
    learner_threads: int = opt(0, "torch threads of the process that runs the learner "
                               "(IMPALA, SEED RL, GA3C, Ape-X, Gorila, R2D2; with --actors 0, "
                               "the one process of every architecture); 0: --threads", group="run")
    quiet: bool = opt(False, "no progress display (a live panel on a terminal, else a line "
                             "per metrics row)", group="run")
    straggler: str | None = opt(None, "RANK:FACTOR: rank RANK steps its envs FACTOR times "
                                "slower (scales Synthetic-v0's step_cost_us; for studying "
                                "stragglers)", group="run")
    tensorboard: bool = opt(True, "TensorBoard event files in the run directory's "
                            "tensorboard/ (the metrics.csv columns and summary.json's numbers)",
                            group="run")
    wandb: bool = opt(False, "track the run in Weights & Biases (archzoo's wandb extra): "
                      "TensorBoard's scalars, the resolved config, summary.json and the videos "
                      "of --record-video; offline in RUN_DIR/wandb/ without a W&B login "
                      "(upload it with wandb sync)", group="run")
    record_video: float = opt(0.0, "seconds between videos of one greedy episode of the "
                              "current policy, and one of the final policy at the end, in "
                              "RUN_DIR/videos/step-ENV_STEPS.mp4 (0 = no videos)", group="run")
    checkpoint_interval: float = opt(300.0, "seconds between checkpoints of the deciding "
                                     "rank (one is also written at every stop)",
                                     group="reliability")
    keep_checkpoints: int = opt(3, "how many of the latest checkpoints to keep",
                                group="reliability")
    max_restarts: int = opt(0, "embedded and archzoo.run launches: restart a failed run "
                            "from its latest checkpoint up to this many times (with "
                            "backoff); under torchrun use its own --max-restarts",
                            group="reliability")
    min_actors: int = opt(1, "asynchronous modes: carry on while this many actors are alive "
                          "(an actor that dies is dropped and counted in summary.json)",
                          group="reliability")
    resume: str | None = opt(None, "RUN_DIR: continue that run from its latest checkpoint, "
                             "with the flags of its config.json (only the limits and the "
                             "logging and checkpoint flags may be given anew)",
                             group="reliability")

    # -- the shape of the run ------------------------------------------------------------
    default_topology = "star"
    builder: ClassVar[str | None] = None  # DQN family: ``module:NAME`` of its parts' builder

    # -- checks --------------------------------------------------------------------------
    def problem(self) -> str | None:
        """The first broken rule, as one line naming the flag, or None."""
        r = Rules()
        self.check(r)
        return r.problem

    def check(self, r: Rules) -> None:
        r.at_least(self, "learner_threads", 0)
        for name in ("envs_per_actor", "total_steps", "threads"):
            r.at_least(self, name, 1)
        r.at_least(self, "fanout", 2)
        for name in ("time_limit", "comm_timeout", "startup_timeout", "log_interval",
                     "checkpoint_interval"):
            r.positive(self, name)
        r.at_least(self, "keep_checkpoints", 1)
        r.at_least(self, "min_actors", 1)
        if self.actors:
            r.need(self.min_actors <= self.actors, f"--min-actors {self.min_actors} exceeds "
                   f"--actors {self.actors}: the run could never have that many alive (give "
                   f"--actors {self.min_actors} or more)")
        if self.wandb:
            from archzoo.extras import problem

            r.need(problem("wandb", "--wandb") is None, problem("wandb", "--wandb") or "")
        r.at_least(self, "max_restarts", 0)
        r.at_least(self, "record_video", 0)
        latency = latency_problem(self.env_latency_ms, self.env_latency_jitter_ms,
                                  self.env_latency_spin)
        r.need(latency is None, latency or "")
        if self.actors is not None:
            r.at_least(self, "actors", 0)
        if self.straggler is not None:
            r.need(self.straggler_problem() is None, self.straggler_problem() or "")

    def straggler_rank(self) -> tuple[int, float] | None:
        """``--straggler RANK:FACTOR`` as (rank, factor), or None when unset or malformed."""
        if self.straggler is None:
            return None
        rank, _, factor = self.straggler.partition(":")
        try:
            return int(rank), float(factor)
        except ValueError:
            return None

    def straggler_problem(self) -> str | None:
        got = self.straggler_rank()
        if got is None:
            return f"--straggler {self.straggler!r}: expected RANK:FACTOR, e.g. 2:4"
        rank, factor = got
        if rank < 0 or factor < 1:
            return f"--straggler {self.straggler}: RANK must be >= 0 and FACTOR >= 1"
        if self.env != "archzoo/Synthetic-v0" or not _step_cost(self.env_kwargs):
            return ("--straggler slows a rank through Synthetic-v0's step cost: use --env "
                    "archzoo/Synthetic-v0 --env-kwargs '{\"step_cost_us\": 50}'")
        return None

    def for_rank(self, rank: int) -> RunConfig:
        """This config as rank ``rank`` runs it: the straggler's step cost scaled."""
        got = self.straggler_rank()
        if got is None or got[0] != rank:
            return self
        kwargs = json.loads(self.env_kwargs)
        kwargs["step_cost_us"] = float(kwargs["step_cost_us"]) * got[1]
        return self.replace(env_kwargs=json.dumps(kwargs))

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def topology_name(self) -> str:
        """``--topology`` once resolved (archzoo.resolve gives each architecture its own
        default)."""
        return filled(self.topology, "--topology")


def latency_problem(ms: float, jitter_ms: float, spin: float) -> str | None:
    """The first broken rule of the env-latency flags (archzoo/latency.py), or None."""
    for flag, v in (("--env-latency-ms", ms), ("--env-latency-jitter-ms", jitter_ms),
                    ("--env-latency-spin", spin)):
        if not (math.isfinite(v) and v >= 0):
            return f"{flag} must be a finite number >= 0, got {v}"
    if jitter_ms > ms:
        return (f"--env-latency-jitter-ms {jitter_ms:g} must be <= --env-latency-ms {ms:g} "
                "(each wait is drawn from [L - J, L + J], its mean L)")
    if spin > 1:
        return f"--env-latency-spin must be in [0, 1] (a fraction of the wait), got {spin}"
    return None


def _step_cost(env_kwargs: str) -> float:
    """``step_cost_us`` of an --env-kwargs JSON object (0 when absent or unreadable)."""
    try:
        return float(json.loads(env_kwargs or "{}").get("step_cost_us", 0.0))
    except (ValueError, TypeError, AttributeError):
        return 0.0


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a config class that are command-line flags, in declaration order."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("flag", True)]


# -- the learners' hyper-parameters ---------------------------------------------------------


@dataclass(frozen=True)
class VTraceConfig(RunConfig):
    """Unrolls and the V-trace actor-critic learner (IMPALA, SEED RL, GA3C)."""

    unroll_length: int = opt(20, "T, steps per unroll", group="learner")
    batch_unrolls: int = opt(0, "unrolls per update (0 = one per actor); an asynchronous "
                             "learner waits for exactly this many", group="learner")
    lr: float = opt(1e-3, "learning rate", group="learner")
    optimizer: str = opt("adam", "optimizer (rmsprop: the IMPALA paper's, alpha 0.99 and eps "
                         "0.01, on the loss summed over the batch's steps; pair it with a "
                         "gradient clip such as --max-grad-norm 40)", choices=("adam", "rmsprop"),
                         group="learner")
    gamma: float = opt(0.99, "discount γ", group="learner")
    rho_bar: float = opt(1.0, "ρ̄, importance-weight clip (IMPALA eq. 1)", group="learner")
    c_bar: float = opt(1.0, "c̄, trace clip (IMPALA eq. 1)", group="learner")
    baseline_coef: float = opt(0.5, "value-loss weight", group="learner")
    entropy_coef: float = opt(0.01, "entropy-bonus weight", group="learner")
    lr_decay: bool = opt(False, "decay the learning rate linearly to 0 over the run's budget: "
                         "--total-steps env steps or --time-limit seconds, whichever is spent "
                         "faster (IMPALA's schedule)", group="learner")
    clip_ratio: float = opt(0.0, "ε > 0: PPO's clipped surrogate on the V-trace advantages, "
                            "with the behaviour policy as the old one (APPO); 0: the IMPALA "
                            "paper's policy gradient", group="learner")
    normalize_advantages: bool = opt(False, "normalise the policy term's advantages to mean 0 "
                                     "and std 1 over each (mini)batch's valid steps, as PPO's "
                                     "and APPO's implementations do", group="learner")
    epochs: int = opt(1, "passes over each batch (sample reuse as in PPO and APPO; pair it "
                      "with --clip-ratio)", group="learner")
    minibatches: int = opt(1, "gradient steps per pass, each on a random group of the "
                           "batch's steps (of its trajectories with a recurrent core)",
                           group="learner")
    max_grad_norm: float = opt(1.0, "gradient-norm clip", group="learner")
    hidden: int = opt(64, "MLP width", group="learner")

    def check(self, r: Rules) -> None:
        super().check(r)
        r.at_least(self, "unroll_length", 1)
        r.at_least(self, "epochs", 1)
        r.at_least(self, "minibatches", 1)
        groups = self.envs_per_actor * max(1, self.batch_unrolls)  # a batch's trajectories
        what = "trajectories of a batch, --envs-per-actor × --batch-unrolls"
        if getattr(self, "core", "none") == "none":  # feed-forward: groups of steps
            groups *= self.unroll_length
            what = "steps of a batch, --envs-per-actor × --batch-unrolls × --unroll-length"
        r.need(self.minibatches <= groups,
               f"--minibatches {self.minibatches} must be <= the {what} = {groups}")
        r.at_least(self, "batch_unrolls", 0)
        r.positive(self, "lr")
        r.within(self, "gamma", 0.0, 1.0)
        r.positive(self, "rho_bar")
        r.positive(self, "c_bar")
        r.at_least(self, "clip_ratio", 0)
        r.at_least(self, "hidden", 1)
        r.positive(self, "max_grad_norm")


@dataclass(frozen=True)
class InferenceConfig(VTraceConfig):
    """A batched inference server (SEED RL, GA3C) in front of the V-trace learner's model."""

    max_batch: int = opt(64, "most requests (each carries all E envs of one actor) per "
                         "forward pass", group="batched inference")
    max_wait_us: float = opt(1000.0, "longest wait (µs) after a batch's first request for "
                             "more; a batch closes early once every live actor is in it",
                             group="batched inference")

    def check(self, r: Rules) -> None:
        super().check(r)
        r.at_least(self, "max_batch", 1)
        r.at_least(self, "max_wait_us", 0)
        r.need(self.topology in (None, "star"),
               f"--topology {self.topology}: {self.arch} has no parameter broadcast to "
               "schedule (inference is central; actors hold no policy); use --topology star")


@dataclass(frozen=True)
class CoreFlags:
    """``--core``: a recurrent core between the torso and the heads (every actor-critic
    architecture; R2D2's Q-network)."""

    core: str = opt("none", "recurrent core between the torso and the heads: none, or "
                    "lstm[:SIZE], an LSTM of SIZE units (default --hidden), the IMPALA "
                    "paper's agent; its state resets at episode ends and every unroll or "
                    "segment carries its initial state (SEED RL: the inference server keeps "
                    "each env's)", group="environment and model")
    core_prev_action_reward: bool = opt(False, "--core lstm: feed the core the previous "
                                        "action (one-hot) and reward too, as the IMPALA and "
                                        "R2D2 papers' agents", group="environment and model")

    def check_core(self, r: Rules) -> None:
        try:
            core_size(self.core, getattr(self, "hidden", 0))
        except ValueError as e:
            r.need(False, str(e))
        r.need(not self.core_prev_action_reward or self.core != "none",
               "--core-prev-action-reward feeds the recurrent core: add --core lstm")


@dataclass(frozen=True)
class A2CRunConfig(RunConfig, CoreFlags):
    """n-step advantage actor-critic segments (A3C, A2C, GALA)."""

    t_max: int = opt(5, "steps per segment before a gradient (A3C's t_max)", group="learner")
    lr: float = opt(7e-4, "learning rate", group="learner")
    gamma: float = opt(0.99, "discount γ", group="learner")
    value_coef: float = opt(0.5, "value-loss weight", group="learner")
    entropy_coef: float = opt(0.01, "entropy-bonus weight", group="learner")
    max_grad_norm: float = opt(0.5, "gradient-norm clip", group="learner")
    hidden: int = opt(64, "MLP width", group="learner")
    optimizer: str = opt("rmsprop", "optimizer: RMSProp as in A3C (alpha 0.99; A3C's shards "
                         "share its statistics, GALA's agents keep their own) or Adam",
                         choices=("rmsprop", "adam"), group="learner")
    rms_eps: float = opt(1e-5, "RMSProp ε", group="learner")

    def check(self, r: Rules) -> None:
        super().check(r)
        self.check_core(r)
        r.positive(self, "rms_eps")
        r.at_least(self, "t_max", 1)
        r.positive(self, "lr")
        r.within(self, "gamma", 0.0, 1.0)
        r.at_least(self, "hidden", 1)
        r.positive(self, "max_grad_norm")
        r.need(self.device != "cuda", f"--device cuda: {self.arch or 'this architecture'} "
               "computes its gradients in CPU actor-learner processes (no central learner "
               "to put on a GPU); use --device cpu or auto")


# -- the architectures ----------------------------------------------------------------------


@dataclass(frozen=True)
class ImpalaConfig(VTraceConfig, CoreFlags):
    """IMPALA: rank 0 learns, ranks 1..N act."""

    max_inflight: int = opt(1, "async: unrolls an actor may have sent that the learner has "
                            "not yet taken into a batch (1: each unroll starts once the "
                            "learner took the last, with the parameters it published then; "
                            "more: faster actors, more policy lag)", group="learner")

    def check(self, r: Rules) -> None:
        super().check(r)
        r.at_least(self, "max_inflight", 1)
        self.check_core(r)
        r.need(self.topology != "native" or self.mode == "sync",
               "--topology native needs --mode sync: torch.distributed's collectives block "
               "every rank (async IMPALA broadcasts latest-wins over star, tree, butterfly "
               "or ring)")


@dataclass(frozen=True)
class SeedConfig(InferenceConfig, CoreFlags):
    """SEED RL: rank 0 serves inference and learns, ranks 1..N only step envs (with a core,
    the inference server keeps every env's state)."""

    def check(self, r: Rules) -> None:
        super().check(r)
        self.check_core(r)


@dataclass(frozen=True)
class Ga3cConfig(InferenceConfig, CoreFlags):
    """GA3C: rank 0 runs predictor and trainer threads around one model; 1..N are agents
    (with a core, the predictors keep every env's state)."""

    loss: str = opt("a3c", "trainer loss: A3C's n-step advantage (GA3C) or V-trace (IMPALA)",
                    choices=("a3c", "vtrace"), group="GA3C threads and queues")
    predictors: int = opt(1, "predictor threads", group="GA3C threads and queues")
    trainers: int = opt(1, "trainer threads", group="GA3C threads and queues")
    prediction_queue: int = opt(64, "bound of the prediction queue (requests)",
                                group="GA3C threads and queues")
    training_queue: int = opt(8, "bound of the training queue (unrolls)",
                              group="GA3C threads and queues")

    def check(self, r: Rules) -> None:
        for name in ("predictors", "trainers", "prediction_queue", "training_queue"):
            r.at_least(self, name, 1)
        r.need(self.mode != "sync", "--mode sync: GA3C is asynchronous by design (agents, "
               "predictors and trainers run freely); use --mode async, or seed/impala for a "
               "sync mode")
        r.need(self.clip_ratio == 0 or self.loss == "vtrace", f"--clip-ratio {self.clip_ratio}"
               ": the clip applies to the V-trace loss; add --loss vtrace")
        r.need(not self.normalize_advantages or self.loss == "vtrace",
               "--normalize-advantages applies to the V-trace loss; add --loss vtrace")
        r.need(self.epochs == self.minibatches == 1 or self.loss == "vtrace",
               "--epochs and --minibatches (sample reuse) apply to the V-trace loss; add "
               "--loss vtrace")
        super().check(r)
        self.check_core(r)


APEX_EVAL_WINDOW = 3  # evaluations that Ape-X's "solved" averages


@dataclass(frozen=True)
class ApexConfig(RunConfig):
    """Ape-X: rank 0 learns, then the replay shards, then the actors."""

    builder: ClassVar[str | None] = "archzoo.builders:ApexBuilder"

    checkpoint_replay: bool = opt(False, "every rank that holds a replay memory also "
                                  "checkpoints it (RUN_DIR/checkpoints/replay-rank<r>.pt), and "
                                  "--resume restores it", group="reliability")
    replay_capacity: int = opt(100_000, "transitions, all shards", group="replay")
    replay_shards: int = opt(1, "replay ranks (0 = replay inside the learner process)",
                             group="replay")
    n_step: int = opt(3, "n of the n-step return", group="learner")
    batch_size: int = opt(128, "learner batch", group="learner")
    alpha: float = opt(0.6, "priority exponent α (Schaul et al. 2016)", group="replay")
    beta: float = opt(0.4, "importance-weight exponent β", group="replay")
    learning_starts: int = opt(2000, "transitions in replay before sampling starts",
                               group="replay")
    samples_per_insert: float = opt(4.0, "target samples per inserted item; sampling and "
                                    "inserting wait to keep it (0 = no limit)", group="replay")
    eps_base: float = opt(0.4, "ε of the ladder", group="actors")
    eps_alpha: float = opt(7.0, "α of the ε ladder", group="actors")
    eps_ladder: int = opt(0, "--actors 0: split the envs into K groups, group i acting with "
                          "actor i's ε of a K-actor ladder (the exploration of a K-actor run, "
                          "for an equal-exploration baseline); 0: every env at --eps-base",
                          group="actors")
    actor_batch: int = opt(256, "transitions per actor->replay message", group="actors")
    lr: float = opt(1e-3, "learning rate", group="learner")
    lr_decay: bool = opt(False, "decay the learning rate linearly to 0 over the run's budget: "
                         "--total-steps env steps of all actors or --time-limit seconds, "
                         "whichever is spent faster (IMPALA's schedule)", group="learner")
    gamma: float = opt(0.99, "discount γ", group="learner")
    target_update: int = opt(250, "learner updates between target-network refreshes",
                             group="learner")
    max_grad_norm: float = opt(10.0, "gradient-norm clip", group="learner")
    hidden: int = opt(128, "MLP width", group="learner")
    dueling: bool = opt(True, "dueling head (Wang et al. 2016)", group="learner")
    publish_every: int = opt(10, "learner updates between parameter broadcasts",
                             group="learner")
    eval_interval: float = opt(1.0, "seconds between an actor's greedy evaluations",
                               group="actors")
    eval_episodes: int = opt(10, "greedy episodes per evaluation; solved = the mean of the "
                             f"last {APEX_EVAL_WINDOW} evaluations' episodes >= target",
                             group="actors")
    prioritized: bool = opt(True, "prioritized replay (Schaul et al. 2016)", group="replay",
                            flag=False)

    def insert_capacity(self) -> int:
        """Most transitions in one actor->replay message (a batch plus the n-step tails)."""
        return self.actor_batch + self.envs_per_actor * self.n_step

    def check(self, r: Rules) -> None:
        super().check(r)
        for name in ("replay_capacity", "batch_size", "n_step", "actor_batch", "target_update",
                     "hidden", "publish_every", "eval_episodes"):
            r.at_least(self, name, 1)
        for name in ("alpha", "replay_shards", "learning_starts", "samples_per_insert"):
            r.at_least(self, name, 0)
        r.within(self, "beta", 0.0, 1.0)
        r.need(0 < self.eps_base <= 1, f"--eps-base must be in (0, 1], got {self.eps_base}")
        r.positive(self, "lr")
        r.within(self, "gamma", 0.0, 1.0)
        r.positive(self, "eval_interval")
        r.at_least(self, "eps_ladder", 0)
        r.need(self.eps_ladder == 0 or not self.actors, f"--eps-ladder {self.eps_ladder} "
               "applies to --actors 0 (one process); with actors each explores with its own "
               "rung of the ladder")
        r.need(self.eps_ladder <= self.envs_per_actor, f"--eps-ladder {self.eps_ladder} "
               f"exceeds --envs-per-actor {self.envs_per_actor}: every rung needs an env")
        r.need(self.replay_capacity >= max(1, self.replay_shards) * self.batch_size,
               f"--replay-capacity {self.replay_capacity} must hold at least one batch "
               f"(--batch-size {self.batch_size}) per replay shard")
        r.need(self.learning_starts <= self.replay_capacity,
               f"--learning-starts {self.learning_starts} exceeds --replay-capacity "
               f"{self.replay_capacity}: sampling would never start")
        r.need(self.topology != "native", f"{self.arch} cannot use --topology native: "
               "torch.distributed's collectives block every rank, and its actors never wait "
               "(parameters go latest-wins over star, tree, butterfly or ring)")
        r.need(self.mode == "async", f"{self.arch} has no --mode sync: its actors, replay and "
               "learner never wait for each other (use --mode async)")
        if self.actors:
            r.need(self.replay_shards <= self.actors,
                   f"--replay-shards {self.replay_shards} exceeds --actors {self.actors}: "
                   "every shard needs an actor")


@dataclass(frozen=True)
class R2D2Config(ApexConfig, CoreFlags):
    """R2D2: Ape-X's roles (rank 0 learns, then the replay shards, then the actors) on
    sequences of a recurrent Q-network (Kapturowski et al. 2019)."""

    builder: ClassVar[str | None] = "archzoo.builders:R2D2Builder"

    core: str = opt("lstm", "the recurrent core: lstm[:SIZE], an LSTM of SIZE units "
                    "(default --hidden)", group="environment and model")
    sequence_length: int = opt(80, "steps per replayed sequence, burn-in included",
                               group="R2D2")
    sequence_overlap: int = opt(40, "steps adjacent sequences share (a new sequence every "
                                "length − overlap steps)", group="R2D2")
    burn_in: int = opt(40, "steps at a sequence's start that only unroll the network from the "
                       "stored state (no loss)", group="R2D2")
    priority_eta: float = opt(0.9, "η of the sequence priority η·max|δ| + (1 − η)·mean|δ|",
                              group="R2D2")
    rescale_eps: float = opt(1e-3, "ε of the value rescaling h(x) = sign(x)(√(|x|+1) − 1) + εx",
                             group="R2D2")
    n_step: int = opt(5, "n of the n-step return", group="learner")
    gamma: float = opt(0.997, "discount γ", group="learner")
    replay_capacity: int = opt(10_000, "sequences, all shards", group="replay")
    learning_starts: int = opt(200, "sequences in replay before sampling starts",
                               group="replay")
    batch_size: int = opt(32, "learner batch (sequences)", group="learner")
    actor_batch: int = opt(16, "sequences per actor->replay message", group="actors")
    samples_per_insert: float = opt(8.0, "target samples per inserted sequence; sampling and "
                                    "inserting wait to keep it (0 = no limit)", group="replay")
    lr: float = opt(1e-3, "learning rate (Adam, ε 1e-3)", group="learner")
    target_update: int = opt(250, "learner updates between target-network refreshes",
                             group="learner")

    def insert_capacity(self) -> int:
        """Most sequences in one actor->replay message (each step may add one per env)."""
        return self.actor_batch + self.envs_per_actor

    def check_within_length(self, r: Rules, name: str, why: str = "") -> None:
        """``name`` (the overlap or the burn-in) in [0, --sequence-length). Where a
        --sequence-length of the user's leaves it at a default that no longer fits, the
        line names that flag and the default that follows from it."""
        v, n = getattr(self, name), self.sequence_length
        if 0 <= v < n:
            return
        fields = type(self).__dataclass_fields__
        if v == fields[name].default and n != fields["sequence_length"].default:
            r.need(False, f"--sequence-length {n} leaves {flag_name(name)} at its default "
                   f"{v}, which must be below it{f' ({why})' if why else ''}: give "
                   f"{flag_name(name)} in [0, {n}) too, e.g. {n // 2} (R2D2's "
                   f"{fields['sequence_length'].default}-step sequences take {v})")
        r.need(False, f"{flag_name(name)} must be in [0, --sequence-length {n})"
               f"{f': {why}' if why else ''}, got {v}")

    def check(self, r: Rules) -> None:
        super().check(r)
        self.check_core(r)
        r.need(self.core != "none", "r2d2 needs its recurrent core: --core lstm[:SIZE]")
        r.at_least(self, "sequence_length", 2)
        self.check_within_length(r, "sequence_overlap")
        self.check_within_length(r, "burn_in", "a sequence needs a step to learn from")
        r.within(self, "priority_eta", 0.0, 1.0)
        r.positive(self, "rescale_eps")


@dataclass(frozen=True)
class GorilaConfig(ApexConfig):
    """Gorila: parameter-server shards, one replay memory, L learners, then the actors."""

    ps_shards: int = opt(1, "parameter-server ranks", group="Gorila")
    learners: int = opt(1, "learner ranks", group="Gorila")
    prioritized: bool = opt(False, "prioritized replay (Gorila's is uniform by default)",
                            group="Gorila")
    staleness: int | None = opt(None, "drop gradients computed on parameters more than S "
                                "versions old", group="Gorila")
    param_sync_every: int = opt(1, "actor batches between parameter pulls", group="Gorila")

    def check(self, r: Rules) -> None:
        r.need(not self.lr_decay, "--lr-decay: gorila's parameter-server shards apply the "
               "gradients with their own optimiser, which keeps a constant learning rate; "
               "use apex or r2d2 for a decayed one")
        r.need(self.topology in (None, "star", "native") or self.ps_shards == 1,
               f"gorila --topology {self.topology}: the pushed broadcast to the actors "
               f"starts from one shard holding the whole model (use --ps-shards 1, not "
               f"{self.ps_shards})")
        r.need(self.replay_shards == 1, f"--replay-shards {self.replay_shards}: gorila has one "
               "replay memory (its own rank); leave --replay-shards at 1")
        r.at_least(self, "ps_shards", 1)
        r.at_least(self, "learners", 1)
        if self.staleness is not None:
            r.at_least(self, "staleness", 0)
        r.at_least(self, "param_sync_every", 1)
        r.need(self.device != "cuda" or self.actors == 0, "--device cuda: gorila's learner "
               "ranks compute on the CPU (only --actors 0 uses --device); use --device cpu "
               "or auto")
        super().check(r)


@dataclass(frozen=True)
class A3CConfig(A2CRunConfig):
    """A3C / A2C: parameter-server shards first, then the actor-learners."""

    ps_shards: int = opt(1, "parameter-server ranks", group="parameter server")
    ps_drop: int = opt(0, "sync: D, gradients a round may go without (it waits for W - D)",
                       group="parameter server")
    staleness: int | None = opt(None, "async: drop gradients computed on parameters more than "
                                "S versions old", group="parameter server")

    @property
    def all_reduce(self) -> bool:
        """A2C without a server: sync mode over a topology other than the star."""
        return self.mode == "sync" and self.topology not in (None, "star")

    def check(self, r: Rules) -> None:
        r.need(self.topology in (None, "star") or self.mode == "sync",
               f"a3c cannot use --topology {self.topology} in --mode async: its workers push "
               "gradients to the parameter server as they go (star); all-reduce over a "
               "topology is A2C's, in lock-step rounds (--mode sync)")
        if self.all_reduce:
            r.need(self.ps_shards == 1, f"--ps-shards {self.ps_shards}: all-reduce A2C "
                   f"(--topology {self.topology}) has no parameter server")
            r.need(self.ps_drop == 0, f"--ps-drop {self.ps_drop}: an all-reduce round needs "
                   "every worker (a collective); drop stragglers with --topology star")
        r.at_least(self, "ps_shards", 1)
        if self.staleness is not None:
            r.at_least(self, "staleness", 0)
        r.at_least(self, "ps_drop", 0)
        workers = max(1, self.actors or 0)
        r.need(self.ps_drop < workers, f"--ps-drop {self.ps_drop} must be < the number of "
               f"actor-learners W = {workers} (a round waits for W - D of them)")
        super().check(r)


@dataclass(frozen=True)
class GalaConfig(A2CRunConfig):
    """GALA/PALA: every rank is an agent; rank 0 also keeps the learning curve."""

    gossip_every: int = opt(1, "local updates between gossip rounds", group="GALA")
    default_topology = "ring"

    def check(self, r: Rules) -> None:
        r.need(self.topology in (None, "ring"), f"gala cannot use --topology {self.topology}: "
               "its agents gossip with their ring neighbours (--topology ring)")
        r.need(self.mode == "async", "gala has no --mode sync: its agents step on their own "
               "between gossip rounds")
        r.at_least(self, "gossip_every", 1)
        super().check(r)
