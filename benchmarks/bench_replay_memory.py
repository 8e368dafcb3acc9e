"""Resident memory of a replay shard of Atari transitions, frames stored once vs stacks.

Fills a prioritized replay of ``--capacity`` n-step transitions from ALE/Pong-v5 (random
actions, 16 envs, 3-step transitions, exactly as an Ape-X actor makes them) and reports the
process's resident memory before and after, the distinct frames kept, and what the same
memory would take holding both observations of every transition as whole uint8 stacks.
With ``--sequences`` it fills R2D2's replay instead, as ``archzoo run r2d2 --config atari``
builds it (sequences of 80 steps every 40, LSTM 512 states), from a SequenceActor acting
uniformly at random (ε = 1) with the preset's network.

    python benchmarks/bench_replay_memory.py --capacity 100000
    python benchmarks/bench_replay_memory.py --sequences --capacity 5000
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--sequences", action="store_true",
                   help="R2D2's sequences (the atari preset) instead of n-step transitions")
    a = p.parse_args()
    if a.sequences:
        return sequences(a)

    from archzoo.actors.nstep import NStepAssembler
    from archzoo.envs import env_spec, make_vector_env
    from archzoo.replay.memory import PrioritizedReplay
    from archzoo.replay.server import memory_fields

    spec = env_spec(a.env)
    envs = make_vector_env(spec, a.envs)
    nstep = NStepAssembler(a.envs, a.n_step, 0.99, spec.obs_shape, spec.obs_dtype)
    fields = memory_fields(spec.obs_shape, spec.obs_dtype)
    before = rss_mib()
    mem = PrioritizedReplay(a.capacity, fields, frames=(("obs", "next_obs"), 2))
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    valid = np.ones(a.envs, bool)
    t0, inserted = time.perf_counter(), 0
    while inserted < a.capacity:
        actions = rng.integers(spec.num_actions, size=a.envs)
        nxt, rew, term, trunc, _ = envs.step(actions)
        b = nstep.step(obs, actions, rew, term, trunc, nxt, valid)
        valid = ~(term | trunc)
        obs = nxt
        if len(b):
            batch = {"obs": b.obs, "action": b.action, "ret": b.ret.astype(np.float32),
                     "next_obs": b.next_obs, "discount": b.discount.astype(np.float32),
                     "version": np.zeros(len(b), np.int64)}
            mem.add(batch, np.ones(len(b)))
            inserted += len(b)
    fill_s = time.perf_counter() - t0
    after = rss_mib()
    stack = int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize
    frame = stack // spec.obs_shape[0]
    t1 = time.perf_counter()
    for _ in range(100):
        mem.sample(512)
    sample_ms = (time.perf_counter() - t1) * 10
    whole = 2 * stack * a.capacity / 2 ** 20
    print(f"| {a.env} replay | value |")
    print("| --- | ---: |")
    print(f"| transitions stored | {len(mem):,} |")
    print(f"| distinct frames kept | {len(mem.frame_pool):,} "
          f"({len(mem.frame_pool) / len(mem):.2f} per transition) |")
    print(f"| frame pool | {mem.frame_pool.nbytes / 2 ** 20:,.0f} MiB |")
    print(f"| resident memory added by the replay | {after - before:,.0f} MiB |")
    print(f"| both observations as whole uint8 stacks (8 frames of {frame:,} B each) "
          f"| {whole:,.0f} MiB |")
    print(f"| factor | {whole / max(1.0, after - before):.1f}x |")
    print(f"| fill time (env + n-step + insert) | {fill_s:.1f} s |")
    print(f"| sample of 512, stacks rebuilt | {sample_ms:.2f} ms |")
    return 0


def sequences(a: argparse.Namespace) -> int:
    """R2D2's replay of ``a.capacity`` sequences, filled by its own actor."""
    import torch

    from archzoo import builders
    from archzoo.replay.server import insert
    from archzoo.resolve import parse_run

    torch.set_num_threads(1)
    cfg, _ = parse_run(["run", "r2d2", "--config", "atari", "--env", a.env,
                        "--envs-per-actor", str(a.envs)])
    spec = builders.env_spec(cfg)
    actor = builders.transition_actor(cfg, spec, builders.q_network(cfg, spec), 1.0, 0)
    msg = builders.replay_inserts(cfg, spec).new()
    actor.collect(msg, 1)  # the network's first steps allocate: before the baseline
    before = rss_mib()
    mem = builders.replay_memory(cfg, spec, a.capacity, seed=0)
    t0, inserted = time.perf_counter(), 0
    while inserted < a.capacity:
        actor.collect(msg, 1)
        inserted += insert(mem, msg)
    fill_s = time.perf_counter() - t0
    after = rss_mib()
    actor.close()
    T = cfg.sequence_length
    whole = (T + 1) * int(np.prod(spec.obs_shape)) * a.capacity / 2 ** 20
    t1 = time.perf_counter()
    for _ in range(20):
        mem.sample(cfg.batch_size)
    sample_ms = (time.perf_counter() - t1) * 50
    print(f"| {a.env} R2D2 replay (sequences of {T} steps every "
          f"{T - cfg.sequence_overlap}) | value |")
    print("| --- | ---: |")
    print(f"| sequences stored | {len(mem):,} |")
    print(f"| distinct frames kept | {len(mem.frame_pool):,} "
          f"({len(mem.frame_pool) / len(mem):.1f} per sequence) |")
    print(f"| frame pool | {mem.frame_pool.nbytes / 2 ** 20:,.0f} MiB |")
    print(f"| resident memory added by the replay | {after - before:,.0f} MiB |")
    print(f"| the observations as whole uint8 stacks ({T + 1} per sequence) "
          f"| {whole:,.0f} MiB |")
    print(f"| factor | {whole / max(1.0, after - before):.1f}x |")
    print(f"| fill time (env + network + insert) | {fill_s:.1f} s |")
    print(f"| sample of {cfg.batch_size} sequences, stacks rebuilt | {sample_ms:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
