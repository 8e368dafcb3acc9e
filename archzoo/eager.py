"""Torch's optimizers in eager mode, without importing torch._dynamo.

torch.optim guards ``Optimizer.step`` (``_use_grad_for_differentiable``) and
``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict``
(``torch._disable_dynamo``) for torch.compile, and each guard imports torch._dynamo the
first time it runs. That import costs more CPU than ``import torch`` itself (2.1 s against
1.9 s on the 2-core machine), in every rank that trains. archzoo never compiles, so its
learners make and step their optimizers here:

- :func:`optimizer` builds one after :func:`unguard`, which resolves the four methods'
  guards to the plain methods, through the cache each guard keeps for itself (once per
  process);
- :func:`step` runs the optimizer's own update under ``torch.no_grad()``, which is what the
  guard sets for an optimizer that is not ``differentiable``, past the step hooks and the
  profiler's label (archzoo registers no hooks).

The updates are bit for bit those of ``opt.step()`` (tests/test_eager.py). Where a torch
keeps no such guards, both fall back to torch's own calls.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

GUARDED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def unguard() -> None:
    """Resolve the guards of :data:`GUARDED` to the plain methods, as the first call of each
    would after importing torch._dynamo (a no-op once done, or where they are unguarded)."""
    for name in GUARDED:
        plain = getattr(getattr(torch.optim.Optimizer, name), "__wrapped__", None)
        if plain is not None and getattr(plain, "__dynamo_disable", None) is None:
            setattr(plain, "__dynamo_disable", plain)


def optimizer(cls: type[torch.optim.Optimizer], params: Any, **kwargs: Any
              ) -> torch.optim.Optimizer:
    """``cls(params, **kwargs)``, its guarded methods resolved (:func:`unguard`)."""
    unguard()
    return cls(params, **kwargs)


def step(opt: torch.optim.Optimizer) -> None:
    """One update of ``opt`` (``opt.step()`` without its torch.compile guard)."""
    plain = inspect.unwrap(type(opt).step)
    if plain is type(opt).step or opt.defaults.get("differentiable", False):
        opt.step()
        return
    with torch.no_grad():
        plain(opt)
