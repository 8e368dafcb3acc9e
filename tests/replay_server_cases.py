"""Replay shards over the real transport: ``python tests/replay_server_cases.py gloo|mpi K``.

Run on every rank (tests/mp.py: ``run_gloo`` or ``run_mpi``) with world size >= K + 3:

- rank 0 is the learner (``ShardedReplayClient``);
- ranks 1..K are replay shards (``ReplayServer.serve()`` in a loop until the learner's STOP);
- ranks K+1.. are actors (>= 2); actor j inserts into shard j % K, as in apex.py.

Every transition carries a unique id ``actor_rank * 10000 + k`` (k counts the actor's
transitions) in ``ret``; every other field is a known function of it (:func:`fields_for`), so
the learner can tell exactly which item it got. The shards' rate limiter sets
``learning_starts`` to the number of transitions the shard will receive, with no
samples-per-insert limit, so sampling starts only once everything is in.

Cases (each with its own tags, separated by barriers; each rank prints ``CASE <name> OK`` or
``CASE <name> FAIL: ...`` and exits 0 only if all passed):

- ``prioritized``: PrioritizedReplay shards. Sampling waits for learning_starts; every sample
  is a transition some actor inserted, from the right shard, with sane idx/item_ids; importance
  weights equal ``importance_weights()`` from the global totals the shards reported and those
  of one reference PrioritizedReplay holding every item; one item with an overwhelming
  priority dominates until a priority update (sent with the next request) makes it tiny; a
  stale update (wrong item id) is dropped; per-shard sample counts follow the shards' priority
  totals; each shard's own count of items sampled matches what the learner received.
- ``uniform``: UniformReplay shards, non-prioritized client: no weights, totals are sizes,
  per-shard counts follow the shard sizes, every inserted item gets sampled.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from mp import log, rank_exit, run_cases

from archzoo.comm import ControlChannel, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.replay.memory import PrioritizedReplay, UniformReplay, importance_weights
from archzoo.replay.server import (
    TRANSITION_FIELDS,
    Batch,
    RateLimiter,
    ReplayServer,
    ShardedReplayClient,
    insert_schema,
    memory_fields,
)

TIMEOUT_S = 15.0  # every transport wait
CASE_DEADLINE_S = 45.0  # a shard's serve loop / an actor's wait for STOP

OBS_SHAPE = (3,)
INSERT_CAP = 8  # transitions per actor message
BATCH = 16
SHARD_CAPACITY = 256  # far more than a shard receives: nothing is evicted
ALPHA = 0.6
EPS = 1e-6  # PrioritizedReplay's default
BETA = 0.4  # the learner's (fixed) β
SHARD_BETA = 1.0  # the shards' memories' own β, which must play no part in the weights
ID_BASE = 10_000

# Each actor's messages, as transition counts (a 0-count message included on purpose).
PLANS: dict[str, Callable[[int], list[int]]] = {
    "prioritized": lambda i: [5, 8, 0, 3, 7],
    "uniform": lambda i: [6, 4] if i % 2 == 0 else [8, 8, 0, 8, 6],
}
DOMINANT_K = 6  # of the last actor: the overwhelming priority
MIN_K = 1  # of the first actor: the smallest priority (until the update)
P_DOMINANT, P_MIN, P_TINY = 1e6, 0.05, 1e-3
POISON_PRIORITY = 1e9  # in the unused tail of every message: would dominate if inserted


# -- the known data ----------------------------------------------------------------------------
def fields_for(ids: np.ndarray) -> dict[str, np.ndarray]:
    """The transition fields of the items with these ids (what actors send, what must return)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    k = ids % ID_BASE
    obs = np.repeat(ids.astype(np.float32)[:, None], OBS_SHAPE[0], axis=1)
    return {"obs": obs, "action": (k % 4).astype(np.int64), "ret": ids.astype(np.float32),
            "next_obs": obs + np.float32(0.5),
            "discount": (0.25 * (1 + k % 3)).astype(np.float32), "version": k % 7}


