"""The batched inference server over the real transport: ``python tests/inference_cases.py
gloo|mpi [dead|dead-in-flight]``.

Run on every rank (tests/mp.py: ``run_gloo`` / ``run_mpi``). Rank 0 runs an
:class:`~archzoo.actors.inference.InferenceServer` (a
:class:`~archzoo.actors.batched_policy.BatchedPolicy` over a seeded ActorCritic on the CPU);
the other ranks are actors with a :class:`~archzoo.actors.remote.PolicyClient`. Every
request carries E = 4 envs of CartPole-v1.

Cases (world size 5: 4 actors; each case has its own tags, cases are separated by barriers;
each rank prints ``CASE <name> OK`` or ``CASE <name> FAIL: ...`` and exits 0 only if all
passed):

- ``batched_equals_unbatched``: replies equal an unbatched forward of an identical model;
  seq and version echoed; every batch holds distinct actors and says its own size.
- ``exactly_once``: actor r sends 50·r requests with random gaps; the server answers each
  (actor, seq) exactly once, in per-actor order, with the request that actor sent.
- ``max_batch``: max_batch = 2 with 4 actors firing at once: no batch exceeds 2, some reach 2.
- ``max_wait``: a slow actor does not hold a fast one beyond max_wait (5 ms).
- ``max_wait_fills``: with max_wait 0.2 s and two fast actors, batches of 2 form, and a batch
  closes as soon as both are in (not after max_wait).
- ``silent_actor``: an actor that goes quiet for 3 s does not stall the other three.
- ``versions``: parameters staged with ``load()`` before every ``serve()``; a reply's logits
  are the forward pass of the version it names, one version per batch.
- ``restart``: an actor restarts (new PolicyClient, new run id) mid-run; the learner-side
  UnrollBuilder sees exactly one restart, for that actor, and drops its partial unroll.
- ``sync_lockstep``: ``mode="sync"``: every batch is one request of every actor in rank
  order, whatever the arrival order; the actions equal a same-seeded policy's on the
  rank-ordered concatenation (reproducible).

``dead`` mode (gloo, world 4): actor 3 exits (``os._exit(1)``) after a few requests; the server
must drop it (``InferenceServer.dead == [3]``) and keep serving actors 1 and 2 to the end.
``dead-in-flight`` is the same, but actor 3 dies with a request sent and its reply not yet
received; the server answers that request 0.5 s after it arrived, when the actor is surely
gone. Rank 0 prints ``SERVED <actor>:<count> ... DEAD [..]`` then ``SERVER OK`` (or
``SERVER FAIL: ...``), the surviving actors ``ACTOR DONE``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from mp import log, rank_exit, run_cases

from archzoo.actors.batched_policy import BatchedPolicy, reply_schema, request_schema
from archzoo.actors.inference import InferenceServer
from archzoo.actors.remote import PolicyClient, SeedActor, new_run_id
from archzoo.actors.unroll import unroll_schema
from archzoo.comm import ControlChannel, Message, Schema, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.envs import EnvSpec, env_spec
from archzoo.learners.unroll_builder import UnrollBuilder
from archzoo.nets import ActorCritic, get_flat

TIMEOUT_S = 20.0  # every transport wait
CASE_DEADLINE_S = 20.0  # the server's serve loop in one case
ENV = "CartPole-v1"
E = 4  # envs per request (the schema is fixed per run)
HIDDEN = 32
MODEL_SEED = 1234
SERVER_VERSION = 7  # the parameter version the server answers with (cases without load())
ATOL = RTOL = 1e-5
WORLD = 5
CPU = torch.device("cpu")


def make_model(spec: EnvSpec, seed: int) -> ActorCritic:
    """A seeded ActorCritic whose policy head gives logits of order 1 (ActorCritic's own
    init, gain 0.01, makes every logit ~0, which would let wrong rows pass a tolerance)."""
    torch.manual_seed(seed)
    m = ActorCritic(spec.obs_shape, spec.num_actions, HIDDEN)
    with torch.no_grad():
        m.policy.weight.normal_(0.0, 1.0)
        m.policy.bias.normal_(0.0, 0.5)
    return m


def forward(model: torch.nn.Module, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unbatched reference: one forward pass on this request's rows only."""
    with torch.no_grad():
        logits, values = model(torch.from_numpy(np.ascontiguousarray(obs, np.float32)))
    return logits.numpy(), values.numpy()


