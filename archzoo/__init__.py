"""archzoo: a zoo of parallel actor-learner architectures for deep RL.

From Python: ``archzoo.run(ARCH, **flags)`` runs an architecture and returns its summary
(archzoo/api.py); ``archzoo.load_policy(RUN_DIR)`` rebuilds a finished run's policy
(archzoo/policy.py).
Both modules are loaded on first use, so importing the package (every rank does) stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_policy", "run"]


def run(arch: str, **flags: Any) -> dict[str, Any]:
    """``archzoo run ARCH`` from Python: see :func:`archzoo.api.run`."""
    from archzoo import api

    return api.run(arch, **flags)


def load_policy(run_dir: Any, greedy: bool = False, seed: int = 0) -> Any:
    """A finished run's policy, ready to act: see :func:`archzoo.policy.load_policy`."""
    from archzoo import policy

    return policy.load_policy(run_dir, greedy, seed)