def p_alpha_of(priorities: np.ndarray) -> np.ndarray:
    """p^α as a memory stores it: float32 priorities from the wire, (|p| + ε)^α in float64."""
    p = np.abs(np.asarray(priorities, dtype=np.float32).astype(np.float64))
    return np.power(p + EPS, ALPHA)


@dataclass
class World:
    kind: str
    shards: list[int]  # ranks
    actors: list[int]  # ranks
    messages: dict[int, list[np.ndarray]] = field(default_factory=dict)  # actor -> ids per msg
    priority: dict[int, float] = field(default_factory=dict)  # id -> current priority

    def __post_init__(self) -> None:
        n_act = len(self.actors)
        for i, a in enumerate(self.actors):
            k0, msgs = 0, []
            for n in PLANS[self.kind](i):
                ids = a * ID_BASE + np.arange(k0, k0 + n, dtype=np.int64)
                msgs.append(ids)
                k0 += n
                for item in ids.tolist():
                    k = item % ID_BASE
                    if i == n_act - 1 and k == DOMINANT_K:
                        p = P_DOMINANT
                    elif i == 0 and k == MIN_K:
                        p = P_MIN
                    else:
                        p = (1.0 + 3.0 * i) * (1.0 + 0.25 * (k % 4))
                    self.priority[item] = float(np.float32(p))
            self.messages[a] = msgs

    @property
    def prioritized(self) -> bool:
        return self.kind == "prioritized"

    def dest(self, actor: int) -> int:
        """The shard rank an actor inserts into (apex.py: actor j -> shard j % K)."""
        return self.shards[self.actors.index(actor) % len(self.shards)]

    def ids_of_actor(self, actor: int) -> np.ndarray:
        return np.concatenate(self.messages[actor])

    def ids_of_shard(self, shard: int) -> np.ndarray:
        mine = [a for a in self.actors if self.dest(a) == shard]
        return np.concatenate([self.ids_of_actor(a) for a in mine])

    def all_ids(self) -> np.ndarray:
        return np.concatenate([self.ids_of_actor(a) for a in self.actors])

    @property
    def dominant(self) -> int:
        return self.actors[-1] * ID_BASE + DOMINANT_K

    @property
    def minimum(self) -> int:
        return self.actors[0] * ID_BASE + MIN_K


@dataclass
class Tags:
    control: int
    insert: int
    request: int
    reply: int


# -- actor ---------------------------------------------------------------------------------------
def actor_role(t: Transport, w: World, tags: Tags) -> None:
    control = ControlChannel(t, [0], tags.control)
    schema = insert_schema(memory_fields(OBS_SHAPE), INSERT_CAP)
    go = control.recv_from(0, TIMEOUT_S)
    assert go.get("type") == "go", f"expected GO from the learner, got {go}"
    dest = w.dest(t.rank)
    for ids in w.messages[t.rank]:
        msg = schema.new()
        # Poison the unused tail: a shard that inserted past `count` would show it.
        msg["obs"][...] = -7.0
        msg["next_obs"][...] = -7.0
        msg["ret"][...] = -1.0
        msg["priority"][...] = POISON_PRIORITY
        n = len(ids)
        for k, v in fields_for(ids).items():
            msg[k][:n] = v
        msg["priority"][:n] = [w.priority[i] for i in ids.tolist()]
        msg["count"][...] = n
        t.wait(t.isend(msg.buffer, dest, tags.insert, "transitions"), TIMEOUT_S)
        time.sleep(0.01)  # spread the inserts out: a shard must not sample before the last
    stop = control.recv_from(0, CASE_DEADLINE_S)
    assert stop.get("type") == "stop", f"expected STOP, got {stop}"