def obs_for(spec: EnvSpec, rank: int, seq: int) -> np.ndarray:
    """The observations actor ``rank`` sends with request ``seq`` (random, but known)."""
    rng = np.random.default_rng(1_000_003 * rank + seq)
    return rng.normal(0.0, 1.5, size=(E, *spec.obs_shape)).astype(np.float32)


@dataclass
class Tags:
    request: int
    reply: int
    control: int


@dataclass
class Answer:
    actor: int
    seq: int
    run_id: int
    first: bool
    batch: int
    batch_size: int
    version: int


@dataclass
class Ctx:
    t: Transport
    spec: EnvSpec
    req_s: Schema
    rep_s: Schema
    tags: Tags
    actors: list[int] = field(default_factory=list)  # every actor rank of the world


class Recorder:
    """The server's ``on_answer``: records every answer; checks go in ``problems``."""

    def __init__(self, spec: EnvSpec, check: Callable[[int, Message, Message], None] | None
                 = None) -> None:
        self.spec = spec
        self.answers: list[Answer] = []
        self.problems: list[str] = []
        self.check = check

    def __call__(self, actor: int, req: Message, rep: Message) -> None:
        a = Answer(actor, int(req["seq"]), int(req["run_id"]), bool(req["first"]),
                   int(rep["batch"]), int(rep["batch_size"]), int(rep["version"]))
        self.answers.append(a)
        if int(rep["seq"]) != a.seq:
            self.problems.append(f"reply seq {int(rep['seq'])} for request {a.seq} of {actor}")
        if self.check is not None:
            try:
                self.check(actor, req, rep)
            except AssertionError as e:
                self.problems.append(f"actor {actor} seq {a.seq}: {e}")

    def assert_ok(self) -> None:
        assert not self.problems, f"{len(self.problems)} problems: {self.problems[:5]}"

    def check_batches(self, server: InferenceServer, max_batch: int) -> dict[int, list[Answer]]:
        """Every batch: numbered 0.., distinct actors, its size as said, one version."""
        by_batch: dict[int, list[Answer]] = defaultdict(list)
        for a in self.answers:
            by_batch[a.batch].append(a)
        assert sorted(by_batch) == list(range(len(by_batch))), sorted(by_batch)[:20]
        assert len(by_batch) == server.stats.batches, (len(by_batch), server.stats.batches)
        assert server.stats.requests == len(self.answers), (server.stats.requests,
                                                           len(self.answers))
        for b, rows in by_batch.items():
            actors = [r.actor for r in rows]
            assert len(set(actors)) == len(actors), f"batch {b} holds an actor twice: {actors}"
            assert all(r.batch_size == len(rows) for r in rows), (
                f"batch {b}: {len(rows)} answers, replies say {[r.batch_size for r in rows]}")
            assert 1 <= len(rows) <= max_batch, f"batch {b} of {len(rows)} > {max_batch}"
            assert len({r.version for r in rows}) == 1, (
                f"batch {b} answered by versions {[r.version for r in rows]}")
        # answers of one batch are contiguous: the server answers a batch before the next
        order = [a.batch for a in self.answers]
        assert order == sorted(order), "answers of different batches interleave"
        return by_batch


def new_server(ctx: Ctx, policy: BatchedPolicy, actors: list[int], max_batch: int,
               max_wait_s: float, rec: Recorder) -> InferenceServer:
    return InferenceServer(ctx.t, ctx.req_s, ctx.rep_s, actors, policy, max_batch, max_wait_s,
                           ctx.tags.request, ctx.tags.reply, on_answer=rec)


def serve_until(server: InferenceServer, rec: Recorder, total: int,
                before_serve: Callable[[], None] | None = None) -> list[int]:
    """Serve until ``total`` requests were answered (deadline!); the batch sizes served."""
    sizes = []
    deadline = time.monotonic() + CASE_DEADLINE_S
    while len(rec.answers) < total:
        if before_serve is not None:
            before_serve()
        n = server.serve()
        if n:
            sizes.append(n)
        else:
            server.t.idle(1e-4)
        if time.monotonic() > deadline:
            got = Counter(a.actor for a in rec.answers)
            raise TimeoutError(f"answered {len(rec.answers)}/{total} requests after "
                               f"{CASE_DEADLINE_S}s (per actor {dict(got)}; dead {server.dead})")
    server.flush(TIMEOUT_S)
    assert len(rec.answers) == total, f"answered {len(rec.answers)}, expected {total}"
    assert sum(sizes) == total, f"serve() returned {sum(sizes)} in all, {total} answered"
    return sizes


