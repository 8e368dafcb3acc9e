"""Every learner's learning rate goes one way (learners/schedule.py): a ``Schedule`` set
after each update from the budget the learner follows. The rates of every update are
pinned to the bits the learners gave before the schedule had one path (the V-trace learner
counting its own steps and seconds, the DQN learners told by their loop), on a clock the
test sets: V-trace's own budget (env steps trained on, seconds since its first update, a
resume), and Ape-X's and R2D2's run budget (the Monitor's env steps and seconds)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from archzoo import builders, runlog
from archzoo.learners import vtrace_learner
from archzoo.learners.base import Learner, ReplayLearner, UnrollLearner
from archzoo.learners.schedule import Schedule, TrainingBudget
from archzoo.resolve import parse_run
from archzoo.runlog import Monitor
from tests.test_dqn import random_batch
from tests.test_r2d2 import _config as r2d2_config
from tests.test_r2d2 import _sequences


class Clock:
    """time.perf_counter and time.time for the modules that read them: the test's."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    fake = types.SimpleNamespace(perf_counter=c, time=c)
    monkeypatch.setattr(vtrace_learner, "time", fake)
    monkeypatch.setattr(runlog, "time", fake)
    return c


def _cfg(*argv: str):
    return parse_run(["run", *argv, "--device", "cpu"])[0]


def _unroll(seed: int, T: int = 6, E: int = 4) -> dict[str, np.ndarray]:
    """A CartPole-shaped unroll with 22 valid steps (two autoreset steps masked)."""
    rng = np.random.default_rng(seed)
    valid = np.ones((T, E), bool)
    valid[2, 1] = valid[0, 3] = False
    terminated = np.zeros((T, E), bool)
    terminated[1, 1] = True
    return {"obs": rng.normal(size=(T + 1, E, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, (T, E)),
            "behaviour_logits": rng.normal(size=(T, E, 2)).astype(np.float32),
            "rewards": rng.normal(size=(T, E)).astype(np.float32),
            "terminated": terminated, "truncated": np.zeros((T, E), bool), "valid": valid}


def _hex(*values: str) -> list[float]:
    return [float.fromhex(v) for v in values]


UPDATES_AT = [100.0, 100.4, 101.1, 102.0, 103.3, 104.0, 104.1]  # seconds on the clock
RESUMED_AT = [200.0, 200.5, 201.0]

# the lr of each update, then the one set for the next; a resumed learner's likewise
VTRACE = {
    ("impala", "--total-steps", "300", "--time-limit", "5"): _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.e5d7183894547p-11", "0x1.bf647612f3696p-11",
        "0x1.98f1d3ed527e6p-11", "0x1.3a92a30553261p-11", "0x1.64840e1719f89p-12",
        "0x1.a36e2eb1c432bp-13", "0x1.797cc39ffd639p-13", "0x1.797cc39ffd639p-13",
        "0x1.797cc39ffd639p-13", "0x1.4f8b588e36948p-14", "0x0.0p+0"),
    ("impala", "--total-steps", "150", "--time-limit", "1e9", "--optimizer", "rmsprop"): _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.bf647612f3696p-11", "0x1.727f31c7b1934p-11",
        "0x1.2599ed7c6fbd3p-11", "0x1.b16952625bce1p-12", "0x1.179ec9cbd821fp-12",
        "0x1.f75104d551d69p-14", "0x0.0p+0", "0x0.0p+0", "0x0.0p+0", "0x0.0p+0", "0x0.0p+0"),
    ("ga3c", "--total-steps", "250", "--time-limit", "6"): _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.de26916440f24p-11", "0x1.b003686a4ca50p-11",
        "0x1.81e03f705857bp-11", "0x1.53bd1676640a7p-11", "0x1.d7dbf487fcb9cp-12",
        "0x1.5d867c3ece2a6p-12", "0x1.4c0c8fa210a96p-12", "0x1.4c0c8fa210a96p-12",
        "0x1.3660e51d25aacp-12", "0x1.b43526527a204p-13", "0x1.f75104d551d69p-14"),
}


