"""archzoo/scaling.py: the model's steps/s against hand computations of its formulas, its
costs read from a summary, and its fits recovering the constants that made the points."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from archzoo import scaling
from archzoo.scaling import AlphaBeta, Costs, predict

# E = 4 envs, 1 ms env + 1 ms other CPU per vector step, a learner at 10 µs per env step
BASE = Costs(arch="impala", envs=4, env_s=1e-3, actor_s=1e-3,
             central=(("learner", 1e-5),), cores=2.0)


def test_actor_bound() -> None:
    """N = 2, L = 4 ms: a vector step takes 4 + 1 + 1 ms, so 2·4/0.006 steps/s; the CPU it
    uses, 1333.3·(2 ms / 4 + 10 µs) = 0.68 cores, fits in 2."""
    p = predict(BASE, 2, 0.004)
    assert p.steps_per_s == pytest.approx(8 / 0.006)
    assert p.bound == "actors" and p.sigma == 1.0


def test_cores_bound() -> None:
    """N = 16: the actors would make 10,667 steps/s, needing 5.4 cores; on 2 the CPU work
    slows by σ until X·0.51 ms = 2 cores: X = 3921.6 steps/s, 64/(0.004 + 0.002σ) = X."""
    p = predict(BASE, 16, 0.004)
    x = 2 / 0.51e-3
    assert p.steps_per_s == pytest.approx(x, rel=1e-6)
    assert p.bound == "cores"
    assert p.sigma == pytest.approx((64 / x - 0.004) / 0.002, rel=1e-5)


def test_learner_bound() -> None:
    """A learner at 1 ms per env step caps N = 8 cheap actors at 1000 steps/s (1.05 cores)."""
    c = replace(BASE, env_s=1e-4, actor_s=1e-4, central=(("learner", 1e-3),))
    p = predict(c, 8, 0.004)
    assert p.steps_per_s == pytest.approx(1000.0) and p.bound == "learner"


def test_batched_inference() -> None:
    """Central inference at 1 ms a pass (f1 = 0), no batching window: one actor waits 1 ms per
    step (4 + 0.5 + 0.5 + 1 = 6 ms); two meet in a batch while it computes, b = 1 + 1/6,
    each pass costing the server 1 ms / (b·4) per env step."""
    c = Costs(arch="seed", envs=4, env_s=5e-4, actor_s=5e-4, central=(("learner", 0.0),),
              forward=(1e-3, 0.0), cores=2.0)
    one, two = predict(c, 1, 0.004), predict(c, 2, 0.004)
    assert one.steps_per_s == pytest.approx(4 / 0.006) and one.batch == 1.0
    assert two.batch == pytest.approx(7 / 6)
    assert two.steps_per_s == pytest.approx(8 / 0.006)
    # a pass that costs 100 µs per observation: the server's 10,000 steps/s, whatever the
    # batch; 64 actors wait on it, round trips growing with its batches, at 99.7% of that
    heavy = replace(c, forward=(0.0, 1e-4), env_s=0.0, actor_s=0.0)
    many = predict(heavy, 64, 0.004, cores=math.inf)
    assert many.bound == "inference" and many.steps_per_s == pytest.approx(1e4, rel=0.01)


def test_root_bandwidth_and_fan_out() -> None:
    """The root's bytes per env step: 100 in, 50 out to each actor it sends to (4 over a
    star, ⌈log2 5⌉ = 3 over the binary tree of 5 ranks), on a link of 1 MB/s."""
    c = replace(BASE, env_s=0.0, actor_s=0.0, root_in=100.0, root_out=50.0, broadcast=True)
    assert [scaling.root_fan(n, "tree", 2) for n in (1, 2, 4, 16)] == [1, 2, 3, 5]
    star = predict(c, 4, 0.004, link_Bps=1e6)
    tree = predict(c, 4, 0.004, link_Bps=1e6, topology="tree")
    assert star.steps_per_s == pytest.approx(1e6 / 300) and star.bound == "root bandwidth"
    assert tree.steps_per_s == pytest.approx(1e6 / 250)


def test_root_messages_cost_its_process() -> None:
    """α–β: beyond the one actor measured, each extra actor's copy of the parameters costs
    the root α per message and bytes/β: 1 message of 1000 B per 100 env steps at α = 1 ms,
    1/β = 1 µs/B, so 20 µs per env step per extra actor on top of the learner's 10 µs."""
    c = replace(BASE, env_s=0.0, actor_s=0.0, root_out=10.0, root_msgs_out=0.01,
                broadcast=True, messages=AlphaBeta(1e-3, 1e-6))
    p = predict(c, 5, 1e-4, cores=math.inf)
    assert p.steps_per_s == pytest.approx(1 / (1e-5 + 4 * 2e-5))
    assert p.bound == "root broadcast"


