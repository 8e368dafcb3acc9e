"""learners/ga3c_server.py's Ga3cServer in one process, without a transport.

GA3C (Babaeizadeh et al. 2017, §4) puts predictor and trainer threads around one model, fed
through a prediction queue and a training queue; the trainer's loss is A3C's, or IMPALA's
V-trace (Espeholt et al. 2018, eq. 1) with ``--loss vtrace``. Here the test thread plays
the communication thread of archzoo/architectures/ga3c.py: it puts ``(agent, seq, obs, time
seen)`` on the prediction queue and unroll messages (recorded from CartPole-v1 by an
UnrollActor) on the training queue, and reads the reply queue. Everything is checked
against ground truth computed outside the server: the model's own forward pass and a
Gumbel-max generator seeded like the server's, a second identically-initialised learner fed
the same unrolls in the same order, and the optimiser's own step counters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch

from archzoo import builders
from archzoo.actors.unroll import UnrollActor, unroll_schema
from archzoo.config import Ga3cConfig
from archzoo.envs import env_spec
from archzoo.learners.ga3c_server import Ga3cServer
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.messages import Message
from archzoo.nets import ActorCritic
from archzoo.runlog import Monitor

SPEC = env_spec("CartPole-v1")
E, T = 3, 5
U_SCHEMA = unroll_schema(SPEC, T, E)
DEADLINE_S = 20.0  # how long to wait for the threads before calling it a hang


def config(**kw) -> Ga3cConfig:
    base = dict(arch="ga3c", seed=7, envs_per_actor=E, unroll_length=T, hidden=32,
                device="cpu", lr=3e-3, gamma=0.95, entropy_coef=0.02, max_grad_norm=0.8,
                max_wait_us=0.0, predictors=1, trainers=1, prediction_queue=64,
                training_queue=16)
    return Ga3cConfig(**{**base, **kw})


def make_server(cfg: Ga3cConfig, agents: int) -> Ga3cServer:
    mon = Monitor(None, None, None, None, 1e9, "ga3c", quiet=True)
    return Ga3cServer(cfg, builders.vtrace_learner(cfg, SPEC, loss=cfg.loss), mon, agents)


def reference_learner(cfg: Ga3cConfig) -> VTraceLearner:
    """A learner built as the server's was (same class, seed, hyper-parameters)."""
    return builders.vtrace_learner(cfg, SPEC, loss=cfg.loss)


def stop(srv: Ga3cServer) -> None:
    """Shut the server down; every worker thread must have ended, none with an error."""
    srv.shutdown()
    assert [th.name for th in srv.threads if th.is_alive()] == []
    assert not any(th in threading.enumerate() for th in srv.threads)
    srv.check()


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.002)


def recorded_unrolls(n: int) -> list[Message]:
    """n CartPole unrolls from two agents in turn (episode ends inside some of them)."""
    torch.manual_seed(123)
    model = ActorCritic(SPEC.obs_shape, SPEC.num_actions, 32)
    agents = [UnrollActor(SPEC, E, T, model, seed) for seed in (3, 4)]
    out = []
    try:
        for i in range(n):
            m = U_SCHEMA.new()
            agents[i % 2].collect(m)
            out.append(m)
    finally:
        for a in agents:
            a.close()
    assert any(m["terminated"].any() for m in out) and any((~m["valid"]).any() for m in out)
    return out


