"""Flat-vector optimizers for a parameter-server shard.

Each optimizer owns the state of one slice of the flat parameter vector and updates it
elementwise in float32, one correctly rounded operation at a time (multiply, add, divide,
square root; no fused multiply-add, no reduction across the vector, no transcendental
function). So K shards that each step their own slice give bit-for-bit the result of one
shard stepping the whole vector (Gorila's sharded parameter server, Nair et al. 2015, is
then exactly the unsharded one).

- :class:`SharedRMSProp`: A3C's optimizer (Mnih et al. 2016, supplementary §S3 "shared
  RMSProp"): the running average g of squared gradients lives with the parameters, so on a
  parameter server it is shared by every actor-learner by construction.
- :class:`Adam` (Kingma & Ba 2015, Algorithm 1), with its bias correction.

``step(params, grad)`` takes a numpy array or a CPU torch tensor (updated in place through a
zero-copy numpy view); ``grad`` is the gradient *of the loss* and the step descends (Mnih et
al.'s Algorithm S3 accumulates the policy's dθ as a gradient of the objective, to be ascended;
archzoo's clients push gradients of the loss, see :func:`archzoo.learners.a2c.a2c_gradient`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

F32 = np.float32


def as_f32(x: object, what: str = "array") -> np.ndarray:
    """A float32 numpy view of ``x`` (numpy array or CPU torch tensor), never a copy."""
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor (CPU)
        arr = np.asarray(x.detach().numpy())  # the tensor's own array: no copy
    else:
        raise TypeError(f"{what}: expected a numpy array or torch tensor, got {type(x)}")
    if arr.dtype != np.float32:
        raise TypeError(f"{what}: expected float32, got {arr.dtype}")
    return arr


class FlatOptimizer(Protocol):
    """What a shard needs: an in-place elementwise update of its slice."""

    steps: int
    lr: np.float32

    def step(self, params: object, grad: object) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class _Elementwise:
    """State arrays created on the first step, sized like that slice."""

    def __init__(self) -> None:
        self.steps = 0
        self.size: int | None = None

    def _check(self, params: object, grad: object) -> tuple[np.ndarray, np.ndarray]:
        p, g = as_f32(params, "params"), as_f32(grad, "grad")
        if p.shape != g.shape or p.ndim != 1:
            raise ValueError(f"params {p.shape} and grad {g.shape} must be equal 1-D slices")
        if self.size is None:
            self.size = p.size
            self._init_state(p.size)
        elif p.size != self.size:
            raise ValueError(f"this optimizer holds the state of {self.size} parameters, "
                             f"got a slice of {p.size}")
        return p, g

    def _init_state(self, n: int) -> None:
        raise NotImplementedError

    STATE: tuple[str, ...] = ()  # the names of the per-parameter state arrays

    def state_dict(self) -> dict[str, Any]:
        """Step count and state arrays (as tensors), for a checkpoint."""
        import torch

        return {"steps": self.steps, "size": self.size,
                **{k: torch.from_numpy(getattr(self, k).copy()) for k in self.STATE}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, size = int(state["steps"]), state["size"]
        if size is not None:
            self.size = int(size)
            self._init_state(self.size)
            for k in self.STATE:
                getattr(self, k)[:] = state[k].numpy()


class SharedRMSProp(_Elementwise):
    """A3C's shared RMSProp (Mnih et al. 2016, §S3), elementwise on a float32 slice::

        g ← α g + (1 − α) Δθ²
        θ ← θ − η Δθ / √(g + ε)

    The exact float32 operation order, which a reference must follow to match bits::

        tmp = Δθ·Δθ;  tmp = tmp·(1−α);  g = g·α;  g = g + tmp
        den = √(g + ε);  num = Δθ·η;  num = num / den;  θ = θ − num
    """

    STATE = ("square_avg",)

    def __init__(self, lr: float, alpha: float = 0.99, eps: float = 0.1) -> None:
        super().__init__()
        if lr <= 0 or not 0 <= alpha < 1 or eps <= 0:
            raise ValueError(f"SharedRMSProp: bad lr={lr}, alpha={alpha}, eps={eps}")
        self.lr, self.alpha, self.eps = F32(lr), F32(alpha), F32(eps)
        self.one_minus_alpha = F32(1.0 - alpha)
        self.square_avg = np.zeros(0, F32)

    def _init_state(self, n: int) -> None:
        self.square_avg = np.zeros(n, F32)
        self._tmp = np.empty(n, F32)
        self._num = np.empty(n, F32)

    def step(self, params: object, grad: object) -> None:
        p, g = self._check(params, grad)
        s, tmp, num = self.square_avg, self._tmp, self._num
        np.multiply(g, g, out=tmp)
        np.multiply(tmp, self.one_minus_alpha, out=tmp)
        np.multiply(s, self.alpha, out=s)
        np.add(s, tmp, out=s)
        np.add(s, self.eps, out=tmp)
        np.sqrt(tmp, out=tmp)
        np.multiply(g, self.lr, out=num)
        np.divide(num, tmp, out=num)
        np.subtract(p, num, out=p)
        self.steps += 1


class Adam(_Elementwise):
    """Adam (Kingma & Ba 2015, Algorithm 1), elementwise on a float32 slice::

        m ← β₁ m + (1 − β₁) g;   v ← β₂ v + (1 − β₂) g²
        θ ← θ − η m̂ / (√v̂ + ε),  m̂ = m / (1 − β₁ᵗ),  v̂ = v / (1 − β₂ᵗ)

    ``t`` counts this optimizer's steps; the bias corrections are computed in float64 and
    rounded to float32 once. The float32 operation order::

        tmp = g·(1−β₁);  m = m·β₁;  m = m + tmp
        tmp = g·g;  tmp = tmp·(1−β₂);  v = v·β₂;  v = v + tmp
        num = m / c₁;  num = num·η;  den = v / c₂;  den = √den;  den = den + ε
        num = num / den;  θ = θ − num
    """

    STATE = ("exp_avg", "exp_avg_sq")

    def __init__(self, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        super().__init__()
        b1, b2 = betas
        if lr <= 0 or not (0 <= b1 < 1 and 0 <= b2 < 1) or eps <= 0:
            raise ValueError(f"Adam: bad lr={lr}, betas={betas}, eps={eps}")
        self.lr, self.eps = F32(lr), F32(eps)
        self.beta1, self.beta2 = float(b1), float(b2)
        self.b1, self.b2 = F32(b1), F32(b2)
        self.one_minus_b1, self.one_minus_b2 = F32(1.0 - b1), F32(1.0 - b2)
        self.exp_avg = np.zeros(0, F32)
        self.exp_avg_sq = np.zeros(0, F32)

    def _init_state(self, n: int) -> None:
        self.exp_avg = np.zeros(n, F32)
        self.exp_avg_sq = np.zeros(n, F32)
        self._tmp = np.empty(n, F32)
        self._num = np.empty(n, F32)

    def bias_corrections(self, t: int) -> tuple[np.float32, np.float32]:
        return F32(1.0 - self.beta1 ** t), F32(1.0 - self.beta2 ** t)

    def step(self, params: object, grad: object) -> None:
        p, g = self._check(params, grad)
        m, v, tmp, num = self.exp_avg, self.exp_avg_sq, self._tmp, self._num
        c1, c2 = self.bias_corrections(self.steps + 1)
        np.multiply(g, self.one_minus_b1, out=tmp)
        np.multiply(m, self.b1, out=m)
        np.add(m, tmp, out=m)
        np.multiply(g, g, out=tmp)
        np.multiply(tmp, self.one_minus_b2, out=tmp)
        np.multiply(v, self.b2, out=v)
        np.add(v, tmp, out=v)
        np.divide(m, c1, out=num)
        np.multiply(num, self.lr, out=num)
        np.divide(v, c2, out=tmp)
        np.sqrt(tmp, out=tmp)
        np.add(tmp, self.eps, out=tmp)
        np.divide(num, tmp, out=num)
        np.subtract(p, num, out=p)
        self.steps += 1


def make_optimizer(name: str, lr: float, **kwargs: Any) -> SharedRMSProp | Adam:
    """``rmsprop`` (A3C's shared RMSProp) or ``adam``, by name (for ``--ps-optimizer``)."""
    if name == "rmsprop":
        return SharedRMSProp(lr, **kwargs)
    if name == "adam":
        return Adam(lr, **kwargs)
    raise ValueError(f"unknown optimizer {name!r} (choose rmsprop or adam)")
