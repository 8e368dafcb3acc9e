"""Choosing a preset on the tuning seeds, never on the reported ones.

A preset is chosen by its own score: each candidate (a few flag values laid over the
preset) runs with ``--actors 2`` on seeds 100 and up, and the one with the best mean
frozen-evaluation return at the budget wins, leaving out candidates that collapsed
(:func:`~archzoo.benchlearn.readouts.collapse`). What its one process would do plays no
part. The choice is written into the preset file and kept as a ``preset-choice`` record
with the digest of the preset's values; a reported run refuses a preset without such a
record (:func:`check_chosen`), and a choice refuses records of a reported seed.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from archzoo.benchlearn import protocol as P
from archzoo.benchlearn.readouts import collapse, score
from archzoo.benchlearn.store import Record, newest
from archzoo.errors import UsageError

Values = dict[str, Any]
_DECAY = (("lr-decay", {"lr-decay": True}), ("constant lr", {"lr-decay": False}))
_OPTIMIZER = (("adam", {"optimizer": "adam"}), ("rmsprop", {"optimizer": "rmsprop"}))
CANDIDATES: dict[str, tuple[tuple[str, Values], ...]] = {
    "impala": _DECAY, "seed": _DECAY, "ga3c": _DECAY, "apex": _DECAY, "r2d2": _DECAY,
    "a3c": _OPTIMIZER, "gala": _OPTIMIZER,
    "gorila": (("prioritized", {"prioritized": True}), ("uniform", {"prioritized": False})),
}
"""Per architecture: the candidates tried on the tuning seeds, as preset keys and values."""
TUNING_GAME = "MinAtar/Breakout-v1"
READOUT = "eval"


def flags(values: Values) -> tuple[str, ...]:
    """Preset keys and values as command-line flags (``True`` -> ``--x``, ``False`` ->
    ``--no-x``)."""
    out: list[str] = []
    for k, v in values.items():
        if isinstance(v, bool):
            out.append(f"--{k}" if v else f"--no-{k}")
        else:
            out += [f"--{k}", str(v)]
    return tuple(out)


def tuning_setups(arch: str, preset: str) -> list[P.Setup]:
    """``--actors 2`` of ``arch`` once per candidate."""
    return [P.setups(arch, preset, extra=flags(values), candidate=name)[0]
            for name, values in CANDIDATES[arch]]


def candidate_values(record: Record) -> Values | None:
    """The values of a tuning record's candidate (its setup's ``[name]``), else None."""
    name = record["setup"].rpartition("[")[2].rstrip("]")
    return dict(CANDIDATES.get(record["arch"], ())).get(name)


def holds(record: Record) -> bool:
    """Whether a tuning record's resolved config (config.json) has its candidate's values.
    One that does not ran something else (a ``--no-`` flag that its child ranks lost, say)
    and is no evidence for the candidate: a choice leaves it out and ``tune`` runs it again."""
    if record.get("kind") != "learning" or record.get("purpose") != "tune":
        return True
    values = candidate_values(record)
    if values is None:
        return True
    config = record.get("config")
    if not config:  # a run that ended before writing config.json: a failed run, kept as one
        return True
    return all(config.get(k.replace("-", "_")) == v for k, v in values.items())


def choose(records: Iterable[Record], arch: str, preset: str) -> Record:
    """The preset-choice record of ``arch``'s tuning records: per candidate its scores and
    collapses, and the winner, from the newest run of each cell; records that do not
    :func:`holds` their candidate are left out (and named). A record of a reported seed is a
    UsageError."""
    ours = [r for r in records if r.get("kind") == "learning" and r["purpose"] == "tune"
            and r["arch"] == arch and r["preset"] == preset]
    mine = list(newest(r for r in ours if holds(r)).values())  # a cell run again: its newest
    left_out = sorted({f"{r['setup']} s{r['seed']}" for r in ours if not holds(r)})
    reported = sorted({r["seed"] for r in mine if r["seed"] < P.TUNING_SEEDS})
    if reported:
        raise UsageError(f"{arch}: a preset cannot be chosen on reported seed(s) "
                         f"{', '.join(map(str, reported))}: tuning uses seeds "
                         f"{P.TUNING_SEEDS} and up")
    table: dict[str, Any] = {}
    for name, values in CANDIDATES[arch]:
        runs = [r for r in mine if r["setup"].endswith(f"[{name}]")]
        scores = [s for r in runs if (s := score(r, READOUT)) is not None]
        table[name] = {"values": values, "seeds": sorted(r["seed"] for r in runs),
                       "scores": scores, "mean": statistics.fmean(scores) if scores else None,
                       "collapsed": [c for r in runs if (c := collapse(r))]}
    if not any(c["mean"] is not None for c in table.values()):
        raise UsageError(f"{arch}: no finished tuning run to choose from (archzoo bench "
                         f"learning tune --archs {arch})")
    seeds = {r["seed"] for r in mine}
    for name, c in table.items():
        if missing := sorted(seeds - set(c["seeds"])):
            raise UsageError(f"{arch}: candidate {name!r} has no run of its values on seed(s) "
                             f"{', '.join(map(str, missing))}: run archzoo bench learning tune "
                             f"--archs {arch} first")
    standing = {n: c for n, c in table.items() if c["mean"] is not None and not c["collapsed"]}
    pool = standing or {n: c for n, c in table.items() if c["mean"] is not None}
    chosen = max(pool, key=lambda n: pool[n]["mean"])
    return {"kind": "preset-choice", "arch": arch, "preset": preset, "readout": READOUT,
            "candidates": table, "chosen": chosen, "left_out": left_out,
            "seeds": sorted({s for c in table.values() for s in c["seeds"]}),
            "chosen_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def apply(choice: Record, path: Path) -> Record:
    """Write the chosen candidate's values into the preset file ``path`` (one ``key =
    value`` line each) and return the choice with the preset's new digest."""
    text = path.read_text()
    for key, value in choice["candidates"][choice["chosen"]]["values"].items():
        line = f"{key} = {_toml(value)}"
        pattern = re.compile(rf"^{re.escape(key)}\s*=.*$", re.M)
        text = pattern.sub(line, text) if pattern.search(text) else text.rstrip("\n") + \
            f"\n{line}\n"
    path.write_text(text)
    from archzoo.architectures import get
    from archzoo.resolve import load_config_file

    arch = choice["arch"]
    values = load_config_file(str(path), get(arch).config, arch)
    return {**choice, "preset_digest": P.digest(values)}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def check_chosen(records: Iterable[Record], arch: str, preset: str) -> Record:
    """The choice behind ``arch``'s preset as it is now: a preset-choice record with the
    preset's digest, made on tuning seeds alone, and the newest choice (the one the page
    shows); else a UsageError (the preset was not chosen, was edited since, was chosen again
    since, or was chosen on a reported seed)."""
    records = list(records)
    digest = P.preset_digest(arch, preset)
    choices = [r for r in records if r.get("kind") == "preset-choice" and r["arch"] == arch
               and r["preset"] == preset and r.get("preset_digest") == digest]
    if not choices:
        raise UsageError(f"{arch}'s {preset} preset (digest {digest}) has no choice on the "
                         f"tuning seeds in the store: run archzoo bench learning tune "
                         f"--archs {arch}, then choose --archs {arch}")
    newest = [r for r in records if r.get("kind") == "preset-choice" and r["arch"] == arch
              and r["preset"] == preset][-1]
    if newest.get("preset_digest") != digest:  # the page shows the newest choice's runs
        raise UsageError(f"{arch}'s {preset} preset (digest {digest}) is not its newest "
                         f"choice (digest {newest.get('preset_digest')}): run archzoo bench "
                         f"learning choose --archs {arch} again")
    choice = choices[-1]
    if any(s < P.TUNING_SEEDS for s in choice["seeds"]):
        raise UsageError(f"{arch}'s {preset} preset was chosen on reported seed(s) "
                         f"{[s for s in choice['seeds'] if s < P.TUNING_SEEDS]}: refused")
    return choice
