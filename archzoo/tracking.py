"""Weights & Biases beside TensorBoard: ``archzoo run ARCH --wandb`` (archzoo's wandb extra).

The deciding rank's run directory (archzoo/runlog.py) hands the tracker what it writes: the
resolved config (config.json's contents) once, each metrics row's scalars, the same ones
TensorBoard gets (``metrics/COLUMN``, plotted against ``env_steps``), summary.json's values
as the run's W&B summary, and with ``--record-video`` the videos of the run, the final
policy's last, as ``videos/policy``. This is what cleanRL's ``--track`` and Sample Factory's
``--with_wandb`` log.

The W&B run lives in ``RUN_DIR/wandb/``. It is online only where W&B can be reached with
a key (``wandb login`` or ``WANDB_API_KEY``); without a key it is written offline, with no
network traffic at all, and uploaded later with ``wandb sync RUN_DIR/wandb/offline-run-*``.
``WANDB_MODE`` (online, offline, disabled), ``WANDB_PROJECT`` (default "archzoo"),
``WANDB_ENTITY`` and W&B's other variables are W&B's own.
"""

from __future__ import annotations

import netrc
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from archzoo.records import JSONObject, Summary

PROJECT = "archzoo"
VIDEO_KEY = "videos/policy"


def mode() -> str:
    """``WANDB_MODE`` if set; else online where an API key is known, offline otherwise."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if _has_key() else "offline"


def _has_key() -> bool:
    """Whether ``wandb login`` (a ~/.netrc entry for the W&B host) or ``WANDB_API_KEY``
    gave this user an API key; looked up locally, never over the network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbRun:
    """One W&B run of an archzoo run directory (rank 0's)."""

    def __init__(self, run_dir: Path, config: JSONObject) -> None:
        import wandb

        self.wandb, self.run_dir = wandb, Path(run_dir)
        self.mode = mode()
        self._videos_logged: set[str] = set()
        self._videos: list[str] = []
        settings: dict[str, Any] = dict(silent=True, console="off", save_code=False,
                                        disable_git=True, x_disable_stats=True)
        try:
            ws = wandb.Settings(**settings)
        except (TypeError, ValueError):  # a wandb without one of the newer settings
            ws = wandb.Settings(silent=True, console="off")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT),
                              name=self.run_dir.name, dir=str(self.run_dir),
                              mode=self.mode,  # type: ignore[arg-type]  # wandb checks it
                              group=str(config.get("arch", "")) or None,
                              config=config, settings=ws)
        self.run.define_metric("env_steps")
        self.run.define_metric("metrics/*", step_metric="env_steps")
        self.run.define_metric(VIDEO_KEY, step_metric="env_steps")

    def scalars(self, env_steps: int, values: dict[str, float]) -> None:
        """One metrics row's scalars (TensorBoard's), against ``env_steps``."""
        self.run.log({"env_steps": env_steps, **values})

    def summary(self, summary: Summary) -> None:
        """summary.json's values as the run's summary; its ``videos`` are logged at the end."""
        self.run.summary.update({k: v for k, v in summary.items() if k != "videos"})
        videos = summary.get("videos")
        self._videos = [str(v) for v in videos] if isinstance(videos, list) else []

    def close(self) -> None:
        """Log the run's videos (the final policy's last), end the W&B run and, offline, say
        how to upload it."""
        for rel in self._videos:
            path = self.run_dir / rel
            if rel in self._videos_logged or not path.is_file():
                continue
            steps = path.stem.rpartition("-")[2]
            self.run.log({"env_steps": int(steps) if steps.isdigit() else 0,
                          VIDEO_KEY: self.wandb.Video(str(path), format="mp4")})
            self._videos_logged.add(rel)
        where = Path(self.run.dir).parent  # RUN_DIR/wandb/offline-run-TIME-ID
        self.run.finish()
        if self.mode == "offline":
            print(f"archzoo: W&B run kept offline in {where}; upload it with: wandb sync "
                  f"{where}", file=sys.stderr, flush=True)


def start(run_dir: Path, config: JSONObject) -> WandbRun | None:
    """The run directory's W&B run, or None (one line on stderr) where W&B cannot start:
    a run is not given up for its tracking."""
    try:
        return WandbRun(run_dir, config)
    except Exception as e:  # noqa: BLE001 - W&B's own errors are many; the run goes on
        print(f"archzoo: --wandb: W&B did not start ({type(e).__name__}: {e}); the run goes "
              "on without it", file=sys.stderr, flush=True)
        return None
