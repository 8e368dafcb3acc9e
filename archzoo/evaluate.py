"""``archzoo eval RUN_DIR``: replay a run's final policy and report its returns; with
``--video FILE.mp4``, film every frame of those episodes (archzoo/video.py); with
``--parallel``, play them at once, one env each (:func:`play_at_once`), as the learning
benchmark's frozen-parameter read-out does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from archzoo.errors import UsageError
from archzoo.policy import Policy, load_policy
from archzoo.video import Played

if TYPE_CHECKING:
    from archzoo.envs import EnvSpec


def cmd_eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be >= 1, got {args.max_steps}")
    video = Path(args.video) if args.video else None
    if video is not None and video.suffix.lower() != ".mp4":
        raise UsageError(f"--video {args.video}: the video is an .mp4 file")
    if video is not None and args.parallel:
        raise UsageError("--parallel plays every episode at once: it cannot film them into "
                         "one --video; leave one of them out")
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
        if args.parallel:
            played = play_at_once(policy, spec, args.episodes, args.seed,
                                  args.max_steps or EVAL_MAX_STEPS)
        else:
            played = play(policy, spec, args.episodes, args.seed, video,
                          args.max_steps or EVAL_MAX_STEPS)
    except EnvError as e:
        raise UsageError(f"--video: {e}") from None
    returns = played.returns
    result = {"run_dir": str(run_dir), "env": meta["env"], "episodes": args.episodes,
              "policy": "greedy" if policy.greedy else "sample",
              "mean_return": float(np.mean(returns)), "min_return": float(np.min(returns)),
              "max_return": float(np.max(returns)), "returns": [float(r) for r in returns],
              "episode_lengths": played.lengths, "seed": args.seed,
              "max_steps": args.max_steps or EVAL_MAX_STEPS}
    if video is not None:
        result.update(video=str(video), video_frames=played.frames)
    print(json.dumps(result))
    return 0


def play_at_once(policy: Policy, spec: str | EnvSpec, episodes: int, seed: int,
                 max_steps: int) -> Played:
    """``episodes`` episodes of ``spec``'s env played side by side, one env each (env k reset
    with seed ``seed + k``), with the policy's parameters fixed: one forward pass per step
    for all of them. An env's episode ends at its first ``terminated`` or ``truncated``, or
    after ``max_steps`` steps; what it does after that is not counted."""
    from archzoo.actors.base import vector_seed
    from archzoo.envs import make_vector_env

    env = make_vector_env(spec, episodes)
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, np.int64)
    running = np.ones(episodes, bool)
    try:
        obs, _ = env.reset(seed=vector_seed(env, [seed + k for k in range(episodes)]))
        policy.reset(episodes)
        while running.any() and lengths.max() < max_steps:
            obs, r, term, trunc, _ = env.step(policy(obs))
            policy.observe(r)
            returns += np.where(running, r, 0.0)
            lengths += running
            running &= ~(np.asarray(term) | np.asarray(trunc)) & (lengths < max_steps)
    finally:
        env.close()
    return Played(returns=returns.tolist(), lengths=lengths.tolist())
