"""Videos of a policy playing its env: ``archzoo eval RUN_DIR --video out.mp4`` and
``archzoo run ... --record-video N`` (RUN_DIR/videos/step-<env_steps>.mp4).

The frames are the env's own ``render()`` with ``render_mode="rgb_array"``
(archzoo/envs.py): CartPole's cart, MinAtar's grid in its palette (scaled up), the Atari
screen, never the network's preprocessed input. One frame is taken at each reset and one
after each step, so an episode of T steps is T + 1 frames. imageio writes them (H.264 in
an .mp4) through the ffmpeg binary that the imageio-ffmpeg package ships.

``--record-video N`` (:class:`Recorder`): on the deciding rank, at the first metrics row
after every N seconds, the current policy is saved to RUN_DIR/videos/.step-<env_steps>.pt
and a background process (``python -m archzoo.video``, at a lower priority) films one
greedy episode of it and deletes the file, so the training loop only pays for the save.
At the end of the run the final policy (policy.pt) plays one greedy episode, filmed in
the deciding rank after the last background video is written.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from archzoo.policy import load_policy
from archzoo.records import PolicyMeta

if TYPE_CHECKING:
    from archzoo.envs import EnvSpec
    from archzoo.nets import Weights

VIDEO_DIR = "videos"  # in the run directory
MIN_SIDE = 160  # smaller frames (MinAtar's 10x10 grid) are scaled up by a whole factor
RUN_VIDEO_MAX_STEPS = 10_000  # a run's video stops there (a greedy policy may never lose)


@dataclass
class Played:
    """What :func:`play` saw: each episode's return and length (env steps), and how many
    frames went to the video."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    frames: int = 0


class VideoSummary(TypedDict):
    """summary.json's ``videos`` (the run directory's, oldest first) and, if one failed,
    ``video_error``."""
    videos: list[str]
    video_error: NotRequired[str]


def policy_env(meta: dict[str, Any]) -> EnvSpec:
    """The :class:`archzoo.envs.EnvSpec` of the env a policy.pt was trained on (EnvError
    if it cannot be rebuilt)."""
    from archzoo.envs import env_spec

    return env_spec(meta["env"], meta.get("env_kwargs") or {},
                    imports=tuple(meta.get("env_import") or ()))


def _headless() -> None:
    """pygame (CartPole's renderer) without a display or a sound card, and quiet."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


def rgb(frame: Any) -> np.ndarray:
    """A rendered frame as the video's uint8 RGB image: floats in [0, 1] (MinAtar's
    palette) and grayscale widened, small grids scaled up, odd sizes padded to even
    (H.264 in yuv420p needs even sizes)."""
    f = np.asarray(frame)
    if f.dtype.kind in "fb":
        f = np.clip(f.astype(np.float64), 0.0, 1.0) * 255.0 + 0.5
    f = f.astype(np.uint8)
    if f.ndim == 2:
        f = f[..., None]
    if f.shape[-1] != 3:
        f = np.repeat(f[..., :1], 3, axis=-1)
    k = -(-MIN_SIDE // min(f.shape[:2]))
    if k > 1:
        f = f.repeat(k, axis=0).repeat(k, axis=1)
    h, w = f.shape[:2]
    return np.pad(f, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


# gymnasium's env checker on what rgb() and the default frame rate take care of (MinAtar
# renders floats and declares no render_fps)
_HANDLED = r".*(No render fps was declared|RGB-array rendering should return a numpy array)"


def play(policy: Any, spec: Any, episodes: int, seed: int, video: Path | None = None,
         max_steps: int | None = None) -> Played:
    """``policy`` (a batch of observations -> a batch of actions) plays ``episodes``
    episodes of ``spec``'s env (episode k reset with seed ``seed + k``); with ``video``
    every frame of them goes into that file. ``max_steps`` cuts an episode there.
    EnvError if the env cannot be made or rendered."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_HANDLED, category=UserWarning)
        return _play(policy, spec, episodes, seed, video, max_steps)