# -- shard ---------------------------------------------------------------------------------------
def verify_memory(memory: UniformReplay, w: World, shard: int) -> list[str]:
    """The shard's own view: exactly its actors' transitions, in per-actor order, right p^α."""
    problems = []
    expect = w.ids_of_shard(shard)
    n = len(memory)
    if n != len(expect):
        return [f"shard holds {n} items, its actors sent {len(expect)}"]
    got = memory._gather(np.arange(n))  # test introspection: every stored slot
    ids = got.data["ret"].astype(np.int64)
    if sorted(ids.tolist()) != sorted(expect.tolist()):
        extra = sorted(set(ids.tolist()) ^ set(expect.tolist()))[:10]
        return [f"stored ids differ from the inserted ones (symmetric difference {extra})"]
    want = fields_for(ids)
    for k in TRANSITION_FIELDS:
        if not np.array_equal(got.data[k], want[k]):
            problems.append(f"stored field {k!r} does not match the ids")
    if not np.array_equal(got.item_ids, np.arange(n)):
        problems.append(f"item ids {got.item_ids.tolist()} are not the insertion order 0..{n - 1}")
    for a in w.actors:  # one actor's transitions are stored in the order it sent them
        pos = np.flatnonzero(ids // ID_BASE == a)
        if pos.size and not np.all(np.diff(ids[pos]) > 0):
            problems.append(f"actor {a}'s transitions are stored out of order")
    if isinstance(memory, PrioritizedReplay):
        pa = memory._sum.get(np.arange(n))
        want_pa = p_alpha_of([w.priority[i] for i in ids.tolist()])
        if not np.array_equal(pa, want_pa):
            problems.append("stored p^alpha differs from (priority + eps)^alpha")
        if not np.isclose(memory.total(), want_pa.sum(), rtol=1e-12):
            problems.append(f"total {memory.total()} != {want_pa.sum()}")
    return problems


def shard_role(t: Transport, w: World, tags: Tags) -> None:
    mine = [a for a in w.actors if w.dest(a) == t.rank]
    expected = len(w.ids_of_shard(t.rank))
    control = ControlChannel(t, [0], tags.control)
    if w.prioritized:
        memory: UniformReplay = PrioritizedReplay(SHARD_CAPACITY, memory_fields(OBS_SHAPE),
                                                  alpha=ALPHA, beta=SHARD_BETA, eps=EPS,
                                                  seed=1000 + t.rank)
    else:
        memory = UniformReplay(SHARD_CAPACITY, memory_fields(OBS_SHAPE), seed=1000 + t.rank)
    limiter = RateLimiter(learning_starts=expected, samples_per_insert=0)
    server = ReplayServer(t, memory, OBS_SHAPE, mine, 0, INSERT_CAP, BATCH, limiter,
                          (tags.insert, tags.request, tags.reply))
    problems: list[str] = []
    ready = stopped = False
    deadline = time.monotonic() + CASE_DEADLINE_S
    while not stopped:
        stopped = any(m.get("type") == "stop" for _, m in control.poll())
        busy = server.serve()
        if not ready and limiter.inserted >= expected:
            # Keep serving whatever this finds: a learner left without replies would only hang.
            problems += verify_memory(memory, w, t.rank)
            control.send(0, {"type": "ready", "inserted": limiter.inserted})
            ready = True
        if not busy:
            t.idle(2e-4)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no STOP from the learner after {CASE_DEADLINE_S}s "
                               f"(inserted {limiter.inserted}/{expected}, "
                               f"sampled {limiter.sampled})")
    server.flush()
    control.send(0, {"type": "bye", "inserted": limiter.inserted, "sampled": limiter.sampled,
                     "size": len(memory)})
    control.flush(TIMEOUT_S)
    assert ready, f"stopped after inserting {limiter.inserted}/{expected}"
    assert not problems, "; ".join(problems)