def new_client(ctx: Ctx, run_id: int | None = None) -> PolicyClient:
    rid = new_run_id(ctx.t.rank) if run_id is None else run_id
    return PolicyClient(ctx.t, 0, ctx.req_s, ctx.rep_s, ctx.tags.request, ctx.tags.reply, rid)


def check_reply(ctx: Ctx, rep: Message, seq: int, model: torch.nn.Module, obs: np.ndarray,
                version: int | None) -> None:
    """A reply against the unbatched forward of ``model`` on this request's ``obs``."""
    assert int(rep["seq"]) == seq, f"reply seq {int(rep['seq'])} for request {seq}"
    if version is not None:
        assert int(rep["version"]) == version, f"version {int(rep['version'])} != {version}"
    logits, values = forward(model, obs)
    assert np.allclose(rep["logits"], logits, rtol=RTOL, atol=ATOL), (
        f"seq {seq}: logits {rep['logits'].tolist()} != unbatched {logits.tolist()}")
    assert np.allclose(rep["values"], values, rtol=RTOL, atol=ATOL), (
        f"seq {seq}: values {rep['values'].tolist()} != unbatched {values.tolist()}")
    acts = rep["actions"]
    assert ((acts >= 0) & (acts < ctx.spec.num_actions)).all(), f"actions {acts.tolist()}"
    assert 1 <= int(rep["batch_size"]) <= len(ctx.actors), int(rep["batch_size"])


def request_obs(ctx: Ctx, client: PolicyClient, seq: int) -> tuple[Message, np.ndarray]:
    obs = obs_for(ctx.spec, ctx.t.rank, seq)
    client.req["obs"][:] = obs
    return client.request(), obs


def server_policy(ctx: Ctx, version: int = SERVER_VERSION) -> BatchedPolicy:
    policy = BatchedPolicy(make_model(ctx.spec, MODEL_SEED), CPU, seed=99)
    policy.version = version
    return policy


def obs_check(ctx: Ctx) -> Callable[[int, Message, Message], None]:
    """on_answer check: the request holds what that actor sent with that seq."""
    def check(actor: int, req: Message, rep: Message) -> None:
        want = obs_for(ctx.spec, actor, int(req["seq"]))
        assert np.array_equal(req["obs"], want), "request obs are not what the actor sent"
        assert int(req["run_id"]) % 1000 == actor, f"run id {int(req['run_id'])}"
    return check


# -- a. batched == unbatched ----------------------------------------------------------------------
K_A = 30


def case_batched_equals_unbatched(ctx: Ctx) -> None:
    actors = ctx.actors
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, 64, 2e-3, rec)
        serve_until(server, rec, K_A * len(actors))
        rec.assert_ok()
        by_batch = rec.check_batches(server, len(actors))
        got = sorted((a.actor, a.seq) for a in rec.answers)
        assert got == sorted((p, k) for p in actors for k in range(K_A)), "answers differ"
        sizes = Counter(len(v) for v in by_batch.values())
        log(ctx.t, f"  batch sizes {dict(sorted(sizes.items()))}")
        return
    model = make_model(ctx.spec, MODEL_SEED)  # the same seed: the same parameters
    client = new_client(ctx)
    rng = np.random.default_rng(ctx.t.rank)
    actions = []
    for k in range(K_A):
        time.sleep(rng.uniform(0.0, 2e-3))  # uneven arrivals: batches mix actors differently
        rep, obs = request_obs(ctx, client, k)
        check_reply(ctx, rep, k, model, obs, SERVER_VERSION)
        actions.append(rep["actions"].copy())
    # logits are O(1) and not degenerate: both actions get sampled
    assert len(np.unique(np.concatenate(actions))) == ctx.spec.num_actions


# -- b. exactly once ------------------------------------------------------------------------------
def k_b(actor: int) -> int:
    return 50 * actor


