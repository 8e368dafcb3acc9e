"""The recurrent core of IMPALA and SEED RL (``--core lstm``; archzoo/nets.py
``RecurrentActorCritic``).

- The core's state resets exactly where an episode starts, inside an unroll too: on a
  hand-built unroll with an episode end in the middle, the learner's outputs after the reset
  equal those of a fresh state, whatever the state before it.
- The learner's replay of the core over an unroll (from the unroll's initial state, with the
  resets the flags imply) gives the logits the actor computed while acting, on real unrolls
  of CartPoleNoVel that carry the state from one unroll to the next.
- SEED RL's server answers every env from its own state (actors/core_states.py): the
  same logits as a per-env loop of the model, whatever the batches' composition; GA3C's
  predictors do the same, and each agent's unroll, stamped with the state its first step
  was answered from, replays to the logits the agent acted on.
- ``archzoo run impala|seed --core lstm`` runs on ``archzoo/CartPoleNoVel-v1`` in one
  process, embedded, under mpiexec and under torchrun; a bad ``--core`` is refused with
  exit 2.
- ``archzoo/CartPoleNoVel-v1`` is CartPole-v1 seen through ``[x, theta]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from archzoo.actors.unroll import UnrollActor, core_inputs, unroll_schema
from archzoo.envs import env_spec, make_vector_env
from archzoo.learners.vtrace import ImpalaLossConfig
from archzoo.learners.vtrace_learner import VTraceLearner, batch_unrolls
from archzoo.memory_envs import CARTPOLE_NOVEL_ID
from archzoo.nets import RecurrentActorCritic
from tests.mp import describe, run_mpi
from tests.runs import cli, load_run, torchrun

ENV = CARTPOLE_NOVEL_ID
SIZE = 16


def _model(prev: bool, seed: int = 0) -> RecurrentActorCritic:
    torch.manual_seed(seed)
    return RecurrentActorCritic((2,), 2, hidden=8, core_size=SIZE, prev_action_reward=prev)


def _learner(model: RecurrentActorCritic) -> VTraceLearner:
    return VTraceLearner(model, ImpalaLossConfig(), 1e-3, 1.0, torch.device("cpu"))


# -- (a) resets inside an unroll ------------------------------------------------------------
@pytest.mark.parametrize("prev", [False, True])
def test_state_resets_exactly_where_an_episode_starts(prev: bool) -> None:
    """Step 3 is the autoreset step (valid False), so x_4 starts an episode: the learner's
    logits and values from x_4 on equal a fresh state's on x_4.. (first there), and differ
    before it between two initial states; an env with no episode end never resets."""
    T, E, end = 8, 2, 3
    spec = env_spec(ENV)
    model = _model(prev)
    msg = unroll_schema(spec, T, E, SIZE, prev).new()
    rng = np.random.default_rng(0)
    msg["obs"][:] = rng.normal(size=msg["obs"].shape)
    msg["actions"][:] = rng.integers(0, 2, size=(T, E))
    msg["rewards"][:] = rng.normal(size=(T, E))
    msg["valid"][:] = True
    msg["valid"][end, 0] = False  # env 0: step 2 ended an episode, step 3 autoresets
    msg["core_h0"][:] = rng.normal(size=(E, SIZE))
    msg["core_c0"][:] = rng.normal(size=(E, SIZE))
    if prev:
        msg["prev_action0"][:] = 1
        msg["prev_reward0"][:] = 0.5
    learner = _learner(model)
    with torch.no_grad():
        logits, values = learner.logits_and_values(batch_unrolls([msg], learner.device))
        other = unroll_schema(spec, T, E, SIZE, prev).new()
        other.copy_from(msg)
        other["core_h0"][:] = 0.0
        other["core_c0"][:] = rng.normal(size=(E, SIZE))
        logits2, values2 = learner.logits_and_values(batch_unrolls([other], learner.device))
        # a fresh start at x_{end+1} of env 0: zero state, first there
        b = batch_unrolls([msg], learner.device)
        x = core_inputs(b)
        s = end + 1
        fresh_first = torch.zeros(T + 1 - s, 1, dtype=torch.bool)
        fresh_first[0] = True
        fresh_logits, fresh_values, _ = model.unroll(
            b["obs"][s:, :1], model.initial_state(1), fresh_first,
            *(None if x[k] is None else x[k][s:, :1] for k in ("prev_action", "prev_reward")))
    assert x["first"][:, 0].tolist() == [i == s for i in range(T + 1)]
    assert not x["first"][:, 1].any()
    # after the reset: the same as a fresh state, whatever the state before (to float error)
    torch.testing.assert_close(logits[s, 0], fresh_logits[0, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(values[s, 0], fresh_values[0, 0], rtol=0, atol=1e-6)
    assert torch.equal(logits[s:, 0], logits2[s:, 0]) and torch.equal(values[s:, 0],
                                                                        values2[s:, 0])
    # ... and from then on the fresh state's own recurrence, step by step
    torch.testing.assert_close(logits[s:, 0][:T - s], fresh_logits[:T - s, 0], rtol=0, atol=1e-5)
    torch.testing.assert_close(values[s:, 0], fresh_values[:, 0], rtol=0, atol=1e-5)
    # before the reset, and in the env that never resets, the initial state matters
    assert not torch.allclose(values[:s, 0], values2[:s, 0])
    assert not torch.allclose(values[:, 1], values2[:, 1])


def test_first0_resets_the_unrolls_initial_state() -> None:
    """``first0``: x_0 starts an episode, so the state the unroll carries is not used."""
    T, E = 4, 1
    spec = env_spec(ENV)
    model = _model(False)
    learner = _learner(model)
    out = []
    for h in (0.0, 3.0):
        msg = unroll_schema(spec, T, E, SIZE).new()
        msg["obs"][:] = 0.1
        msg["valid"][:] = True
        msg["first0"][:] = True
        msg["core_h0"][:] = h
        msg["core_c0"][:] = h
        with torch.no_grad():
            out.append(learner.logits_and_values(batch_unrolls([msg], learner.device)))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


# -- (b) the learner's replay equals what the actor computed -------------------------------
@pytest.mark.parametrize("prev", [False, True])
def test_learner_replay_equals_the_actors_logits(prev: bool) -> None:
    """Three real unrolls of 4 envs on CartPoleNoVel (a random-ish policy: episodes of ~20
    steps, so several end inside unrolls): replaying the core over each unroll, alone or
    batched with the others, from its ``core_h0``/``core_c0`` with the resets of
    ``first0``/``valid``, gives the behaviour logits the actor recorded step by step."""
    T, E = 20, 4
    spec = env_spec(ENV)
    model = _model(prev, seed=1)
    actor = UnrollActor(spec, E, T, model, seed=5)
    schema = unroll_schema(spec, T, E, SIZE, prev)
    msgs = [schema.new() for _ in range(3)]
    try:
        for m in msgs:
            actor.collect(m)
    finally:
        actor.close()
    # resets happen inside the unrolls, and unrolls carry a state (not zeros) between them
    assert sum(int((~m["valid"][:-1]).sum()) for m in msgs) >= 2
    assert np.abs(msgs[1]["core_h0"]).sum() > 0 and np.abs(msgs[2]["core_c0"]).sum() > 0
    learner = _learner(model)
    with torch.no_grad():
        for m in msgs:
            logits, _ = learner.logits_and_values(batch_unrolls([m], learner.device))
            np.testing.assert_allclose(logits.numpy(), m["behaviour_logits"], rtol=0, atol=1e-5)
        logits, _ = learner.logits_and_values(batch_unrolls(msgs, learner.device))
    np.testing.assert_allclose(logits.numpy(), np.concatenate([m["behaviour_logits"]
                                                               for m in msgs], 1),
                               rtol=0, atol=1e-5)


def test_each_unroll_starts_where_the_last_ended() -> None:
    """The state an unroll carries is the actor's state after the previous unroll's last
    step: the replay of unroll k's core, run one more observation, ends in unroll k+1's
    ``core_h0``/``core_c0``."""
    T, E = 10, 3
    spec = env_spec(ENV)
    model = _model(True, seed=2)
    actor = UnrollActor(spec, E, T, model, seed=1)
    schema = unroll_schema(spec, T, E, SIZE, True)
    a, b = schema.new(), schema.new()
    try:
        actor.collect(a)
        actor.collect(b)
    finally:
        actor.close()
    with torch.no_grad():
        bt = batch_unrolls([a], torch.device("cpu"))
        x = core_inputs(bt)
        # the actor's steps were x_0..x_{T-1}; the last observation x_T belongs to unroll b
        _, _, (h, c) = model.unroll(bt["obs"][:T], (bt["core_h0"], bt["core_c0"]),
                                    x["first"][:T], x["prev_action"][:T], x["prev_reward"][:T])
    np.testing.assert_allclose(h.numpy(), b["core_h0"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), b["core_c0"], rtol=0, atol=1e-6)
    assert np.array_equal(b["first0"], ~a["valid"][-1])
    assert np.array_equal(b["prev_action0"], a["actions"][-1])
    assert np.array_equal(b["prev_reward0"], a["rewards"][-1])


# -- the environment ----------------------------------------------------------------------
def test_cartpole_novel_is_cartpole_without_velocities() -> None:
    spec = env_spec(ENV)
    assert (spec.obs_shape, spec.obs_dtype, spec.num_actions) == ((2,), "<f4", 2)
    full, novel = make_vector_env("CartPole-v1", 3), make_vector_env(ENV, 3)
    try:
        o1, _ = full.reset(seed=7)
        o2, _ = novel.reset(seed=7)
        assert np.array_equal(o1[:, [0, 2]], o2)
        rng = np.random.default_rng(0)
        for _ in range(60):  # through episode ends and autoresets
            a = rng.integers(0, 2, 3)
            s1, s2 = full.step(a), novel.step(a)
            assert np.array_equal(s1[0][:, [0, 2]], s2[0])
            for x, y in zip(s1[1:4], s2[1:4], strict=True):
                assert np.array_equal(x, y)
    finally:
        full.close()
        novel.close()


def test_breakout_notrail_is_minatar_breakout_without_its_trail() -> None:
    from archzoo.memory_envs import BREAKOUT_NOTRAIL_ID

    spec = env_spec(BREAKOUT_NOTRAIL_ID)
    assert (spec.obs_shape, spec.obs_dtype) == ((10, 10, 3), "|b1") and spec.image
    full = make_vector_env("MinAtar/Breakout-v1", 3)
    notrail = make_vector_env(BREAKOUT_NOTRAIL_ID, 3)
    try:
        o1, _ = full.reset(seed=5)
        o2, _ = notrail.reset(seed=5)
        keep = [0, 1, 3]  # paddle, ball, brick of [paddle, ball, trail, brick]
        assert np.array_equal(o1[..., keep], o2)
        rng = np.random.default_rng(1)
        trail_seen = False
        for _ in range(300):  # through episode ends and autoresets
            a = rng.integers(0, spec.num_actions, 3)
            s1, s2 = full.step(a), notrail.step(a)
            assert np.array_equal(s1[0][..., keep], s2[0])
            trail_seen |= bool(s1[0][..., 2].any())
            for x, y in zip(s1[1:4], s2[1:4], strict=True):
                assert np.array_equal(x, y)
        assert trail_seen  # the channel that was removed held something
    finally:
        full.close()
        notrail.close()


def test_breakout_flicker_blanks_half_of_minatar_breakouts_screens() -> None:
    """Every observation is Breakout's or all zeros; about half are zeros, independently
    per env; the same seed flickers the same way; rewards and ends are Breakout's."""
    from archzoo.memory_envs import BREAKOUT_FLICKER_ID

    spec = env_spec(BREAKOUT_FLICKER_ID)
    assert (spec.obs_shape, spec.obs_dtype) == ((10, 10, 4), "|b1") and spec.image
    full = make_vector_env("MinAtar/Breakout-v1", 4)
    flicker = [make_vector_env(BREAKOUT_FLICKER_ID, 4) for _ in range(2)]
    try:
        full.reset(seed=3)
        blank = []
        for f in flicker:
            o, _ = f.reset(seed=3)
            blank.append([not o[i].any() for i in range(4)])
        rng = np.random.default_rng(2)
        for _ in range(400):  # through episode ends and autoresets
            a = rng.integers(0, spec.num_actions, 4)
            s1, s2, s3 = full.step(a), flicker[0].step(a), flicker[1].step(a)
            assert np.array_equal(s2[0], s3[0])  # the same seed, the same flicker
            for i in range(4):
                shown = s2[0][i].any()
                assert not shown or np.array_equal(s2[0][i], s1[0][i])
                blank.append([not s2[0][i].any()])
            for x, y in zip(s1[1:4], s2[1:4], strict=True):
                assert np.array_equal(x, y)
        share = np.mean([b for row in blank for b in row])
        assert 0.4 < share < 0.6, share  # 1,608 draws at p = 0.5 (and a few empty screens)
    finally:
        full.close()
        for f in flicker:
            f.close()