@pytest.mark.parametrize("argv", list(VTRACE))
def test_the_v_trace_learner_decays_over_its_own_steps_and_seconds(clock: Clock,
                                                                  argv: tuple) -> None:
    cfg = _cfg(*argv, "--lr-decay")
    spec = builders.env_spec(cfg)
    loss = "a3c" if cfg.arch == "ga3c" else "vtrace"  # GA3C's default loss
    learner = builders.vtrace_learner(cfg, spec, loss=loss)
    seen = []
    for k, now in enumerate(UPDATES_AT):
        clock.now = now
        seen.append(learner.update([_unroll(k)])["lr"])
    seen.append(learner.opt.param_groups[0]["lr"])
    resumed = builders.vtrace_learner(cfg, spec, loss=loss)
    resumed.load_state_dict(learner.state_dict())
    for k, now in enumerate(RESUMED_AT):
        clock.now = now
        seen.append(resumed.update([_unroll(10 + k)])["lr"])
    seen.append(resumed.opt.param_groups[0]["lr"])
    assert seen == VTRACE[argv]  # bit for bit
    # which is lr · (1 − the larger of steps trained over --total-steps and seconds of
    # training since the first update over --time-limit), set after each update
    steps, seconds = int(argv[2]), float(argv[4])
    want = [1e-3] + [1e-3 * max(0.0, 1 - max(22 * k / steps, (UPDATES_AT[k - 1] - 100) / seconds))
                     for k in range(1, len(UPDATES_AT) + 1)]
    assert seen[:len(want)] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert resumed.training.steps_trained == 22 * (len(UPDATES_AT) + len(RESUMED_AT))
    assert resumed.training.trained_s == pytest.approx(4.1 + 1.0)


def test_a_v_trace_learner_without_lr_decay_keeps_its_rate(clock: Clock) -> None:
    cfg = _cfg("impala", "--total-steps", "100", "--time-limit", "5")
    learner = builders.vtrace_learner(cfg, builders.env_spec(cfg))
    for k, now in enumerate(UPDATES_AT):
        clock.now = now
        assert learner.update([_unroll(k)])["lr"] == 1e-3
    assert learner.training.budget_spent() == pytest.approx(154 / 100)  # spent, not followed


STEPS = [0, 130, 70, 200, 333, 100]  # the actors' env steps before each update
DQN_AT = [1000.0, 1001.0, 1003.5, 1004.0, 1010.0, 1011.0]  # the run started at 1000 s
DQN = {
    "apex --total-steps 1000 --time-limit 20": _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.0624dd2f1a9fcp-10", "0x1.c8216c61522a7p-11",
        "0x1.a36e2eb1c432dp-11", "0x1.3a92a30553261p-11", "0x1.17f84449dbec3p-12",
        "0x1.5e39713ad5bf0p-13"),
    "apex --total-steps 900": _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.0624dd2f1a9fcp-10", "0x1.c08eb90c55611p-11",
        "0x1.97c790f3f086cp-11", "0x1.23456789abcdfp-11", "0x1.8523615dd10d1p-13",
        "0x1.383e1d128f36dp-14"),
    "r2d2 --total-steps 700 --time-limit 30": _hex(
        "0x1.0624dd2f1a9fcp-10", "0x1.0624dd2f1a9fcp-10", "0x1.aaeb941983217p-11",
        "0x1.767dce434a9b1p-11", "0x1.c163c450bfed5p-12", "0x0.0p+0", "0x0.0p+0"),
}


