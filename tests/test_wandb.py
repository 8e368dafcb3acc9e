"""``--wandb`` (archzoo/tracking.py): a run tracked in Weights & Biases beside TensorBoard,
offline where there is no W&B login (this machine has no network). The offline run is read
back from its own files (W&B's record log of protobuf records): the config record is the
resolved config, the history holds each metrics row's scalars against env steps, the same
that TensorBoard gets (archzoo.runlog.scalars), and the summary summary.json's values."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest
from runs import cli

from archzoo.runlog import scalars

pytest.importorskip("wandb")
BLOCK, HEADER = 32768, 7  # W&B's record log: LevelDB's log format, 32 KiB blocks


def records(path: Path) -> list:
    """The records of a W&B run file (``run-ID.wandb``), parsed with W&B's own protobuf."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    out, pos, part = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        if kind == 0:  # padding to the block's end
            pos += left - HEADER
            continue
        chunk, pos = data[pos:pos + n], pos + n
        part = chunk if kind in (1, 2) else part + chunk  # full/first, or middle/last
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(part)
            out.append(r)
    return out


def offline_run(d: Path) -> dict:
    """The offline W&B run under ``d``: its config, history rows and summary."""
    runs = list((d / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, list((d / "wandb").iterdir())
    config, history, summary = {}, [], {}
    for r in records(runs[0]):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                            for i in r.history.item})
        elif kind == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                            for i in r.summary.update})
    return {"config": config, "history": history, "summary": summary, "file": runs[0]}


def test_an_impala_run_is_tracked_offline_with_tensorboards_scalars(tmp_path: Path) -> None:
    d = tmp_path / "run"
    r = cli("run", "impala", "--wandb", "--total-steps", "60000", "--log-interval", "0.5",
            "--quiet", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert f"wandb sync {d / 'wandb'}" in r.stderr, r.stderr  # how to upload it later
    run = offline_run(d)
    resolved = json.loads((d / "config.json").read_text())
    for key in ("arch", "env", "actors", "total_steps", "backend", "seed", "lr", "git_sha"):
        assert run["config"][key] == resolved[key], key
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    logged = [h for h in run["history"] if any(k.startswith("metrics/") for k in h)]
    assert len(logged) == len(rows) >= 1
    for row, h in zip(rows, logged, strict=True):
        assert h["env_steps"] == int(row["env_steps"])
        assert {k: v for k, v in h.items() if k.startswith("metrics/")} == \
            pytest.approx(scalars(row))
    s = json.loads((d / "summary.json").read_text())
    assert run["summary"]["final_mean_return"] == pytest.approx(s["final_mean_return"])
    assert run["summary"]["stop_reason"] == s["stop_reason"] == "steps"


def test_a_resumed_run_may_be_tracked(tmp_path: Path) -> None:
    """--wandb is a logging flag that --resume may give anew: the resumed part is tracked
    with the resumed config, from the checkpoint's steps on."""
    d = tmp_path / "run"
    first = cli("run", "impala", "--actors", "0", "--total-steps", "10000", "--quiet",
                "--no-tensorboard", "--run-dir", str(d))
    assert first.returncode == 0, first.stderr
    before = json.loads((d / "summary.json").read_text())["env_steps"]
    r = cli("run", "--resume", str(d), "--wandb", "--total-steps", "30000", "--log-interval",
            "0.2")
    assert r.returncode == 0, r.stderr
    run = offline_run(d)
    assert run["config"]["resume"] == str(d) and run["config"]["total_steps"] == 30000
    assert run["config"]["wandb"] is True
    rows = [row for row in csv.DictReader(open(d / "metrics.csv"))
            if int(row["env_steps"]) > before]
    logged = [h for h in run["history"] if any(k.startswith("metrics/") for k in h)]
    assert [h["env_steps"] for h in logged] == [int(row["env_steps"]) for row in rows] != []
    s = json.loads((d / "summary.json").read_text())
    assert run["summary"]["env_steps"] == s["env_steps"] >= 30000


def test_the_final_video_is_tracked(tmp_path: Path) -> None:
    pytest.importorskip("imageio_ffmpeg")
    d = tmp_path / "run"
    r = cli("run", "impala", "--actors", "0", "--wandb", "--record-video", "1000",
            "--total-steps", "3000", "--quiet", "--no-tensorboard", "--run-dir", str(d))
    assert r.returncode == 0, r.stderr
    s = json.loads((d / "summary.json").read_text())
    assert s["videos"] == [f"videos/step-{s['env_steps']}.mp4"], s.get("video_error")
    run = offline_run(d)
    video = [h for h in run["history"] if "videos/policy/_type" in h]  # a media file's keys
    assert len(video) == 1 and video[0]["env_steps"] == s["env_steps"]
    assert video[0]["videos/policy/_type"] == "video-file"
    media = run["file"].parent / "files" / video[0]["videos/policy/path"]
    assert media.read_bytes() == (d / s["videos"][0]).read_bytes()


def test_without_the_extra_one_line_names_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys\nsys.modules['wandb'] = None\nfrom archzoo.cli import main\n"
            "sys.exit(main(['run', 'impala', '--wandb', '--actors', '0']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert "--wandb needs archzoo's wandb extra" in err[0]
    assert "pip install 'archzoo[wandb]'" in err[0]