# -- SEED RL: the server's state per env ----------------------------------------------------
@pytest.mark.parametrize("prev", [False, True])
def test_seed_server_answers_each_env_as_a_loop_over_its_own_state(prev: bool) -> None:
    """Two actors of three envs, answered in batches of every composition (one actor, both,
    either order) over 12 steps with episode starts and a restarted actor: each env's logits
    equal a step-by-step loop of the model over that env's observations alone."""
    from archzoo.actors.batched_policy import BatchedPolicy, request_schema
    from archzoo.actors.core_states import CoreStates

    model, E, actors = _model(prev, seed=3), 3, [1, 2]
    spec = env_spec(ENV)
    states = CoreStates(model, actors, E)
    policy = BatchedPolicy(model, torch.device("cpu"), seed=0)
    rng = np.random.default_rng(0)
    ref = {(a, e): (model.initial_state(1), 0) for a in actors for e in range(E)}
    orders = [[1, 2], [2, 1], [1], [2]]
    for step in range(12):
        order = orders[step % 4]
        reqs = []
        for a in order:
            req = request_schema(spec, E).new()
            req["obs"][:] = rng.normal(size=(E, 2))
            req["valid"][:] = rng.random(E) > 0.3
            req["rewards"][:] = rng.normal(size=E)
            req["first"][...] = step < 2 or (a == 2 and step == 7)  # actor 2 restarts
            reqs.append(req)
        actions, logits, _, _ = states.answer(policy, order, reqs)
        for i, (a, req) in enumerate(zip(order, reqs, strict=True)):
            for e in range(E):
                state, pa = ref[a, e]
                first = bool(req["first"]) or not bool(req["valid"][e])
                with torch.no_grad():
                    lg, _, state = model(torch.as_tensor(req["obs"][e:e + 1]), state,
                                         torch.tensor([first]), torch.tensor([pa]),
                                         torch.tensor([float(req["rewards"][e])]))
                np.testing.assert_allclose(logits[i * E + e], lg[0].numpy(), rtol=1e-5,
                                           atol=1e-6)
                assert states.before[a]["first0"][e] == first
                ref[a, e] = (state, int(actions[i * E + e]))  # the previous action


