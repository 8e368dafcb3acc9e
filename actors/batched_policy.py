"""The policy behind batched inference, and the messages that reach it.

GA3C (Babaeizadeh et al., ICLR 2017, §4 "predictors") and SEED RL (Espeholt et al., ICLR 2020,
§3 "central inference") answer many actors' observations with one forward pass.
:class:`BatchedPolicy` is that forward pass (π and V on the device, actions by Gumbel-max,
one parameter version per batch); :func:`request_schema` and :func:`reply_schema` are the
messages an actor and the server exchange; :class:`InferenceStats` counts batches and
latency. Nothing here touches the transport: the server that moves these messages is
:class:`archzoo.actors.inference.InferenceServer`, and GA3C's predictor threads
(``learners/ga3c_server.py``) call :class:`BatchedPolicy` in-process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from archzoo.envs import EnvSpec
from archzoo.messages import Schema

__all__ = ["BatchedPolicy", "InferenceStats", "reply_schema", "request_schema"]


def request_schema(spec: EnvSpec, num_envs: int) -> Schema:
    """An actor's request: x_t of its E envs, plus what SEED's learner needs of step t−1.

    ``rewards``/``terminated``/``truncated``/``valid`` describe the env step that produced
    ``obs`` (the one taken with the previous reply's actions); ``first`` marks the first
    request of an actor incarnation ``run_id`` (there is no previous step). Episodes that
    finished at that step travel along (at most one per env).
    """
    E = num_envs
    return Schema("infer_request", [
        ("obs", spec.obs_dtype, (E, *spec.obs_shape)),
        ("rewards", np.float32, (E,)),
        ("terminated", np.bool_, (E,)),
        ("truncated", np.bool_, (E,)),
        ("valid", np.bool_, (E,)),
        ("first", np.bool_, ()),
        ("run_id", np.int64, ()),
        ("seq", np.int64, ()),               # request number within this run id
        ("first_step_time", np.float64, ()),
        ("timing", np.float64, (2,)),        # the actor's cumulative env and round-trip seconds
        ("ep_count", np.int64, ()),
        ("ep_returns", np.float32, (E,)),
        ("ep_lengths", np.int32, (E,)),
    ])


def reply_schema(spec: EnvSpec, num_envs: int) -> Schema:
    """The server's answer to one request: a_t ~ π(·|x_t), the logits μ(·|x_t), V(x_t)."""
    E = num_envs
    return Schema("infer_reply", [
        ("actions", np.int64, (E,)),
        ("logits", np.float32, (E, spec.num_actions)),
        ("values", np.float32, (E,)),
        ("seq", np.int64, ()),               # echoes the request's seq
        ("version", np.int64, ()),           # parameter version that answered
        ("batch", np.int64, ()),             # which batch (forward pass) answered
        ("batch_size", np.int64, ()),        # requests in that batch
    ])


class BatchedPolicy:
    """The model behind the server: one forward pass per batch, actions by Gumbel-max.

    ``lock`` is held for the whole forward pass; a trainer that updates the model in place
    (GA3C) takes it for its optimiser step, so a batch never sees half an update. Staged
    parameters (:meth:`load`) are applied at the start of the next batch.
    """

    optional = True  # as a checkpoint part: without it a resumed run draws new noise

    def __init__(self, model: torch.nn.Module, device: torch.device, seed: int,
                 version_of: Callable[[], int] | None = None) -> None:
        self.model = model.to(device)
        self.device = device
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.version = 0
        # Where the model is trained in place (SEED, GA3C): the trainer's version counter,
        # read under the lock, which the trainer also holds while it steps and counts.
        self.version_of = version_of
        self._staged: tuple[np.ndarray, int] | None = None

    def state_dict(self) -> dict[str, str]:
        """The sampling generator's state (a checkpoint part: a resumed SEED RL run in
        ``--mode sync`` draws the noise the uninterrupted run would have)."""
        return {"rng": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, str]) -> None:
        self.rng.bit_generator.state = json.loads(state["rng"])

    def load(self, flat: np.ndarray, version: int) -> None:
        """Stage new parameters; the next batch (not the current one) uses them."""
        staged = (flat.copy(), version)
        with self.lock:
            self._staged = staged

    def _current_version(self) -> int:
        """Under :attr:`lock`: apply staged parameters; the version answering this batch."""
        from archzoo.nets import set_flat

        if self._staged is not None:
            flat, self.version = self._staged
            self._staged = None
            set_flat(self.model, flat)
        return self.version if self.version_of is None else self.version_of()

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(actions, logits, values, version) for a batch of observations ``[B, *obs]``."""
        with self.lock:
            version = self._current_version()
            with torch.no_grad():
                x = torch.from_numpy(obs)
                if self.device.type != "cpu":
                    x = x.to(self.device, non_blocking=True)
                logits, values = self.model(x)
                logits, values = logits.cpu().numpy(), values.cpu().numpy()
        # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits).
        actions = np.argmax(logits + self.rng.gumbel(size=logits.shape), axis=-1)
        return actions, logits, values, version

    def forward_recurrent(self, obs: np.ndarray, state: tuple[torch.Tensor, torch.Tensor],
                          first: torch.Tensor, prev_action: torch.Tensor | None = None,
                          prev_reward: torch.Tensor | None = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int,
                                     tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`forward` for a recurrent model (``RecurrentActorCritic``): every row from
        its own core ``state`` (CPU tensors ``[B, H]``, reset where ``first``); also returns
        the state after the step, on the CPU (actors/core_states.py keeps them)."""
        dev = self.device
        with self.lock:
            version = self._current_version()
            with torch.no_grad():
                args = [None if x is None else x.to(dev) for x in (
                    torch.from_numpy(obs), first, prev_action, prev_reward)]
                logits, values, (h, c) = self.model(
                    args[0], (state[0].to(dev), state[1].to(dev)), args[1], args[2], args[3])
                logits, values = logits.cpu().numpy(), values.cpu().numpy()
                h, c = h.cpu(), c.cpu()
        actions = np.argmax(logits + self.rng.gumbel(size=logits.shape), axis=-1)
        return actions, logits, values, version, (h, c)