# -- learner -------------------------------------------------------------------------------------
class ReplySpy:
    """Records what each shard's last reply said (the learner's Batch keeps only the samples)."""

    def __init__(self, client: ShardedReplayClient) -> None:
        self.last: dict[int, dict] = {}
        self.counts = dict.fromkeys(client.shards, 0)  # items received from each shard
        inbox = client.replies
        orig = inbox.recv_from

        def recv_from(peer, timeout_s=None, on_poll=None):
            msg = orig(peer, timeout_s, on_poll)
            n = int(msg["count"])
            self.last[peer] = {"count": n, "total": float(msg["total"]),
                               "min_p_alpha": float(msg["min_p_alpha"]),
                               "size": int(msg["size"]), "inserted": int(msg["inserted"]),
                               "p_alpha": np.array(msg["p_alpha"][:n])}
            self.counts[peer] += n
            return msg

        inbox.recv_from = recv_from  # type: ignore[method-assign]


class Learner:
    def __init__(self, t: Transport, w: World, tags: Tags) -> None:
        self.t, self.w, self.tags = t, w, tags
        self.control = ControlChannel(t, w.shards + w.actors, tags.control)
        self.client = ShardedReplayClient(t, w.shards, OBS_SHAPE, BATCH, BETA, w.prioritized,
                                          (tags.request, tags.reply), seed=7)
        self.spy = ReplySpy(self.client)
        self.all_ids = np.sort(w.all_ids())
        self.n_items = len(self.all_ids)
        self.shard_pos = {int(i): w.shards.index(w.dest(int(i) // ID_BASE))
                          for i in self.all_ids}
        self.slot_of: dict[tuple[int, int], int] = {}  # (shard position, item id) -> item
        self.seen: dict[int, tuple[int, int]] = {}  # item -> (shard position, item id)
        self.ref: PrioritizedReplay | None = None
        if w.prioritized:  # one memory holding every item: what K shards must sample like
            self.ref = PrioritizedReplay(self.n_items, memory_fields(OBS_SHAPE), alpha=ALPHA,
                                         beta=BETA, eps=EPS, seed=0)
            self.ref.add(fields_for(self.all_ids),
                         np.array([w.priority[int(i)] for i in self.all_ids], np.float32))
            self.ref_slot = {int(i): s for s, i in enumerate(self.all_ids)}

    # -- one batch ---------------------------------------------------------------------------
    def next_batch(self) -> Batch:
        self.client.request()
        return self.client.receive(timeout_s=TIMEOUT_S)

    def check_samples(self, b: Batch) -> np.ndarray:
        """Every sample is an inserted transition from the right shard; idx/item ids sane."""
        w = self.w
        n = len(b.idx)
        assert n == BATCH, f"batch of {n} items, asked for {BATCH}"
        for k in TRANSITION_FIELDS:
            assert len(b.data[k]) == n, (k, len(b.data[k]))
        ret = b.data["ret"]
        ids = ret.astype(np.int64)
        known = np.isin(ids, self.all_ids) & (ids.astype(np.float32) == ret)
        assert known.all(), f"sampled transitions nobody inserted: ret={ret[~known].tolist()}"
        want = fields_for(ids)
        for k in TRANSITION_FIELDS:
            assert b.data[k].dtype == want[k].dtype, (k, b.data[k].dtype)
            assert np.array_equal(b.data[k], want[k]), f"field {k!r} does not match ret (id)"
        pos = np.array([self.shard_pos[int(i)] for i in ids])
        assert np.array_equal(b.shard, pos), (
            f"items attributed to shards {b.shard.tolist()}, their actors feed {pos.tolist()}")
        sizes = np.array([len(w.ids_of_shard(s)) for s in w.shards])
        assert (b.idx >= 0).all() and (b.idx < sizes[b.shard]).all(), b.idx.tolist()
        # Nothing was evicted: a shard's slot is its item's insertion number.
        assert np.array_equal(b.item_ids, b.idx), (b.item_ids.tolist(), b.idx.tolist())
        for i, s, iid in zip(ids.tolist(), b.shard.tolist(), b.item_ids.tolist(), strict=True):
            old = self.slot_of.setdefault((s, iid), i)
            assert old == i, f"shard {s} item {iid} was id {old}, now id {i}"
            prev = self.seen.setdefault(i, (s, iid))
            assert prev == (s, iid), f"id {i} was at {prev}, now at {(s, iid)}"
        return ids

    def check_totals(self, b: Batch) -> None:
        reps = [self.spy.last[s] for s in self.w.shards]
        for s, r in zip(self.w.shards, reps, strict=True):
            want = len(self.w.ids_of_shard(s))
            assert r["size"] == want and r["inserted"] == want, (s, r["size"], r["inserted"])
        assert self.client.size == self.n_items == self.client.inserted, (
            self.client.size, self.client.inserted)
        if not self.w.prioritized:
            assert b.weights is None, "a non-prioritized client returned weights"
            for s, r in zip(self.w.shards, reps, strict=True):
                assert r["total"] == r["size"], f"uniform shard {s} total {r['total']} != size"
                assert (r["p_alpha"] == 1.0).all()
            return
        # Weights from the GLOBAL total, minimum and size the shards reported.
        p_alpha = np.concatenate([r["p_alpha"] for r in reps])
        total = sum(r["total"] for r in reps)
        min_pa = min(r["min_p_alpha"] for r in reps if r["size"] > 0)
        size = sum(r["size"] for r in reps)
        assert b.weights is not None and b.weights.dtype == np.float32
        assert np.array_equal(b.weights, importance_weights(p_alpha, total, min_pa, size, BETA)), (
            "weights are not importance_weights() of the shards' global totals")
        # ... and what one memory holding every item gives for the same items.
        ref = self.ref
        assert ref is not None
        ids = b.data["ret"].astype(np.int64)
        ref_pa = ref._sum.get(np.array([self.ref_slot[int(i)] for i in ids]))
        assert np.array_equal(p_alpha, ref_pa), (
            f"shards' p^alpha {p_alpha.tolist()} != reference {ref_pa.tolist()} for ids "
            f"{ids.tolist()}")
        assert np.isclose(total, ref.total(), rtol=1e-9, atol=0), (total, ref.total())
        assert min_pa == ref.min_p_alpha(), (min_pa, ref.min_p_alpha())
        assert size == len(ref)
        ref_w = importance_weights(ref_pa, ref.total(), ref.min_p_alpha(), len(ref), BETA)
        assert np.allclose(b.weights, ref_w, rtol=1e-6, atol=0), (
            f"weights {b.weights.tolist()} != one memory's {ref_w.tolist()}")
        for s, r in zip(self.w.shards, reps, strict=True):
            want = self.shard_total(s)
            assert np.isclose(r["total"], want, rtol=1e-9), (
                f"shard {s} reports total {r['total']}, its items' p^alpha sum to {want}")

    def shard_total(self, s: int) -> float:
        if not self.w.prioritized:
            return float(len(self.w.ids_of_shard(s)))
        return float(p_alpha_of([self.w.priority[int(i)] for i in self.w.ids_of_shard(s)]).sum())

    def batch(self) -> tuple[Batch, np.ndarray]:
        b = self.next_batch()
        ids = self.check_samples(b)
        self.check_totals(b)
        return b, ids

    def set_priorities(self, b: Batch, new: np.ndarray) -> None:
        """Send new priorities for batch b (with the next request); mirror them in ref."""
        self.client.update_priorities(b, new)
        ids = b.data["ret"].astype(np.int64)
        for i, p in zip(ids.tolist(), new.tolist(), strict=True):
            self.w.priority[i] = float(np.float32(p))
        assert self.ref is not None
        slots = np.array([self.ref_slot[i] for i in ids.tolist()])
        self.ref.update_priorities(slots, slots, new)

    def split_check(self, counts: np.ndarray, what: str) -> None:
        totals = np.array([self.shard_total(s) for s in self.w.shards])
        want = totals / totals.sum()
        got = counts / counts.sum()
        log(self.t, f"  {what}: per-shard sample share {np.round(got, 3).tolist()}, "
                    f"priority-total share {np.round(want, 3).tolist()}")
        assert np.all(np.abs(got - want) <= 0.07), (
            f"{what}: shards sampled {counts.tolist()} (share {got.round(3).tolist()}), "
            f"totals say {want.round(3).tolist()}")

    # -- the case ------------------------------------------------------------------------------
    def run(self) -> None:
        w = self.w
        # Gate: the request is in the shards before any actor inserts; a shard may answer a
        # count > 0 only once everything it will receive is in (learning_starts).
        self.client.request()
        for a in w.actors:
            self.control.send(a, {"type": "go"})
        b0 = self.client.receive(timeout_s=TIMEOUT_S)
        self.check_samples(b0)
        for s in w.shards:
            r = self.spy.last[s]
            want = len(w.ids_of_shard(s))
            if r["count"] > 0:
                assert r["inserted"] == want and r["size"] == want, (
                    f"shard {s} sampled {r['count']} with {r['size']}/{want} items inserted: "
                    "learning_starts not honoured")
        for s in w.shards:
            msg = self.control.recv_from(s, TIMEOUT_S)
            assert msg.get("type") == "ready", msg
        if w.prioritized:
            self.run_prioritized()
        else:
            self.run_uniform()

    def run_prioritized(self) -> None:
        w = self.w
        dom = w.dominant
        # 1. the overwhelming priority dominates; weights are global
        n_dom = n = 0
        for _ in range(6):
            b, ids = self.batch()
            n_dom += int((ids == dom).sum())
            n += len(ids)
        share = self.ref_share(dom)
        log(self.t, f"  dominant item: {n_dom}/{n} samples (P = {share:.3f})")
        assert share > 0.95 and n_dom >= 0.85 * n, f"dominant item in {n_dom}/{n} samples"
        assert (ids == dom).any(), "the last batch lacks the dominant item"
        # 2. priority updates travel with the next request: dominant -> tiny, others change
        new = np.where(ids == dom, P_TINY, 2.0 + (ids % ID_BASE) % 3).astype(np.float32)
        self.set_priorities(b, new)
        assert self.ref is not None and self.ref.min_p_alpha() == p_alpha_of([P_TINY])[0]
        counts = np.zeros(len(w.shards), np.int64)
        n_dom = n = 0
        for j in range(50):
            b, ids = self.batch()  # the first of these already reflects the update
            n_dom += int((ids == dom).sum())
            n += len(ids)
            if j >= 2:  # the split uses the totals of the previous reply
                counts += np.bincount(b.shard, minlength=len(w.shards))
            if j == 10:
                # 3. an update for an item a slot no longer holds (wrong item id): dropped
                stale = Batch({}, None, b.shard[:1].copy(), b.idx[:1].copy(),
                              b.item_ids[:1] + 1000)
                self.client.update_priorities(stale, np.array([P_DOMINANT], np.float32))
        log(self.t, f"  after the update: dominant item in {n_dom}/{n} samples")
        assert n_dom <= 0.02 * n, f"the demoted item still in {n_dom}/{n} samples"
        assert len(self.seen) >= 0.9 * (self.n_items - 1), (
            f"only {len(self.seen)}/{self.n_items} items ever sampled")
        self.split_check(counts, "prioritized")
        self.check_item_order()

    def ref_share(self, item: int) -> float:
        assert self.ref is not None
        return float(self.ref._sum.get(np.array([self.ref_slot[item]]))[0] / self.ref.total())

    def run_uniform(self) -> None:
        counts = np.zeros(len(self.w.shards), np.int64)
        for j in range(40):
            b, _ = self.batch()
            if j >= 2:
                counts += np.bincount(b.shard, minlength=len(self.w.shards))
        missing = sorted(set(self.all_ids.tolist()) - set(self.seen))
        assert not missing, f"inserted but never sampled: {missing}"
        self.split_check(counts, "uniform")
        self.check_item_order()

    def check_item_order(self) -> None:
        """A shard's item ids follow each actor's send order; one message is one block."""
        for a in self.w.actors:
            for msg in self.w.messages[a]:
                got = [self.seen[i] for i in msg.tolist() if i in self.seen]
                for (s0, i0), (s1, i1) in zip(got, got[1:], strict=False):
                    assert s0 == s1 and i1 > i0, f"actor {a}: items out of order {got}"
                both = [(i, self.seen[i][1]) for i in msg.tolist() if i in self.seen]
                for (x0, y0), (x1, y1) in zip(both, both[1:], strict=False):
                    assert y1 - y0 == x1 - x0, f"actor {a}: a message split up: {both}"
            ids = [i for i in self.w.ids_of_actor(a).tolist() if i in self.seen]
            iids = [self.seen[i][1] for i in ids]
            assert iids == sorted(iids), f"actor {a}: item ids not in send order"

    def stop(self) -> None:
        """STOP to everyone (also after a failure: nobody waits for a deadline), then BYEs."""
        leaves = self.w.shards + self.w.actors
        for r in leaves:
            self.control.send(r, {"type": "stop"})
        byes = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(byes) < len(self.w.shards):
            for p, m in self.control.poll():
                if m.get("type") == "bye":
                    byes[p] = m
            if time.monotonic() > deadline:
                raise TimeoutError(f"BYE from {len(byes)}/{len(self.w.shards)} shards")
            time.sleep(1e-3)
        self.control.flush(TIMEOUT_S)
        self.byes = byes

    def check_byes(self) -> None:
        for s in self.w.shards:
            m = self.byes[s]
            want = len(self.w.ids_of_shard(s))
            assert m["inserted"] == want and m["size"] == want, (s, m)
            assert m["sampled"] == self.spy.counts[s], (
                f"shard {s} counts {m['sampled']} samples served, the learner got "
                f"{self.spy.counts[s]}")


def learner_role(t: Transport, w: World, tags: Tags) -> None:
    ln = Learner(t, w, tags)
    try:
        ln.run()
    except BaseException:
        try:  # still release the others, but report the first failure
            ln.stop()
        except Exception as e:  # noqa: BLE001
            log(t, f"  (stopping after the failure failed too: {type(e).__name__}: {e})")
        raise
    ln.stop()
    ln.check_byes()


# -- driver --------------------------------------------------------------------------------------
def run_case(kind: str, t: Transport, k_shards: int, tag: int) -> None:
    shards = list(range(1, 1 + k_shards))
    actors = list(range(1 + k_shards, t.world_size))
    w = World(kind, shards, actors)
    tags = Tags(tag + 1, tag + 2, tag + 3, tag + 4)
    if t.rank == 0:
        learner_role(t, w, tags)
    elif t.rank in shards:
        shard_role(t, w, tags)
    else:
        actor_role(t, w, tags)


CASE_NAMES = ["prioritized", "uniform"]


def main() -> int:
    backend, k_shards = sys.argv[1], int(sys.argv[2])
    t = make_transport(backend, detect_launch(), timeout_s=TIMEOUT_S)
    assert k_shards >= 1 and t.world_size - 1 - k_shards >= 2, (
        f"world {t.world_size} with {k_shards} shards leaves fewer than 2 actors")
    code = run_cases(t, [(name, lambda tag, name=name: run_case(name, t, k_shards, tag))
                         for name in CASE_NAMES], TIMEOUT_S)
    t.shutdown()
    return code


if __name__ == "__main__":
    rank_exit(main)
