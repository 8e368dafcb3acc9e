"""Frames stored once (replay/frames.py): what comes out of the replay is exactly what went
in, across episode boundaries and FIFO wrap-around, while each distinct frame is stored once
and freed with the last transition that shows it."""

from __future__ import annotations

import numpy as np
import pytest

from archzoo.replay.frames import FramePool
from archzoo.replay.memory import PrioritizedReplay, UniformReplay
from archzoo.replay.server import memory_fields

SHAPE = (4, 6, 5)  # a stack of 4 frames of 6×5, stacked along axis 0 as ALE's are


def stream(envs: int, steps: int, n: int, seed: int):
    """n-step transitions of E envs as an Atari actor makes them: stacks of the last 4
    frames (zeros before an episode's first), next_obs = the stack n steps later."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(envs):
        stack = np.zeros(SHAPE, np.uint8)
        stacks = []
        for t in range(steps):
            if t % 17 == 0:  # an episode starts: the stack restarts from zeros
                stack = np.zeros(SHAPE, np.uint8)
            frame = rng.integers(0, 4, size=SHAPE[1:], dtype=np.uint8)  # few values: repeats
            stack = np.concatenate([stack[1:], frame[None]])
            stacks.append(stack)
        for t in range(steps - n):
            out.append((e, t, stacks[t], stacks[t + n]))
    order = rng.permutation(len(out))  # transitions of many envs arrive interleaved
    return [out[i] for i in order]


def batches(items, size):
    for i in range(0, len(items), size):
        chunk = items[i:i + size]
        yield {"obs": np.stack([c[2] for c in chunk]),
               "next_obs": np.stack([c[3] for c in chunk]),
               "action": np.arange(i, i + len(chunk)), "ret": np.zeros(len(chunk), np.float32),
               "discount": np.ones(len(chunk), np.float32),
               "version": np.full(len(chunk), i // size)}


@pytest.mark.parametrize("cls", [UniformReplay, PrioritizedReplay])
def test_round_trip_across_episodes_and_wraparound(cls) -> None:
    items = stream(envs=3, steps=120, n=3, seed=0)
    capacity = 100  # far fewer than the 351 items: the FIFO wraps three times
    fields = memory_fields(SHAPE, np.uint8)
    mem = cls(capacity, fields, seed=1, frames=(("obs", "next_obs"), 2))
    ref = cls(capacity, fields, seed=1)  # stores every observation whole
    for b in batches(items, 23):
        if cls is PrioritizedReplay:
            mem.add(b, np.ones(len(b["ret"])))
            ref.add(b, np.ones(len(b["ret"])))
        else:
            mem.add(b)
            ref.add(b)
    idx = np.arange(capacity)
    got, want = mem._gather(idx), ref._gather(idx)  # noqa: SLF001 - every slot
    for k in fields:
        assert got.data[k].dtype == want.data[k].dtype
        np.testing.assert_array_equal(got.data[k], want.data[k], err_msg=k)
    np.testing.assert_array_equal(got.item_ids, want.item_ids)
    # sampled batches rebuild stacks too
    s = mem.sample(64)
    kept = {int(a): (o, x) for a, o, x in zip(ref._data["action"], ref._data["obs"],  # noqa: SLF001
                                             ref._data["next_obs"], strict=True)}  # noqa: SLF001
    for a, o, x in zip(s.data["action"], s.data["obs"], s.data["next_obs"], strict=True):
        np.testing.assert_array_equal(o, kept[int(a)][0])
        np.testing.assert_array_equal(x, kept[int(a)][1])


GRID = (10, 10, 4)  # MinAtar: one channel-last bool grid per step, no stacking


def grid_stream(envs: int, steps: int, n: int, seed: int):
    """n-step transitions of E MinAtar-like envs: sparse bool grids, every episode opening on
    the same grid, a grid often repeating the step before; next_obs = the grid n steps
    later."""
    rng = np.random.default_rng(seed)
    start = rng.random(GRID) < 0.1
    out = []
    for e in range(envs):
        grids = [start]
        for t in range(1, steps):
            grids.append(start if t % 13 == 0 else grids[-1] if rng.random() < 0.3
                         else rng.random(GRID) < 0.1)
        out += [(e, t, grids[t], grids[t + n]) for t in range(steps - n)]
    order = rng.permutation(len(out))  # transitions of many envs arrive interleaved
    return [out[i] for i in order]


@pytest.mark.parametrize("cls", [UniformReplay, PrioritizedReplay])
def test_bool_grids_round_trip_across_episodes_and_wraparound(cls) -> None:
    """MinAtar's replay as Ape-X/Gorila build it (each whole grid one frame): what comes out
    is the bool grids that went in, and the pool holds just the distinct live grids."""
    from archzoo import builders
    from archzoo.config import ApexConfig
    from archzoo.envs import EnvSpec

    spec = EnvSpec("MinAtar/Breakout-v1", GRID, "|b1", 3)
    items = grid_stream(envs=3, steps=120, n=3, seed=4)
    capacity = 100  # the FIFO wraps three times
    cfg = ApexConfig(arch="apex", prioritized=cls is PrioritizedReplay)
    mem = builders.replay_memory(cfg, spec, capacity, seed=1)
    assert type(mem) is cls and mem.frame_pool is not None
    fields = memory_fields(GRID, np.bool_)
    ref = cls(capacity, fields, seed=1)  # stores every observation whole
    for b in batches(items, 23):
        args = (np.ones(len(b["ret"])),) if cls is PrioritizedReplay else ()
        mem.add(b, *args)
        ref.add(b, *args)
    idx = np.arange(capacity)
    got, want = mem._gather(idx), ref._gather(idx)  # noqa: SLF001 - every slot
    for k in fields:
        assert got.data[k].dtype == want.data[k].dtype, k
        assert k not in ("obs", "next_obs") or got.data[k].dtype == np.bool_, k
        np.testing.assert_array_equal(got.data[k], want.data[k], err_msg=k)
    np.testing.assert_array_equal(got.item_ids, want.item_ids)
    live = {g.tobytes() for k in ("obs", "next_obs") for g in want.data[k]}
    shown = {g.tobytes() for _, _, o, x in items for g in (o, x)}
    assert len(mem.frame_pool) == len(live) < len(shown)  # once each; evicted grids freed
    assert len(live) < 2 * capacity  # 2 grids per transition, shared ones stored once
    s = mem.sample(64)
    assert s.data["obs"].dtype == np.bool_
    for a, o, x in zip(s.data["action"], s.data["obs"], s.data["next_obs"], strict=True):
        i = int(np.flatnonzero(want.data["action"] == a)[0])
        np.testing.assert_array_equal(o, want.data["obs"][i])
        np.testing.assert_array_equal(x, want.data["next_obs"][i])


def test_each_distinct_frame_is_stored_once_and_freed_with_its_last_transition() -> None:
    items = stream(envs=2, steps=200, n=3, seed=2)
    mem = UniformReplay(1000, memory_fields(SHAPE, np.uint8), frames=(("obs", "next_obs"), 2))
    for b in batches(items, 50):
        mem.add(b)
    pool = mem.frame_pool
    distinct = {f.tobytes() for _, _, o, x in items for f in (*o, *x)}
    assert len(pool) == len(distinct)
    assert len(pool) < 0.2 * 8 * len(items)  # 8 frames per transition, stored ~once each
    # overwrite everything with one repeated transition: every old frame is freed
    z = np.zeros((1000, *SHAPE), np.uint8)
    mem.add({"obs": z, "next_obs": z, "action": np.zeros(1000, np.int64),
             "ret": np.zeros(1000, np.float32), "discount": np.zeros(1000, np.float32),
             "version": np.zeros(1000, np.int64)})
    assert len(pool) == 1 and pool.refs.sum() == 1000 * 8


def test_pool_keeps_colliding_or_equal_content_apart_correctly() -> None:
    pool = FramePool((2,), np.uint8, capacity=2)
    a, b = np.array([[1, 2]], np.uint8), np.array([[3, 4]], np.uint8)
    sa, sb, sa2 = pool.put(a), pool.put(b), pool.put(a)
    assert sa[0] == sa2[0] != sb[0] and len(pool) == 2
    pool.put(np.array([[5, 6], [7, 8]], np.uint8))  # grows past its first capacity
    assert len(pool) == 4 and np.array_equal(pool.frames[sb[0]], b[0])
    pool.release(sa)
    assert len(pool) == 4  # a is still shown once
    pool.release(sa2)
    assert len(pool) == 3 and pool.refs[sa[0]] == 0


@pytest.mark.parametrize("frames", [None, (("obs", "next_obs"), 2)])
@pytest.mark.parametrize("cls", [UniformReplay, PrioritizedReplay])
def test_a_memory_restored_from_its_state_goes_on_as_the_original(tmp_path, cls,
                                                                  frames) -> None:
    """--checkpoint-replay (replay/keeper.py): a memory saved half-way (through a real
    ``torch.save`` file read with ``weights_only``) and restored into a fresh memory, then
    fed and sampled like the original, gives the same samples, weights, priorities and
    stored items, frames and all (the frame index is rebuilt from the frames)."""
    import torch

    items = stream(envs=3, steps=120, n=3, seed=0)
    fields = memory_fields(SHAPE, np.uint8)

    def make():
        return cls(100, fields, seed=1, frames=frames)

    def feed(mem, bs):
        for b in bs:
            if cls is PrioritizedReplay:
                mem.add(b, np.arange(1, len(b["ret"]) + 1, dtype=np.float64))
            else:
                mem.add(b)

    def draw(mem):
        s = mem.sample(32)
        if cls is PrioritizedReplay:
            mem.update_priorities(s.idx, s.item_ids, np.linspace(0.1, 3.0, 32))
        return s

    all_b = list(batches(items, 23))
    orig = make()
    feed(orig, all_b[:9])  # past the first wrap-around
    draw(orig)
    torch.save(orig.state_dict(), tmp_path / "replay.pt")
    back = make()
    back.load_state_dict(torch.load(tmp_path / "replay.pt", weights_only=True))
    for mem in (orig, back):
        feed(mem, all_b[9:])
    for _ in range(3):
        a, b = draw(orig), draw(back)
        np.testing.assert_array_equal(a.idx, b.idx)
        for k in fields:
            np.testing.assert_array_equal(a.data[k], b.data[k], err_msg=k)
        if cls is PrioritizedReplay:
            np.testing.assert_array_equal(a.weights, b.weights)
    idx = np.arange(100)
    for k in fields:
        np.testing.assert_array_equal(orig._gather(idx).data[k], back._gather(idx).data[k])  # noqa: SLF001
    with pytest.raises(ValueError, match="capacity"):
        cls(50, fields, seed=1, frames=frames).load_state_dict(orig.state_dict())


def test_a_replay_checkpoint_from_before_the_version_field_loads_as_unknown() -> None:
    """A replay checkpoint written before items carried the version that acted them loads
    with version −1 (unknown: replay_lag_stats leaves it out); one that lacks any other
    field of the memory is refused by name."""
    fields = memory_fields(SHAPE, np.uint8)
    orig = UniformReplay(100, fields, seed=1)
    for b in batches(stream(envs=2, steps=40, n=3, seed=0), 23):
        orig.add(b)
    old = orig.state_dict()
    del old["data"]["version"]
    back = UniformReplay(100, fields, seed=1)
    back.load_state_dict(old)
    got = back._gather(np.arange(len(back))).data  # noqa: SLF001
    assert (got["version"] == -1).all()
    np.testing.assert_array_equal(got["ret"], orig._gather(np.arange(len(orig))).data["ret"])  # noqa: SLF001
    del old["data"]["ret"]
    with pytest.raises(ValueError, match="'ret'"):
        UniformReplay(100, fields, seed=1).load_state_dict(old)


def test_r2d2_sequences_keep_their_frames_once_across_overlaps_and_wraparound() -> None:
    """R2D2's replay as builders.py makes it on Atari: overlapping sequences of stacked
    observations (a new one every stride steps) come out exactly as they went in, across
    episode starts and FIFO wrap-around, while the pool holds only the distinct frames of
    the live sequences: about stride frames per sequence, not (T + 1)·4."""
    from archzoo import builders
    from archzoo.config import R2D2Config
    from archzoo.envs import EnvSpec

    T, stride = 8, 4
    spec = EnvSpec("ALE/Pong-v5", SHAPE, "|u1", 6, atari=True)
    cfg = R2D2Config(arch="r2d2", sequence_length=T, sequence_overlap=T - stride, burn_in=2,
                     n_step=2)
    fields = builders.replay_items(cfg, spec)
    capacity = 40
    mem = builders.replay_memory(cfg, spec, capacity, seed=1)
    ref = PrioritizedReplay(capacity, fields, alpha=cfg.alpha, beta=cfg.beta, seed=1)
    assert mem.frame_pool is not None and mem.frame_pool.frame_shape == SHAPE[1:]
    rng = np.random.default_rng(3)
    seqs = []  # (start, env, sequence): each env's in time order, the envs interleaved
    for e in range(3):
        stacks = [s for _, _, s, _ in sorted(stream(1, 130, 1, seed=10 + e),
                                             key=lambda x: x[1])]
        for start in range(0, len(stacks) - T - 1, stride):
            seqs.append((start, e, {"obs": np.stack(stacks[start:start + T + 1]),
                         **{k: rng.random(shape).astype(dtype) if dtype.kind == "f" else
                            np.zeros(shape, dtype) for k, (shape, dtype) in fields.items()
                            if k != "obs"}}))
    seqs = [x for *_, x in sorted(seqs, key=lambda x: x[:2])]
    assert len(seqs) > 2 * capacity
    for i in range(0, len(seqs), 7):
        batch = {k: np.stack([x[k] for x in seqs[i:i + 7]]) for k in fields}
        p = np.ones(len(batch["obs"]))
        mem.add(batch, p)
        ref.add(batch, p)
    idx = np.arange(capacity)
    got, want = mem._gather(idx), ref._gather(idx)  # noqa: SLF001 - every slot
    for k in fields:
        np.testing.assert_array_equal(got.data[k], want.data[k], err_msg=k)
    live = {f.tobytes() for o in want.data["obs"] for f in o.reshape(-1, *SHAPE[1:])}
    assert len(mem.frame_pool) == len(live)
    assert len(mem.frame_pool) < 0.15 * capacity * (T + 1) * SHAPE[0]