# -- GA3C: the predictors' states, stamped on the agents' unrolls --------------------------
@pytest.mark.parametrize("prev", [False, True])
def test_ga3c_stamped_unrolls_replay_to_the_predictors_logits(prev: bool) -> None:
    """Two GA3C agents on CartPoleNoVel, their steps answered alternately from the
    predictors' core states (actors/core_states.py with T): each unroll, stamped on arrival
    with the state its first step was answered from, replays to the behaviour logits the
    agent acted on (episodes end inside the unrolls); an agent's restart starts afresh."""
    from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
    from archzoo.actors.core_states import CoreStates
    from archzoo.actors.remote import LocalPolicyClient, RemoteUnrollActor

    T, E, agents = 15, 3, [1, 2]
    spec = env_spec(ENV)
    model = _model(prev, seed=4)
    states = CoreStates(model, agents, E, unroll_length=T)
    policy = BatchedPolicy(model, torch.device("cpu"), seed=0)

    class Client(LocalPolicyClient):  # agent a's requests, answered as the predictors do
        def __init__(self, agent: int) -> None:
            super().__init__(policy, request_schema(spec, E), reply_schema(spec, E), agent)
            self.agent = agent

        def request(self):  # noqa: ANN202 - LocalPolicyClient's
            actions, logits, values, _ = states.answer(policy, [self.agent], [self.req])
            rep = self.rep
            rep["actions"][:], rep["logits"][:], rep["values"][:] = actions, logits, values
            self.req["first"][...] = False
            return rep

    actors = {a: RemoteUnrollActor(spec, E, T, Client(a), seed=10 * a) for a in agents}
    schema = unroll_schema(spec, T, E, SIZE, prev)
    learner = _learner(model)
    resets = 0
    try:
        for k in range(4):
            if k == 2:  # agent 2 restarts: a new incarnation, nothing carries over
                actors[2].close()
                actors[2] = RemoteUnrollActor(spec, E, T, Client(2), seed=99)
            got = {}
            for a in agents:  # the agents' unrolls interleave: 1, 2, then arrive
                got[a] = schema.new()
                actors[a].collect(got[a])
            for a in agents:
                states.unroll_start(a, got[a])
                with torch.no_grad():
                    logits, _ = learner.logits_and_values(batch_unrolls([got[a]],
                                                                        learner.device))
                np.testing.assert_allclose(logits.numpy(), got[a]["behaviour_logits"],
                                           rtol=0, atol=1e-5)
                assert got[a]["first0"].all() == (k == 0 or (k == 2 and a == 2))
                resets += int((~got[a]["valid"][:-1]).sum())
    finally:
        for actor in actors.values():
            actor.close()
    assert resets >= 2  # episodes ended inside the unrolls
    assert all(not q for q in states.starts.values())  # every start was taken


