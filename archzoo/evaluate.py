"""``archzoo eval RUN_DIR``: replay a run's final policy and report its returns."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from archzoo.errors import UsageError


def cmd_eval(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    policy = run_dir / "policy.pt"
    if not policy.is_file():
        raise UsageError(f"{run_dir}: no policy.pt (not a finished run directory?)")
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    import gymnasium as gym
    import torch

    from archzoo.nets import ActorCritic
    from learners.dqn import QNetwork

    torch.set_num_threads(1)
    saved = torch.load(policy, weights_only=True)
    meta = saved["meta"]
    q_net = meta.get("net") == "q"  # Q-networks (Ape-X) act greedily: argmax_a Q(s, a)
    if q_net:
        model = QNetwork(tuple(meta["obs_shape"]), meta["num_actions"], meta["hidden"],
                         meta["dueling"])
    else:
        model = ActorCritic(tuple(meta["obs_shape"]), meta["num_actions"], meta["hidden"])
    model.load_state_dict(saved["state_dict"])
    model.eval()
    rng = np.random.default_rng(args.seed)
    env = gym.make(meta["env"])
    returns = []
    for ep in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + ep)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                out = model(torch.as_tensor(obs, dtype=torch.float32))
            lg = (out if q_net else out[0]).numpy()
            a = int(np.argmax(lg)) if args.greedy or q_net \
                else int(np.argmax(lg + rng.gumbel(size=lg.shape)))
            obs, r, term, trunc, _ = env.step(a)
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    result = {"run_dir": str(run_dir), "env": meta["env"], "episodes": args.episodes,
              "policy": "greedy" if args.greedy or q_net else "sample",
              "mean_return": float(np.mean(returns)), "min_return": float(np.min(returns)),
              "max_return": float(np.max(returns))}
    print(json.dumps(result))
    return 0