def case_exactly_once(ctx: Ctx) -> None:
    actors = ctx.actors
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, 64, 1e-3, rec)
        total = sum(k_b(a) for a in actors)
        serve_until(server, rec, total)
        rec.assert_ok()
        rec.check_batches(server, len(actors))
        counts = Counter((a.actor, a.seq) for a in rec.answers)
        twice = [k for k, c in counts.items() if c > 1]
        assert not twice, f"answered more than once: {twice[:10]}"
        expected = {(a, k) for a in actors for k in range(k_b(a))}
        assert set(counts) == expected, (
            f"missing {sorted(expected - set(counts))[:10]}, "
            f"unexpected {sorted(set(counts) - expected)[:10]}")
        for p in actors:
            seqs = [a.seq for a in rec.answers if a.actor == p]
            assert seqs == list(range(k_b(p))), f"actor {p} answered out of order"
            assert len({a.run_id for a in rec.answers if a.actor == p}) == 1
        return
    client = new_client(ctx)
    rng = np.random.default_rng(100 + ctx.t.rank)
    for k in range(k_b(ctx.t.rank)):
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0.0, 2e-3))
        rep, _ = request_obs(ctx, client, k)
        assert int(rep["seq"]) == k, (int(rep["seq"]), k)
        assert int(rep["version"]) == SERVER_VERSION
    assert client.seq == k_b(ctx.t.rank)


# -- c. max batch ---------------------------------------------------------------------------------
MAX_BATCH_C, K_C = 2, 25


def case_max_batch(ctx: Ctx) -> None:
    actors = ctx.actors
    assert len(actors) >= 4, f"max_batch case needs >= 4 actors, has {len(actors)}"
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, MAX_BATCH_C, 20e-3, rec)
        sizes = serve_until(server, rec, K_C * len(actors))
        rec.assert_ok()
        rec.check_batches(server, MAX_BATCH_C)
        assert max(sizes) <= MAX_BATCH_C, f"serve() answered batches of {max(sizes)}"
        assert max(a.batch_size for a in rec.answers) <= MAX_BATCH_C
        assert sizes.count(MAX_BATCH_C) > 0, f"no batch of {MAX_BATCH_C} formed: {sizes}"
        mean = server.stats.mean_batch
        assert mean is not None and mean > 1.0, f"mean batch {mean}"
        log(ctx.t, f"  {len(sizes)} batches, mean size {mean:.2f}")
        return
    client = new_client(ctx)
    model = make_model(ctx.spec, MODEL_SEED)
    for k in range(K_C):  # no pause at all: everyone fires at once after the barrier
        rep, obs = request_obs(ctx, client, k)
        check_reply(ctx, rep, k, model, obs, SERVER_VERSION)
        assert int(rep["batch_size"]) <= MAX_BATCH_C, int(rep["batch_size"])


# -- d. max wait ----------------------------------------------------------------------------------
FAST, SLOW = 1, 2
K_FAST, K_SLOW, SLOW_SLEEP_S = 60, 3, 0.3


def case_max_wait(ctx: Ctx) -> None:
    """max_wait 5 ms: the fast actor's round trips do not wait for the slow one."""
    actors = [FAST, SLOW]
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, 64, 5e-3, rec)
        sizes = serve_until(server, rec, K_FAST + K_SLOW)
        rec.assert_ok()
        rec.check_batches(server, 2)
        log(ctx.t, f"  batch sizes {dict(Counter(sizes))}")
        return
    if ctx.t.rank not in actors:
        return
    client = new_client(ctx)
    if ctx.t.rank == SLOW:
        for k in range(K_SLOW):
            time.sleep(SLOW_SLEEP_S)
            request_obs(ctx, client, k)
        return
    lat = []
    for k in range(K_FAST):
        time.sleep(5e-3)
        t0 = time.perf_counter()
        request_obs(ctx, client, k)
        lat.append(time.perf_counter() - t0)
    med = statistics.median(lat)
    under = sum(x < 0.150 for x in lat)
    log(ctx.t, f"  fast actor: median round trip {1e3 * med:.2f} ms, max {1e3 * max(lat):.1f} "
               f"ms, {under}/{len(lat)} under 150 ms")
    # a server that waited for the slow actor (300 ms between its requests) would put most
    # round trips near 300 ms; generous bounds, since this machine is shared and noisy
    assert med < 0.100, f"median round trip {1e3 * med:.1f} ms: the server waits for the slow actor"
    assert under >= 0.5 * len(lat), f"only {under}/{len(lat)} round trips under 150 ms"


