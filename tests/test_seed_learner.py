"""learners/seed.py's SeedLearner against IMPALA's VTraceLearner on the same recorded unrolls.

SEED RL (Espeholt et al. 2020, §3) moves inference onto the learner: the learner answers
every env step of every actor and assembles the unrolls itself, then trains on them with
IMPALA's V-trace loss (Espeholt et al. 2018, eq. 1). So a SeedLearner fed a stream of
answered requests must take exactly the steps that a plain VTraceLearner takes on the same
unrolls cut from that stream by hand, in the order they completed, ``batch_unrolls`` at a
time.

No transport: three SeedActors on CartPole-v1 (E = 3, T = 5) ask LocalPolicyClients whose
policy is the SeedLearner's own model (the model that answers is the model that trains),
stepped in an irregular interleaving; every answered request is recorded and handed to
``on_answer``, and ``maybe_update`` runs after each, as SEED's learner loop does. A second
learner, initialised identically, is updated with unrolls sliced naively from the record
(not by UnrollBuilder); its parameters must equal the SeedLearner's bit for bit
(``torch.equal``) after every update, and every recorded reply must be what that reference
model of the reply's version answers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archzoo.actors.batched_policy import BatchedPolicy
from archzoo.actors.remote import LocalPolicyClient, SeedActor
from archzoo.learners.seed import SeedLearner
from archzoo.learners.vtrace_learner import VTraceLearner
from archzoo.messages import Message
from archzoo.runlog import Monitor
from tests.test_sync_equivalence import HP, _learner
from tests.test_unroll_builder import REP_S, REQ_S, SPEC, U_SCHEMA, E, Stream, T

ACTORS = (1, 2, 3)  # actor ids as SEED's learner sees them (ranks)
HP_SEED = dict(HP, envs_per_actor=E, unroll_length=T)
STEPS = 150  # answered requests, all actors together


class Recorder:
    """One actor's ``on_answer``: record the answered request, then feed the SeedLearner."""

    def __init__(self, actor: int, run_id: int, sl: SeedLearner,
                 events: list[tuple[int, int]]) -> None:
        self.actor, self.sl, self.events = actor, sl, events
        self.stream = Stream(run_id, env_seed=0)

    def __call__(self, _client_actor: int, req: Message, rep: Message) -> None:
        s = self.stream
        assert bool(req["first"]) == (len(s.obs) == 0)
        if not bool(req["first"]):  # request k reports step k - 1
            s.rewards.append(req["rewards"].copy())
            s.terminated.append(req["terminated"].copy())
            s.truncated.append(req["truncated"].copy())
            s.valid.append(req["valid"].copy())
        s.obs.append(req["obs"].copy())
        s.actions.append(rep["actions"].copy())
        s.logits.append(rep["logits"].copy())
        s.versions.append(int(rep["version"]))
        self.events.append((self.actor, len(s.obs) - 1))
        self.sl.on_answer(self.actor, req, rep)


def naive_unroll(s: Stream, j: int) -> Message:
    """Unroll j of an actor's stream: steps jT .. jT+T-1 and x_{jT} .. x_{jT+T}."""
    a, b = j * T, j * T + T
    u = U_SCHEMA.new()
    u["obs"][:] = s.cols("obs")[a:b + 1]
    u["actions"][:] = s.cols("actions")[a:b]
    u["behaviour_logits"][:] = s.cols("logits")[a:b]
    for name in ("rewards", "terminated", "truncated", "valid"):
        u[name][:] = s.cols(name)[a:b]
    u["version"][...] = s.versions[a]
    return u


def params(learner: VTraceLearner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.model.parameters()]


