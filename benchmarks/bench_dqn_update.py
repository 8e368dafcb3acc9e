"""Time one double-DQN update (Ape-X's and Gorila's learner) on a MinAtar-sized batch.

The learner's update (learners/dqn.py) runs Q(s) with the graph and Q_online(s'),
Q_target(s') without it. The baseline, measured in the same run, is one forward of s and
s' together with the graph, which backpropagates through both halves. Prints ms per update
and the ratio, per torso and batch size, on one thread (a learner's share of 2 cores).

    python benchmarks/bench_dqn_update.py [--models impala-cnn minatar-cnn] [--batch 64 128]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from archzoo.learners.dqn import DQNConfig, DQNLearner, QNetwork, double_dqn_targets  # noqa: E402


def one_forward_update(learner: DQNLearner, b: dict[str, torch.Tensor]) -> None:
    """The baseline: s and s' in one forward with the graph."""
    n = b["obs"].shape[0]
    q_all = learner.model(torch.cat([b["obs"], b["next_obs"]]))
    q_sa = q_all[:n].gather(-1, b["action"].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        y = double_dqn_targets(q_all[n:].detach(), learner.target(b["next_obs"]), b["ret"],
                               b["discount"])
    learner.step(F.huber_loss(q_sa, y))


def ms_per_update(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e3


def row(model: str, n: int, shape: tuple[int, int, int], reps: int) -> str:
    """One table row: both ways' ms per update on a random batch of ``n``."""
    rng = np.random.default_rng(0)
    net = QNetwork(shape, 6, hidden=256, dueling=True, model=model, obs_dtype="|b1")
    learner = DQNLearner(net, DQNConfig(), torch.device("cpu"))
    b = {"obs": rng.random((n, *shape)) < 0.1, "next_obs": rng.random((n, *shape)) < 0.1,
         "action": rng.integers(0, 6, n), "ret": rng.standard_normal(n),
         "discount": np.full(n, 0.97)}
    t = {k: torch.as_tensor(v) for k, v in b.items()}
    t["action"], t["ret"], t["discount"] = (t["action"].long(), t["ret"].float(),
                                            t["discount"].float())
    base = ms_per_update(lambda: one_forward_update(learner, t), reps)
    ours = ms_per_update(lambda: learner.update(b), reps)
    return f"| {model} | {n} | {base:.2f} | {ours:.2f} | {base / ours:.2f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=["impala-cnn", "minatar-cnn"])
    p.add_argument("--batch", type=int, nargs="*", default=[64, 128])
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--shape", type=int, nargs=3, default=[10, 10, 4], help="H W C (Breakout)")
    a = p.parse_args()
    torch.set_num_threads(1)
    print("| torso | batch | one forward (ms) | s' without graph (ms) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for model in a.models:
        for n in a.batch:
            print(row(model, n, tuple(a.shape), a.reps))


if __name__ == "__main__":
    main()
