"""The bounded full solves CI runs: IMPALA (embedded, gloo, async) reaches 475 on CartPole-v1,
and so does async IMPALA broadcasting over a tree of relaying actors; under torchrun and
mpiexec that tree relays in a short run.

Bounded by an env-step budget; the star's passes if either of two seeds solves
(tests/runs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mp import describe, run_mpi
from tests.runs import RANDOM_RETURN, cli, solve_either_seed, torchrun


@pytest.mark.slow
def test_impala_solves_cartpole(tmp_path: Path) -> None:
    s = solve_either_seed("impala", ["--env", "CartPole-v1", "--target-return", "475",
                                     "--actors", "2", "--backend", "gloo",
                                     "--total-steps", "4000000", "--time-limit", "240"],
                          tmp_path)
    assert s["final_mean_return"] >= 475 and s["env_steps_to_target"] <= 4000000
    assert s["time_to_target_s"] > 0 and s["stop_reason"] == "target"
    ev = cli("eval", s["run_dir"], "--episodes", "10")
    assert ev.returncode == 0, ev.stderr
    # the saved final policy replays above a random one (~22). Not near 475: the window is
    # the behaviour policies of the last ~100 episodes (tens of updates), policy.pt the
    # learner's last update, and async IMPALA on CartPole moves fast: four seed runs that
    # stopped at 475-478 replayed their policy.pt at 500, 500, 500 and 368 (sampled and
    # greedy alike), earlier CI runs at 134 and 43.6; a replay at 500 shows that the
    # saving and the replay are right
    assert json.loads(ev.stdout)["mean_return"] >= RANDOM_RETURN + 10


TREE = ["--env", "CartPole-v1", "--topology", "tree", "--fanout", "2", "--quiet"]
SOLVE = ["--target-return", "475", "--total-steps", "4000000", "--time-limit", "240"]


@pytest.mark.parametrize("launcher", [pytest.param("embedded", marks=pytest.mark.slow),
                                      "torchrun", "mpiexec"])
def test_async_tree_impala_relays_under_each_launcher(tmp_path: Path, launcher: str) -> None:
    """Async IMPALA whose 3 actors relay the parameters down a binary tree (rank 2 feeds
    rank 3), under each launcher; the embedded run learns through the relay to 475. The
    others stop after 6,000 agent steps: the launcher numbers the ranks, and so decides who
    relays to whom; they check the relay, not the learning again (35 s less CI)."""
    d = tmp_path / "run"
    if launcher == "embedded":
        r = cli("run", "impala", "--actors", "3", "--seed", "0", "--run-dir", str(d), *TREE,
                *SOLVE, timeout=400)
        assert r.returncode == 0, r.stderr[-3000:]
    elif launcher == "torchrun":
        torchrun(4, "run", "impala", "--seed", "0", "--run-dir", str(d), *TREE,
                 "--total-steps", "6000", timeout=400)
    else:
        job = run_mpi(4, ["-m", "archzoo", "run", "impala", "--seed", "0", "--run-dir", str(d),
                          *TREE, "--total-steps", "6000"], timeout_s=400)
        assert job.returncode == 0, describe(job)
    s = json.loads((d / "summary.json").read_text())
    if launcher == "embedded":
        assert s["stop_reason"] == "target" and s["final_mean_return"] >= 475, \
            (s["stop_reason"], s["final_mean_return"])
    assert s["topology"] == "tree" and s["params_by_rank"]["3"]["parent"] == 2
    assert s["params_by_rank"]["2"]["relayed"] > 0
