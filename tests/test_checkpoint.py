"""Checkpoints and --resume: the file format, the parts' state, resumed runs, failed runs."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from archzoo import checkpoint
from archzoo.runlog import Monitor
from tests.mp import describe, run_mpi
from tests.runs import ARCHZOO, clean_env, cli, kill_tree, rank_pid

FAST = ["--envs-per-actor", "4", "--log-interval", "0.3", "--checkpoint-interval", "0.5",
        "--quiet", "--seed", "1"]


# -- the file -----------------------------------------------------------------------------

def test_save_is_atomic_keeps_the_last_k_and_loads_weights_only(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        checkpoint.save(tmp_path, {"arch": "x", "w": torch.full((3,), float(step)),
                                   "n": step, "names": ["a", None]}, step, keep=2)
    names = [p.name for p in checkpoint.list_checkpoints(tmp_path)]
    assert names == ["ckpt-000000000030.pt", "ckpt-000000000040.pt"]
    assert not [p for p in checkpoint.checkpoint_dir(tmp_path).iterdir()
                if p.name.startswith(".")]  # no temporary file left behind
    raw = torch.load(checkpoint.latest(tmp_path), weights_only=True)  # no archzoo needed
    assert raw["format"] == checkpoint.FORMAT and raw["n"] == 40
    assert torch.equal(checkpoint.load(checkpoint.latest(tmp_path))["w"], torch.full((3,), 40.0))


def test_load_refuses_other_versions_and_garbage(tmp_path: Path) -> None:
    p = tmp_path / "old.pt"
    torch.save({"format": checkpoint.FORMAT, "format_version": 0}, p)
    with pytest.raises(checkpoint.CheckpointError, match="format version 0"):
        checkpoint.load(p)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="cannot read"):
        checkpoint.load(tmp_path / "junk.pt")
    torch.save({"w": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(checkpoint.CheckpointError, match="not an archzoo checkpoint"):
        checkpoint.load(tmp_path / "other.pt")


def test_rng_state_round_trips_through_a_file(tmp_path: Path) -> None:
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    checkpoint.save(tmp_path, {"rng": checkpoint.rng_state()}, 1, keep=1)
    expected = (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)])
    checkpoint.set_rng_state(checkpoint.load(checkpoint.latest(tmp_path))["rng"])
    got = (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)])
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1])
    assert expected[2] == got[2]


def test_monitor_goes_on_from_its_state() -> None:
    a = Monitor(None, 100.0, 10_000, 60.0, 1.0, "x", quiet=True, window=3)
    a.add_steps(500, time.time() - 5.0)
    a.add_episodes([1.0, 2.0, 3.0, 4.0])
    a.add_lag(2.0)
    a.updates = 7
    b = Monitor(None, 100.0, 10_000, 60.0, 1.0, "x", quiet=True, window=3)
    b.load_state_dict(a.state_dict())
    assert (b.env_steps, b.episodes, b.updates, list(b.returns)) == (500, 4, 7, [2.0, 3.0, 4.0])
    assert b.lag_mean == 2.0 and b.elapsed() == pytest.approx(a.elapsed(), abs=0.5)


def test_a_learner_restored_from_its_state_takes_the_same_next_step() -> None:
    from archzoo import builders
    from archzoo.actors.unroll import UnrollActor, unroll_schema
    from archzoo.config import ImpalaConfig

    cfg = ImpalaConfig(arch="impala", device="cpu", seed=0, envs_per_actor=2, unroll_length=8)
    spec = builders.env_spec(cfg)
    torch.manual_seed(0)
    actor = UnrollActor(spec, 2, 8, builders.actor_critic(cfg, spec), seed=5)
    unrolls = []
    for _ in range(3):
        unrolls.append(unroll_schema(spec, 8, 2).new())
        actor.collect(unrolls[-1])
    actor.close()
    a = builders.vtrace_learner(cfg, spec)
    a.update(unrolls[:2])
    b = builders.vtrace_learner(cfg, spec)
    b.load_state_dict(a.state_dict())
    assert b.version == a.version == 1
    a.update(unrolls[2:])
    b.update(unrolls[2:])
    for (k, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                         strict=True):
        assert torch.equal(x, y), k


@pytest.mark.parametrize("name", ["rmsprop", "adam"])
def test_a_parameter_shard_restored_from_its_state_takes_the_same_next_step(
        tmp_path: Path, name: str) -> None:
    from archzoo.paramserver import make_optimizer
    from archzoo.paramserver.shard import ShardState

    rng = np.random.default_rng(0)
    grads = rng.normal(size=(3, 50)).astype(np.float32)
    a = ShardState(rng.normal(size=50).astype(np.float32), make_optimizer(name, 0.01), [1])
    for g in grads[:2]:
        a.push(1, a.version, g)
    checkpoint.save(tmp_path, {"ps": a.state_dict()}, 0, keep=1)
    saved = checkpoint.load(checkpoint.latest(tmp_path))["ps"]
    b = ShardState(np.zeros(50, np.float32), make_optimizer(name, 0.01), [1])
    b.load_state_dict(saved)
    assert b.version == a.version == 2
    a.push(1, a.version, grads[2])
    b.push(1, b.version, grads[2])
    assert np.array_equal(a.params, b.params)


# -- runs ---------------------------------------------------------------------------------

def _summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def _metrics(d: Path) -> list[dict]:
    return list(csv.DictReader(open(d / "metrics.csv")))


# SEED RL is resumed under mpiexec below; Gorila's server is A3C's (harness/ps_roles.py)
@pytest.mark.parametrize("arch,actors", [("impala", "2"), ("apex", "0"), ("ga3c", "0"),
                                         ("a3c", "2"), ("gala", "2")])
def test_resume_goes_on_from_the_last_checkpoint(tmp_path: Path, arch: str, actors: str) -> None:
    d = tmp_path / "run"
    r = cli("run", arch, "--actors", actors, "--total-steps", "10000", "--run-dir", str(d),
            *FAST)
    assert r.returncode == 0, r.stderr
    first = _summary(d)
    assert first["checkpoints"]["saved"] >= 1 and first["checkpoints"]["resumed_from"] is None
    r = cli("run", "--resume", str(d), "--total-steps", "20000", "--quiet")
    assert r.returncode == 0, r.stderr
    s = _summary(d)
    assert s["checkpoints"]["resumed_from"]["env_steps"] == first["env_steps"]
    assert s["checkpoints"]["resumed_from"]["updates"] == first["learner_updates"]
    assert s["env_steps"] >= 20000 and s["learner_updates"] > first["learner_updates"]
    assert s["episodes"] > first["episodes"] and s["wall_s"] > first["wall_s"]
    rows = _metrics(d)  # one header, and both parts of the run in order
    steps = [int(r["env_steps"]) for r in rows]
    times = [float(r["time_s"]) for r in rows]
    assert steps == sorted(steps) and times == sorted(times) and steps[-1] == s["env_steps"]
    assert first["env_steps"] in steps
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["total_steps"] == 20000 and cfg["resume"] == str(d)


def test_resume_refuses_bad_input(tmp_path: Path) -> None:
    d = tmp_path / "run"
    assert cli("run", "impala", "--actors", "0", "--total-steps", "3000", "--run-dir", str(d),
               *FAST).returncode == 0
    for args, words in [(["--resume", str(d), "--lr", "0.1"], "takes --lr"),
                        (["--resume", str(tmp_path / "none")], "no config.json"),
                        (["apex", "--resume", str(d)], "that run is 'impala'")]:
        r = cli("run", *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
    r = cli("run", "impala", "--run-dir", str(d))  # never into another run's directory
    assert r.returncode == 2 and "is not empty" in r.stderr and f"--resume {d}" in r.stderr
    (tmp_path / "file").write_text("x")
    r = cli("run", "impala", "--run-dir", str(tmp_path / "file"))
    assert r.returncode == 2 and "not a directory" in r.stderr, r.stderr
    latest = checkpoint.latest(d)
    before = {p.name: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    good = latest.read_bytes()
    latest.write_bytes(good[: len(good) // 2])  # truncated
    r = cli("run", "--resume", str(d))
    assert r.returncode == 2 and "cannot read it" in r.stderr, r.stderr
    state = torch.load(io.BytesIO(good), weights_only=True)
    state["env"] = "Acrobot-v1"  # a checkpoint of another env
    torch.save(state, latest)
    r = cli("run", "--resume", str(d))
    assert r.returncode == 2 and "of env 'Acrobot-v1'" in r.stderr, r.stderr
    after = {p.name: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k != latest.name} == \
        {k: v for k, v in before.items() if k != latest.name}  # nothing else written
    for p in checkpoint.list_checkpoints(d):
        p.unlink()
    r = cli("run", "--resume", str(d))
    assert r.returncode == 2 and "no checkpoint" in r.stderr, r.stderr


def test_a_killed_actor_leaves_a_run_to_resume(tmp_path: Path) -> None:
    """Sync IMPALA cannot go on without an actor: the run fails naming the rank, but rank 0
    keeps a checkpoint, policy.pt and summary.json, and --resume continues it to the
    target return."""
    d = tmp_path / "run"
    proc = subprocess.Popen([*ARCHZOO, "run", "impala", "--mode", "sync", "--actors", "2",
                             "--time-limit", "120", "--comm-timeout", "10", "--run-dir", str(d),
                             *FAST], env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        victim = rank_pid(d, 2)
        end = time.time() + 60
        while not checkpoint.list_checkpoints(d) and time.time() < end:
            time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc, str(d))
    assert proc.returncode != 0 and "rank 2" in err, err
    s = _summary(d)
    assert s["stop_reason"].startswith("error:") and "rank 2" in s["stop_reason"]
    assert (d / "policy.pt").is_file() and s["checkpoints"]["latest"]
    r = cli("run", "--resume", str(d), "--time-limit", "300", "--target-return", "150")
    assert r.returncode == 0, r.stderr
    end = _summary(d)
    assert end["checkpoints"]["resumed_from"]["env_steps"] == s["env_steps"]
    assert end["stop_reason"] == "target" and end["final_mean_return"] >= 150


def test_resume_under_mpiexec_a_run_made_embedded(tmp_path: Path) -> None:
    d = tmp_path / "run"
    assert cli("run", "seed", "--actors", "2", "--total-steps", "10000", "--run-dir", str(d),
               *FAST).returncode == 0
    first = _summary(d)
    job = run_mpi(3, ["-m", "archzoo", "run", "--resume", str(d), "--total-steps", "20000"],
                  timeout_s=180)
    assert job.returncode == 0, describe(job)
    s = _summary(d)
    assert s["launcher"] == "mpiexec" and s["backend"] == "mpi"
    assert s["checkpoints"]["resumed_from"]["updates"] == first["learner_updates"]


def _policy(d: Path) -> dict[str, torch.Tensor]:
    return torch.load(d / "policy.pt", weights_only=True)["state_dict"]


def test_a_resumed_sync_run_goes_on_bit_for_bit(tmp_path: Path) -> None:
    """Sync IMPALA with --seed, stopped at 3000 steps and resumed to 6000 (embedded, and a
    copy under mpiexec), ends with the very parameters and counts of the run that went to
    6000 at once: the learner, optimizer and Monitor come from the checkpoint, and each
    actor takes its logged steps again (with the same sampling noise) before it acts.
    Resumed with fresh envs instead, the parameters differ (so the comparison can fail)."""
    import shutil

    flags = ["--actors", "2", "--mode", "sync", "--seed", "5", "--envs-per-actor", "4",
             "--unroll-length", "20", "--quiet"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert cli("run", "impala", *flags, "--total-steps", "6000",
               "--run-dir", str(whole)).returncode == 0
    r = cli("run", "impala", *flags, "--total-steps", "3000", "--run-dir", str(cut))
    assert r.returncode == 0, r.stderr
    first = _summary(cut)
    assert 3000 <= first["env_steps"] < 6000
    cut_mpi, fresh = tmp_path / "cut-mpi", tmp_path / "fresh"
    shutil.copytree(cut, cut_mpi)
    shutil.copytree(cut, fresh)  # the same checkpoint without the action log
    state = torch.load(checkpoint.latest(fresh), weights_only=True)
    assert set(state["parts"]["actions"]) == {"1", "2"}
    assert state["parts"]["actions"]["1"].shape == (first["learner_updates"] * 20, 4)
    del state["parts"]["actions"]
    torch.save(state, checkpoint.latest(fresh))

    def resume(d: Path) -> list[str]:
        return ["run", "--resume", str(d), "--total-steps", "6000", "--quiet"]

    r = cli(*resume(cut))
    assert r.returncode == 0, r.stderr
    job = run_mpi(3, ["-m", "archzoo", *resume(cut_mpi)], timeout_s=180)
    assert job.returncode == 0, describe(job)
    a, sa = _policy(whole), _summary(whole)
    for d in (cut, cut_mpi):
        b, sb = _policy(d), _summary(d)
        for k in a:
            assert a[k].equal(b[k]), f"{d.name}: {k} departs from the uninterrupted run"
        for k in ("env_steps", "episodes", "learner_updates", "final_mean_return"):
            assert sa[k] == sb[k], (d.name, k)
        assert sb["checkpoints"]["resumed_from"]["env_steps"] == first["env_steps"]
    r = cli(*resume(fresh))
    assert r.returncode == 0, r.stderr
    c = _policy(fresh)
    assert any(not a[k].equal(c[k]) for k in a), "fresh envs should have changed the run"



def test_a_resumed_sync_seed_run_goes_on_bit_for_bit(tmp_path: Path) -> None:
    """SEED RL's sync mode: the inference server chose every action, so its checkpoint keeps
    them with the unrolls in progress and its sampling generator; resumed, the run ends
    with the parameters and counts of the uninterrupted one. Without the unrolls part the
    actors start with fresh envs and the parameters differ. The run is cut under MPI and
    resumed without --backend: it keeps its engine, and its parameters are gloo's."""
    import shutil

    flags = ["--actors", "2", "--mode", "sync", "--seed", "5", "--envs-per-actor", "4",
             "--unroll-length", "20", "--quiet"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert cli("run", "seed", *flags, "--total-steps", "6000",
               "--run-dir", str(whole)).returncode == 0
    r = cli("run", "seed", *flags, "--total-steps", "3000", "--backend", "mpi",
            "--run-dir", str(cut))
    assert r.returncode == 0, r.stderr
    fresh = tmp_path / "fresh"
    shutil.copytree(cut, fresh)
    state = torch.load(checkpoint.latest(fresh), weights_only=True)
    assert set(state["parts"]["unrolls"]["actions"]) == {"1", "2"}
    del state["parts"]["unrolls"]
    torch.save(state, checkpoint.latest(fresh))
    for d in (cut, fresh):
        r = cli("run", "--resume", str(d), "--total-steps", "6000", "--quiet")
        assert r.returncode == 0, r.stderr
    a, b, c = _policy(whole), _policy(cut), _policy(fresh)
    assert all(a[k].equal(b[k]) for k in a), "the resumed run departs from the uninterrupted"
    sa, sb = _summary(whole), _summary(cut)
    for k in ("env_steps", "episodes", "learner_updates", "final_mean_return"):
        assert sa[k] == sb[k], k
    assert sb["backend"] == "mpi" and sb["launcher"] == "mpiexec"
    assert sb["checkpoints"]["resumed_from"]["env_steps"] < sa["env_steps"]
    assert any(not a[k].equal(c[k]) for k in a), "fresh envs should have changed the run"

@pytest.mark.parametrize("arch", ["impala", "seed"])
def test_a_resumed_single_process_run_goes_on_bit_for_bit(tmp_path: Path, arch: str) -> None:
    """``--actors 0`` keeps its actor's action log too: stopped and resumed, it ends where
    the uninterrupted run does."""
    flags = ["--actors", "0", "--seed", "3", "--envs-per-actor", "4", "--unroll-length",
             "20", "--quiet"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert cli("run", arch, *flags, "--total-steps", "6000",
               "--run-dir", str(whole)).returncode == 0
    assert cli("run", arch, *flags, "--total-steps", "3000",
               "--run-dir", str(cut)).returncode == 0
    r = cli("run", "--resume", str(cut), "--total-steps", "6000", "--quiet")
    assert r.returncode == 0, r.stderr
    a, b = _policy(whole), _policy(cut)
    assert all(a[k].equal(b[k]) for k in a)
    assert _summary(whole)["episodes"] == _summary(cut)["episodes"]


def test_allreduce_a2c_resumes_every_copy_from_the_checkpoint(tmp_path: Path) -> None:
    """All-reduce A2C keeps no server: rank 0 checkpoints its copy (the copies are equal),
    and on resume every worker takes rank 0's parameters, update count and optimizer
    state. Were a worker to keep its fresh copy, the copies would differ at the end: the
    BYE's checksum of every copy must equal rank 0's."""
    d = tmp_path / "run"
    flags = ["--mode", "sync", "--topology", "ring", "--actors", "3"]
    r = cli("run", "a3c", *flags, "--total-steps", "8000", "--run-dir", str(d), *FAST)
    assert r.returncode == 0, r.stderr
    first = _summary(d)
    r = cli("run", "--resume", str(d), "--total-steps", "16000", "--quiet")
    assert r.returncode == 0, r.stderr
    s = _summary(d)
    assert s["checkpoints"]["resumed_from"]["updates"] == first["learner_updates"] > 0
    assert s["learner_updates"] > first["learner_updates"] and s["env_steps"] >= 16000
    crcs = {r: p["crc32"] for r, p in s["params_by_rank"].items()}
    assert set(crcs) == {"1", "2"} and set(crcs.values()) == {s["params_crc32_rank0"]}


@pytest.mark.parametrize("actors", ["0", "2"])
def test_checkpoint_replay_restores_the_memory_where_it_lives(tmp_path: Path,
                                                              actors: str) -> None:
    """--checkpoint-replay: the rank holding the replay (the single process, or Ape-X's
    shard, rank 1) writes its own replay checkpoint, and a resumed run restores it: the
    memory's counts go on from the first part (without it they would restart at 0)."""
    d = tmp_path / "run"
    r = cli("run", "apex", "--actors", actors, "--checkpoint-replay", "--total-steps", "6000",
            "--learning-starts", "1000", "--run-dir", str(d), *FAST)
    assert r.returncode == 0, r.stderr
    first = _summary(d)
    rank = 0 if actors == "0" else 1
    path = checkpoint.checkpoint_dir(d) / f"replay-rank{rank}.pt"
    raw = torch.load(path, weights_only=True)  # readable without archzoo
    assert raw["kind"] == "replay" and raw["memory"]["size"] > 1000
    # the first part may overshoot 6,000 steps (actors report in chunks): go on 1,500 more
    more = str(first["env_steps"] + 1500)
    r = cli("run", "--resume", str(d), "--total-steps", more, "--quiet")
    assert r.returncode == 0, r.stderr
    assert f"rank {rank}: replay restored from {path}" in r.stderr, r.stderr
    s = _summary(d)
    assert s["replay_inserted"] > first["replay_inserted"]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_server_split_over_shards_resumes_every_slice(tmp_path: Path, mode: str) -> None:
    """--ps-shards 2: shard 0's slice is in the run's checkpoint, shard 1 keeps its own
    (ps-rank1.pt); a resumed run loads both, so each shard's version goes on from where it
    stopped (a fresh slice would start at 0). A truncated slice file is refused before
    anything is written."""
    d = tmp_path / "run"
    r = cli("run", "a3c", "--mode", mode, "--actors", "2", "--ps-shards", "2",
            "--total-steps", "8000", "--run-dir", str(d), *FAST)
    assert r.returncode == 0, r.stderr
    first = _summary(d)
    path = checkpoint.checkpoint_dir(d) / "ps-rank1.pt"
    assert torch.load(path, weights_only=True)["kind"] == "ps-slice"
    r = cli("run", "--resume", str(d), "--total-steps", "16000", "--quiet")
    assert r.returncode == 0, r.stderr
    s = _summary(d)
    for shard in ("0", "1"):
        assert s["ps"][shard]["version"] > first["ps"][shard]["version"] > 0, shard
    assert s["checkpoints"]["resumed_from"]["updates"] == first["learner_updates"]
    path.write_bytes(path.read_bytes()[:100])
    before = {p.name: p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file()}
    r = cli("run", "--resume", str(d), "--total-steps", "20000", "--quiet")
    assert r.returncode == 2 and "cannot read it" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert before == {p.name: p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file()}
