"""Actors whose policy lives in a batched inference server (actors/inference.py).

- :class:`PolicyClient`: one request (x_t of all E envs) → one reply (a_t, μ(·|x_t), V(x_t)),
  with a deadline that names the server.
- :class:`SeedActor` (SEED RL, Espeholt et al., ICLR 2020, §3): only steps the
  envs. Each request also carries the reward and episode-end flags of the step that
  produced x_t, and whether that step was a transition (``valid``: False on gymnasium's
  autoreset step, see actors/base.py), so the learner can assemble unrolls itself.
- :class:`RemoteUnrollActor` (GA3C, Babaeizadeh et al. 2017, §4 "agents"): an
  :class:`~archzoo.actors.unroll.UnrollActor` whose actions come from the predictor; it still
  assembles its unrolls and sends them to the training queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from archzoo.actors.base import EnvActor, EnvStep
from archzoo.actors.unroll import UnrollActor
from archzoo.comm import Transport
from archzoo.envs import EnvSpec
from archzoo.messages import Message, Schema

# An actor waits for a reply on every env step; a 1 ms spin (MPI's default) on a machine with
# fewer cores than processes takes the core the server needs. Spin briefly, then nap.
REPLY_SPIN_S = 20e-6
REPLY_SLEEP_S = 2e-4

__all__ = ["LocalPolicyClient", "PolicyClient", "RemoteUnrollActor", "SeedActor", "new_run_id"]


def new_run_id(rank: int) -> int:
    """An id for one actor incarnation: a restarted actor gets a new one (SEED resets its
    unroll buffer when the id changes)."""
    return (time.time_ns() // 1000) * 1000 + rank % 1000


class PolicyClient:
    """Request/reply with the inference server ``server``; one request in flight."""

    def __init__(self, transport: Transport, server: int, req_schema: Schema,
                 rep_schema: Schema, tag_request: int, tag_reply: int, run_id: int,
                 on_poll: Callable[[], object] | None = None) -> None:
        self.t, self.server = transport, server
        self.tag_request, self.tag_reply = tag_request, tag_reply
        self.req, self.rep = req_schema.new(), rep_schema.new()
        self.req["run_id"][...] = run_id
        self.req["first"][...] = True
        self.on_poll = on_poll
        self.seq = 0
        self.round_trip_s = 0.0

    def request(self) -> Message:
        """Send ``self.req`` (filled by the caller) and wait for its reply."""
        t0 = time.perf_counter()
        self.req["seq"][...] = self.seq
        recv = self.t.irecv(self.rep.buffer, self.server, self.tag_reply, "inference reply")
        sending = self.t.isend(self.req.buffer, self.server, self.tag_request,
                               "inference request")
        self.t.wait(recv, on_poll=self.on_poll, spin_s=REPLY_SPIN_S, max_sleep_s=REPLY_SLEEP_S)
        self.t.wait(sending, on_poll=self.on_poll)  # received, since answered: req is free
        if int(self.rep["seq"]) != self.seq:
            raise RuntimeError(f"rank {self.t.rank}: inference reply for request "
                               f"{int(self.rep['seq'])}, expected {self.seq}")
        self.seq += 1
        self.req["first"][...] = False
        self.round_trip_s += time.perf_counter() - t0
        return self.rep


class LocalPolicyClient:
    """:class:`PolicyClient`'s stand-in in one process (``--actors 0``): the same request
    and reply messages, answered by a direct call of the policy (a batch of one)."""

    def __init__(self, policy, req_schema: Schema, rep_schema: Schema, run_id: int,
                 on_answer: Callable[[int, Message, Message], None] | None = None,
                 states: Any = None) -> None:
        """``states``: a recurrent model's core states (actors/core_states.py), actor 0's."""
        self.policy, self.states = policy, states
        self.req, self.rep = req_schema.new(), rep_schema.new()
        self.req["run_id"][...] = run_id
        self.req["first"][...] = True
        self.on_answer = on_answer
        self.seq = 0
        self.round_trip_s = 0.0

    def request(self) -> Message:
        t0 = time.perf_counter()
        if self.states is not None:
            actions, logits, values, version = self.states.answer(self.policy, [0], [self.req])
        else:
            actions, logits, values, version = self.policy.forward(self.req["obs"])
        rep = self.rep
        rep["actions"][:], rep["logits"][:], rep["values"][:] = actions, logits, values
        rep["seq"][...], rep["version"][...] = self.seq, version
        rep["batch"][...], rep["batch_size"][...] = self.seq, 1  # every request is a batch
        self.req["seq"][...] = self.seq
        if self.on_answer is not None:
            self.on_answer(0, self.req, rep)
        self.seq += 1
        self.req["first"][...] = False
        self.round_trip_s += time.perf_counter() - t0
        return rep


class SeedActor(EnvActor):
    """E envs stepped with actions from the learner's inference server; nothing else."""

    def __init__(self, spec: EnvSpec, num_envs: int, client: PolicyClient | LocalPolicyClient,
                 seed: int) -> None:
        super().__init__(spec, num_envs, seed)
        self.client = client
        client.req["obs"][:] = self.obs

    def step(self) -> Message:
        """One round trip and one env step; returns the reply that chose the actions."""
        req = self.client.req
        if self.first_step_time == 0.0:
            self.start_clock()
            req["first_step_time"][...] = self.first_step_time
        req["timing"][:] = (self.env_s, self.client.round_trip_s)
        rep = self.client.request()
        self._report(self.step_envs(rep["actions"]))
        return rep

    def fast_forward(self, actions: np.ndarray, num_actions: int) -> None:
        """Take the logged steps again (a resumed ``--mode sync`` run; the server, which
        sampled them, sent the log), and report the last one in the next request, as the
        uninterrupted actor would have."""
        self.check_log(actions)
        for a in actions:
            self._report(self.step_envs(a.astype(np.int64)))
        if len(actions):
            self.client.req["first"][...] = False  # it goes on with the unroll in progress

    def _report(self, s: EnvStep) -> None:
        """The step's outcome into the next request."""
        req = self.client.req
        req["obs"][:] = s.obs
        req["rewards"][:] = s.reward
        req["terminated"][:] = s.terminated
        req["truncated"][:] = s.truncated
        req["valid"][:] = s.valid
        req["ep_count"][...] = len(s.ep_returns)
        req["ep_returns"][: len(s.ep_returns)] = s.ep_returns
        req["ep_lengths"][: len(s.ep_lengths)] = s.ep_lengths