# -- A3C, A2C and GALA: segments ----------------------------------------------------------
def test_a2c_gradient_replays_the_actors_core_over_each_segment() -> None:
    """An actor-learner's segments carry their initial core state: unrolling the core over
    a segment from it gives the logits the actor acted on, across episode ends and from one
    segment to the next; the gradient reaches the core."""
    from archzoo.actors.segment import SegmentActor
    from archzoo.learners.a2c import A2CConfig, a2c_gradient

    model = _model(True, seed=5)
    seen: list[torch.Tensor] = []
    forward = model.forward

    def recording(*args: object) -> object:
        out = forward(*args)
        seen.append(out[0].clone())
        return out

    model.forward = recording  # type: ignore[method-assign]
    actor = SegmentActor(env_spec(ENV), 3, 25, model, seed=2)
    segments = [actor.collect() for _ in range(3)]
    model.forward = forward  # type: ignore[method-assign]
    assert not all(seg.valid.all() for seg in segments)  # episodes end inside
    for k, seg in enumerate(segments):
        b = {**{n: torch.as_tensor(v) for n, v in seg.core.items()},
             "valid": torch.as_tensor(seg.valid), "actions": torch.as_tensor(seg.actions),
             "rewards": torch.as_tensor(seg.rewards)}
        x = core_inputs(b)
        with torch.no_grad():
            logits, _, _ = model.unroll(torch.as_tensor(seg.obs), (b["core_h0"], b["core_c0"]),
                                        x["first"], x["prev_action"], x["prev_reward"])
        acted = torch.stack(seen[25 * k:25 * (k + 1)])
        torch.testing.assert_close(logits[:-1], acted, rtol=1e-5, atol=1e-6)
    grad, stats = a2c_gradient(model, segments[0], A2CConfig(max_grad_norm=None))
    sizes = [p.numel() for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]
    offsets = np.cumsum([0, *sizes])
    core = [i for i, n in enumerate(names) if n.startswith("core.")]
    assert all(np.abs(grad[offsets[i]:offsets[i + 1]]).sum() > 0 for i in core)
    assert np.isfinite(stats["loss"])