K_FILL = 20
MAX_WAIT_FILL_S = 0.2


def case_max_wait_fills(ctx: Ctx) -> None:
    """max_wait 0.2 s, two fast actors: batches of 2 form, closing once both are in."""
    actors = [1, 2]
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, 64, MAX_WAIT_FILL_S, rec)
        sizes = serve_until(server, rec, K_FILL * len(actors))
        rec.assert_ok()
        rec.check_batches(server, 2)
        log(ctx.t, f"  batch sizes {dict(Counter(sizes))}")
        assert sizes.count(2) >= 1, f"no batch of 2 formed: {sizes}"
        assert sizes.count(2) >= K_FILL // 2, f"batches of 2 are rare: {sizes}"
        return
    if ctx.t.rank not in actors:
        return
    client = new_client(ctx)
    lat, sizes = [], []
    for k in range(K_FILL):
        t0 = time.perf_counter()
        rep, _ = request_obs(ctx, client, k)
        lat.append(time.perf_counter() - t0)
        sizes.append(int(rep["batch_size"]))
    med = statistics.median(lat)
    log(ctx.t, f"  median round trip {1e3 * med:.2f} ms, batch sizes {dict(Counter(sizes))}")
    assert 2 in sizes, f"never in a batch of 2: {sizes}"
    # a batch closes as soon as every live actor is in it, not after max_wait
    assert med < MAX_WAIT_FILL_S / 2, f"median round trip {1e3 * med:.1f} ms"


# -- e. a silent actor ----------------------------------------------------------------------------
SILENT, SILENT_S, K_E = 1, 12.0, 100


def case_silent_actor(ctx: Ctx) -> None:
    actors = ctx.actors
    busy = [a for a in actors if a != SILENT]
    if ctx.t.rank == 0:
        rec = Recorder(ctx.spec, obs_check(ctx))
        server = new_server(ctx, server_policy(ctx), actors, 64, 5e-3, rec)
        serve_until(server, rec, 2 + K_E * len(busy))
        rec.assert_ok()
        rec.check_batches(server, len(actors))
        idx = next(i for i, a in enumerate(rec.answers) if a.actor == SILENT and a.seq == 1)
        before = Counter(a.actor for a in rec.answers[:idx])
        for a in busy:
            assert before[a] == K_E, (
                f"only {before[a]}/{K_E} of actor {a}'s requests were answered before the "
                f"silent actor spoke again: the server waited for it ({dict(before)})")
        return
    client = new_client(ctx)
    t0 = time.monotonic()
    if ctx.t.rank == SILENT:
        request_obs(ctx, client, 0)
        time.sleep(SILENT_S)  # alive, but says nothing
        request_obs(ctx, client, 1)
        return
    for k in range(K_E):
        request_obs(ctx, client, k)
    took = time.monotonic() - t0
    log(ctx.t, f"  {K_E} requests in {took:.2f}s while actor {SILENT} was silent")
    assert took < SILENT_S - 1.0, f"{K_E} requests took {took:.2f}s: stalled by the silent actor"


# -- f. versions ----------------------------------------------------------------------------------
N_MODELS, K_F = 8, 30


def version_models(spec: EnvSpec) -> list[ActorCritic]:
    """Version v is answered by model v % N_MODELS (each a different random model)."""
    return [make_model(spec, 5000 + i) for i in range(N_MODELS)]


