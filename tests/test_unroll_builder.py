"""Tests of learners/unroll_builder.py: SEED's unrolls, assembled from inference traffic.

No transport: a SeedActor on CartPole-v1 (E = 3) asks a LocalPolicyClient, whose ``on_answer``
feeds an UnrollBuilder (T = 5) and also records the raw stream: per step k the request's
x_k, the reply's a_k, μ(·|x_k) and version, and what the NEXT request reports about step k
(reward, terminated, truncated, valid). Each completed unroll must be the slice of that
stream a naive reference cuts out: unroll j covers steps jT .. jT+T-1 and x_{jT} .. x_{jT+T}.
The stream itself is checked against an independently built vector env replayed with the
recorded actions, and the logits against the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from archzoo.actors.base import vector_seed
from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
from archzoo.actors.remote import LocalPolicyClient, SeedActor
from archzoo.actors.unroll import unroll_schema
from archzoo.comm import Message
from archzoo.envs import env_spec, make_vector_env
from archzoo.learners.unroll_builder import UnrollBuilder
from archzoo.nets import ActorCritic
from archzoo.seeding import env_seeds

ENV = "CartPole-v1"
E, T = 3, 5
SPEC = env_spec(ENV)
REQ_S, REP_S = request_schema(SPEC, E), reply_schema(SPEC, E)
U_SCHEMA = unroll_schema(SPEC, T, E)


def make_policy(seed: int = 0) -> BatchedPolicy:
    torch.manual_seed(seed)
    model = ActorCritic(SPEC.obs_shape, SPEC.num_actions, 32)
    with torch.no_grad():  # logits of order 1, so actions (and episodes) vary
        model.policy.weight.normal_(0.0, 1.0)
    return BatchedPolicy(model, torch.device("cpu"), seed)


@dataclass
class Stream:
    """What one actor incarnation sent and got, step by step (the naive reference)."""

    run_id: int
    env_seed: int
    obs: list[np.ndarray] = field(default_factory=list)       # x_k (request k)
    actions: list[np.ndarray] = field(default_factory=list)   # a_k (reply k)
    logits: list[np.ndarray] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)   # of step k (request k+1 says)
    terminated: list[np.ndarray] = field(default_factory=list)
    truncated: list[np.ndarray] = field(default_factory=list)
    valid: list[np.ndarray] = field(default_factory=list)
    # (index of the request that completed it, the unroll)
    unrolls: list[tuple[int, Message]] = field(default_factory=list)

    def cols(self, name: str) -> np.ndarray:
        return np.stack(getattr(self, name))


class Feeder:
    """The on_answer of every LocalPolicyClient: records, then feeds the builder."""

    def __init__(self, builder: UnrollBuilder) -> None:
        self.builder = builder
        self.stream: Stream | None = None

    def __call__(self, actor: int, req: Message, rep: Message) -> None:
        s = self.stream
        assert s is not None and actor == 0
        assert int(req["run_id"]) == s.run_id
        assert int(req["seq"]) == len(s.obs) == int(rep["seq"])
        assert bool(req["first"]) == (len(s.obs) == 0)
        s.obs.append(req["obs"].copy())
        s.actions.append(rep["actions"].copy())
        s.logits.append(rep["logits"].copy())
        s.versions.append(int(rep["version"]))
        u = self.builder.add(req, rep)
        if u is not None:
            s.unrolls.append((len(s.obs) - 1, u))


def run_incarnation(feeder: Feeder, policy: BatchedPolicy, run_id: int, env_seed: int,
                    steps: int, version_every: int = 7) -> Stream:
    """``steps`` SeedActor steps of one actor incarnation; the policy's version moves on."""
    stream = feeder.stream = Stream(run_id, env_seed)
    client = LocalPolicyClient(policy, REQ_S, REP_S, run_id, on_answer=feeder)
    actor = SeedActor(SPEC, E, client, env_seed)
    try:
        for k in range(steps):
            policy.version = 100 * run_id + k // version_every  # as seed.py's learner does
            actor.step()
            req = client.req  # now the next request: it reports step k
            stream.rewards.append(req["rewards"].copy())
            stream.terminated.append(req["terminated"].copy())
            stream.truncated.append(req["truncated"].copy())
            stream.valid.append(req["valid"].copy())
    finally:
        actor.close()
    assert len(stream.obs) == steps
    return stream


