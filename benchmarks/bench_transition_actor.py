"""What an Ape-X/Gorila actor's initial priorities cost: reusing the Q-values it computed to
act, against computing them again for every batch.

One ε-greedy ``TransitionActor`` (the MinAtar preset's torso and 16 envs, one torch thread,
as every actor runs) collects batches of ``--actor-batch`` transitions for ``--seconds``;
its priorities come from the Q-values it acted with. On the same batches, the same run then
times the forward pass that computing them again takes (Q(s, ·) and Q(s', ·) of every
transition, as a recompute under the local network would), and reports it per 1,000 agent
steps beside the actor's own time.

    python benchmarks/bench_transition_actor.py --seconds 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from archzoo import builders  # noqa: E402
from archzoo.actors.transitions import TransitionActor  # noqa: E402
from archzoo.cli import parse  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="MinAtar/Breakout-v1")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--actor-batch", type=int, default=256)
    a = p.parse_args()
    torch.set_num_threads(1)
    cfg = parse(["run", "apex", "--config", "minatar", "--env", a.env,
                 "--actor-batch", str(a.actor_batch)])
    spec = builders.env_spec(cfg)
    model = builders.q_network(cfg, spec)
    actor = TransitionActor(spec, cfg.envs_per_actor, cfg.n_step, cfg.gamma, model, 0.4, 0)
    msg = builders.replay_inserts(cfg, spec).new()
    batches, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        n = actor.collect(msg, cfg.actor_batch)
        batches.append((msg["obs"][:n].copy(), msg["next_obs"][:n].copy()))
    wall = time.perf_counter() - t0
    steps = actor.tracker.env_steps
    t1 = time.perf_counter()
    with torch.no_grad():
        for obs, next_obs in batches:
            model(torch.cat([torch.as_tensor(obs), torch.as_tensor(next_obs)]))
    again = time.perf_counter() - t1
    actor.close()
    per_k = 1000.0 / steps
    print(f"{a.env}, {cfg.model}, {cfg.envs_per_actor} envs, batches of "
          f"{cfg.actor_batch}: {steps:,} agent steps in {wall:.1f} s, {len(batches)} batches\n")
    print("| per 1,000 agent steps | seconds |")
    print("| --- | ---: |")
    print(f"| the actor (env + acting + priorities from its Q-values) | {wall * per_k:.3f} |")
    print(f"| of which its forward passes | {actor.inference_s * per_k:.3f} |")
    print(f"| computing the priorities again (Q(s), Q(s') forward) | {again * per_k:.3f} |")
    print(f"\nrecomputing would make the actor {(wall + again) / wall:.2f}x slower")


if __name__ == "__main__":
    main()
