"""GALA/PALA end to end: A2C agents gossiping over the ring, on both engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from archzoo.topology.ring import neighbour_distance, ring_neighbours
from tests.mp import describe, run_mpi
from tests.runs import RANDOM_RETURN, best_return, cli, filled, load_run, solve_either_seed

SMOKE = ["--total-steps", "150000", "--quiet", "--seed", "2", "--log-interval", "0.5"]
# The one agent and the MPI run take the same steps: a shorter run checks them, the
# embedded gloo run of 3 agents that the policy learns, and the slow tier that it solves
# CartPole (test_gala_solves_cartpole).
SHORT = ["--total-steps", "50000", *SMOKE[2:]]


def check(d: Path, backend: str, agents: int, learns: bool = False) -> dict:
    """Gossip, consensus and loss columns; ``learns``: it beat random within SMOKE's
    150,000 agent steps."""
    s = load_run(d)
    assert (s["arch"], s["backend"], s["world_size"]) == ("gala", backend, agents)
    assert s["env_steps"] >= (150000 if learns else 50000)
    if learns:
        assert best_return(d) > RANDOM_RETURN + 10, s["final_mean_return"]
    if agents > 1:
        assert s["topology"] == "ring" and s["gossip_rounds"] > 0
        # every gossip round sends to both ring neighbours (one for two agents): the
        # messages of rank 0 count gossip rounds and the stop-flag chain
        assert s["per_rank_bytes"]["1"]["msgs_sent"] >= s["gossip_rounds"]
        assert {f"agent{r}" for r in range(agents)} <= set(s["time_breakdown_s"])
        # the last round's stop flag follows a gossip average; on a ring of 2 or 3 agents
        # that average is every agent's mean, so all end with the same parameters
        assert 0.0 <= s["consensus_distance"] < 1e-6, s["consensus_distance"]
        # metrics.csv: rank 0's distance to its neighbours' mean at each gossip round
        dist = filled(d, "consensus_distance")
        assert dist and all(np.isfinite(x) and x >= 0 for x in dist), dist
        assert max(dist) > 0  # the agents' local steps move them apart between rounds
    else:
        assert not filled(d, "consensus_distance")
    for col in ("loss", "pg_loss", "baseline_loss", "entropy", "grad_norm", "lr"):
        assert filled(d, f"learner/{col}"), col  # every agent's A2C loss terms
    assert all(0 <= h <= np.log(2) + 1e-6 for h in filled(d, "learner/entropy"))
    return s


def test_neighbour_distance_is_the_distance_to_the_neighbours_mean() -> None:
    """Recovered from one gossip average (archzoo/topology/ring.py's, in float32), the
    distance matches numpy's on the parameter vectors themselves: 3 or more agents (two
    neighbours), and 2 (one)."""
    rng = np.random.default_rng(0)
    x, left, right = (rng.normal(size=1000).astype(np.float32) for _ in range(3))
    after = (left + x + right) / np.float32(3)
    want = np.linalg.norm(x.astype(np.float64) - (left.astype(np.float64) + right) / 2)
    assert neighbour_distance(x, after, ring_neighbours(3)) == pytest.approx(want, rel=1e-5)
    after2 = (x + left) / np.float32(2)
    want2 = np.linalg.norm(x.astype(np.float64) - left)
    assert neighbour_distance(x, after2, ring_neighbours(2)) == pytest.approx(want2, rel=1e-5)
    assert neighbour_distance(x, x.copy(), 2) == 0.0  # in consensus
    assert ring_neighbours(5) == 2 and ring_neighbours(2) == 1 and ring_neighbours(1) == 0
    with pytest.raises(ValueError, match="neighbours"):
        neighbour_distance(x, x, 0)


@pytest.mark.parametrize("agents", [0, 3])
def test_embedded_gloo(tmp_path: Path, agents: int) -> None:
    d = tmp_path / "run"
    r = cli("run", "gala", "--actors", str(agents), "--run-dir", str(d),
            *(SMOKE if agents else SHORT))
    assert r.returncode == 0, r.stderr
    check(d, "gloo" if agents else "none", max(1, agents), learns=agents > 0)


def test_mpiexec(tmp_path: Path) -> None:
    d = tmp_path / "run"
    job = run_mpi(3, ["-m", "archzoo", "run", "gala", "--run-dir", str(d), *SHORT],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    check(d, "mpi", 3)


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "tree"], "gossip with their ring neighbours"),
    (["--mode", "sync"], "no --mode sync"),
    (["--gossip-every", "0"], "--gossip-every"),
    (["--device", "cuda"], "gala computes its gradients in CPU actor-learner processes"),
])
def test_bad_input(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "gala", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.slow
def test_gala_solves_cartpole(tmp_path: Path) -> None:
    s = solve_either_seed("gala", ["--env", "CartPole-v1", "--target-return", "475",
                                   "--actors", "2", "--total-steps", "3000000",
                                   "--time-limit", "240"], tmp_path)
    assert s["final_mean_return"] >= 475 and s["stop_reason"] == "target"


@pytest.mark.parametrize("name", ["rmsprop", "adam"])
def test_an_agent_steps_with_the_optimizer_it_was_given(name: str) -> None:
    """``--optimizer`` reaches a GALA agent: the same gradient step as torch's own optimizer
    with the flags' settings (RMSProp: alpha 0.99, ``--rms-eps``)."""
    import torch

    from archzoo import builders
    from archzoo.config import GalaConfig

    cfg = GalaConfig(arch="gala", optimizer=name, rms_eps=1e-3, lr=0.01)
    model, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    ref_opt = (torch.optim.RMSprop(ref.parameters(), lr=0.01, alpha=0.99, eps=1e-3)
               if name == "rmsprop" else torch.optim.Adam(ref.parameters(), lr=0.01))
    opt = builders.agent_optimizer(cfg, model)
    x = torch.randn(8, 3)
    for m, o in ((model, opt), (ref, ref_opt)):
        for _ in range(3):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    assert type(opt) is type(ref_opt)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
