"""R2D2's parts against references: the value rescaling and its inverse, n-step returns
against a loop of the definition, sequence priorities against the formula, burn-in without
gradient, and the stored state reproducing the actor's Q-values across episode ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archzoo import builders
from archzoo.actors.sequences import SequenceActor, sequence_fields
from archzoo.actors.unroll import core_inputs
from archzoo.architectures.r2d2 import R2D2Builder
from archzoo.config import R2D2Config
from archzoo.envs import env_spec
from archzoo.learners.r2d2 import (
    R2D2Learner,
    inverse_value_rescale,
    n_step_returns,
    sequence_loss,
    sequence_priorities,
    sequence_td,
    time_major,
    value_rescale,
)
from archzoo.messages import Schema
from archzoo.nets import RecurrentQNetwork
from archzoo.replay.server import insert_schema

ENV = "archzoo/CartPoleNoVel-v1"


def test_value_rescaling_is_inverted_by_its_inverse() -> None:
    x = torch.cat([torch.linspace(-1e4, 1e4, 20001, dtype=torch.float64),
                   torch.tensor([0.0, 1e-9, -1e-9, 0.5, -0.5], dtype=torch.float64)])
    for eps in (1e-3, 1e-2, 0.1):
        h = value_rescale(x, eps)
        ref = torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x  # R2D2 §2.3
        torch.testing.assert_close(h, ref)
        torch.testing.assert_close(inverse_value_rescale(h, eps), x, rtol=1e-9, atol=1e-7)
        torch.testing.assert_close(value_rescale(inverse_value_rescale(x, eps), eps), x,
                                   rtol=1e-9, atol=1e-7)
    s = torch.sort(x).values
    assert bool((value_rescale(s[1:]) >= value_rescale(s[:-1])).all())  # increasing


def reference_returns(r: np.ndarray, term: np.ndarray, trunc: np.ndarray, v: np.ndarray,
                      gamma: float, n: int) -> np.ndarray:
    """G_t, one step t and one sequence b at a time, as the definition reads."""
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            g, k = 0.0, 0
            while True:
                g += gamma ** k * r[t + k, b]
                if term[t + k, b]:
                    break
                if trunc[t + k, b] or k + 1 == n or t + k + 1 == T:
                    g += gamma ** (k + 1) * v[t + k + 1, b]
                    break
                k += 1
            out[t, b] = g
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_returns_equal_a_loop_of_the_definition(n: int) -> None:
    rng = np.random.default_rng(n)
    T, B, gamma = 13, 7, 0.9
    r = rng.normal(size=(T, B))
    term = rng.random((T, B)) < 0.15
    trunc = ~term & (rng.random((T, B)) < 0.1)
    v = rng.normal(size=(T + 1, B))
    got = n_step_returns(*(torch.as_tensor(a) for a in (r, term, trunc, v)), gamma, n)
    np.testing.assert_allclose(got.numpy(), reference_returns(r, term, trunc, v, gamma, n),
                               rtol=1e-12, atol=1e-12)


def test_sequence_priority_is_eta_max_plus_one_minus_eta_mean() -> None:
    rng = np.random.default_rng(0)
    td = np.abs(rng.normal(size=(9, 6)))
    mask = rng.random((9, 6)) < 0.7
    mask[:, 0] = False  # a sequence with no trained step
    got = sequence_priorities(torch.as_tensor(td), torch.as_tensor(mask), 0.9).numpy()
    for b in range(6):
        d = td[mask[:, b], b]
        want = 0.9 * d.max() + 0.1 * d.mean() if d.size else 0.0
        assert got[b] == pytest.approx(want, rel=1e-12)


def test_sequence_loss_sums_over_time_and_averages_over_the_batch() -> None:
    """½δ² summed over each sequence's trained steps, times its importance weight, averaged
    over the batch (R2D2's learner; a mean over time would shrink the gradient by T)."""
    rng = np.random.default_rng(1)
    td = rng.normal(size=(7, 5))
    mask = rng.random((7, 5)) < 0.6
    w = rng.random(5)
    got = float(sequence_loss(torch.as_tensor(td), torch.as_tensor(mask), torch.as_tensor(w)))
    want = np.mean([w[b] * sum(0.5 * td[t, b] ** 2 for t in range(7) if mask[t, b])
                    for b in range(5)])
    assert got == pytest.approx(want, rel=1e-12)
    unweighted = float(sequence_loss(torch.as_tensor(td), torch.as_tensor(mask), None))
    assert unweighted == pytest.approx(np.mean((0.5 * td**2 * mask).sum(0)), rel=1e-12)


def _config(**kw: object) -> R2D2Config:
    base = dict(arch="r2d2", env=ENV, hidden=16, core="lstm:8", sequence_length=12,
                burn_in=4, sequence_overlap=6, n_step=3, gamma=0.95, envs_per_actor=3,
                actor_batch=3)
    return R2D2Config(**{**base, **kw})


def _sequences(cfg: R2D2Config, eps: float = 0.3, count: int = 6
               ) -> tuple[SequenceActor, dict[str, np.ndarray], list[torch.Tensor]]:
    """An actor's first ``count`` sequences, and the Q-values it acted on at every step."""
    spec = builders.env_spec(cfg)
    model = builders.q_network(cfg, spec)
    seen: list[torch.Tensor] = []
    forward = model.forward

    def recording(*args: object) -> object:
        q, state = forward(*args)
        seen.append(q.clone())
        return q, state

    model.forward = recording  # type: ignore[method-assign]
    actor = builders.transition_actor(cfg, spec, model, eps, seed=3)
    msg = builders.replay_inserts(cfg, spec).new()
    n = actor.collect(msg, count)
    model.forward = forward  # type: ignore[method-assign]
    return actor, {k: np.array(msg[k][:n]) for k in msg if k != "count"}, seen


def test_the_stored_state_replays_the_actors_q_values_across_episode_ends() -> None:
    cfg = _config()
    actor, seqs, seen = _sequences(cfg)
    T, P, E = cfg.sequence_length, cfg.sequence_length - cfg.sequence_overlap, 3
    assert len(seqs["actions"]) == 6  # two emissions of E sequences
    assert not seqs["valid"].all()  # random CartPole episodes end inside the sequences
    b = time_major(seqs, torch.device("cpu"))
    ins = core_inputs(b)
    with torch.no_grad():
        q, _ = actor.model.unroll(b["obs"][:T], (b["core_h0"], b["core_c0"]), ins["first"][:T])
    for i in range(len(seqs["actions"])):
        start = (i // E) * P  # emission k (at step T + k·P) covers steps k·P .. k·P + T − 1
        acted = torch.stack(seen[start:start + T])[:, i % E]
        torch.testing.assert_close(q[:, i], acted, rtol=1e-5, atol=1e-6)
    # adjacent sequences of one env share T − P steps
    np.testing.assert_array_equal(seqs["obs"][E:, :T - P + 1], seqs["obs"][:E, P:])
    np.testing.assert_array_equal(seqs["actions"][E:, :T - P], seqs["actions"][:E, P:])


def test_burn_in_steps_carry_no_gradient_and_no_loss() -> None:
    cfg = _config()
    _, seqs, _ = _sequences(cfg)
    b = time_major(seqs, torch.device("cpu"))
    b["obs"] = b["obs"].float().requires_grad_(True)
    model = builders.q_network(cfg, builders.env_spec(cfg))
    loss_cfg = R2D2Builder(cfg).loss()
    td, mask, _ = sequence_td(model, model, b, loss_cfg)
    assert td.shape == (cfg.sequence_length - cfg.burn_in, len(seqs["actions"]))
    (td * mask).pow(2).sum().backward()
    grad = b["obs"].grad
    assert grad is not None
    assert float(grad[:cfg.burn_in].abs().max()) == 0.0  # burn-in: no gradient
    assert float(grad[cfg.burn_in:cfg.sequence_length].abs().max()) > 0.0
    # changing a burn-in step's reward changes nothing; a trained step's reward does
    for t, changes in ((cfg.burn_in - 1, False), (cfg.burn_in, True)):
        b2 = {k: v.detach().clone() for k, v in b.items()}
        b2["rewards"][t] += 5.0
        b2["valid"][:] = True
        b2["terminated"][:] = False
        b2["truncated"][:] = False
        base = {**b2, "rewards": b["rewards"]}
        d1 = sequence_td(model, model, b2, loss_cfg)[0]
        d0 = sequence_td(model, model, base, loss_cfg)[0]
        assert bool((d1 != d0).any()) is changes


def test_the_learner_returns_the_formulas_priorities_and_moves_q_toward_targets() -> None:
    cfg = _config(lr=1e-2, target_update=1000, actor_batch=12, device="cpu")
    _, seqs, _ = _sequences(cfg, count=12)
    spec = builders.env_spec(cfg)
    learner = builders.dqn_learner(cfg, spec)
    assert isinstance(learner, R2D2Learner) and isinstance(learner.model, RecurrentQNetwork)
    b = time_major(seqs, torch.device("cpu"))
    with torch.no_grad():
        td0, mask, _ = sequence_td(learner.model, learner.target, b, learner.loss_cfg)
    prio, stats = learner.update(seqs, np.ones(len(seqs["actions"]), np.float32))
    np.testing.assert_allclose(prio, sequence_priorities(td0.abs(), mask, 0.9).numpy(),
                               rtol=1e-5)
    assert stats["is_weight_mean"] == 1.0 and stats["loss"] > 0
    for _ in range(60):
        learner.update(seqs, None)
    with torch.no_grad():
        td1, _, _ = sequence_td(learner.model, learner.target, b, learner.loss_cfg)
    assert float((td1.abs() * mask).sum()) < 0.5 * float((td0.abs() * mask).sum())


def test_a_sequence_is_one_replay_item_on_the_wire() -> None:
    cfg = _config()
    spec = env_spec(ENV)
    fields = sequence_fields(spec, cfg.sequence_length, 8)
    schema = builders.replay_inserts(cfg, spec)
    assert isinstance(schema, Schema) and schema.name == "sequences"
    assert schema.digest() == insert_schema(fields, cfg.insert_capacity(), "sequences").digest()
    assert schema.fields["obs"].shape == (cfg.insert_capacity(), 13, *spec.obs_shape)
    assert schema.fields["core_h0"].shape == (cfg.insert_capacity(), 8)
    memory = builders.replay_memory(cfg, spec, 50, seed=0)
    assert memory.field_names == tuple(fields)


def test_bad_sequence_flags_are_refused_in_one_line() -> None:
    from archzoo.config import Rules

    for kw, words in ((dict(burn_in=12), "--burn-in"), (dict(sequence_overlap=12),
                                                          "--sequence-overlap"),
                      (dict(core="none"), "--core lstm"), (dict(priority_eta=1.5),
                                                            "--priority-eta")):
        r = Rules()
        _config(**kw).check(r)
        assert r.problem is not None and words in r.problem, (kw, r.problem)


def test_a_recurrent_policy_acts_as_the_networks_unroll_and_resets() -> None:
    """archzoo.policy.Policy on a recurrent Q-network (``archzoo eval``'s policy, and the one
    R2D2's greedy evaluation acts with) is argmax_a Q along the network's own unroll."""
    from archzoo.policy import Policy

    torch.manual_seed(0)
    model = RecurrentQNetwork((2,), 3, 16, "mlp", "<f4", 8)
    policy = Policy(model, {"net": "q"})
    xs = torch.randn(6, 4, 2).numpy() * 3
    first = [policy(x) for x in xs]
    with torch.no_grad():  # the network's own unroll from a zero state
        q, _ = model.unroll(torch.as_tensor(xs), model.initial_state(4),
                            torch.tensor([[True] * 4] + [[False] * 4] * 5))
    np.testing.assert_array_equal(np.stack(first), q.argmax(-1).numpy())
    policy.reset(4)
    np.testing.assert_array_equal(policy(xs[0]), first[0])