def check_stream_against_env(s: Stream, policy: BatchedPolicy) -> None:
    """The recorded stream is what the envs and the model say (so it can be a reference)."""
    envs = make_vector_env(ENV, E)
    try:
        obs, _ = envs.reset(seed=vector_seed(envs, env_seeds(s.env_seed, E)))
        assert np.array_equal(obs, s.obs[0])
        done_prev = np.zeros(E, bool)
        for k in range(len(s.obs)):
            obs, rew, term, trunc, _ = envs.step(s.actions[k])
            ok = ~done_prev
            assert np.array_equal(s.valid[k], ok), k
            assert np.array_equal(s.rewards[k], np.where(ok, rew, 0.0).astype(np.float32)), k
            assert np.array_equal(s.terminated[k], term & ok), k
            assert np.array_equal(s.truncated[k], trunc & ok), k
            if k + 1 < len(s.obs):
                assert np.array_equal(s.obs[k + 1], obs), k
            done_prev = (term | trunc) & ok
    finally:
        envs.close()
    with torch.no_grad():
        logits, _ = policy.model(torch.from_numpy(s.cols("obs").reshape(-1, *SPEC.obs_shape)))
    assert np.allclose(s.cols("logits").reshape(-1, SPEC.num_actions), logits.numpy(),
                       rtol=1e-5, atol=1e-6)


def check_unrolls(s: Stream) -> None:
    """Every completed unroll is its slice of the stream; consecutive ones share x_T/x_0."""
    n = len(s.obs)
    assert len(s.unrolls) == (n - 1) // T, (len(s.unrolls), n)
    for j, (closed_by, u) in enumerate(s.unrolls):
        a, b = j * T, j * T + T
        assert closed_by == b, f"unroll {j} completed by request {closed_by}, not {b}"
        assert np.array_equal(u["obs"], s.cols("obs")[a:b + 1]), j
        assert np.array_equal(u["actions"], s.cols("actions")[a:b]), j
        assert np.array_equal(u["behaviour_logits"], s.cols("logits")[a:b]), j
        for name in ("rewards", "terminated", "truncated", "valid"):
            assert np.array_equal(u[name], s.cols(name)[a:b]), (j, name)
            assert u[name].dtype == U_SCHEMA.new()[name].dtype
        assert int(u["version"]) == s.versions[a], (j, int(u["version"]), s.versions[a])
        if j + 1 < len(s.unrolls):
            assert np.array_equal(u["obs"][T], s.unrolls[j + 1][1]["obs"][0]), j
            assert u.buffer is not s.unrolls[j + 1][1].buffer  # every unroll a fresh message


def test_unrolls_are_slices_of_the_stream() -> None:
    policy = make_policy(0)
    builder = UnrollBuilder(U_SCHEMA, T)
    feeder = Feeder(builder)
    s = run_incarnation(feeder, policy, run_id=1, env_seed=7, steps=201)
    check_stream_against_env(s, policy)
    check_unrolls(s)
    assert len(s.unrolls) == 40
    assert builder.restarts == 0 and builder.dropped_steps == 0
    # The versions really varied, so the version check above could tell steps apart.
    assert len({int(u["version"]) for _, u in s.unrolls}) > 10
    # valid is False exactly on the steps that follow an episode end (autoreset steps) ...
    valid, ended = s.cols("valid"), s.cols("terminated") | s.cols("truncated")
    assert valid[0].all()
    assert np.array_equal(valid[1:], ~ended[:-1])
    assert (~valid).sum() >= 5, "too few episode ends to test anything"
    # ... and inside each unroll, including across its boundary with the previous one
    prev_end = np.zeros(E, bool)
    for _, u in s.unrolls:
        ends = u["terminated"] | u["truncated"]
        assert np.array_equal(u["valid"][0], ~prev_end)
        assert np.array_equal(u["valid"][1:], ~ends[:-1])
        assert (u["rewards"][~u["valid"]] == 0).all()
        assert (u["rewards"][u["valid"]] == 1.0).all()  # CartPole: 1 per real transition
        assert not (u["terminated"] & ~u["valid"]).any()
        prev_end = ends[-1]
    assert any((~u["valid"]).any() for _, u in s.unrolls)


