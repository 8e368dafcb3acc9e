"""A finished run's policy, rebuilt from its policy.pt without the run:
:func:`load_policy` (``archzoo.load_policy``, re-exported by archzoo/api.py) and
:class:`Policy`, what ``archzoo eval`` and archzoo/video.py act with.

    policy = archzoo.load_policy(summary["run_dir"])
    actions = policy(observations)        # a batch of observations -> a batch of actions

torch and the networks are imported when a policy is loaded, so importing this module stays
light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from archzoo.errors import UsageError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Policy", "load_policy"]


class Policy:
    """A finished run's policy, ready to act: ``policy(obs)`` maps a batch of observations
    ``[B, *obs_shape]`` (numpy or torch, in the env's dtype) to a numpy batch of actions.

    Q-networks (Ape-X, Gorila, R2D2) act greedily, argmax_a Q(x, a); actor-critic policies
    sample a ~ π(·|x) (Gumbel-max), or take argmax_a π(a|x) with ``greedy=True``. ``model``
    is the rebuilt ``nn.Module``; ``meta`` what policy.pt recorded (env, model, observation).

    A recurrent policy (``--core lstm``) keeps one core state per env of the batch: call
    :meth:`reset` where episodes start (the first call, or a batch of another size, resets
    by itself), and :meth:`observe` with the rewards after each step when its core takes
    the previous reward (``--core-prev-action-reward``)."""

    def __init__(self, model: Any, meta: dict[str, Any], greedy: bool = False,
                 seed: int = 0) -> None:
        import numpy as np

        self.model, self.meta = model, meta
        self.q_net = meta.get("net") == "q"
        self.greedy = greedy or self.q_net
        self.rng = np.random.default_rng(seed)
        self.recurrent = bool(getattr(model, "recurrent", False))
        self.state: Any = None

    def reset(self, num_envs: int) -> None:
        """Every env starts an episode: zero core state, no previous action or reward
        (nothing to do for a feed-forward policy)."""
        import torch

        if not self.recurrent:
            return

        self.state = self.model.initial_state(num_envs)
        self.first = torch.ones(num_envs, dtype=torch.bool)
        self.prev_action = torch.zeros(num_envs, dtype=torch.int64)
        self.prev_reward = torch.zeros(num_envs)

    def observe(self, rewards: Any) -> None:
        """The rewards of the step just taken (the previous reward of the next call)."""
        import torch

        if self.recurrent:
            self.prev_reward = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)

    def __call__(self, obs: Any) -> Any:
        import numpy as np
        import torch

        x = torch.as_tensor(obs)
        with torch.no_grad():
            if self.recurrent:
                if self.state is None or self.state[0].shape[0] != x.shape[0]:
                    self.reset(x.shape[0])
                out = self.model(x, self.state, self.first, self.prev_action,
                                 self.prev_reward)
                self.state, out = out[-1], out[0]
                self.first = torch.zeros_like(self.first)
            else:
                out = self.model(x)
                out = out if self.q_net else out[0]
        scores = out.numpy()
        if self.greedy:
            actions = np.argmax(scores, axis=-1)
        else:
            actions = np.argmax(scores + self.rng.gumbel(size=scores.shape), axis=-1)
        if self.recurrent:
            self.prev_action = torch.as_tensor(actions, dtype=torch.int64)
        return actions


def load_policy(run_dir: str | Path, greedy: bool = False, seed: int = 0) -> Policy:
    """The final policy of the run in ``run_dir`` (its policy.pt), rebuilt without the run:
    any ``--model``, pixel observations included. ``run_dir`` may also name a policy file
    in policy.pt's format (archzoo/video.py films such snapshots). Raises UsageError if it
    cannot be."""
    import torch

    from archzoo.learners.dqn import QNetwork
    from archzoo.model_shapes import core_size
    from archzoo.nets import ActorCritic, RecurrentActorCritic, RecurrentQNetwork

    path = Path(run_dir) if Path(run_dir).is_file() else Path(run_dir) / "policy.pt"
    if not path.is_file():
        raise UsageError(f"{run_dir}: no policy.pt (not a finished run directory?)")
    saved = torch.load(path, weights_only=True)
    meta = saved["meta"]
    shape, dtype = tuple(meta["obs_shape"]), meta.get("obs_dtype", "<f4")
    model_name = meta.get("model", "mlp")
    model: nn.Module
    try:
        if meta.get("core"):  # the IMPALA agent or R2D2's network
            core = (core_size(meta["core"], meta["hidden"]),
                    bool(meta.get("core_prev_action_reward")))
            cls = RecurrentQNetwork if meta.get("net") == "q" else RecurrentActorCritic
            model = cls(shape, meta["num_actions"], meta["hidden"], model_name, dtype, *core)
        elif meta.get("net") == "q":
            model = QNetwork(shape, meta["num_actions"], meta["hidden"], meta["dueling"],
                             model_name, dtype)
        else:
            model = ActorCritic(shape, meta["num_actions"], meta["hidden"], model_name, dtype)
    except ValueError as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy: {e}") from None
    model.load_state_dict(saved["state_dict"])
    return Policy(model.eval(), meta, greedy, seed)