@pytest.mark.parametrize("run", list(DQN))
def test_the_dqn_learners_decay_over_the_runs_budget(clock: Clock, run: str) -> None:
    arch, *flags = run.split()
    torch.manual_seed(0)
    if arch == "r2d2":
        cfg = r2d2_config(lr=1e-3, lr_decay=True, device="cpu", total_steps=int(flags[1]),
                          time_limit=float(flags[3]))
        _, seqs, _ = _sequences(cfg, count=6)
        weights = np.linspace(0.5, 1.0, len(seqs["actions"])).astype(np.float32)
        batches = [(seqs, weights)] * len(STEPS)
    else:
        cfg = _cfg(arch, *flags, "--lr-decay")
        rng = np.random.default_rng(0)
        batches = [(random_batch(rng, obs_dim=4, A=2), None) for _ in STEPS]
    learner = builders.dqn_learner(cfg, builders.env_spec(cfg))
    clock.now = 1000.0
    mon = Monitor(None, None, cfg.total_steps, cfg.time_limit, 1.0, "x", quiet=True)
    learner.schedule.follow(mon)  # what the run's loop does once its Monitor is open
    seen = []
    for (batch, weights), steps, now in zip(batches, STEPS, DQN_AT, strict=True):
        mon.add_steps(steps)
        clock.now = now
        seen.append(learner.update(batch, weights)[1]["lr"])
    seen.append(learner.opt.param_groups[0]["lr"])
    assert seen == DQN[run]  # bit for bit
    done = np.cumsum(STEPS)  # lr · (1 − the larger of env steps and seconds spent)
    want = [1e-3] + [1e-3 * max(0.0, 1 - max(done[k] / cfg.total_steps,
                                             (DQN_AT[k] - 1000) / cfg.time_limit))
                     for k in range(len(STEPS))]
    assert seen == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_without_lr_decay_a_dqn_learner_keeps_its_rate(clock: Clock) -> None:
    cfg = _cfg("apex", "--total-steps", "900")
    learner = builders.dqn_learner(cfg, builders.env_spec(cfg))
    mon = Monitor(None, None, 900, None, 1.0, "x", quiet=True)
    learner.schedule.follow(mon)
    mon.add_steps(450)
    rng = np.random.default_rng(1)
    assert [learner.update(random_batch(rng, obs_dim=4, A=2))[1]["lr"]
            for _ in range(3)] == [1e-3] * 3


def test_a_schedule_without_a_budget_and_the_budgets_resume() -> None:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    s = Schedule(0.5, decay=True)
    s.after_update(opt)  # nothing to follow yet: the rate stays
    assert opt.param_groups[0]["lr"] == 0.5
    b = TrainingBudget(steps=100, seconds=10.0)
    b.start(3.0)
    b.trained(25, 5.0)  # 25 of 100 steps, 2 of 10 s
    s.follow(b).after_update(opt)
    assert opt.param_groups[0]["lr"] == 0.5 * 0.75
    again = TrainingBudget(steps=100, seconds=10.0)
    again.load_state_dict(b.state_dict())
    again.start(50.0)
    again.trained(5, 57.0)  # 30 steps; 2 + 7 s of training
    assert again.budget_spent() == pytest.approx(0.9)
    with pytest.raises(RuntimeError, match="before start"):
        TrainingBudget().trained(1, 1.0)


def test_every_learner_meets_the_learner_protocol() -> None:
    """The V-trace learners train on unrolls, the DQN learners on replay batches; every
    one has what the harness reads (model, device, version, update_s, schedule) and
    checkpoints itself."""
    v = _cfg("impala")
    g = _cfg("ga3c")
    spec = builders.env_spec(v)
    unroll = [builders.vtrace_learner(v, spec), builders.vtrace_learner(g, spec, loss="a3c")]
    replay = [builders.dqn_learner(_cfg("apex"), spec),
              builders.dqn_learner(r2d2_config(device="cpu"), builders.env_spec(r2d2_config()))]
    for learner in unroll + replay:
        assert isinstance(learner, Learner) and isinstance(learner.schedule, Schedule)
    assert all(isinstance(learner, UnrollLearner) for learner in unroll)
    assert all(isinstance(learner, ReplayLearner) for learner in replay)
    assert not any(isinstance(learner, ReplayLearner) for learner in unroll)  # no target
