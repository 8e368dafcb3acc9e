"""Sample reuse in the V-trace learner (``--epochs``, ``--minibatches``), as PPO (Schulman et
al. 2017) and APPO (Petrenko et al. 2020) train: each batch is passed over ``epochs`` times,
each pass split into ``minibatches`` random groups, one gradient step per group. A
feed-forward model: V-trace targets and advantages from the current parameters at the start
of each pass, groups of single valid steps (PPO's minibatches). Checked against a loop
written here from that definition."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archzoo.learners.vtrace import ImpalaLossConfig, impala_loss, vtrace_targets
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.nets import ActorCritic
from tests.test_vtrace_optim import OBS, A, E, T, unroll  # unrolls with episode ends

CFG = ImpalaLossConfig(clip_ratio=0.2)


def reference_step(model: torch.nn.Module, opt: torch.optim.Optimizer,
                   b: dict[str, np.ndarray], cols: np.ndarray, clip: float) -> None:
    """One Adam step of the per-step mean IMPALA loss on the trajectories ``cols`` of ``b``."""
    sub = {k: torch.as_tensor(v[:, cols]) for k, v in b.items()}
    n = len(cols)
    logits, values = model(sub["obs"].reshape((T + 1) * n, OBS))
    loss, _ = impala_loss(logits=logits.reshape(T + 1, n, A)[:-1],
                          values=values.reshape(T + 1, n), actions=sub["actions"],
                          behaviour_logits=sub["behaviour_logits"], rewards=sub["rewards"],
                          terminated=sub["terminated"], truncated=sub["truncated"],
                          valid=sub["valid"], cfg=CFG)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


def pass_targets(model: torch.nn.Module, b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """V-trace's v_s and a_s for every step of ``b`` under ``model``'s current π and V."""
    cols = b["obs"].shape[1]
    with torch.no_grad():
        logits, values = model(torch.as_tensor(b["obs"]).reshape(-1, OBS))
    logits, values = logits.reshape(T + 1, cols, A)[:-1], values.reshape(T + 1, cols)
    a = torch.as_tensor(b["actions"])

    def logp(lg: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(lg, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)

    t = vtrace_targets(target_logp=logp(logits),
                       behaviour_logp=logp(torch.as_tensor(b["behaviour_logits"])),
                       rewards=torch.as_tensor(b["rewards"]), values=values,
                       terminated=torch.as_tensor(b["terminated"]),
                       truncated=torch.as_tensor(b["truncated"]),
                       valid=torch.as_tensor(b["valid"]), gamma=CFG.gamma)
    return {"vs": t.vs.numpy(), "adv": t.advantages.numpy()}


def reference_step_on_steps(model: torch.nn.Module, opt: torch.optim.Optimizer,
                            b: dict[str, np.ndarray], tg: dict[str, np.ndarray],
                            steps: np.ndarray, clip: float) -> None:
    """One Adam step on the flat steps ``steps`` (indices into T × B): PPO's clipped
    surrogate on the fixed a_s, ½(v_s − V(x_s))², the entropy bonus; means over the group."""
    flat = {k: v[:T].reshape(T * b["obs"].shape[1], *v.shape[2:])[steps] for k, v in b.items()}
    vs = torch.as_tensor(tg["vs"].reshape(-1)[steps])
    adv = torch.as_tensor(tg["adv"].reshape(-1)[steps])
    logits, values = model(torch.as_tensor(flat["obs"]))
    lp = F.log_softmax(logits, -1)
    a = torch.as_tensor(flat["actions"]).unsqueeze(-1)
    mu = F.log_softmax(torch.as_tensor(flat["behaviour_logits"]), -1).gather(-1, a).squeeze(-1)
    r = torch.exp(lp.gather(-1, a).squeeze(-1) - mu)
    eps = CFG.clip_ratio
    pg = -torch.minimum(r * adv, torch.clamp(r, 1 - eps, 1 + eps) * adv).mean()
    loss = (pg + CFG.baseline_coef * (0.5 * (vs - values) ** 2).mean()
            - CFG.entropy_coef * (-(lp.exp() * lp).sum(-1)).mean())
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


@pytest.mark.parametrize("epochs,minibatches", [(2, 2), (3, 5), (1, 8)])
def test_each_pass_steps_once_on_every_group_of_a_partition_of_the_valid_steps(
        epochs: int, minibatches: int) -> None:
    torch.manual_seed(0)
    model = ActorCritic((OBS,), A, 8)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, eps=1e-5)
    u1, u2 = unroll(1), unroll(2)
    learner = VTraceLearner(model, CFG, 1e-2, 0.5, torch.device("cpu"), epochs=epochs,
                            minibatches=minibatches)
    for _ in range(2):  # two updates: the shuffles go on from where the first left them
        learner.update([u1, u2])
    both = {k: np.concatenate([u1[k], u2[k]], axis=1) for k in u1}
    valid = np.flatnonzero(both["valid"].reshape(-1))
    assert len(valid) == T * 2 * E - 4  # the autoreset steps are never trained on
    shuffle = torch.Generator().manual_seed(0)
    n_steps = 0
    for _ in range(2 * epochs):
        tg = pass_targets(ref, both)  # the pass's targets, from the parameters it starts with
        groups = np.array_split(torch.randperm(len(valid), generator=shuffle).numpy(),
                                minibatches)
        assert sorted(np.concatenate(groups)) == list(range(len(valid)))  # a partition
        for g in groups:
            reference_step_on_steps(ref, ref_opt, both, tg, valid[g], 0.5)
            n_steps += 1
    assert learner.version == 2  # one version per batch, however many steps
    assert learner.opt.state[next(iter(model.parameters()))]["step"] == n_steps
    assert n_steps == 2 * epochs * minibatches
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_a_single_step_per_batch_is_impalas_update_on_the_batch_in_its_order() -> None:
    """1 × 1 takes no shuffle: the batch's columns stay in the order the unrolls came."""
    torch.manual_seed(0)
    model = ActorCritic((OBS,), A, 8)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, eps=1e-5)
    u1, u2 = unroll(3), unroll(4)
    VTraceLearner(model, CFG, 1e-2, 0.5, torch.device("cpu")).update([u1, u2])
    both = {k: np.concatenate([u1[k], u2[k]], axis=1) for k in u1}
    reference_step(ref, ref_opt, both, np.arange(2 * E), 0.5)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("argv,needle", [
    (["--epochs", "0"], "--epochs"), (["--minibatches", "0"], "--minibatches"),
    (["--envs-per-actor", "4", "--batch-unrolls", "2", "--unroll-length", "5",
      "--minibatches", "41"], "<= the steps"),
    (["--envs-per-actor", "4", "--batch-unrolls", "2", "--core", "lstm", "--minibatches", "9"],
     "<= the trajectories")])
