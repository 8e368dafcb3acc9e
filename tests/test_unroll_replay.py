"""Tests for replay/unrolls.py: copies kept, FIFO eviction, uniform sampling, the learner
takes what it samples."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from archzoo.actors.unroll import unroll_schema
from archzoo.envs import EnvSpec
from archzoo.learners.vtrace import ImpalaLossConfig
from archzoo.learners.vtrace_learner import VTraceLearner, batch_unrolls
from archzoo.nets import ActorCritic
from archzoo.replay.unrolls import UnrollReplay

SPEC = EnvSpec("Test-v0", (3,), "<f4", 2)
SCHEMA = unroll_schema(SPEC, unroll_length=4, num_envs=2)


def tagged(k: int):
    """An unroll message whose every field carries the tag ``k``."""
    msg = SCHEMA.new()
    for name in msg:
        msg[name][...] = k % 2 if msg[name].dtype == np.bool_ else k
    return msg


def tag(unroll) -> int:
    return int(unroll["version"])


def test_it_keeps_copies_not_the_messages() -> None:
    memory = UnrollReplay(SCHEMA, capacity=1)
    msg = tagged(1)
    memory.add([msg])
    msg.buffer[...] = 0  # what an Inbox does to a released buffer: the next message lands
    (out,) = memory.sample(1)
    assert tag(out) == 1 and np.all(out["obs"] == 1) and np.all(out["actions"] == 1)
    memory.add([tagged(2)])  # overwrites the only slot; a sample is a copy and stays
    assert tag(out) == 1 and set(out) == set(SCHEMA.fields)
    assert tag(memory.sample(1)[0]) == 2


def test_fifo_eviction_and_counts() -> None:
    memory = UnrollReplay(SCHEMA, capacity=3, seed=1)
    assert len(memory) == 0 and memory.sample(5) == []  # an empty memory replays nothing
    memory.add([tagged(k) for k in range(5)])
    memory.add([])
    assert len(memory) == 3 and memory.added == 5
    seen = {tag(u) for u in memory.sample(200)}
    assert seen == {2, 3, 4}  # the two oldest were evicted
    assert memory.sampled == 200 and memory.sample(0) == []


def test_sampling_is_uniform_and_seeded() -> None:
    memory = UnrollReplay(SCHEMA, capacity=4, seed=3)
    memory.add([tagged(k) for k in range(4)])
    counts = Counter(tag(u) for u in memory.sample(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert all(abs(c - 1000) < 150 for c in counts.values()), counts  # sd 27
    again = UnrollReplay(SCHEMA, capacity=4, seed=3)
    again.add([tagged(k) for k in range(4)])
    other = UnrollReplay(SCHEMA, capacity=4, seed=3)
    other.add([tagged(k) for k in range(4)])
    assert [tag(u) for u in again.sample(50)] == [tag(u) for u in other.sample(50)]


def test_a_subset_of_fields_and_bad_input() -> None:
    memory = UnrollReplay(SCHEMA, capacity=2, fields=("obs", "actions"))
    memory.add([tagged(7)])
    (out,) = memory.sample(1)
    assert set(out) == {"obs", "actions"} and out["obs"].shape == (5, 2, 3)
    with pytest.raises(ValueError, match="no fields"):
        UnrollReplay(SCHEMA, capacity=2, fields=("obs", "nope"))
    with pytest.raises(ValueError, match="n must be >= 0"):
        memory.sample(-1)


def test_the_vtrace_learner_trains_on_replayed_and_fresh_unrolls_together() -> None:
    fresh = tagged(1)
    fresh["valid"][...] = True
    fresh["terminated"][...] = False
    fresh["truncated"][...] = False
    fresh["actions"][...] = 1
    memory = UnrollReplay(SCHEMA, capacity=2)
    memory.add([fresh])
    replayed = memory.sample(1)
    b = batch_unrolls([fresh, *replayed], torch.device("cpu"))
    assert b["obs"].shape == (5, 4, 3)  # [T + 1, E fresh + E replayed, obs]
    learner = VTraceLearner(ActorCritic((3,), 2, 8), ImpalaLossConfig(), 1e-3, 1.0,
                            torch.device("cpu"))
    stats = learner.update([fresh, *replayed])
    assert learner.version == 1 and np.isfinite(stats["grad_norm"])
