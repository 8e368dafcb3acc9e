"""Learner throughput against torch threads: what ``--learner-threads`` buys on this machine.

For each torso and batch size, samples per second of one training step of an
``ActorCritic`` (forward, a loss on both heads, backward, an Adam step) on random
observations of the game's shape, with 1 and 2 threads, in the same run; the ratio is
2 threads over 1. Pong's batches: 640 (IMPALA's Atari batch, 2 unrolls × 16 envs × 20
steps) and 40 and 84 (sample reuse's minibatches); MinAtar's: 128 (Ape-X's and Gorila's
DQN batch) and 640.

    python benchmarks/bench_learner_threads.py --seconds 8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from archzoo.nets import ActorCritic  # noqa: E402

CASES = [  # label, observation shape, actions, torso, dtype, batch
    ("ALE/Pong-v5", (4, 84, 84), 6, "nature-cnn", "|u1", 640),
    ("ALE/Pong-v5", (4, 84, 84), 6, "nature-cnn", "|u1", 84),
    ("ALE/Pong-v5", (4, 84, 84), 6, "nature-cnn", "|u1", 40),
    ("MinAtar/Breakout-v1", (4, 10, 10), 3, "impala-cnn", "|b1", 640),
    ("MinAtar/Breakout-v1", (4, 10, 10), 3, "impala-cnn", "|b1", 128),
]


def samples_per_s(shape: tuple[int, ...], actions: int, torso: str, dtype: str, batch: int,
                  threads: int, seconds: float) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ActorCritic(shape, actions, 256, torso, dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if dtype == "|u1":
        obs = torch.randint(0, 256, (batch, *shape), dtype=torch.uint8)
    else:
        obs = torch.rand(batch, *shape) < 0.1

    def step() -> None:
        logits, values = model(obs)
        loss = logits.logsumexp(-1).mean() + values.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n * batch / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per cell")
    args = ap.parse_args()
    print(f"torch {torch.__version__}; samples/s of one training step (forward, backward, Adam)")
    print("| game | torso | batch | 1 thread | 2 threads | 2 / 1 |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for game, shape, actions, torso, dtype, batch in CASES:
        one, two = (samples_per_s(shape, actions, torso, dtype, batch, t, args.seconds)
                    for t in (1, 2))
        print(f"| {game} | {torso} | {batch} | {one:,.0f} | {two:,.0f} | {two / one:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