def test_unroll_counts_at_the_boundaries() -> None:
    """T requests complete nothing; the (T+1)th closes the first unroll and opens the next."""
    policy = make_policy(1)
    builder = UnrollBuilder(U_SCHEMA, T)
    feeder = Feeder(builder)
    s = run_incarnation(feeder, policy, run_id=2, env_seed=3, steps=T)
    assert s.unrolls == [] and builder.t == T
    # one more request from the same incarnation: build it by hand from the stream's end
    req, rep = REQ_S.new(), REP_S.new()
    req["run_id"][...], req["first"][...], req["seq"][...] = 2, False, T
    req["obs"][:] = 42.0
    req["rewards"][:] = s.rewards[-1]
    req["terminated"][:] = s.terminated[-1]
    req["truncated"][:] = s.truncated[-1]
    req["valid"][:] = s.valid[-1]
    rep["actions"][:] = [1, 0, 1]
    rep["logits"][:] = 0.5
    rep["version"][...] = 77
    u = builder.add(req, rep)
    assert u is not None and builder.t == 1
    assert np.array_equal(u["obs"][:T], s.cols("obs")) and (u["obs"][T] == 42.0).all()
    assert np.array_equal(u["rewards"][T - 1], s.rewards[-1])
    nxt = builder.msg  # the unroll now in progress starts at the closing request
    assert (nxt["obs"][0] == 42.0).all() and int(nxt["version"]) == 77
    assert nxt["actions"][0].tolist() == [1, 0, 1] and (nxt["behaviour_logits"][0] == 0.5).all()
    # the completed unroll is not the buffer the builder goes on writing into
    assert u.buffer is not nxt.buffer


@pytest.mark.parametrize("steps_before", [1, 11, 13, 15])
def test_restart_drops_the_partial_unroll(steps_before: int) -> None:
    policy = make_policy(2)
    builder = UnrollBuilder(U_SCHEMA, T)
    feeder = Feeder(builder)
    a = run_incarnation(feeder, policy, run_id=10, env_seed=11, steps=steps_before)
    check_unrolls(a)
    partial = steps_before - T * ((steps_before - 1) // T)  # actions since the last x_0
    assert builder.t == partial and builder.restarts == 0
    # The actor restarts: new run id, new envs, seq 0 and first=True again.
    b = run_incarnation(feeder, policy, run_id=20, env_seed=12, steps=3 * T + 2)
    assert builder.restarts == 1
    assert builder.dropped_steps == partial, (builder.dropped_steps, partial)
    check_stream_against_env(b, policy)
    check_unrolls(b)  # the unrolls after the restart are slices of the NEW stream only
    assert len(b.unrolls) == 3
    assert np.array_equal(b.unrolls[0][1]["obs"][0], b.obs[0])
    assert int(b.unrolls[0][1]["version"]) == b.versions[0] == 2000
    # nothing of the old incarnation leaks into the new unrolls
    old = a.cols("obs").reshape(-1, *SPEC.obs_shape)
    for _, u in b.unrolls:
        rows = u["obs"].reshape(-1, *SPEC.obs_shape)
        assert not any((rows == o).all(axis=1).any() for o in old)
    # a second restart is counted too
    run_incarnation(feeder, policy, run_id=30, env_seed=13, steps=2)
    assert builder.restarts == 2 and builder.dropped_steps == partial + (3 * T + 2 - 3 * T)


def test_first_flag_with_the_same_run_id_restarts() -> None:
    """A new client that (by accident) reuses the run id still starts a new unroll."""
    policy = make_policy(3)
    builder = UnrollBuilder(U_SCHEMA, T)
    feeder = Feeder(builder)
    run_incarnation(feeder, policy, run_id=5, env_seed=1, steps=7)
    again = run_incarnation(feeder, policy, run_id=5, env_seed=2, steps=T + 1)
    assert builder.restarts == 1 and builder.dropped_steps == 2
    check_unrolls(again)
    assert len(again.unrolls) == 1