def _play(policy: Any, spec: Any, episodes: int, seed: int, video: Path | None,
          max_steps: int | None) -> Played:
    from archzoo.envs import EnvError, make_vector_env

    if video is None:
        env = make_vector_env(spec, 1)
    else:
        _headless()
        try:
            env = make_vector_env(spec, 1, render_mode="rgb_array")
        except EnvError:
            raise
        except Exception as e:  # noqa: BLE001 - a missing renderer, a factory without it
            raise EnvError(f"{spec.env_id}: cannot render: {type(e).__name__}: {e}") from None
    played, writer = Played(), None
    try:
        if video is not None:
            writer = _writer(video, float(env.metadata.get("render_fps") or 30))

        def film() -> None:
            if writer is not None:
                try:
                    frame = env.render()[0]
                except Exception as e:  # noqa: BLE001 - e.g. pygame not installed
                    raise EnvError(f"{spec.env_id}: cannot render: {type(e).__name__}: "
                                   f"{e}") from None
                writer.append_data(rgb(frame))
                played.frames += 1

        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            if hasattr(policy, "reset"):  # a recurrent policy: a new episode's state
                policy.reset(1)
            film()
            total, steps, done = 0.0, 0, False
            while not done and (max_steps is None or steps < max_steps):
                obs, r, term, trunc, _ = env.step(policy(obs))
                if hasattr(policy, "observe"):
                    policy.observe(r)
                total += float(r[0])
                steps += 1
                done = bool(term[0] or trunc[0])
                film()
            played.returns.append(total)
            played.lengths.append(steps)
    finally:
        env.close()
        if writer is not None:
            writer.close()
    return played


def _writer(path: Path, fps: float) -> Any:
    """imageio's ffmpeg writer of ``path`` (H.264 for .mp4)."""
    from archzoo.extras import require

    require("video", "a video")
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    return imageio.get_writer(path, format="FFMPEG", fps=fps, macro_block_size=1,
                              ffmpeg_log_level="error")


def record_policy(policy_file: Path, out: Path, seed: int = 0,
                  max_steps: int | None = RUN_VIDEO_MAX_STEPS) -> Played:
    """One greedy episode of the policy in ``policy_file`` (policy.pt, or a snapshot in its
    format), filmed into ``out``."""
    policy = load_policy(policy_file, greedy=True, seed=seed)
    return play(policy, policy_env(policy.meta), 1, seed, out, max_steps)


