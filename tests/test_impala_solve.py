"""The bounded full solve CI runs: IMPALA (embedded, gloo, async) reaches 475 on CartPole-v1.

Bounded by an env-step budget; passes if either of two seeds solves (DESIGN.md, Testing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runs import cli

pytestmark = pytest.mark.slow


def test_impala_solves_cartpole(tmp_path: Path) -> None:
    results = []
    for seed in (0, 1):
        d = tmp_path / f"seed{seed}"
        r = cli("run", "impala", "--env", "CartPole-v1", "--target-return", "475",
                "--actors", "2", "--backend", "gloo", "--total-steps", "4000000",
                "--time-limit", "240", "--seed", str(seed), "--quiet", "--run-dir", str(d),
                timeout=400)
        assert r.returncode == 0, r.stderr
        s = json.loads((d / "summary.json").read_text())
        results.append(s)
        if s["solved"]:
            break
    solved = [s for s in results if s["solved"]]
    assert solved, [(s["stop_reason"], s["final_mean_return"]) for s in results]
    s = solved[0]
    assert s["final_mean_return"] >= 475 and s["env_steps_to_target"] <= 4000000
    assert s["time_to_target_s"] > 0 and s["stop_reason"] == "target"
    ev = cli("eval", str(tmp_path / f"seed{s['seed']}"), "--episodes", "10")
    assert ev.returncode == 0, ev.stderr
    # the saved final policy replays far above a random one (~22)
    assert json.loads(ev.stdout)["mean_return"] >= 200
