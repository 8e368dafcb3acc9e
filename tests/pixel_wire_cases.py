"""Pixel observations over a real transport: ``python tests/pixel_wire_cases.py`` on 2 gloo ranks.

Run under tests/mp.py's ``run_gloo(2, ...)``. For ALE Pong (uint8 ``4×84×84``) and MinAtar
Breakout (bool ``10×10×4``), rank 0 sends and rank 1 receives:

- ``messages``: every message kind that carries observations (the unroll, the inference
  request, the replay's transitions and its sample reply), each derived by the project's own
  schema function and filled with random frames from a seeded generator; the receiver
  regenerates the frames and checks dtype and bytes.
- ``replay``: the same frames through the replay itself: rank 0 sends transitions the way an
  Ape-X actor does, rank 1 keeps them in the replay memory Ape-X builds (frames stored once)
  and serves a sample request from rank 0 (the learner's client); each sampled observation
  must be, bit for bit and in its own dtype, the one sent with that transition.

Each rank prints ``CASE <name> <env> OK`` or ``CASE <name> <env> FAIL: ...`` and exits 0 only
if every case passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import numpy as np
from mp import rank_exit, run_cases

from archzoo import builders
from archzoo.actors.batched_policy import request_schema
from archzoo.actors.unroll import unroll_schema
from archzoo.comm import Inbox, Schema, Transport
from archzoo.comm.factory import detect_launch, make_transport
from archzoo.comm.sender import DoubleBuffer
from archzoo.config import ApexConfig
from archzoo.envs import EnvSpec, env_spec
from archzoo.replay.server import (
    RateLimiter,
    ReplayServer,
    ShardedReplayClient,
    insert_schema,
    memory_fields,
    reply_schema,
)

ENVS = ("ALE/Pong-v5", "MinAtar/Breakout-v1")
TIMEOUT_S = 20.0
E, T, CAP, BATCH = 2, 3, 5, 4  # envs, unroll length, transitions per message, sample batch
OBS_FIELDS = ("obs", "next_obs")


def frames(spec: EnvSpec, lead: tuple[int, ...], seed: int) -> np.ndarray:
    """Random observations ``[*lead, *obs_shape]`` in the env's own dtype (uint8 or bool)."""
    rng = np.random.default_rng(seed)
    shape = (*lead, *spec.obs_shape)
    if np.dtype(spec.obs_dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def message_kinds(spec: EnvSpec) -> dict[str, Schema]:
    """Every message that carries observations, as its owner derives it."""
    return {"unroll": unroll_schema(spec, T, E), "infer_request": request_schema(spec, E),
            "transitions": insert_schema(memory_fields(spec.obs_shape, spec.obs_dtype), CAP),
            "sample_reply": reply_schema(spec.obs_shape, BATCH, spec.obs_dtype)}


def expected(spec: EnvSpec, schema: Schema, seed: int) -> dict[str, np.ndarray]:
    """What the sender puts in each observation field of ``schema`` (shapes from the env)."""
    out = {}
    for i, name in enumerate(n for n in OBS_FIELDS if n in schema.fields):
        lead = schema.fields[name].shape[:len(schema.fields[name].shape) - len(spec.obs_shape)]
        out[name] = frames(spec, lead, seed + i)
    return out


def case_messages(t: Transport, spec: EnvSpec, tag: int) -> None:
    kinds = list(message_kinds(spec).items())
    wants = [expected(spec, schema, 1000 * tag + k) for k, (_, schema) in enumerate(kinds)]
    assert all(wants), "a message kind without an observation field"
    if t.rank == 0:
        for k, ((kind, schema), want) in enumerate(zip(kinds, wants, strict=True)):
            msg = schema.new()
            rng = np.random.default_rng(tag + k)
            msg.buffer[:] = rng.integers(0, 256, size=schema.nbytes, dtype=np.uint8)
            for name, a in want.items():
                msg[name][...] = a
            t.send(msg.buffer, 1, tag + k, kind, timeout_s=TIMEOUT_S)
        return
    # every receive is posted before any is checked: a failed check never stalls the sender
    inboxes = [Inbox(t, schema, [0], tag + k, depth=1, what=kind)
               for k, (kind, schema) in enumerate(kinds)]
    got = [inbox.recv_from(0, TIMEOUT_S) for inbox in inboxes]
    bad = []
    for (kind, _), want, msg in zip(kinds, wants, got, strict=True):
        for name, a in want.items():
            g = msg[name]
            if g.dtype != a.dtype or g.dtype != np.dtype(spec.obs_dtype):
                bad.append(f"{kind}.{name}: dtype {g.dtype}, sent {a.dtype}")
            elif g.shape != a.shape or g.tobytes() != a.tobytes():
                bad.append(f"{kind}.{name}: bytes differ")
    assert not bad, "; ".join(bad)


def case_replay(t: Transport, spec: EnvSpec, tag: int) -> None:
    """Ape-X's path: actor message -> replay memory (frames stored once) -> sample reply."""
    cfg = ApexConfig(arch="apex", envs_per_actor=E, n_step=1, actor_batch=CAP - E,
                     batch_size=BATCH, replay_capacity=64)
    sends = 3
    obs = frames(spec, (sends, CAP), 7 * tag)
    nxt = frames(spec, (sends, CAP), 7 * tag + 1)
    if t.rank == 1:  # the replay shard
        memory = builders.replay_memory(cfg, spec, cfg.replay_capacity, seed=1)
        limiter = RateLimiter(sends * CAP, 0.0, min_sample=BATCH)
        server = ReplayServer(t, memory, spec.obs_shape, [0], 0, cfg.insert_capacity(),
                              BATCH, limiter, (tag, tag + 1, tag + 2), spec.obs_dtype)
        deadline = time.monotonic() + TIMEOUT_S
        while limiter.sampled < BATCH:
            server.serve()
            assert time.monotonic() < deadline, "no sample request answered"
        server.flush()
        return
    schema = builders.replay_inserts(cfg, spec)
    assert schema.digest() == insert_schema(memory_fields(spec.obs_shape, spec.obs_dtype),
                                           CAP).digest()
    out = DoubleBuffer(t, schema, 1, tag, "transitions")
    for s in range(sends):  # the actor
        msg = out.next()
        msg["obs"][...], msg["next_obs"][...] = obs[s], nxt[s]
        msg["action"][...] = s * CAP + np.arange(CAP)  # an id per transition
        msg["ret"][...], msg["discount"][...], msg["priority"][...] = 1.0, 0.99, 1.0
        msg["count"][...] = CAP
        out.send()
    client = ShardedReplayClient(t, [1], spec.obs_shape, BATCH, 0.4, False,
                                 (tag + 1, tag + 2), obs_dtype=spec.obs_dtype)
    client.request()  # the learner
    batch = client.receive(timeout_s=TIMEOUT_S)
    out.flush()
    assert len(batch.data["action"]) == BATCH
    for name, sent in (("obs", obs), ("next_obs", nxt)):
        got = batch.data[name]
        assert got.dtype == np.dtype(spec.obs_dtype), (name, got.dtype)
        for a, g in zip(batch.data["action"], got, strict=True):
            w = sent.reshape(sends * CAP, *spec.obs_shape)[int(a)]
            assert g.tobytes() == w.tobytes(), f"sample of transition {int(a)}: {name} differs"


CASES: list[tuple[str, Callable[[Transport, EnvSpec, int], None]]] = [
    ("messages", case_messages), ("replay", case_replay)]


def main() -> int:
    t = make_transport("gloo", detect_launch(), timeout_s=TIMEOUT_S)
    assert t.world_size == 2, "run pixel_wire_cases.py on 2 ranks"
    specs = [env_spec(e) for e in ENVS]
    return run_cases(t, [(f"{name} {spec.env_id}", partial(fn, t, spec))
                         for name, fn in CASES for spec in specs], TIMEOUT_S)


if __name__ == "__main__":
    rank_exit(main, hard=True)
