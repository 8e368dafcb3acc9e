"""Where a benchmark record came from: the code (commit, and whether the tree had changes),
the libraries, and the machine.

:func:`provenance` is what every appended record carries (archzoo/study.py's scaling points,
the learning benchmark's records), so that a page generated from the records can say which
commit and which machine each number is from.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

_CHECKOUT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                             cwd=_CHECKOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def commit() -> tuple[str | None, bool | None]:
    """The checkout's HEAD and whether its tracked files differ from it (None, None outside
    a git checkout)."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return sha.strip(), (bool(status.strip()) if status is not None else None)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    """Python, archzoo, torch, numpy and gymnasium (and mpi4py when installed)."""
    import gymnasium
    import numpy
    import torch

    import archzoo

    v = {"python": platform.python_version(), "archzoo": archzoo.__version__,
         "torch": torch.__version__, "numpy": numpy.__version__,
         "gymnasium": gymnasium.__version__}
    try:
        import mpi4py

        v["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    return v


def provenance() -> dict[str, Any]:
    """commit, dirty, versions, cpu_count, cpu_model, hostname and start_time (ISO 8601, UTC)
    of this process, as a plain dict for a JSON record."""
    sha, dirty = commit()
    return {"commit": sha, "dirty": dirty, "versions": versions(),
            "cpu_count": os.cpu_count(), "cpu_model": cpu_model(),
            "hostname": socket.gethostname(),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