def record(batch_unrolls: int) -> tuple[SeedLearner, Monitor, dict[int, Recorder],
                                        list[tuple[int, int]], list[list[torch.Tensor]],
                                        list[int]]:
    """Drive the actors against a SeedLearner. Returns it, its monitor, the recorders, the
    events (actor, request index) in answer order, the parameters after each update and the
    event index after which each update happened."""
    sl_learner = _learner(HP_SEED, SPEC)
    mon = Monitor(None, None, None, None, 1e9, "seed", quiet=True)
    sl = SeedLearner(sl_learner, U_SCHEMA, T, list(ACTORS), batch_unrolls, mon)
    policy = BatchedPolicy(sl_learner.model, sl_learner.device, HP_SEED["seed"],
                           version_of=lambda: sl_learner.version)
    events: list[tuple[int, int]] = []
    recorders = {a: Recorder(a, 100 + a, sl, events) for a in ACTORS}
    actors = {a: SeedActor(SPEC, E, LocalPolicyClient(policy, REQ_S, REP_S, 100 + a,
                                                      on_answer=recorders[a]), 1000 + a)
              for a in ACTORS}
    snapshots: list[list[torch.Tensor]] = []
    update_after: list[int] = []
    rng = np.random.default_rng(4)
    try:
        for _ in range(STEPS):  # irregular interleaving: unrolls complete out of rank order
            actors[ACTORS[rng.choice(len(ACTORS), p=[0.5, 0.3, 0.2])]].step()
            if sl.maybe_update():
                snapshots.append(params(sl_learner))
                update_after.append(len(events) - 1)
            assert not sl.maybe_update()  # at most one unroll completes per request
    finally:
        for act in actors.values():
            act.close()
    return sl, mon, recorders, events, snapshots, update_after


@pytest.mark.parametrize("batch_unrolls", [0, 2, 4])
def test_seed_learner_steps_equal_vtrace_learner_on_the_same_unrolls(batch_unrolls: int) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sl, mon, recorders, events, snapshots, update_after = record(batch_unrolls)
        B = batch_unrolls or len(ACTORS)

        # The reference's unrolls: each actor's naive slices, in the order they completed
        # (request jT+T of an actor closes its unroll j).
        completed = [(g, naive_unroll(recorders[a].stream, k // T - 1))
                     for g, (a, k) in enumerate(events) if k >= T and k % T == 0]
        n_updates = len(completed) // B
        assert n_updates >= 6 and len(snapshots) == n_updates == sl.learner.version
        assert len(sl.complete) == len(completed) % B
        # an update follows the request that completes its last unroll, not later
        assert update_after == [completed[(m + 1) * B - 1][0] for m in range(n_updates)]
        # the data is worth the comparison: episode ends inside unrolls, and autoreset steps
        units = [u for _, u in completed[:n_updates * B]]
        assert sum(int(u["terminated"].sum()) for u in units) >= 5
        assert any((~u["valid"][1:]).any() for u in units)
        actors_in = {a for a, k in events if k >= T and k % T == 0}
        assert actors_in == set(ACTORS)

        # every reply named the number of updates before it
        for g, (a, k) in enumerate(events):
            want = sum(1 for m in update_after if m < g)
            assert recorders[a].stream.versions[k] == want, (g, a, k)

        ref = _learner(HP_SEED, SPEC)
        for p, q in zip(ref.model.parameters(), sl.learner.model.parameters(), strict=True):
            assert not torch.equal(p, q)  # the SeedLearner did move away from the start
        by_version: dict[int, list[tuple[int, int]]] = {}
        for a, k in events:
            by_version.setdefault(recorders[a].stream.versions[k], []).append((a, k))
        for m in range(n_updates + 1):
            # the replies of version m are what the reference model after m updates answers
            for a, k in by_version.get(m, []):
                s = recorders[a].stream
                with torch.no_grad():
                    logits, _ = ref.model(torch.from_numpy(s.obs[k]))
                assert np.array_equal(logits.numpy(), s.logits[k]), (m, a, k)
            if m == n_updates:
                break
            ref.update([u for _, u in completed[m * B:(m + 1) * B]])
            for p, q in zip(params(ref), snapshots[m], strict=True):
                assert torch.equal(p, q), f"update {m}: max |Δ| {(p - q).abs().max()}"
            if m:
                assert any(not torch.equal(p, q)
                           for p, q in zip(snapshots[m - 1], snapshots[m], strict=True))

        # the monitor saw every reported step and episode, and the policy lag of each unroll
        steps = sum(int(v.sum()) for r in recorders.values() for v in r.stream.valid)
        episodes = sum(int((np.stack(r.stream.terminated) | np.stack(r.stream.truncated)).sum())
                       for r in recorders.values())
        assert (mon.env_steps, mon.episodes, mon.updates) == (steps, episodes, n_updates)
        lags = [m - int(u["version"]) for m in range(n_updates)
                for _, u in completed[m * B:(m + 1) * B]]
        assert mon.lag_mean == pytest.approx(sum(lags) / len(lags))
    finally:
        torch.set_num_threads(threads)