# -- (c) runs -------------------------------------------------------------------------------
RUN = ["--env", ENV, "--core", "lstm:32", "--total-steps", "3000", "--envs-per-actor", "4",
       "--quiet", "--no-tensorboard", "--seed", "1"]


def _check(d: Path, backend: str, world_size: int) -> dict:
    s = load_run(d)
    assert (s["backend"], s["world_size"]) == (backend, world_size), s
    assert s["env_steps"] >= 3000 and s["learner_updates"] > 0 and s["episodes"] > 0
    assert json.loads((d / "config.json").read_text())["core"] == "lstm:32"
    params = torch.load(d / "policy.pt", weights_only=True)["state_dict"]
    assert params["core.weight_hh"].shape == (4 * 32, 32)
    return s


@pytest.mark.parametrize("argv", [["--actors", "0", "--core-prev-action-reward"],
                                  ["--actors", "2"],
                                  ["--actors", "2", "--mode", "sync",
                                   "--core-prev-action-reward"]])
def test_run_embedded(tmp_path: Path, argv: list[str]) -> None:
    d = tmp_path / "run"
    r = cli("run", "impala", *argv, *RUN, "--run-dir", str(d))
    assert r.returncode == 0, r.stdout + r.stderr
    _check(d, "none" if argv[1] == "0" else "gloo", 1 if argv[1] == "0" else 3)
    if argv[1] == "0":  # archzoo eval runs the recurrent policy, its state reset per episode
        ev = cli("eval", str(d), "--episodes", "2")
        assert ev.returncode == 0, ev.stderr
        out = json.loads(ev.stdout)
        assert out["episodes"] == 2 and all(n > 0 for n in out["episode_lengths"]), out


