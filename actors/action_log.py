"""Every action an actor took, so that a resumed synchronous run re-creates its envs exactly.

A checkpoint cannot hold a gymnasium env (an ALE emulator, a MuJoCo simulation), but with
a seed an env is a deterministic function of the actions it was given, and an actor's
Gumbel-max sampling draws the same amount of noise per step whatever the policy. So the
learner, which in ``--mode sync`` receives every unroll, keeps each actor's actions in the
checkpoint (:class:`ActionLog`); a resumed actor re-seeds its envs, steps them through its
log and draws the same noise (:meth:`archzoo.actors.base.EnvActor.fast_forward`), and from then
on acts exactly as the uninterrupted actor would have. This is how deterministic
simulators replay a run from its inputs; its cost is the env steps of the log, taken at
env speed without any inference, and one byte per env step per actor in the checkpoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archzoo.actors.base import EnvActor
from archzoo.comm import Transport


def _dtype(num_actions: int) -> np.dtype:
    return np.dtype(np.uint8 if num_actions <= 256 else np.int32)


class ActionLog:
    """Per actor rank, the actions of every unroll the learner trained on: shape (steps, E).

    A checkpoint part (``state_dict`` / ``load_state_dict``): tensors keyed by rank. It is
    ``optional``: a checkpoint without it resumes with freshly reset envs."""

    optional = True

    def __init__(self, num_actions: int) -> None:
        self.dtype = _dtype(num_actions)
        self._chunks: dict[int, list[np.ndarray]] = {}

    def record(self, rank: int, actions: np.ndarray) -> None:
        """Append one unroll's actions (T, E) of actor ``rank``."""
        self._chunks.setdefault(rank, []).append(np.asarray(actions, self.dtype).copy())

    def actions(self, rank: int) -> np.ndarray:
        """All of ``rank``'s actions so far, (steps, E); (0, 0) if it has none."""
        chunks = self._chunks.get(rank)
        if not chunks:
            return np.zeros((0, 0), self.dtype)
        if len(chunks) > 1:  # keep one array: a long run has many unrolls
            chunks[:] = [np.concatenate(chunks)]
        return chunks[0]

    def plus(self, pending: dict[int, np.ndarray]) -> ActionLog:
        """A copy with each rank's ``pending`` actions (steps, E) after its logged ones (SEED
        RL's learner: the steps of the unroll in progress)."""
        out = ActionLog.__new__(ActionLog)
        out.dtype = self.dtype
        out._chunks = {r: [self.actions(r)] for r in self._chunks}
        for r, actions in pending.items():
            if len(actions):
                out.record(r, actions)
        return out

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {str(r): torch.from_numpy(np.ascontiguousarray(self.actions(r)))
                for r in sorted(self._chunks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._chunks = {int(r): [t.numpy().astype(self.dtype)] for r, t in state.items()}

    def send_all(self, t: Transport, ranks: list[int], tag: int, timeout_s: float) -> None:
        """Send every actor its log (a header (steps, E), then the actions if any), then
        wait up to ``timeout_s`` until each has taken its steps again (:func:`catch_up`)."""
        for r in ranks:
            log = self.actions(r)
            t.send(np.array(log.shape, np.int64), r, tag, "action log size", timeout_s)
            if log.size:
                t.send(np.ascontiguousarray(log), r, tag, "action log", timeout_s)
        done = np.zeros(1, np.int64)
        for r in ranks:
            t.recv(done, r, tag, "the end of its fast-forward through its action log",
                   timeout_s)


def catch_up(t: Transport, actor: EnvActor, root: int, tag: int, num_actions: int,
             timeout_s: float) -> int:
    """An actor's end of :meth:`ActionLog.send_all`: take the logged steps again, tell the
    root; returns how many steps that was."""
    shape = np.zeros(2, np.int64)
    t.recv(shape, root, tag, "action log size", timeout_s)
    log = np.zeros(tuple(int(n) for n in shape), _dtype(num_actions))
    if log.size:
        t.recv(log, root, tag, "action log", timeout_s)
    actor.fast_forward(log, num_actions)
    t.send(np.array([len(log)], np.int64), root, tag, "fast-forward done", timeout_s)
    return len(log)