def test_knee() -> None:
    """BASE at L = 4 ms: 666.7 steps/s per actor up to the cores' 3921.6: N = 7 still gives
    0.84 of 7 × 666.7, N = 8 only 0.74."""
    assert scaling.knee(BASE, 0.004) == (7, "cores")


def test_fits_recover_the_constants() -> None:
    """calibrate() finds the actor CPU that gives a measured one-actor rate; fit_cores() the
    cores that give a measured saturated rate."""
    truth = replace(BASE, actor_s=1.7e-3, cores=1.3)
    one = predict(truth, 1, 0.004).steps_per_s
    sixteen = predict(truth, 16, 0.004).steps_per_s
    c = scaling.calibrate(BASE, 1, 0.004, one)
    assert c.actor_s == pytest.approx(1.7e-3, rel=1e-6)
    c = scaling.fit_cores(c, 16, 0.004, sixteen)
    assert c.cores == pytest.approx(1.3, rel=1e-6)
    assert predict(c, 8, 0.004).steps_per_s == pytest.approx(predict(truth, 8, 0.004)
                                                             .steps_per_s, rel=1e-6)


def test_costs_from_a_summary() -> None:
    """IMPALA's summary of one actor of 4 envs at L = 2 ms: 1000 env steps in 200 episodes
    are (1000 + 200)/4 = 300 vector steps; env 0.9 s = 300·(2 ms + 1 ms); inference 0.3 s =
    1 ms per step; the learner's update 0.5 s and comm 0.1 s over 1000 steps = 600 µs; the
    actor's 30 messages of 3000 B at α = 1 ms, 1/β = 1 µs/B add 0.033 s / 300 steps."""
    summary = {"arch": "impala", "envs_per_actor": 4, "actors": 1, "env_steps": 1000,
               "episodes": 200, "world_size": 2,
               "time_breakdown_s": {"learner": {"update": 0.5, "comm": 0.1, "wait": 9.0},
                                    "actor1": {"env": 0.9, "inference": 0.3, "comm": 2.0}},
               "per_rank_bytes": {"0": {"msgs_sent": 10, "bytes_sent": 5000, "msgs_recv": 20,
                                        "bytes_recv": 2000},
                                  "1": {"msgs_sent": 20, "bytes_sent": 2000, "msgs_recv": 10,
                                        "bytes_recv": 1000}}}
    config = {"env_latency_ms": 2.0, "batch_unrolls": 1}
    c = scaling.costs_from_summary(summary, config, AlphaBeta(1e-3, 1e-6), cores=2)
    assert c.env_s == pytest.approx(1e-3)
    assert c.actor_s == pytest.approx(1e-3 + (30 * 1e-3 + 3000 * 1e-6) / 300)
    assert c.central == (("learner", pytest.approx(6e-4)),)
    assert (c.root_in, c.root_out, c.root_msgs_out) == (2.0, 5.0, 0.01)
    assert c.broadcast and c.servers == 1 and c.cores == 2
    with pytest.raises(ValueError, match="no scaling model for gorila"):
        scaling.costs_from_summary(dict(summary, arch="gorila"), config)


def test_seed_actors_wait_behind_updates() -> None:
    """SEED RL's learner trains in its serving loop: a request waits ρ·u/2 on average (u =
    20 ms an update, ρ = X·100 µs the share of time training), so one actor of 4 envs at
    4 + 0.5 + 0.5 ms per step runs at the root of X = 4/(0.005 + 1e-6·X)."""
    c = Costs(arch="seed", envs=4, env_s=5e-4, actor_s=5e-4, central=(("learner", 1e-4),),
              serial_update_s=0.02, cores=math.inf)
    x = (-0.005 + math.sqrt(0.005 ** 2 + 4 * 1e-6 * 4)) / (2 * 1e-6)
    assert predict(c, 1, 0.004).steps_per_s == pytest.approx(x, rel=1e-6)
    assert predict(replace(c, serial_update_s=0.0), 1, 0.004).steps_per_s == \
        pytest.approx(4 / 0.005)
