"""archzoo/eager.py: torch's optimizers made and stepped without importing torch._dynamo.

- The updates are bit for bit those of ``opt.step()`` for every optimizer archzoo builds
  (Adam, RMSProp plain and centred, SGD), over several steps, with state_dict and
  load_state_dict on the way.
- A training run of each learner family (V-trace, double DQN, a GALA agent's) in a fresh
  process trains without ever importing torch._dynamo (``python -X importtime`` lists every
  module imported); before, each of those processes imported it at its first update, which
  costs more CPU than ``import torch`` itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from archzoo import eager
from archzoo.spawn import clean_env

OPTIMIZERS = [
    (torch.optim.Adam, {"lr": 1e-2, "eps": 1e-5}),
    (torch.optim.RMSprop, {"lr": 1e-2, "alpha": 0.99, "eps": 0.01}),
    (torch.optim.RMSprop, {"lr": 1e-2, "alpha": 0.95, "eps": 1.5e-7, "centered": True}),
    (torch.optim.SGD, {"lr": 0.1}),
]


def train(cls: type[torch.optim.Optimizer], kwargs: dict, guarded: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    opt = cls(model.parameters(), **kwargs) if guarded else \
        eager.optimizer(cls, model.parameters(), **kwargs)
    for i in range(6):
        opt.zero_grad(set_to_none=True)
        model(torch.randn(16, 4)).pow(2).mean().backward()
        opt.step() if guarded else eager.step(opt)
        if i == 2:  # a checkpoint's round trip on the way
            opt.load_state_dict(opt.state_dict())
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("cls,kwargs", OPTIMIZERS)
def test_updates_are_bit_for_bit_those_of_opt_step(cls, kwargs: dict) -> None:
    got, want = train(cls, kwargs, guarded=False), train(cls, kwargs, guarded=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert not torch.equal(want[0], train(cls, {**kwargs, "lr": kwargs["lr"] / 2}, False)[0])


@pytest.mark.parametrize("arch,flags", [
    ("impala", []),  # learners/vtrace_learner.py
    ("apex", ["--learning-starts", "200"]),  # learners/dqn.py
    ("gala", []),  # builders.agent_optimizer, stepped by the agent
])
def test_a_training_process_never_imports_torch_dynamo(tmp_path: Path, arch: str,
                                                       flags: list[str]) -> None:
    d = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "archzoo", "run", arch, "--env",
         "CartPole-v1", "--actors", "0", "--total-steps", "3000", *flags, "--quiet",
         "--run-dir", str(d)],
        capture_output=True, text=True, timeout=180, env=clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((d / "summary.json").read_text())["learner_updates"] > 0
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines()
                if ln.startswith("import time:")}
    assert "torch.optim" in imported  # what is listed is what this process imported
    assert "torch._dynamo" not in imported
