"""``archzoo eval RUN_DIR``: replay a run's final policy and report its returns."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from archzoo.errors import UsageError


def cmd_eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    import torch

    from archzoo.api import load_policy
    from archzoo.envs import EnvError, env_spec, make_vector_env

    torch.set_num_threads(1)
    run_dir = Path(args.run_dir)
    policy = load_policy(run_dir, greedy=args.greedy, seed=args.seed)
    meta = policy.meta
    try:
        spec = env_spec(meta["env"], meta.get("env_kwargs") or {},
                        imports=tuple(meta.get("env_import") or ()))
    except EnvError as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy's env: {e}") from None
    env = make_vector_env(spec, 1)
    returns = []
    for ep in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + ep)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += float(r[0])
            done = bool(term[0] or trunc[0])
        returns.append(total)
    env.close()
    result = {"run_dir": str(run_dir), "env": meta["env"], "episodes": args.episodes,
              "policy": "greedy" if policy.greedy else "sample",
              "mean_return": float(np.mean(returns)), "min_return": float(np.min(returns)),
              "max_return": float(np.max(returns))}
    print(json.dumps(result))
    return 0
