"""The frozen-parameter evaluation (``archzoo eval --parallel``, archzoo/evaluate.py): its
episodes played side by side are the episodes ``archzoo eval`` plays one after another."""

from __future__ import annotations

import json
from pathlib import Path

from runs import cli

from archzoo.evaluate import play_at_once
from archzoo.policy import load_policy
from archzoo.video import play, policy_env


def test_episodes_at_once_are_the_episodes_one_by_one(tmp_path: Path) -> None:
    """MinAtar's envs step one by one in a SyncVectorEnv: env k of the batch, reset with
    seed + k, plays the episode that the sequential evaluation plays k-th (a greedy policy
    with frozen parameters: its sticky actions draw from the env's seed), cut at the same
    step."""
    d = tmp_path / "run"
    r = cli("run", "impala", "--env", "MinAtar/Breakout-v1", "--config", "none", "--actors",
            "0", "--quiet", "--no-tensorboard", "--total-steps", "2000", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    policy = load_policy(d, greedy=True)
    spec = policy_env(policy.meta)
    one_by_one = play(policy, spec, 4, seed=50, max_steps=150)
    at_once = play_at_once(policy, spec, 4, seed=50, max_steps=150)
    assert at_once.lengths == one_by_one.lengths and at_once.returns == one_by_one.returns
    assert max(at_once.lengths) <= 150 and len(set(at_once.returns)) > 1  # seeds differ

    ev = cli("eval", str(d), "--episodes", "5", "--parallel", "--max-steps", "4")
    assert ev.returncode == 0, ev.stderr[-3000:]
    res = json.loads(ev.stdout.strip().splitlines()[-1])
    assert len(res["returns"]) == 5 and res["episode_lengths"] == [4] * 5
    assert res["mean_return"] == sum(res["returns"]) / 5 and res["policy"] == "sample"
    bad = cli("eval", str(d), "--parallel", "--video", str(tmp_path / "v.mp4"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