def case_versions(ctx: Ctx) -> None:
    actors = ctx.actors
    models = version_models(ctx.spec)
    if ctx.t.rank == 0:
        flats = []
        for m in models:
            f = np.zeros(sum(p.numel() for p in m.parameters()), np.float32)
            get_flat(m, f)
            flats.append(f)
        staged = {"v": 0}

        def check(actor: int, req: Message, rep: Message) -> None:
            v = int(rep["version"])
            assert v == staged["v"], f"answered by version {v}, staged {staged['v']}"
            logits, values = forward(models[v % N_MODELS], req["obs"])
            assert np.allclose(rep["logits"], logits, rtol=RTOL, atol=ATOL), "logits"
            assert np.allclose(rep["values"], values, rtol=RTOL, atol=ATOL), "values"

        def stage() -> None:
            staged["v"] += 1
            v = staged["v"]
            policy.load(flats[v % N_MODELS], v)

        rec = Recorder(ctx.spec, check)
        # the server starts from a model none of the versions uses
        policy = BatchedPolicy(make_model(ctx.spec, MODEL_SEED), CPU, seed=3)
        server = new_server(ctx, policy, actors, 64, 2e-3, rec)
        serve_until(server, rec, K_F * len(actors), before_serve=stage)
        rec.assert_ok()
        by_batch = rec.check_batches(server, len(actors))
        versions = [rows[0].version for _, rows in sorted(by_batch.items())]
        assert all(b > a for a, b in zip(versions, versions[1:], strict=False)), (
            "a later batch was answered by an older or the same version")
        log(ctx.t, f"  {len(by_batch)} batches, versions {versions[0]}..{versions[-1]}")
        return
    client = new_client(ctx)
    rng = np.random.default_rng(200 + ctx.t.rank)
    seen = set()
    for k in range(K_F):
        time.sleep(rng.uniform(0.0, 2e-3))
        rep, obs = request_obs(ctx, client, k)
        v = int(rep["version"])
        assert v >= 1, f"answered by the initial parameters (version {v}), none was staged"
        check_reply(ctx, rep, k, models[v % N_MODELS], obs, None)
        seen.add(v % N_MODELS)
    assert len(seen) > 1, f"every reply came from one model ({seen})"


# -- g. a restarted actor -------------------------------------------------------------------------
T_G, K_G, RESTARTED = 5, 30, 1


def case_restart(ctx: Ctx) -> None:
    actors = ctx.actors
    if ctx.t.rank == 0:
        u_schema = unroll_schema(ctx.spec, T_G, E)
        builders = {a: UnrollBuilder(u_schema, T_G) for a in actors}
        done: dict[int, list[Message]] = {a: [] for a in actors}
        firsts: dict[int, list[tuple[int, np.ndarray]]] = {a: [] for a in actors}
        run_of: dict[int, list[int]] = {a: [] for a in actors}  # run id of each unroll

        def feed(actor: int, req: Message, rep: Message) -> None:
            if bool(req["first"]):
                firsts[actor].append((len(done[actor]), req["obs"].copy()))
            u = builders[actor].add(req, rep)
            if u is not None:
                done[actor].append(u)
                run_of[actor].append(int(req["run_id"]))

        rec = Recorder(ctx.spec, feed)
        server = new_server(ctx, server_policy(ctx), actors, 64, 2e-3, rec)
        serve_until(server, rec, 2 * K_G * len(actors))
        rec.assert_ok()
        rec.check_batches(server, len(actors))
        per_run = (K_G - 1) // T_G  # unrolls one run of K_G requests completes
        for a in actors:
            b = builders[a]
            want_restarts = 1 if a == RESTARTED else 0
            assert b.restarts == want_restarts, f"actor {a}: {b.restarts} restarts"
            if a == RESTARTED:
                assert b.dropped_steps == K_G - T_G * per_run, (a, b.dropped_steps)
                assert len(done[a]) == 2 * per_run, (a, len(done[a]))
                assert len(firsts[a]) == 2 and firsts[a][1][0] == per_run, firsts[a]
                # the first unroll after the restart starts at the restart request's obs
                assert np.array_equal(done[a][per_run]["obs"][0], firsts[a][1][1])
                assert len(set(run_of[a])) == 2
            else:
                assert b.dropped_steps == 0, (a, b.dropped_steps)
                assert len(done[a]) == (2 * K_G - 1) // T_G, (a, len(done[a]))
            assert np.array_equal(done[a][0]["obs"][0], firsts[a][0][1])
            for k in range(len(done[a]) - 1):
                if run_of[a][k] == run_of[a][k + 1]:
                    assert np.array_equal(done[a][k]["obs"][T_G], done[a][k + 1]["obs"][0]), (
                        f"actor {a}: unroll {k + 1} does not start where unroll {k} ended")
        return
    seed = 300 + ctx.t.rank
    if ctx.t.rank == RESTARTED:
        run_a = new_run_id(ctx.t.rank)
        actor = SeedActor(ctx.spec, E, new_client(ctx, run_a), seed)
        for _ in range(K_G):
            actor.step()
        actor.close()
        time.sleep(2e-3)  # new_run_id has microsecond resolution
        run_b = new_run_id(ctx.t.rank)
        assert run_b != run_a, (run_a, run_b)
        client = new_client(ctx, run_b)  # the restarted incarnation: seq 0, first=True
        actor = SeedActor(ctx.spec, E, client, seed + 1000)
        for _ in range(K_G):
            actor.step()
        assert client.seq == K_G
    else:
        actor = SeedActor(ctx.spec, E, new_client(ctx), seed)
        for _ in range(2 * K_G):
            actor.step()
    actor.close()