CORE_ARCHS = ["impala", "seed", "ga3c", "a3c", "gala"]  # every actor-critic architecture


# each architecture under one launcher, mpiexec and torchrun taking turns: the core's state
# crosses each engine in two architectures or more
LAUNCHED = [(arch, ("mpiexec", "torchrun")[i % 2]) for i, arch in enumerate(CORE_ARCHS)]


@pytest.mark.parametrize("arch,launcher", LAUNCHED, ids=["-".join(c) for c in LAUNCHED])
def test_run_under_a_launcher(tmp_path: Path, arch: str, launcher: str) -> None:
    d = tmp_path / "run"
    if launcher == "mpiexec":
        job = run_mpi(3, ["-m", "archzoo", "run", arch, *RUN, "--run-dir", str(d)],
                      timeout_s=120)
        assert job.returncode == 0, describe(job)
    else:
        torchrun(3, "run", arch, *RUN, "--run-dir", str(d), timeout=120)
    _check(d, "mpi" if launcher == "mpiexec" else "gloo", 3)


def test_seed_runs_in_one_process_and_its_policy_is_evaluated(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "seed", "--actors", "0", "--core-prev-action-reward", *RUN,
            "--run-dir", str(d))
    assert r.returncode == 0, r.stdout + r.stderr
    _check(d, "none", 1)
    ev = cli("eval", str(d), "--episodes", "1")
    assert ev.returncode == 0 and json.loads(ev.stdout)["episodes"] == 1, ev.stderr


# -- (d) bad flags ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needle", [
    (["--core", "gru"], "--core 'gru': expected none, lstm or lstm:SIZE"),
    (["--core", "lstm:0"], "--core 'lstm:0'"),
    (["--core", "lstm:big"], "--core 'lstm:big'"),
    (["--core-prev-action-reward"], "add --core lstm"),
])
@pytest.mark.parametrize("arch", CORE_ARCHS)
def test_bad_core_exits_2_with_one_line(arch: str, argv: list[str], needle: str,
                                        capsys) -> None:
    from archzoo.cli import main

    assert main(["run", arch, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("archzoo: error:") and needle in err[0], err
