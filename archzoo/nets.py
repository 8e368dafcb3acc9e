"""Networks shared by actors and learners, and their flat parameter vectors.

A network is a torso (what turns an observation into features) and heads (policy and
value, or Q-values). Torsos, chosen by ``--model``:

- ``mlp``: two ReLU layers of ``--hidden`` units on the flattened observation;
- ``nature-cnn``: the DQN torso (Mnih et al. 2015): convolutions 32×8×8/4, 64×4×4/2,
  64×3×3/1, then 512 units;
- ``impala-cnn``: the IMPALA paper's deep residual torso (Espeholt et al. 2018, Fig. 3):
  three sections of a 3×3 convolution (16, 32, 32 channels), a 3×3 max-pool with stride 2
  and two residual blocks, then 256 units;
- ``impala-cnn-no-residual``: the same three sections without their residual blocks; on
  10×10 grids a double-DQN update takes about a third of ``impala-cnn``'s time;
- ``minatar-cnn``: the MinAtar paper's network (Young & Tian 2019): one 3×3 convolution of
  16 channels, stride 1, then 128 units; ~18x cheaper than ``impala-cnn`` on a 10×10 grid;
- ``package.module:factory``: a user's own module, ``factory(observation_space,
  action_space)``, mapping a float batch ``[B, *obs_shape]`` to features ``[B, F]``.

``--core lstm[:SIZE]`` puts an LSTM between the torso and the heads
(:class:`RecurrentActorCritic`, the IMPALA paper's agent; :class:`RecurrentQNetwork`,
R2D2's); without it the network is the feed-forward :class:`ActorCritic`.

Observations reach the network in their own dtype; the torso makes them float on its
device (÷255 for uint8 frames) and puts the channels first (an image whose first axis is
larger than its last is taken as height × width × channels, as MinAtar's are).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from archzoo.model_shapes import MODELS, channels_last, check_builtin, image_channels, image_hw


class NatureCNN(nn.Module):
    """The DQN paper's convolutional torso; 512 features."""

    def __init__(self, channels: int, h: int, w: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n = self.conv(torch.zeros(1, channels, h, w)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n, 512), nn.ReLU())
        self.out_dim = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c2(torch.relu(self.c1(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """The IMPALA paper's deep residual torso; 256 features. ``blocks``: residual blocks per
    stage (the paper's 2; ``impala-cnn-no-residual`` has none)."""

    def __init__(self, channels: int, h: int, w: int, depths: tuple[int, ...] = (16, 32, 32),
                 blocks: int = 2):
        super().__init__()
        c_in = channels
        layers: list[nn.Module] = []
        for d in depths:
            layers += [nn.Conv2d(channels, d, 3, padding=1), nn.MaxPool2d(3, 2, padding=1),
                       *(_Residual(d) for _ in range(blocks))]
            channels = d
        self.conv = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n = self.conv(torch.zeros(1, c_in, h, w)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n, 256), nn.ReLU())
        self.out_dim = 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


class MinAtarCNN(nn.Module):
    """The MinAtar paper's torso (Young & Tian 2019): conv 16×3×3/1, then 128 features."""

    def __init__(self, channels: int, h: int, w: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(),
                                  nn.Flatten())
        n = 16 * (h - 2) * (w - 2)
        self.fc = nn.Sequential(nn.Linear(n, 128), nn.ReLU())
        self.out_dim = 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


TORSOS: dict[str, Callable[[int, int, int], NatureCNN | ImpalaCNN | MinAtarCNN]] = {
    "nature-cnn": NatureCNN, "impala-cnn": ImpalaCNN,
    "impala-cnn-no-residual": functools.partial(ImpalaCNN, blocks=0),
    "minatar-cnn": MinAtarCNN}


class Torso(nn.Module):
    """Observation (any dtype, ``[..., *obs_shape]``) → float features ``[..., out_dim]``."""

    def __init__(self, body: nn.Module, obs_shape: tuple[int, ...], obs_dtype: str,
                 out_dim: int, image: bool, flatten: bool | None = None) -> None:
        """``image``: the body takes [B, C, H, W]; ``flatten``: it takes [..., prod(shape)]
        (default: not an image); otherwise it takes [B, *obs_shape] (a user's module)."""
        super().__init__()
        self.body, self.out_dim = body, out_dim
        self.obs_ndim = len(obs_shape)
        self.scale = 1.0 / 255.0 if np.dtype(obs_dtype) == np.uint8 else None
        self.image = image
        self.flatten = (not image) if flatten is None else flatten
        self.permute = image and channels_last(obs_shape)
        self.dtype = next(body.parameters(), torch.zeros(())).dtype

    def _apply(self, fn, recurse: bool = True):  # .double(), .to(device): note the dtype
        out = super()._apply(fn, recurse)
        self.dtype = next(self.body.parameters(), torch.zeros(())).dtype
        return out

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs if obs.dtype == self.dtype else obs.to(self.dtype)
        if self.scale is not None:
            x = x * self.scale
        if self.flatten:  # the MLP on the flattened observation
            return self.body(x.flatten(start_dim=x.dim() - self.obs_ndim))
        lead = x.shape[: x.dim() - self.obs_ndim]
        x = x.reshape(-1, *x.shape[x.dim() - self.obs_ndim:])
        if self.permute:
            x = x.permute(0, 3, 1, 2)
        return self.body(x).reshape(*lead, self.out_dim)


def make_torso(model: str, obs_shape: tuple[int, ...], obs_dtype: str = "<f4",
               hidden: int = 64, num_actions: int | None = None) -> Torso:
    """The torso named by ``--model`` ("auto" follows the observation)."""
    model = check_builtin(model, obs_shape)
    if model == "mlp":
        n = int(np.prod(obs_shape))
        body = nn.Sequential(nn.Linear(n, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                             nn.ReLU())
        return Torso(body, obs_shape, obs_dtype, hidden, image=False)
    if model in TORSOS:
        h, w = image_hw(obs_shape)
        cnn = TORSOS[model](image_channels(obs_shape), h, w)
        return Torso(cnn, obs_shape, obs_dtype, cnn.out_dim, image=True)
    return _user_torso(model, obs_shape, obs_dtype, num_actions)


def _user_torso(spec: str, obs_shape: tuple[int, ...], obs_dtype: str,
                num_actions: int | None) -> Torso:
    """``package.module:factory`` → the user's module, behind the dtype and layout steps."""
    import gymnasium as gym

    if ":" not in spec:
        raise ValueError(f"--model {spec!r}: one of {', '.join(MODELS)}, auto, or "
                         "package.module:factory")
    mod_name, fn_name = spec.split(":", 1)
    try:
        factory = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--model {spec}: cannot load the factory: {e}") from None
    dtype = np.dtype(obs_dtype)
    high = 255 if dtype == np.uint8 else 1 if dtype == np.bool_ else np.inf
    obs_space = gym.spaces.Box(-np.inf if high == np.inf else 0, high, obs_shape, dtype)
    body = factory(obs_space, gym.spaces.Discrete(num_actions or 1))
    if not isinstance(body, nn.Module):
        raise ValueError(f"--model {spec}: the factory returned {type(body).__name__}, "
                         "not a torch.nn.Module")
    with torch.no_grad():
        out = body(torch.zeros(2, *obs_shape))
    if out.dim() != 2 or out.shape[0] != 2:
        raise ValueError(f"--model {spec}: features must be [batch, F], got "
                         f"{tuple(out.shape)} for a batch of 2")
    return Torso(body, obs_shape, obs_dtype, int(out.shape[1]), image=False, flatten=False)


class ActorCritic(nn.Module):
    """A torso with a policy head (action logits) and a value head V(x).

    ReLU, not tanh, in the MLP: torch's CPU tanh is ~20x slower than ReLU on this machine.
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int = 64,
                 model: str = "mlp", obs_dtype: str = "<f4") -> None:
        super().__init__()
        self.torso = make_torso(model, tuple(obs_shape), obs_dtype, hidden, num_actions)
        self.policy = nn.Linear(self.torso.out_dim, num_actions)
        self.value = nn.Linear(self.torso.out_dim, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and values for a batch ``[..., *obs_shape]``."""
        h = self.torso(obs)
        return self.policy(h), self.value(h).squeeze(-1)


def dueling(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Q = V + A − mean_a A: the dueling aggregation (Wang et al. 2016, eq. 9);
    ``value`` [...], ``advantage`` [..., A]."""
    return value.unsqueeze(-1) + advantage - advantage.mean(-1, keepdim=True)


class RecurrentCore(nn.Module):
    """A torso followed by an LSTM core (Hochreiter & Schmidhuber 1997): what the IMPALA
    paper's agent (Espeholt et al. 2018, Fig. 3) and R2D2's network (Kapturowski et al.
    2019) share; subclasses put their heads on the core's output ``h``.

    With ``prev_action_reward`` the core also takes the previous action (one-hot) and
    reward beside the torso's features, as both papers' agents do. The core state is a pair
    ``(h, c)`` of ``[B, core_size]`` tensors. ``first[t]`` marks an observation that starts
    an episode: the state (and the previous action and reward) are multiplied by
    ``1 - first[t]`` before the core sees it, so no memory crosses an episode end, inside an
    unroll as well as between unrolls.
    """

    recurrent = True

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int,
                 model: str, obs_dtype: str, core_size: int, prev_action_reward: bool) -> None:
        super().__init__()
        self.torso = make_torso(model, tuple(obs_shape), obs_dtype, hidden, num_actions)
        self.num_actions, self.core_size = num_actions, core_size
        self.prev_action_reward = prev_action_reward
        extra = num_actions + 1 if prev_action_reward else 0
        self.core = nn.LSTMCell(self.torso.out_dim + extra, core_size)

    def initial_state(self, batch: int, device: torch.device | str = "cpu"
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeros: the state of an episode's first step."""
        z = torch.zeros(batch, self.core_size, device=device)
        return z, z.clone()

    def _step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
              first: torch.Tensor, prev_action: torch.Tensor | None,
              prev_reward: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One core step on features ``x`` [B, F]: reset where ``first``, then the LSTM."""
        keep = (~first.bool()).to(x.dtype).unsqueeze(-1)  # 1 - first, [B, 1]
        h, c = state[0] * keep, state[1] * keep
        if self.prev_action_reward:
            if prev_action is None or prev_reward is None:
                raise ValueError("this core takes the previous action and reward")
            one_hot = nn.functional.one_hot(prev_action.long(), self.num_actions).to(x.dtype)
            x = torch.cat([x, one_hot * keep, prev_reward.to(x.dtype).unsqueeze(-1) * keep], -1)
        return self.core(x, (h, c))

    def core_step(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                  first: torch.Tensor, prev_action: torch.Tensor | None = None,
                  prev_reward: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch ``obs`` [B, *obs_shape]: the state ``(h, c)`` after it."""
        return self._step(self.torso(obs), state, first, prev_action, prev_reward)

    def core_unroll(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                    first: torch.Tensor, prev_action: torch.Tensor | None = None,
                    prev_reward: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Time-major ``obs`` [T, B, *obs_shape], ``first`` [T, B] (and ``prev_action``,
        ``prev_reward`` [T, B]) from the initial ``state``: the core outputs ``h`` [T, B, H]
        and the final state. Step t is :meth:`core_step` on step t's inputs."""
        feats = self.torso(obs)  # [T, B, F], one pass over every step
        outs = []
        for t in range(feats.shape[0]):
            state = self._step(feats[t], state, first[t],
                               None if prev_action is None else prev_action[t],
                               None if prev_reward is None else prev_reward[t])
            outs.append(state[0])
        return torch.stack(outs), state


class RecurrentActorCritic(RecurrentCore):
    """The IMPALA paper's agent (Espeholt et al. 2018, Fig. 3): a torso, an LSTM core
    (:class:`RecurrentCore`) and the two heads on the core's output.

    - :meth:`forward` is one step (what an actor runs while acting):
      ``model(obs, state, first, prev_action, prev_reward) -> (logits, value, new_state)``;
    - :meth:`unroll` runs the torso over ``[T, B, ...]`` at once and the core step by step
      from ``state``, with the same resets (what the learner runs on an unroll).

    ``value_scale``: the value head's output is multiplied by it. The core's output is
    bounded in (-1, 1), so a plain linear head reaches returns of tens (CartPole's V is 10
    to 100 with γ = 0.99) only through weights that Adam grows by about the learning rate
    per update; meanwhile the value loss drives the LSTM's units into saturation (|h| ≈ 1
    everywhere), where its output no longer depends on the observations or the past, and
    the policy stops learning. Under Adam the factor is a learning rate ``value_scale``
    times larger for the value head alone. The paper clips rewards to [-1, 1] on sparse-
    reward tasks, where the values stay small.
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int = 64,
                 model: str = "mlp", obs_dtype: str = "<f4", core_size: int = 64,
                 prev_action_reward: bool = False, value_scale: float = 10.0) -> None:
        super().__init__(obs_shape, num_actions, hidden, model, obs_dtype, core_size,
                         prev_action_reward)
        self.value_scale = value_scale
        self.policy = nn.Linear(core_size, num_actions)
        self.value = nn.Linear(core_size, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                first: torch.Tensor, prev_action: torch.Tensor | None = None,
                prev_reward: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One step for a batch ``obs`` [B, *obs_shape]: logits [B, A], value [B] and the
        state after it."""
        h, c = self.core_step(obs, state, first, prev_action, prev_reward)
        return self.policy(h), self.value(h).squeeze(-1) * self.value_scale, (h, c)

    def unroll(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
               first: torch.Tensor, prev_action: torch.Tensor | None = None,
               prev_reward: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Logits [T, B, A], values [T, B] and the final state over a time-major unroll
        (:meth:`RecurrentCore.core_unroll`'s inputs)."""
        h, state = self.core_unroll(obs, state, first, prev_action, prev_reward)
        return self.policy(h), self.value(h).squeeze(-1) * self.value_scale, state


class RecurrentQNetwork(RecurrentCore):
    """R2D2's network (Kapturowski et al. 2019, §2.3): a torso, an LSTM core
    (:class:`RecurrentCore`) and a dueling head (:func:`dueling`) on the core's output.
    Its Q-values live in the space of the value rescaling h (learners/r2d2.py).

    - :meth:`forward` is one step: ``model(obs, state, first, prev_action, prev_reward)
      -> (q [B, A], new_state)``;
    - :meth:`unroll` is the same over a time-major sequence: ``(q [T, B, A], final state)``.
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: int = 64,
                 model: str = "mlp", obs_dtype: str = "<f4", core_size: int = 64,
                 prev_action_reward: bool = False) -> None:
        super().__init__(obs_shape, num_actions, hidden, model, obs_dtype, core_size,
                         prev_action_reward)
        self.head = nn.Linear(core_size, num_actions)  # the advantage stream A
        self.value = nn.Linear(core_size, 1)

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                first: torch.Tensor, prev_action: torch.Tensor | None = None,
                prev_reward: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, c = self.core_step(obs, state, first, prev_action, prev_reward)
        return dueling(self.value(h).squeeze(-1), self.head(h)), (h, c)

    def unroll(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
               first: torch.Tensor, prev_action: torch.Tensor | None = None,
               prev_reward: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, state = self.core_unroll(obs, state, first, prev_action, prev_reward)
        return dueling(self.value(h).squeeze(-1), self.head(h)), state


M = TypeVar("M", bound=nn.Module)


def expect(model: nn.Module, kind: type[M]) -> M:
    """``model``, checked to be a ``kind`` (a role that needs a recurrent core, say)."""
    if not isinstance(model, kind):
        raise TypeError(f"expected a {kind.__name__} model, got {type(model).__name__}")
    return model


class Weights(Protocol):
    """What policy.pt saves: a model, or anything that gives its ``state_dict()`` (a
    :class:`Locked` model)."""

    def state_dict(self) -> Mapping[str, torch.Tensor]: ...


def cpu_state_dict(model: Weights) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` copied to the CPU: a snapshot that aliases no live tensor."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


class Locked:
    """``model`` read under ``lock`` (the lock that threads stepping its optimiser hold, as
    GA3C's trainers hold the learner's ``step_lock``): ``state_dict()`` is a CPU copy of
    one version of it, never half an update. What a run registers as its policy."""

    def __init__(self, model: nn.Module, lock: Any) -> None:
        self.model, self.lock = model, lock

    def state_dict(self) -> dict[str, torch.Tensor]:
        with self.lock:
            return cpu_state_dict(self.model)


def cpu_optimizer_state(opt: torch.optim.Optimizer) -> dict:
    """``opt.state_dict()`` with every tensor copied to the CPU (the live one aliases the
    optimiser's moment estimates, which the next step changes in place)."""
    def copy(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", copy=True)
        if isinstance(x, dict):
            return {k: copy(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return type(x)(copy(v) for v in x)
        return x
    return copy(opt.state_dict())


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