def test_bad_reuse_flags_one_line_exit_2(argv: list[str], needle: str, capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "impala", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("archzoo: error:") and needle in err[0], err


def test_a_recurrent_model_reuses_whole_trajectories_each_with_its_initial_state() -> None:
    """A recurrent core needs its sequences: the groups are env columns, each with its own
    initial core state, and every trajectory is trained on once per pass."""
    from archzoo.actors.unroll import unroll_schema
    from archzoo.envs import env_spec
    from archzoo.nets import RecurrentActorCritic

    spec = env_spec("archzoo/CartPoleNoVel-v1")
    torch.manual_seed(0)
    model = RecurrentActorCritic((2,), 2, hidden=8, core_size=4, prev_action_reward=True)
    msg = unroll_schema(spec, T, E, 4, True).new()
    rng = np.random.default_rng(0)
    msg["obs"][:] = rng.normal(size=msg["obs"].shape)
    msg["actions"][:] = rng.integers(0, 2, size=(T, E))
    msg["rewards"][:] = rng.normal(size=(T, E))
    msg["valid"][:] = True
    msg["core_h0"][:] = rng.normal(size=(E, 4))
    learner = VTraceLearner(model, CFG, 1e-2, 0.5, torch.device("cpu"), epochs=2,
                            minibatches=3)
    seen: list[list[float]] = []
    real = learner._step

    def spy(b, last):  # the initial states that each step's trajectories carry
        seen.append(sorted(float(x) for x in b["core_h0"][:, 0]))
        return real(b, last)

    learner._step = spy
    learner.update([msg])
    assert learner.version == 1 and len(seen) == 6
    every = sorted(float(x) for x in msg["core_h0"][:, 0])
    for p in (seen[:3], seen[3:]):  # each pass: a partition of the E trajectories
        assert sorted(x for g in p for x in g) == every
