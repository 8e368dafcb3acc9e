"""Networks shared by actors and learners, and their flat parameter vectors."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class ActorCritic(nn.Module):
    """MLP torso with a policy head (action logits) and a value head V(x).

    ReLU, not tanh: torch's CPU tanh is ~20x slower than ReLU on this machine.
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.obs_ndim = len(obs_shape)
        obs_dim = int(np.prod(obs_shape))
        self.torso = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.policy = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and values for a batch ``[..., *obs_shape]``."""
        h = self.torso(obs.flatten(start_dim=obs.dim() - self.obs_ndim))
        return self.policy(h), self.value(h).squeeze(-1)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def get_flat(model: nn.Module, out: np.ndarray) -> None:
    """Copy the model's parameters into the float32 vector ``out`` (a message view)."""
    i = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            out[i:i + n] = p.detach().reshape(-1).cpu().numpy()
            i += n


def set_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Load the float32 vector ``flat`` into the model's parameters."""
    src = torch.from_numpy(flat)
    i = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(src[i:i + n].view_as(p))
            i += n


def set_flat_grad(model: nn.Module, flat: np.ndarray) -> None:
    """Make the float32 vector ``flat`` the parameters' ``.grad`` (for an optimizer step)."""
    src = torch.from_numpy(flat)
    i = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = src[i:i + n].view_as(p).to(p.dtype).clone()
        i += n
