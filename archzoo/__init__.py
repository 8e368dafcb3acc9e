"""archzoo: a zoo of parallel actor-learner architectures for deep RL.

From Python: ``archzoo.run(ARCH, **flags)`` runs an architecture and returns its summary
(archzoo/api.py); ``archzoo.load_policy(RUN_DIR)`` rebuilds a finished run's policy
(archzoo/policy.py).
Both modules are loaded on first use, so importing the package (every rank does) stays light.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from pathlib import Path
    from types import ModuleType

    from archzoo.policy import Policy

__version__ = "0.1.0"
__all__ = ["load_policy", "run"]

COMPONENTS = ("actors", "learners", "replay", "paramserver")
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.dirname(_HERE)


class _CheckoutComponents(importlib.abc.MetaPathFinder):
    """In a source checkout the components are the folders next to this package
    (actors/, learners/, ...), imported as ``archzoo.actors`` and so on. Installed, they
    are subpackages (pyproject.toml's package-dir); in a checkout this finder makes
    ``archzoo.actors`` the checkout's own folder, whichever checkout ``pip install -e``
    pointed at: a second worktree on ``PYTHONPATH`` (a benchmark of two revisions) runs
    its own components, not the installed one's."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        pkg, _, name = fullname.partition(".")
        if pkg != __name__ or name not in COMPONENTS:
            return None
        folder = os.path.join(_CHECKOUT, name)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


if not os.path.isdir(os.path.join(_HERE, "actors")) and \
        os.path.isfile(os.path.join(_CHECKOUT, "actors", "__init__.py")):
    sys.meta_path.insert(0, _CheckoutComponents())


def run(arch: str, **flags: Any) -> dict[str, Any]:
    """``archzoo run ARCH`` from Python: see :func:`archzoo.api.run`."""
    from archzoo import api

    return api.run(arch, **flags)


def load_policy(run_dir: str | Path, greedy: bool = False, seed: int = 0) -> Policy:
    """A finished run's policy, ready to act: see :func:`archzoo.policy.load_policy`."""
    from archzoo import policy

    return policy.load_policy(run_dir, greedy, seed)
