"""archzoo: a zoo of parallel actor-learner architectures for deep RL.

From Python: ``archzoo.run(ARCH, **flags)`` runs an architecture and returns its summary;
``archzoo.load_policy(RUN_DIR)`` rebuilds a finished run's policy (see archzoo/api.py).
"""

from archzoo.api import load_policy, run

__version__ = "0.1.0"
__all__ = ["load_policy", "run"]