# -- sync mode: lockstep, rank order, reproducible ------------------------------------------------
K_SYNC, SYNC_SEED = 12, 31


def case_sync_lockstep(ctx: Ctx) -> None:
    """mode="sync": every batch is one request of every actor, in rank order, so the sampled
    actions equal those of a same-seeded policy run on the rank-ordered concatenation."""
    actors = ctx.actors
    if ctx.t.rank == 0:
        order: list[int] = []
        got: dict[int, dict[int, np.ndarray]] = defaultdict(dict)  # batch -> actor -> actions

        def record(actor: int, req: Message, rep: Message) -> None:
            order.append(actor)
            got[int(rep["batch"])][actor] = rep["actions"].copy()

        rec = Recorder(ctx.spec, record)
        policy = BatchedPolicy(make_model(ctx.spec, MODEL_SEED), CPU, seed=SYNC_SEED)
        server = InferenceServer(ctx.t, ctx.req_s, ctx.rep_s, actors, policy, 64, 0.0,
                                 ctx.tags.request, ctx.tags.reply, mode="sync", on_answer=rec)
        sizes = serve_until(server, rec, K_SYNC * len(actors))
        rec.assert_ok()
        rec.check_batches(server, len(actors))
        assert sizes == [len(actors)] * K_SYNC, sizes
        assert order == actors * K_SYNC, "a batch is not one request per actor in rank order"
        ref = BatchedPolicy(make_model(ctx.spec, MODEL_SEED), CPU, seed=SYNC_SEED)
        for b in range(K_SYNC):
            obs = np.concatenate([obs_for(ctx.spec, a, b) for a in actors])
            want = ref.forward(obs)[0].reshape(len(actors), E)
            for i, a in enumerate(actors):
                assert np.array_equal(got[b][a], want[i]), f"batch {b} actor {a}: actions"
        return
    client = new_client(ctx)
    model = make_model(ctx.spec, MODEL_SEED)
    rng = np.random.default_rng(400 + ctx.t.rank)
    for k in range(K_SYNC):
        time.sleep(rng.uniform(0.0, 3e-3))  # arrival order must not matter
        rep, obs = request_obs(ctx, client, k)
        check_reply(ctx, rep, k, model, obs, 0)
        assert int(rep["batch_size"]) == len(actors) and int(rep["batch"]) == k


# -- driver ---------------------------------------------------------------------------------------
CASES: list[tuple[str, Callable[[Ctx], None]]] = [
    ("batched_equals_unbatched", case_batched_equals_unbatched),
    ("exactly_once", case_exactly_once),
    ("max_batch", case_max_batch),
    ("max_wait", case_max_wait),
    ("max_wait_fills", case_max_wait_fills),
    ("silent_actor", case_silent_actor),
    ("versions", case_versions),
    ("restart", case_restart),
    ("sync_lockstep", case_sync_lockstep),
]
CASE_NAMES = [name for name, _ in CASES]


def context(t: Transport, spec: EnvSpec, base_tag: int) -> Ctx:
    return Ctx(t, spec, request_schema(spec, E), reply_schema(spec, E),
               Tags(base_tag + 1, base_tag + 2, base_tag + 3), list(range(1, t.world_size)))


def all_cases(t: Transport, spec: EnvSpec) -> int:
    return run_cases(t, [(name, lambda tag, fn=fn: fn(context(t, spec, tag)))
                         for name, fn in CASES], TIMEOUT_S + CASE_DEADLINE_S)