def obs_of(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((E, *SPEC.obs_shape)).astype(np.float32)


def forward(model: torch.nn.Module, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        logits, values = model(torch.from_numpy(obs))
    return logits.numpy(), values.numpy()


def opt_steps(learner: VTraceLearner) -> set[int]:
    """The optimiser's own count of steps, per parameter."""
    return {int(learner.opt.state[p]["step"]) for p in learner.model.parameters()}


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def assert_same_params(a: list[torch.Tensor], b: list[torch.Tensor], what: str) -> None:
    for i, (p, q) in enumerate(zip(a, b, strict=True)):
        assert torch.equal(p, q), f"{what}: tensor {i} max |Δ| {(p - q).abs().max()}"


@pytest.mark.parametrize(("max_batch", "sizes"), [(2, [2, 2, 2, 1]), (4, [3, 3, 1])])
def test_every_request_is_answered_once_by_one_forward_pass_per_batch(
        max_batch: int, sizes: list[int]) -> None:
    """7 requests from 3 agents queued before the predictor starts: batches of
    min(max_batch, agents) in queue order, each answered by one forward pass of the model
    and Gumbel-max actions from the server's seeded generator, version 0 throughout."""
    cfg = config(max_batch=max_batch)
    srv = make_server(cfg, agents=3)
    before = params(srv.learner.model)
    rng = np.random.default_rng(0)
    requests = [(1 + i % 3, i // 3, obs_of(rng)) for i in range(7)]
    for agent, seq, obs in requests:
        srv.prediction_q.put_nowait((agent, seq, {"obs": obs.copy()}, time.perf_counter()))
    srv.start()
    try:
        replies = [srv.reply_q.get(timeout=DEADLINE_S) for _ in requests]
    finally:
        stop(srv)
    assert srv.reply_q.empty(), "a request was answered twice"
    assert [(r[0], r[1]) for r in replies] == [(a, s) for a, s, _ in requests]
    assert [(r[6], r[7]) for r in replies] == [(b, n) for b, n in enumerate(sizes)
                                               for _ in range(n)]
    assert [r[5] for r in replies] == [0] * 7  # no update, no new version
    gumbel = np.random.default_rng(cfg.seed)
    for b in range(len(sizes)):
        rows = [i for i, r in enumerate(replies) if r[6] == b]
        obs = np.concatenate([requests[i][2] for i in rows])
        logits, values = forward(srv.learner.model, obs)
        actions = np.argmax(logits + gumbel.gumbel(size=logits.shape), axis=-1)
        got = [replies[i] for i in rows]
        # to float32's last bits: BLAS may sum a batch's products in another order in the
        # server's thread (its kernel choice follows the thread count and the shape)
        np.testing.assert_allclose(np.concatenate([r[3] for r in got]), logits,
                                   rtol=1e-5, atol=1e-7, err_msg=f"batch {b}")
        np.testing.assert_allclose(np.concatenate([r[4] for r in got]), values,
                                   rtol=1e-5, atol=1e-7, err_msg=f"batch {b}")
        assert np.array_equal(np.concatenate([r[2] for r in got]), actions), b
        assert all(r[2].shape == (E,) for r in got)
    assert (srv.stats.batches, srv.stats.requests) == (len(sizes), 7)
    assert srv.learner.version == 0
    assert_same_params(params(srv.learner.model), before, "predictions changed the model")


@pytest.mark.parametrize("loss", ["a3c", "vtrace"])
def test_trainer_steps_equal_a_learner_fed_the_same_unrolls(loss: str) -> None:
    """5 unrolls queued before the trainer starts, batch_unrolls = 2: updates on
    [u0, u1], [u2, u3], [u4], exactly those of a second learner fed the same batches."""
    cfg = config(loss=loss, batch_unrolls=2)
    unrolls = recorded_unrolls(5)
    srv = make_server(cfg, agents=2)
    ref = reference_learner(cfg)
    assert type(ref) is type(srv.learner)
    assert_same_params(params(srv.learner.model), params(ref.model), "initial parameters")
    for u in unrolls:
        srv.training_q.put_nowait(u)
    srv.start()
    try:
        wait_for(srv.training_q.empty, "the trainer to take every unroll")
    finally:
        stop(srv)  # joins the trainer, so its last update is complete
    for batch in ([0, 1], [2, 3], [4]):
        ref.update([unrolls[i] for i in batch])
    assert srv.learner.version == ref.version == 3
    assert opt_steps(srv.learner) == {3}
    assert srv.mon.updates == 3
    assert srv.mon.lag_mean == pytest.approx((0 + 0 + 1 + 1 + 2) / 5)  # all acted at v0
    assert_same_params(params(srv.learner.model), params(ref.model), "after 3 updates")
    assert not torch.equal(params(srv.learner.model)[0], params(reference_learner(cfg).model)[0])


def test_replies_carry_the_version_and_parameters_of_the_latest_update() -> None:
    """One agent in lock step with two predictors while one trainer learns on 4 unrolls
    (batch_unrolls = 1): each reply's version is the number of updates completed before its
    forward pass, and its logits, values and actions are what the model of that version
    answers. Without unrolls, any number of predictions leaves the version alone."""
    cfg = config(predictors=2, batch_unrolls=1)
    unrolls = recorded_unrolls(4)
    srv = make_server(cfg, agents=1)
    ref = reference_learner(cfg)
    snapshots = [params(ref.model)]
    for u in unrolls:
        ref.update([u])
        snapshots.append(params(ref.model))
    rng = np.random.default_rng(1)
    asked: list[tuple[np.ndarray, tuple]] = []
    seq = 0

    def ask() -> tuple:
        nonlocal seq
        obs = obs_of(rng)
        srv.prediction_q.put_nowait((1, seq, {"obs": obs.copy()}, time.perf_counter()))
        r = srv.reply_q.get(timeout=DEADLINE_S)
        assert (r[0], r[1]) == (1, seq)
        seq += 1
        asked.append((obs, r))
        return r

    srv.start()
    try:
        assert all(ask()[5] == 0 for _ in range(10))
        srv.training_q.put_nowait(unrolls[0])  # one update, then ask again
        wait_for(lambda: srv.learner.version == 1, "the first update")
        assert all(ask()[5] == 1 for _ in range(3))
        for u in unrolls[1:]:  # the rest while predictions go on
            srv.training_q.put_nowait(u)
        while srv.learner.version < len(unrolls) and seq < 5000:
            ask()
        wait_for(lambda: srv.learner.version == len(unrolls), "every update")
        assert ask()[5] == len(unrolls)
    finally:
        stop(srv)
    versions = [r[5] for _, r in asked]
    assert versions == sorted(versions)  # never a step back
    assert opt_steps(srv.learner) == {len(unrolls)}
    assert_same_params(params(srv.learner.model), snapshots[-1], "after every update")
    # ground truth for each reply: the reference model of the reply's version
    model = ActorCritic(SPEC.obs_shape, SPEC.num_actions, cfg.hidden)
    gumbel = np.random.default_rng(cfg.seed)  # one draw per batch, batches in reply order
    for i, (obs, r) in enumerate(asked):
        with torch.no_grad():
            for p, q in zip(model.parameters(), snapshots[r[5]], strict=True):
                p.copy_(q)
        logits, values = forward(model, obs)
        assert np.array_equal(r[3], logits), (i, r[5])
        assert np.array_equal(r[4], values), (i, r[5])
        assert np.array_equal(r[2], np.argmax(logits + gumbel.gumbel(size=logits.shape), -1)), i
    assert (srv.stats.batches, srv.stats.requests) == (len(asked), len(asked))


def test_several_trainers_take_one_step_per_batch() -> None:
    """Three trainer threads, batch_unrolls = 1, six unrolls: six serialised optimiser
    steps, one policy-lag sample per unroll."""
    cfg = config(trainers=3, predictors=2, batch_unrolls=1)
    unrolls = recorded_unrolls(6)
    srv = make_server(cfg, agents=2)
    srv.start()
    try:
        for u in unrolls:
            srv.training_q.put(u, timeout=DEADLINE_S)
        wait_for(lambda: srv.learner.version == len(unrolls), "six updates")
    finally:
        stop(srv)
    assert srv.training_q.empty()
    assert opt_steps(srv.learner) == {6}
    assert srv.mon.updates == 6 and sum(srv.mon.lag_hist.values()) == 6


def test_a_failing_worker_stops_every_thread_and_is_reported() -> None:
    """A request the model cannot take (5 features for CartPole's 4): the predictor's error
    reaches check() in the communication thread, and every worker thread ends."""
    cfg = config(predictors=2, trainers=2)
    srv = make_server(cfg, agents=2)
    srv.start()
    try:
        assert all(th.is_alive() for th in srv.threads)
        srv.prediction_q.put_nowait((1, 0, {"obs": np.zeros((E, 5), np.float32)},
                                     time.perf_counter()))
        wait_for(srv.stop.is_set, "the failing predictor to raise the stop flag")
        with pytest.raises(RuntimeError, match="GA3C worker thread failed"):
            srv.check()
    finally:
        srv.shutdown()
    assert [th.name for th in srv.threads if th.is_alive()] == []
    assert len(srv.errors) == 1 and srv.reply_q.empty()
    assert srv.learner.version == 0


def test_idle_threads_stop_when_asked() -> None:
    cfg = config(predictors=3, trainers=2)
    srv = make_server(cfg, agents=4)
    assert len(srv.threads) == 5
    srv.start()
    assert all(th.is_alive() for th in srv.threads)
    stop(srv)
    assert srv.errors == [] and srv.learner.version == 0 and srv.stats.batches == 0
