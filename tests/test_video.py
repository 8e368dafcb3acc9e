"""Videos (archzoo/video.py): ``archzoo eval RUN_DIR --video FILE.mp4`` films every frame of
its episodes, the env's own render (one at each reset, one after each step);
``archzoo run ... --record-video N`` films the policy during the run and at its end."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import pytest
from runs import cli, load_run

TINY = ["--actors", "0", "--quiet", "--no-tensorboard", "--seed", "0"]
# the run's own env, cut short: a Pong game (ALE counts emulator frames) lasts ~100 steps
PONG_SHORT = '{"max_num_frames_per_episode": 400}'


def decoded(path: Path) -> tuple[int, tuple[int, ...]]:
    """(frames, shape of a frame) of a video, decoding every frame."""
    frames, shape = 0, ()
    with imageio.get_reader(path, format="FFMPEG") as r:
        for frame in r:
            frames, shape = frames + 1, frame.shape
    return frames, shape


def train(d: Path, env: str, *extra: str) -> None:
    r = cli("run", "impala", "--env", env, *TINY, *extra, "--run-dir", str(d))
    assert r.returncode == 0, r.stderr[-3000:]


def eval_video(d: Path, video: Path, episodes: int, *extra: str) -> dict:
    ev = cli("eval", str(d), "--episodes", str(episodes), "--video", str(video), *extra)
    assert ev.returncode == 0, ev.stderr[-3000:]
    res = json.loads(ev.stdout.strip().splitlines()[-1])
    assert res["video"] == str(video) and video.is_file()
    lengths = res["episode_lengths"]
    assert len(lengths) == episodes and all(n >= 1 for n in lengths)
    # one frame at each reset and one after each step
    assert res["video_frames"] == sum(lengths) + episodes
    return res


@pytest.mark.parametrize("env,extra,shape", [
    ("CartPole-v1", ["--total-steps", "2000"], (400, 600, 3)),  # the cart, not 4 numbers
    # the Atari screen (210x160 RGB), not the network's 4x84x84 grayscale stack
    ("ALE/Pong-v5", ["--total-steps", "200", "--envs-per-actor", "2", "--env-kwargs",
                     PONG_SHORT], (210, 160, 3)),
    # MinAtar's 10x10 grid in its palette, scaled up 16 times
    ("MinAtar/Breakout-v1", ["--total-steps", "200", "--envs-per-actor", "2"],
     (160, 160, 3)),
])
def test_eval_video(tmp_path: Path, env: str, extra: list[str],
                    shape: tuple[int, ...]) -> None:
    d = tmp_path / "run"
    train(d, env, *extra)
    episodes = 2 if env == "CartPole-v1" else 1
    res = eval_video(d, tmp_path / "eval.mp4", episodes)
    assert decoded(tmp_path / "eval.mp4") == (res["video_frames"], shape)


def test_eval_video_needs_mp4(tmp_path: Path) -> None:
    ev = cli("eval", str(tmp_path), "--video", str(tmp_path / "x.gif"))
    assert ev.returncode == 2 and "--video" in ev.stderr and ".mp4" in ev.stderr, ev.stderr


def test_eval_max_steps_cuts_episodes(tmp_path: Path) -> None:
    """``archzoo eval --max-steps N`` cuts every episode at N steps (a CartPole episode lasts
    at least 8), and a bad N is a usage error."""
    d = tmp_path / "run"
    train(d, "CartPole-v1", "--total-steps", "500")
    ev = cli("eval", str(d), "--episodes", "3", "--max-steps", "5")
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout.strip().splitlines()[-1])["episode_lengths"] == [5, 5, 5]
    bad = cli("eval", str(d), "--max-steps", "0")
    assert bad.returncode == 2 and "--max-steps must be >= 1" in bad.stderr, bad.stderr


def test_record_video_during_and_at_the_end(tmp_path: Path) -> None:
    d = tmp_path / "run"
    train(d, "CartPole-v1", "--time-limit", "3", "--log-interval", "0.5",
          "--record-video", "1")
    s = load_run(d)
    videos = s["videos"]
    assert "video_error" not in s, s["video_error"]
    # the final policy at the end, named after the run's env steps, after at least one
    # video of the policy during the run (the first metrics row after 1 s starts one)
    assert videos[-1] == f"videos/step-{s['env_steps']}.mp4" and len(videos) >= 2, videos
    assert sorted(p.name for p in (d / "videos").iterdir()) == \
        sorted(Path(v).name for v in videos)  # no policy snapshot left behind
    for v in videos:
        frames, shape = decoded(d / v)
        assert frames >= 2 and shape == (400, 600, 3), (v, frames, shape)
    # the final video is one greedy episode of policy.pt from a reset with the run's seed:
    # the episode that eval plays greedily with that seed
    res = eval_video(d, tmp_path / "again.mp4", 1, "--greedy", "--seed", "0")
    assert decoded(d / videos[-1])[0] == res["video_frames"]


def test_record_video_takes_seconds(capsys) -> None:
    from archzoo.cli import main

    assert main(["run", "impala", "--record-video", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--record-video must be >= 0" in err[0], err


def test_record_video_stopped_by_sigterm(tmp_path: Path) -> None:
    """A run stopped while a background video is filming ends it: no snapshot, no partial
    video and no video process left; summary.json lists only the finished videos."""
    import signal
    import subprocess
    import time

    from runs import ARCHZOO, clean_env
    from test_signals import _left

    d = tmp_path / "run"
    proc = subprocess.Popen(
        [*ARCHZOO, "run", "impala", "--env", "CartPole-v1", *TINY, "--log-interval", "0.2",
         "--record-video", "1", "--total-steps", "100000000", "--run-dir", str(d)],
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.time() + 60
        while not list((d / "videos").glob(".step-*.pt")):  # one is being filmed
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.time() < end, "no video started within 60 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert not _left(d), _left(d)
    s = json.loads((d / "summary.json").read_text())
    assert s["stop_reason"] == "signal: SIGTERM"
    assert sorted(p.name for p in (d / "videos").iterdir()) == \
        sorted(Path(v).name for v in s["videos"]), (s["videos"], s.get("video_error"))
    for v in s["videos"]:
        assert decoded(d / v)[0] >= 2, v
