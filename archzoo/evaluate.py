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
    import torch

    from archzoo.envs import EnvError, env_spec, make_vector_env
    from archzoo.nets import ActorCritic
    from learners.dqn import QNetwork

    torch.set_num_threads(1)
    saved = torch.load(policy, weights_only=True)
    meta = saved["meta"]
    shape, dtype = tuple(meta["obs_shape"]), meta.get("obs_dtype", "<f4")
    model_name = meta.get("model", "mlp")
    q_net = meta.get("net") == "q"  # Q-networks (Ape-X) act greedily: argmax_a Q(s, a)
    try:
        if q_net:
            model = QNetwork(shape, meta["num_actions"], meta["hidden"], meta["dueling"],
                             model_name, dtype)
        else:
            model = ActorCritic(shape, meta["num_actions"], meta["hidden"], model_name, dtype)
        spec = env_spec(meta["env"], meta.get("env_kwargs") or {})
    except (ValueError, EnvError) as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy: {e}") from None
    model.load_state_dict(saved["state_dict"])
    model.eval()
    rng = np.random.default_rng(args.seed)
    env = make_vector_env(spec, 1)
    returns = []
    for ep in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + ep)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                out = model(torch.as_tensor(obs))
            lg = (out if q_net else out[0]).numpy()[0]
            a = int(np.argmax(lg)) if args.greedy or q_net \
                else int(np.argmax(lg + rng.gumbel(size=lg.shape)))
            obs, r, term, trunc, _ = env.step(np.array([a]))
            total += float(r[0])
            done = bool(term[0] or trunc[0])
        returns.append(total)
    env.close()
    result = {"run_dir": str(run_dir), "env": meta["env"], "episodes": args.episodes,
              "policy": "greedy" if args.greedy or q_net else "sample",
              "mean_return": float(np.mean(returns)), "min_return": float(np.min(returns)),
              "max_return": float(np.max(returns))}
    print(json.dumps(result))
    return 0
