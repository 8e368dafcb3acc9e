"""A user's own torso, in the form ``--model`` takes besides its built-in names.

The IMPALA torso (Espeholt et al. 2018, Fig. 3) with fewer residual blocks per stage: the
paper's has two, :func:`impala_one_block` one and :func:`impala_no_residual` none (three
convolution and max-pool stages, then 256 features). On MinAtar's 10×10 grids a double-DQN
update of 64 items takes about 2/3 and 1/3 of the paper's torso's time on one CPU thread
(docs/results.md has what that buys Ape-X). From the repository root:

    archzoo run apex --config minatar --model examples.torsos:impala_no_residual

A factory gets the observation and action spaces and returns an ``nn.Module`` from a float
batch ``[B, *obs_shape]`` to features ``[B, F]``; MinAtar's observations are channels-last,
Atari's channels-first (archzoo.model_shapes tells them apart, as the built-in torsos do).
"""

from __future__ import annotations

import gymnasium as gym
from torch import Tensor, nn

from archzoo.model_shapes import channels_last, image_channels, image_hw
from archzoo.nets import ImpalaCNN


class ChannelsLast(nn.Module):
    """A channels-first image torso behind channels-last observations ``[B, H, W, C]``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x.permute(0, 3, 1, 2))


def _impala(observation_space: gym.Space, blocks: int) -> nn.Module:
    shape = observation_space.shape
    body = ImpalaCNN(image_channels(shape), *image_hw(shape), blocks=blocks)
    return ChannelsLast(body) if channels_last(shape) else body


def impala_one_block(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """The IMPALA torso with one residual block per stage."""
    return _impala(observation_space, 1)


def impala_no_residual(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """The IMPALA torso's three convolution and max-pool stages, without residual blocks."""
    return _impala(observation_space, 0)
