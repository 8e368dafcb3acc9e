"""``archzoo eval RUN_DIR``: replay a run's final policy and report its returns; with
``--video FILE.mp4``, film every frame of those episodes (archzoo/video.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from archzoo.errors import UsageError
from archzoo.policy import load_policy


def cmd_eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be >= 1, got {args.max_steps}")
    video = Path(args.video) if args.video else None
    if video is not None and video.suffix.lower() != ".mp4":
        raise UsageError(f"--video {args.video}: the video is an .mp4 file")
    import torch

    from archzoo.envs import EVAL_MAX_STEPS, EnvError
    from archzoo.video import play, policy_env

    torch.set_num_threads(1)
    run_dir = Path(args.run_dir)
    policy = load_policy(run_dir, greedy=args.greedy, seed=args.seed)
    meta = policy.meta
    try:
        spec = policy_env(meta)
    except EnvError as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy's env: {e}") from None
    try:
        played = play(policy, spec, args.episodes, args.seed, video,
                      args.max_steps or EVAL_MAX_STEPS)
    except EnvError as e:
        raise UsageError(f"--video: {e}") from None
    returns = played.returns
    result = {"run_dir": str(run_dir), "env": meta["env"], "episodes": args.episodes,
              "policy": "greedy" if policy.greedy else "sample",
              "mean_return": float(np.mean(returns)), "min_return": float(np.min(returns)),
              "max_return": float(np.max(returns)), "episode_lengths": played.lengths}
    if video is not None:
        result.update(video=str(video), video_frames=played.frames)
    print(json.dumps(result))
    return 0
