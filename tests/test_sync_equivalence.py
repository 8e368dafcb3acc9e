"""Distributed sync runs against single-process sequential references, bit for bit.

``--mode sync`` promises that a distributed IMPALA or SEED run is the sequential algorithm
executed by several processes: every round each actor contributes one unroll (IMPALA) or one
inference request (SEED) in rank order, and the learner's steps see exactly the data a single
process would have produced. These tests run the real CLI (gloo processes on loopback, or MPI
under mpiexec), then rebuild the algorithm in the test process from the components alone
(actors, the learner, the inference policy and unroll builder; no transport, no architecture
module) with the same seeds and hyper-parameters, and require the final parameters to be
*equal* (``torch.equal``), and the step, episode, update and batch counts and the mean return
to match exactly.

What the comparison can and cannot catch: the reference uses the same actor, learner and
loss code as the run, so a bug inside those (say a sign in the V-trace loss) changes both
sides alike and is caught by their own unit tests (test_vtrace.py, test_unroll.py,
test_unroll_builder.py), not here. What it catches is every way the distributed plumbing can
depart from the sequential algorithm: an unroll skipped, duplicated or taken out of rank
order, parameters not delivered (or delivered one version late) before the next unroll,
requests batched in another order, a learner step at another time, wrong per-rank seeds,
hyper-parameter flags that do not reach the learner, a corrupted parameter or unroll message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
from archzoo.actors.core_states import CoreStates
from archzoo.actors.remote import SeedActor
from archzoo.actors.unroll import UnrollActor, unroll_schema
from archzoo.envs import env_spec
from archzoo.learners.unroll_builder import UnrollBuilder
from archzoo.learners.vtrace import ImpalaLossConfig
from archzoo.nets import ActorCritic, RecurrentActorCritic, get_flat, num_params, set_flat
from archzoo.seeding import actor_seed
from tests.runs import cli, load_run

try:  # the learner class is being renamed (learners/vtrace_learner.py)
    from archzoo.learners.vtrace_learner import VTraceLearner as Learner
except ImportError:  # pragma: no cover - the name before the rename
    from archzoo.learners.impala import ImpalaLearner as Learner

ENV = "CartPole-v1"
ACTORS = (1, 2)  # ranks of the actors; rank 0 is the learner
# Non-default values on purpose: a flag that does not reach the learner changes the result.
HP = dict(seed=11, envs_per_actor=4, unroll_length=10, hidden=32, lr=2e-3, gamma=0.97,
          rho_bar=0.9, c_bar=0.8, baseline_coef=0.4, entropy_coef=0.02, max_grad_norm=0.7,
          optimizer="rmsprop", total_steps=3000)


def _flags(hp: dict) -> list[str]:
    return [a for k, v in hp.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _actor_seed(seed: int, rank: int) -> int:
    """Every architecture seeds rank r's envs and sampling from one SeedSequence."""
    return actor_seed(seed, rank)


def _model(hp: dict, spec, core: tuple[int, bool] = (0, False)) -> torch.nn.Module:
    """The run's network: feed-forward, or with ``core`` = (size, previous action and
    reward) the recurrent one of ``--core lstm:SIZE`` (``--core-prev-action-reward``)."""
    if core[0]:
        return RecurrentActorCritic(spec.obs_shape, spec.num_actions, hp["hidden"], "mlp",
                                    spec.obs_dtype, *core)
    return ActorCritic(spec.obs_shape, spec.num_actions, hp["hidden"])


def _learner(hp: dict, spec, core: tuple[int, bool] = (0, False)) -> Learner:
    """The learner a run starts from: the model initialised right after manual_seed(seed)."""
    torch.manual_seed(hp["seed"])
    model = _model(hp, spec, core)
    loss_cfg = ImpalaLossConfig(gamma=hp["gamma"], rho_bar=hp["rho_bar"], c_bar=hp["c_bar"],
                                baseline_coef=hp["baseline_coef"],
                                entropy_coef=hp["entropy_coef"])
    return Learner(model, loss_cfg, hp["lr"], hp["max_grad_norm"], torch.device("cpu"),
                   hp["optimizer"])


class Tally:
    """The deciding rank's accounting, kept by the reference: steps, episodes, returns."""

    def __init__(self) -> None:
        self.steps = 0
        self.returns: list[float] = []

    def add(self, valid: np.ndarray, ep_returns: np.ndarray) -> None:
        self.steps += int(valid.sum())
        self.returns.extend(float(r) for r in ep_returns)

    def mean_return(self) -> float:
        last = self.returns[-100:]
        return sum(last) / len(last)