@dataclass
class InferenceStats:
    """What the metrics report: batch sizes, latency (request seen → answered: reply sent
    by InferenceServer, forward pass done in GA3C's predictors), forward-pass time."""

    batches: int = 0
    requests: int = 0
    forward_s: float = 0.0
    latency_s: float = 0.0
    _window_batches: int = 0
    _window_requests: int = 0
    _window_latency_s: float = 0.0

    def record(self, size: int, forward_s: float, latency_s: float) -> None:
        self.batches += 1
        self.requests += size
        self.forward_s += forward_s
        self.latency_s += latency_s
        self._window_batches += 1
        self._window_requests += size
        self._window_latency_s += latency_s

    @property
    def mean_batch(self) -> float | None:
        return self.requests / self.batches if self.batches else None

    @property
    def mean_latency_ms(self) -> float | None:
        return 1e3 * self.latency_s / self.requests if self.requests else None

    def window(self) -> dict[str, float | None]:
        """Mean batch size and latency since the last call (a metrics row's columns)."""
        b, r, lat = self._window_batches, self._window_requests, self._window_latency_s
        self._window_batches = self._window_requests = 0
        self._window_latency_s = 0.0
        return {"infer_batch_mean": round(r / b, 3) if b else None,
                "infer_latency_ms": round(1e3 * lat / r, 4) if r else None}

    def summary(self) -> dict[str, float | int | None]:
        return {"batches": self.batches, "requests": self.requests,
                "mean_batch_size": self.mean_batch, "mean_latency_ms": self.mean_latency_ms,
                "forward_s": self.forward_s}