# -- dead mode: an actor dies, the server goes on -------------------------------------------------
DEAD_WORLD, DYING, K_DEAD, DIE_AFTER = 4, 3, 300, 5
DEAD_MODES = ("dead", "dead-in-flight")


def run_dead(t: Transport, spec: EnvSpec, mode: str) -> int:
    """``dead``: actor 3 dies between requests; ``dead-in-flight``: it dies with a request sent
    and its reply not yet taken, and the server answers that request only 0.5 s after it
    arrived (by then the actor is surely gone and gloo knows it; without the pause the test
    would race the actor's exit)."""
    in_flight = mode != "dead"
    ctx = context(t, spec, 900)
    actors = [1, 2, DYING]
    survivors = [1, 2]
    control = ControlChannel(t, [0] if t.rank else survivors, ctx.tags.control)
    t.barrier(TIMEOUT_S)
    if t.rank == DYING:
        client = new_client(ctx)
        for k in range(DIE_AFTER):
            time.sleep(2e-3)
            request_obs(ctx, client, k)
        if in_flight:  # a request sent (and taken by the server), its reply never awaited
            client.req["obs"][:] = obs_for(spec, t.rank, DIE_AFTER)
            client.req["seq"][...] = DIE_AFTER
            t.wait(t.isend(client.req.buffer, 0, ctx.tags.request, "inference request"),
                   TIMEOUT_S)
        os._exit(1)
    if t.rank != 0:
        client = new_client(ctx)
        model = make_model(spec, MODEL_SEED)
        for k in range(K_DEAD):
            time.sleep(1e-3)
            rep, obs = request_obs(ctx, client, k)
            check_reply(ctx, rep, k, model, obs, SERVER_VERSION)
        log(t, "ACTOR DONE")
        bye = control.recv_from(0, TIMEOUT_S + CASE_DEADLINE_S)  # leave only after the server
        assert bye.get("type") == "bye", bye
        return 0
    rec = Recorder(spec, obs_check(ctx))
    server = new_server(ctx, server_policy(ctx), actors, 64, 50e-3, rec)
    served: Counter[int] = Counter()
    delayed = False
    code = 0
    try:
        deadline = time.monotonic() + CASE_DEADLINE_S
        # Until the survivors are done and the dead actor dropped. A request of the dead
        # actor that had arrived is answered before its next posted receive can fail.
        while any(served[a] < K_DEAD for a in survivors) or DYING not in server.dead:
            if in_flight and not delayed and served[DYING] == DIE_AFTER \
                    and server.inbox.poll(DYING) is not None:
                time.sleep(0.5)  # the in-flight request is here; its sender dies meanwhile
                delayed = True
            if not server.serve():
                t.idle(1e-4)
            served = Counter(a.actor for a in rec.answers)
            if time.monotonic() > deadline:
                break
        server.flush(TIMEOUT_S)
        log(t, "SERVED " + " ".join(f"{a}:{served[a]}" for a in actors) + f" DEAD {server.dead}")
        rec.assert_ok()
        assert all(served[a] == K_DEAD for a in survivors), dict(served)
        assert server.dead == [DYING], f"dead actors {server.dead}, live {server.live}"
        assert server.live == survivors, server.live
        # the in-flight request had arrived: it is answered (into the void), once
        assert served[DYING] == DIE_AFTER + in_flight, dict(served)
        log(t, "SERVER OK")
    except Exception as e:  # noqa: BLE001
        log(t, f"SERVER FAIL: {type(e).__name__}: {str(e)[:400]}")
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        code = 1
    for a in survivors:
        control.send(a, {"type": "bye"})
    control.flush(TIMEOUT_S)
    return code


def main() -> int:
    backend = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "cases"
    torch.set_num_threads(1)
    spec = env_spec(ENV)
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    if mode in DEAD_MODES:
        assert t.world_size == DEAD_WORLD, t.world_size
        return run_dead(t, spec, mode)
    assert mode == "cases", mode
    assert t.world_size == WORLD, f"run on {WORLD} ranks, not {t.world_size}"
    code = all_cases(t, spec)
    t.shutdown()
    return code


if __name__ == "__main__":
    rank_exit(main, hard=sys.argv[1] == "gloo" or len(sys.argv) > 2)
