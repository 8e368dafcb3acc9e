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
from typing import Any

from archzoo.errors import UsageError

__all__ = ["Policy", "load_policy"]


class Policy:
    """A finished run's policy, ready to act: ``policy(obs)`` maps a batch of observations
    ``[B, *obs_shape]`` (numpy or torch, in the env's dtype) to a numpy batch of actions.

    Q-networks (Ape-X, Gorila) act greedily, argmax_a Q(x, a); actor-critic policies sample
    a ~ π(·|x) (Gumbel-max), or take argmax_a π(a|x) with ``greedy=True``. ``model`` is the
    rebuilt ``nn.Module``; ``meta`` what policy.pt recorded (env, model, observation)."""

    def __init__(self, model: Any, meta: dict[str, Any], greedy: bool = False,
                 seed: int = 0) -> None:
        import numpy as np

        self.model, self.meta = model.eval(), meta
        self.q_net = meta.get("net") == "q"
        self.greedy = greedy or self.q_net
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: Any) -> Any:
        import numpy as np
        import torch

        with torch.no_grad():
            out = self.model(torch.as_tensor(obs))
        scores = (out if self.q_net else out[0]).numpy()
        if self.greedy:
            return np.argmax(scores, axis=-1)
        return np.argmax(scores + self.rng.gumbel(size=scores.shape), axis=-1)


def load_policy(run_dir: str | Path, greedy: bool = False, seed: int = 0) -> Policy:
    """The final policy of the run in ``run_dir`` (its policy.pt), rebuilt without the run:
    any ``--model``, pixel observations included. ``run_dir`` may also name a policy file
    in policy.pt's format (archzoo/video.py films such snapshots). Raises UsageError if it
    cannot be."""
    import torch

    from archzoo.nets import ActorCritic
    from learners.dqn import QNetwork

    path = Path(run_dir) if Path(run_dir).is_file() else Path(run_dir) / "policy.pt"
    if not path.is_file():
        raise UsageError(f"{run_dir}: no policy.pt (not a finished run directory?)")
    saved = torch.load(path, weights_only=True)
    meta = saved["meta"]
    if meta.get("core"):  # the policy needs its state and the episode starts as it acts
        raise UsageError(f"{run_dir}: a recurrent policy (--core {meta['core']}); archzoo eval "
                         "and load_policy do not run recurrent policies yet")
    shape, dtype = tuple(meta["obs_shape"]), meta.get("obs_dtype", "<f4")
    model_name = meta.get("model", "mlp")
    try:
        if meta.get("net") == "q":
            model = QNetwork(shape, meta["num_actions"], meta["hidden"], meta["dueling"],
                             model_name, dtype)
        else:
            model = ActorCritic(shape, meta["num_actions"], meta["hidden"], model_name, dtype)
    except ValueError as e:
        raise UsageError(f"{run_dir}: cannot rebuild the policy: {e}") from None
    model.load_state_dict(saved["state_dict"])
    return Policy(model, meta, greedy, seed)