def _run(tmp: Path, arch: str, backend: str, hp: dict,
         extra: tuple[str, ...] = ()) -> tuple[dict, dict[str, torch.Tensor]]:
    d = tmp / arch
    r = cli("run", arch, "--actors", str(len(ACTORS)), "--mode", "sync", "--backend", backend,
            *_flags(hp), *extra, "--quiet", "--run-dir", str(d))
    assert r.returncode == 0, r.stdout + r.stderr
    s = load_run(d)
    assert (s["backend"], s["world_size"], s["mode"], s["topology"], s["stop_reason"]) == \
        (backend, 3, "sync", "star", "steps"), s
    return s, torch.load(d / "policy.pt", weights_only=True)["state_dict"]


def _assert_same_params(run: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    ref = model.state_dict()
    assert run.keys() == ref.keys()
    for k in ref:
        same = torch.equal(run[k], ref[k])
        assert same, f"{k} differs from the reference: max |Δ| {(run[k] - ref[k]).abs().max()}"


# ---------------------------------------------------------------------------------------------
# IMPALA
# ---------------------------------------------------------------------------------------------
def impala_reference(hp: dict, env: str = ENV,
                     core: tuple[int, bool] = (0, False)) -> tuple[Learner, Tally]:
    """Sequential sync IMPALA: each round every actor collects one unroll with the current
    parameters, the learner takes one V-trace step on the unrolls in rank order, and the new
    parameters go to every actor; until the valid env steps reach the budget. ``core``: the
    recurrent core's (size, previous action and reward), each actor keeping its core states
    from one unroll to the next."""
    spec = env_spec(env)
    learner = _learner(hp, spec, core)
    E, T = hp["envs_per_actor"], hp["unroll_length"]
    actors = [UnrollActor(spec, E, T, _model(hp, spec, core), _actor_seed(hp["seed"], r))
              for r in ACTORS]
    schema = unroll_schema(spec, T, E, *core)
    msgs = [schema.new() for _ in actors]
    flat = np.zeros(num_params(learner.model), np.float32)
    tally = Tally()
    try:
        while tally.steps < hp["total_steps"]:
            get_flat(learner.model, flat)
            for a, m in zip(actors, msgs, strict=True):
                set_flat(a.model, flat)
                a.collect(m)
                tally.add(m["valid"], m["ep_returns"][:int(m["ep_count"])])
            learner.update(msgs)
    finally:
        for a in actors:
            a.close()
    return learner, tally


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_sync_impala_equals_sequential_reference(tmp_path: Path, backend: str) -> None:
    s, params = _run(tmp_path, "impala", backend, HP)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every rank runs (--threads 1)
    try:
        learner, tally = impala_reference(HP)
    finally:
        torch.set_num_threads(threads)
    assert s["learner_updates"] == learner.version > 10
    assert (s["env_steps"], s["episodes"]) == (tally.steps, len(tally.returns))
    _assert_same_params(params, learner.model)
    assert s["final_mean_return"] == tally.mean_return()


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_sync_impala_with_a_recurrent_core_equals_sequential_reference(tmp_path: Path,
                                                                        backend: str) -> None:
    """``--core lstm:16 --core-prev-action-reward`` on CartPoleNoVel: the actors' core states
    and the unrolls' initial states travel as the sequential algorithm's do, bit for bit."""
    env, core = "archzoo/CartPoleNoVel-v1", (16, True)
    s, params = _run(tmp_path, "impala", backend, HP,
                     ("--env", env, "--core", "lstm:16", "--core-prev-action-reward"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every rank runs (--threads 1)
    try:
        learner, tally = impala_reference(HP, env, core)
    finally:
        torch.set_num_threads(threads)
    assert s["learner_updates"] == learner.version > 10
    assert (s["env_steps"], s["episodes"]) == (tally.steps, len(tally.returns))
    assert any(k.startswith("core.") for k in params)
    _assert_same_params(params, learner.model)
    assert s["final_mean_return"] == tally.mean_return()


# ---------------------------------------------------------------------------------------------
# SEED RL
# ---------------------------------------------------------------------------------------------
class LockstepClient:
    """A SeedActor's policy client in the reference: the request is answered by the batch the
    reference computes for all actors at once; :meth:`request` hands that answer over."""

    def __init__(self, req_schema, rep_schema) -> None:
        self.req, self.rep = req_schema.new(), rep_schema.new()
        self.req["first"][...] = True
        self.req["run_id"][...] = 1
        self.round_trip_s = 0.0
        self.seq = 0

    def request(self):
        self.seq += 1
        self.req["first"][...] = False
        return self.rep


def seed_reference(hp: dict, env: str = ENV,
                   core: tuple[int, bool] = (0, False)) -> tuple[Learner, Tally, int]:
    """Sequential sync SEED: each round one batch holds every actor's request in rank order
    (one forward pass, Gumbel-max sampling over the whole batch); each answered step grows
    that actor's unroll; once every actor has a complete unroll the learner takes one V-trace
    step on them in rank order (before the next batch is answered); then every actor steps
    its envs with its actions. Stops when the valid env steps reach the budget; returns the
    learner, the tally and the number of batches answered. ``core``: the recurrent core's
    (size, previous action and reward), every env answered from its own state
    (actors/core_states.py), each unroll opened with the state of its first step."""
    spec = env_spec(env)
    learner = _learner(hp, spec, core)
    states = CoreStates(learner.model, ACTORS, hp["envs_per_actor"]) if core[0] else None
    E, T = hp["envs_per_actor"], hp["unroll_length"]
    policy = BatchedPolicy(learner.model, learner.device, hp["seed"],
                           version_of=lambda: learner.version)
    req_s, rep_s = request_schema(spec, E), reply_schema(spec, E)
    clients = [LockstepClient(req_s, rep_s) for _ in ACTORS]
    actors = [SeedActor(spec, E, c, _actor_seed(hp["seed"], r))
              for c, r in zip(clients, ACTORS, strict=True)]
    u_schema = unroll_schema(spec, T, E, *core)
    builders = [UnrollBuilder(u_schema, T) for _ in ACTORS]
    complete: list = []
    tally = Tally()
    batches = 0
    try:
        while True:
            if states is None:
                obs = np.concatenate([c.req["obs"] for c in clients])
                actions, logits, values, version = policy.forward(obs)
            else:
                actions, logits, values, version = states.answer(
                    policy, ACTORS, [c.req for c in clients])
            batches += 1
            for i, (c, b) in enumerate(zip(clients, builders, strict=True)):
                rows = slice(i * E, (i + 1) * E)
                c.rep["actions"][:], c.rep["logits"][:] = actions[rows], logits[rows]
                c.rep["values"][:], c.rep["version"][...] = values[rows], version
                if not bool(c.req["first"]):
                    tally.add(c.req["valid"], c.req["ep_returns"][:int(c.req["ep_count"])])
                unroll = b.add(c.req, c.rep,
                               None if states is None else states.before[ACTORS[i]])
                if unroll is not None:
                    complete.append(unroll)
            if len(complete) >= len(ACTORS):
                learner.update(complete[:len(ACTORS)])
                del complete[:len(ACTORS)]
            if tally.steps >= hp["total_steps"]:
                break
            for a in actors:
                a.step()
    finally:
        for a in actors:
            a.close()
    return learner, tally, batches


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_sync_seed_equals_sequential_reference(tmp_path: Path, backend: str) -> None:
    hp = dict(HP, total_steps=2000)
    s, params = _run(tmp_path, "seed", backend, hp)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        learner, tally, batches = seed_reference(hp)
    finally:
        torch.set_num_threads(threads)
    inf = s["inference"]
    assert (inf["batches"], inf["requests"]) == (batches, batches * len(ACTORS)), inf
    assert s["learner_updates"] == learner.version > 10
    # each actor's first request opens its unroll; every T more close one, all together
    assert learner.version == (batches - 1) // hp["unroll_length"]
    assert (s["env_steps"], s["episodes"]) == (tally.steps, len(tally.returns))
    _assert_same_params(params, learner.model)
    assert s["final_mean_return"] == tally.mean_return()



@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_sync_seed_with_a_recurrent_core_equals_sequential_reference(tmp_path: Path,
                                                                      backend: str) -> None:
    """``--core lstm:16 --core-prev-action-reward`` on CartPoleNoVel: the server's per-env
    core states and the unrolls' initial states are the sequential algorithm's, bit for
    bit."""
    env, core = "archzoo/CartPoleNoVel-v1", (16, True)
    hp = dict(HP, total_steps=2000)
    s, params = _run(tmp_path, "seed", backend, hp,
                     ("--env", env, "--core", "lstm:16", "--core-prev-action-reward"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        learner, tally, batches = seed_reference(hp, env, core)
    finally:
        torch.set_num_threads(threads)
    assert s["inference"]["batches"] == batches
    assert s["learner_updates"] == learner.version > 10
    assert (s["env_steps"], s["episodes"]) == (tally.steps, len(tally.returns))
    assert any(k.startswith("core.") for k in params)
    _assert_same_params(params, learner.model)
    assert s["final_mean_return"] == tally.mean_return()
