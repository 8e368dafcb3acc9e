"""The run's heartbeat (archzoo/harness/run.py) in one process: ``harness.single`` and
``harness.root`` yield the same :class:`~archzoo.harness.run.Run`, whose ``tick`` writes
the metrics rows, at a row the checkpoints, the parts' own checkpoints, and decides the
stop. A loop that only ticks misses none of them; checkpoints keep their cadence (at a
row, once ``--checkpoint-interval`` has passed) and their format, and resume."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import torch

from archzoo import checkpoint, harness
from archzoo.comm.factory import Launch
from archzoo.comm.loopback import LoopbackGroup, LoopbackTransport
from archzoo.config import RunConfig
from archzoo.harness import RankContext, stats_message


class Count:
    """A stateful part (what a learner is to a checkpoint): one number."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]


class OwnFile:
    """A part with a checkpoint of its own (what a replay memory's keeper is): it writes
    its count into its own file when due (every call here) and at the end."""

    def __init__(self, path: Path, part: Count) -> None:
        self.path, self.part, self.saves = path, part, []

    def maybe_save(self) -> None:
        self.save()

    def save(self) -> None:
        self.path.write_text(str(self.part.n))
        self.saves.append(self.part.n)


def _cfg(run_dir: Path, **flags: Any) -> RunConfig:
    return RunConfig(**{"arch": "heartbeat", "run_dir": str(run_dir), "quiet": True,
                        "tensorboard": False, "actors": 0, "target_return": 1e9,
                        "log_interval": 0.0, "checkpoint_interval": 0.0, **flags})


def _single(run_dir: Path, part: Count, steps: int, own: OwnFile | None = None,
            **flags: Any) -> tuple[dict[str, Any], int]:
    """A one-process loop that only ticks: one env step and one update per pass."""
    ctx = RankContext(_cfg(run_dir, total_steps=steps, **flags), Launch("none", 0, 1), None)
    model = torch.nn.Linear(2, 2)
    ticks = 0
    with harness.single(ctx, parts={"count": part}, policy=(model, {"kind": "test"})) as run:
        if own is not None:
            run.keep(own)
        while not run.stopped:
            part.n += 1
            run.mon.add_steps(1, time.time())
            run.tick(part.n)
            ticks += 1
    return run.finish(model, part.n), ticks


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_loop_that_ticks_logs_and_checkpoints_at_every_row(tmp_path: Path) -> None:
    d, part = tmp_path / "run", Count()
    s, ticks = _single(d, part, steps=5)
    assert (s["stop_reason"], ticks, s["env_steps"], s["learner_updates"]) == ("steps", 5, 5, 5)
    assert (s["topology"], s["backend"], s["world_size"]) == ("none", "none", 1)
    # --log-interval 0: a row at every tick, and the last one at the finish
    assert [int(r["learner_updates"]) for r in _rows(d)] == [1, 2, 3, 4, 5, 5]
    # --checkpoint-interval 0: a checkpoint at every row, and the last one at the finish
    assert s["checkpoints"]["saved"] == ticks + 1
    files = checkpoint.list_checkpoints(d)
    assert len(files) == 3  # --keep-checkpoints 3
    last = torch.load(files[-1], weights_only=True)
    assert last["parts"]["count"] == {"n": 5} and last["monitor"]["env_steps"] == 5
    assert last["format_version"] == checkpoint.FORMAT_VERSION
    assert json.loads((d / "summary.json").read_text()) == json.loads(json.dumps(s))
    assert torch.load(d / "policy.pt", weights_only=True)["meta"] == {"kind": "test"}


def test_checkpoints_come_at_rows_only(tmp_path: Path) -> None:
    """No row is due in the run (a long --log-interval): only the finish checkpoints,
    however short --checkpoint-interval, as rows come between updates."""
    d = tmp_path / "run"
    s, ticks = _single(d, Count(), steps=5, log_interval=1e6)
    assert ticks == 5 and s["checkpoints"]["saved"] == 1
    assert [int(r["learner_updates"]) for r in _rows(d)] == [5]  # the finish's row


def test_a_single_run_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    first = tmp_path / "first"
    _single(first, Count(), steps=5)
    part = Count()
    s, ticks = _single(tmp_path / "second", part, steps=8, resume=str(first))
    assert ticks == 3 and (part.n, s["env_steps"], s["learner_updates"]) == (8, 8, 8)
    assert s["checkpoints"]["resumed_from"]["env_steps"] == 5
    assert s["checkpoints"]["resumed_from"]["updates"] == 5


def test_own_checkpoints_are_kept_at_every_tick_and_at_the_finish(tmp_path: Path) -> None:
    d, part = tmp_path / "run", Count()
    own = OwnFile(tmp_path / "own.txt", part)
    s, ticks = _single(d, part, steps=4, own=own)
    assert own.saves == [1, 2, 3, 4, 4]  # after each tick's update, then the finish's
    assert (tmp_path / "own.txt").read_text() == "4"


def test_the_root_ticks_the_same(tmp_path: Path) -> None:
    """harness.root's run over the loopback engine: a loop that absorbs the leaf's
    statistics and ticks gets a row, and a checkpoint, at every tick."""
    d = tmp_path / "run"

    def ctx(t: LoopbackTransport) -> RankContext:
        cfg = _cfg(d, actors=1, total_steps=100)
        return RankContext(cfg, Launch("loopback", t.rank, t.world_size), t)

    def learner(t: LoopbackTransport) -> tuple[dict[str, Any], int]:
        part, ticks = Count(), 0
        with harness.root(ctx(t), [1], {}, parts={"count": part}) as run:
            while not run.stopped:
                run.absorb(version=part.n)
                part.n += 1
                run.tick(part.n)
                ticks += 1
                t.idle(1e-3)
        return run.finish(torch.nn.Linear(2, 2), part.n, meta={"kind": "test"}), ticks

    def actor(t: LoopbackTransport) -> None:
        with harness.leaf(ctx(t), {}) as link:
            for _ in range(4):  # 100 env steps in all, in 4 reports
                link.control.send(0, stats_message(25, [1.0], 0, time.time()))
                t.idle(5e-3)
            while True:
                link.raise_if_stopped()
                t.idle(1e-3)

    got = LoopbackGroup(2, timeout_s=30).run({0: learner, 1: actor})
    s, ticks = got[0]
    assert s["stop_reason"] == "steps" and s["env_steps"] == 100
    assert s["checkpoints"]["saved"] == ticks + 1
    assert s["learner_updates"] == ticks
    assert int(_rows(d)[-1]["learner_updates"]) == ticks