class RemoteUnrollActor(UnrollActor):
    """GA3C's agent: unrolls as in IMPALA, but each action comes from the predictor.

    An unroll's ``version`` is the parameter version that answered its first step (the
    policy lag is measured from there). Each request also reports the last step's
    ``valid`` and ``rewards``, from which the predictors' core states know where episodes
    start (actors/core_states.py).
    """

    def __init__(self, spec: EnvSpec, num_envs: int, unroll_length: int,
                 client: PolicyClient | LocalPolicyClient, seed: int) -> None:
        super().__init__(spec, num_envs, unroll_length, model=None, seed=seed)
        self.client = client
        self._first_version: int | None = None

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        self.client.req["obs"][:] = obs
        rep = self.client.request()
        if self._first_version is None:
            self._first_version = int(rep["version"])
        self.inference_s += time.perf_counter() - t0
        return rep["actions"].copy(), rep["logits"].copy()

    def step_envs(self, actions: np.ndarray) -> EnvStep:
        s = super().step_envs(actions)
        self.client.req["valid"][:] = s.valid
        self.client.req["rewards"][:] = s.reward
        return s

    def collect(self, msg: Message, on_step: Callable[[], object] | None = None) -> None:
        self._first_version = None
        super().collect(msg, on_step)
        first = self._first_version
        assert first is not None, "the unroll's first step was answered"
        msg["version"][...] = first
        self.version = first