class Recorder:
    """``--record-video N`` on the deciding rank (see the module's docstring).

    ``policy()`` returns the current (model, policy.pt metadata), or None where the
    deciding rank holds no whole policy while it runs (a parameter server sharded over
    several ranks): then only the end-of-run video is made. A video that fails or is cut
    short leaves no file; summary.json's ``video_error`` says why."""

    def __init__(self, run_dir: Path, interval_s: float, seed: int,
                 policy: Callable[[], tuple[Weights, PolicyMeta] | None]) -> None:
        self.dir = Path(run_dir) / VIDEO_DIR
        self.interval, self.seed, self.policy = interval_s, seed, policy
        self.next_t = time.monotonic() + interval_s
        self.proc: subprocess.Popen | None = None
        self.files: tuple[Path, Path] | None = None  # the background one's snapshot, video
        self.errors: list[str] = []
        self.said_none = False

    def maybe_record(self, env_steps: int) -> None:
        """Start filming the current policy if N seconds have passed and the last video is
        done (the training loop calls this between updates, at its metrics rows)."""
        now = time.monotonic()
        if now < self.next_t:
            return
        self.next_t = now + self.interval
        if self.proc is not None and self.proc.poll() is None:
            return  # still filming the last one: skip this one
        self._reap()
        got = self.policy()
        if got is None:
            if not self.said_none:
                self.said_none = True
                print("archzoo: --record-video: this architecture's deciding rank holds no "
                      "whole policy while it runs; only the end-of-run video is made",
                      file=sys.stderr, flush=True)
            return
        import torch

        from archzoo.nets import cpu_state_dict

        model, meta = got
        self.dir.mkdir(parents=True, exist_ok=True)
        snapshot, out = self.dir / f".step-{env_steps}.pt", self.dir / f"step-{env_steps}.mp4"
        self.files = (snapshot, out)  # first: a stop signal from here on leaves no snapshot
        torch.save({"state_dict": cpu_state_dict(model), "meta": meta}, snapshot)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "archzoo.video", str(snapshot), str(out),
             "--seed", str(self.seed), "--nice", "10", "--remove-policy"],
            stdout=subprocess.DEVNULL)

    def _reap(self, error: str | None = None) -> None:
        """The background video has ended (or was stopped, ``error``): a failed one leaves
        neither its snapshot nor its partial video, only an entry in ``errors``."""
        if self.proc is None or self.files is None:
            return
        code = self.proc.returncode
        if error is None and code:
            error = f"exit code {code}"
        if error is not None:
            for f in self.files:
                f.unlink(missing_ok=True)
            self.errors.append(f"{self.files[1].name}: {error}")
        self.proc, self.files = None, None

    def _stop(self, timeout_s: float, error: str) -> None:
        """Wait up to ``timeout_s`` for the background video, then end it."""
        if self.proc is None:  # stopped before the child started: its snapshot goes too
            for f in self.files or ():
                f.unlink(missing_ok=True)
            self.files = None
            return
        try:
            self.proc.wait(timeout=timeout_s)
            self._reap()
            return
        except subprocess.TimeoutExpired:
            pass
        self.proc.terminate()  # the child closes its video and deletes its snapshot
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reap(error)

    def abort(self) -> None:
        """A failed or stopped run: end the background video at once, leaving no partial
        file (the run's summary lists only the videos already made)."""
        self._stop(0, "stopped with the run")

    def finish(self, policy_file: Path, env_steps: int) -> VideoSummary:
        """The end of the run: wait for the background video, film the final policy;
        summary.json's ``videos`` (the run directory's, oldest first), and
        ``video_error`` if one failed."""
        self._stop(120, "still filming after 120 s: killed")
        out = self.dir / f"step-{env_steps}.mp4"
        try:
            record_policy(policy_file, out, self.seed)
        except BaseException as e:  # a video must not fail a finished run
            out.unlink(missing_ok=True)
            if not isinstance(e, Exception):
                raise  # a stop signal: the caller gives up on videos
            self.errors.append(f"{out.name}: {type(e).__name__}: {e}")
        return self.summary()

    def summary(self) -> VideoSummary:
        """summary.json's ``videos`` and, if one failed, ``video_error``."""
        s: VideoSummary = {"videos": self.videos()}
        if self.errors:
            s["video_error"] = "; ".join(self.errors)
        return s

    def videos(self) -> list[str]:
        files = sorted(self.dir.glob("step-*.mp4"), key=lambda p: int(p.stem.split("-")[1]))
        return [f"{VIDEO_DIR}/{p.name}" for p in files]


def main(argv: list[str] | None = None) -> int:
    """``python -m archzoo.video POLICY OUT.mp4``: film one greedy episode (what
    :class:`Recorder` runs in the background)."""
    p = argparse.ArgumentParser(prog="python -m archzoo.video",
                                description="film one greedy episode of a policy file")
    p.add_argument("policy", help="policy.pt, or a snapshot in its format")
    p.add_argument("out", help="the video file (.mp4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nice", type=int, default=0, help="lower this process's priority by")
    p.add_argument("--remove-policy", action="store_true", help="delete POLICY afterwards")
    args = p.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    # stopped by the run (Recorder.abort): close the video and delete POLICY on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    import torch

    torch.set_num_threads(1)
    try:
        played = record_policy(Path(args.policy), Path(args.out), args.seed)
    finally:
        if args.remove_policy:
            Path(args.policy).unlink(missing_ok=True)
    print(f"{args.out}: {played.frames} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
