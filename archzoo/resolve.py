"""Resolving a run: from the flags a user gave to the config every rank runs with.

The command line (archzoo/cli.py) and the Python API (archzoo/api.py) both come here:

- **flags**: each field of an architecture's config class is one flag
  (:func:`add_config_flags`); :func:`parse_run` parses ``run ARCH --flag value ...``;
- **config files and presets**: ``--config FILE`` (TOML or JSON) or ``--config NAME``, a
  bundled preset (archzoo/presets/), beneath the flags given (:func:`load_config_file`);
- **resume**: ``--resume RUN_DIR`` takes the run's config.json, and only the flags in
  :data:`RESUME_MAY_CHANGE` anew (:func:`resumed_values`; torchrun's restarts too);
- **validation**: :func:`validate_run` checks every flag on every rank before any process
  group exists and fills in what the user left open (backend, actors, run directory);
- **argv forwarding**: the command line a child rank parses back into the same config
  (:func:`config_argv`, :func:`forward_argv`, :func:`restart_argv`).

A bad value is a :class:`~archzoo.errors.UsageError`: one line, exit code 2. Nothing here
imports torch or gymnasium unless a check needs them (the env, a user's ``--model``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from archzoo import envvars, presets
from archzoo.architectures import Architecture, actors_for, dir_name, get, world_size
from archzoo.architectures import names as arch_names
from archzoo.comm.factory import Launch, detect_launch
from archzoo.config import Rules, RunConfig, filled, flag_fields, flag_name
from archzoo.errors import UsageError
from archzoo.extras import require
from archzoo.model_shapes import MODELS, check_builtin
from archzoo.spawn import find_mpiexec

if TYPE_CHECKING:
    from archzoo.envs import EnvSpec

T_START = envvars.launch_time()  # when the launch began (the launcher says, else now)


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` (one line, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


_TYPES = {"int": int, "float": float, "str": str}


class _Repeat(argparse.Action):
    """A flag that may be given several times: its values joined by commas."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        before = getattr(namespace, self.dest, None)
        before = "" if before in (None, argparse.SUPPRESS) else before
        setattr(namespace, self.dest, ",".join(v for v in (before, str(values)) if v))


def field_type(f: dataclasses.Field) -> str:
    """'int', 'float', 'str' or 'bool' from a field's annotation ('int | None' -> 'int')."""
    return str(f.type).split("|")[0].strip()


def add_config_flags(p: argparse.ArgumentParser, cls: type[RunConfig]) -> None:
    """One flag per field of ``cls``, grouped, each default shown once.

    Defaults are suppressed in the namespace, so the parse says which flags were given;
    :func:`parse_run` lays them over the config file and the class's defaults."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in flag_fields(cls):
        meta = f.metadata
        g = groups.get(meta["group"]) or groups.setdefault(
            meta["group"], p.add_argument_group(meta["group"]))
        kind = field_type(f)
        shown = "" if f.default is None or f.default is False or f.default == "" \
            else f" (default: {f.default})"
        flag, text = flag_name(f.name), meta["help"] + shown
        if kind == "bool":  # --x and --no-x: a preset's true can be turned off
            g.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, help=text,
                           action=argparse.BooleanOptionalAction)
        elif meta.get("repeat"):
            g.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, help=text,
                           action=_Repeat, metavar=f.name.upper())
        else:  # choices None: any value of the type
            g.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, help=text,
                           type=_TYPES[kind], choices=meta["choices"] or None,
                           metavar=f.name.upper() if not meta["choices"] else None)


def add_run_arguments(p: argparse.ArgumentParser, cls: type[RunConfig]) -> None:
    """``archzoo run``'s arguments: the architecture, then one flag per field of ``cls``."""
    p.add_argument("arch", help=f"one of: {', '.join(arch_names())}; or package.module:NAME, "
                   "an Architecture record in your own module (docs/tutorial.md)")
    add_config_flags(p, cls)


def run_parser(arch: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``archzoo run ARCH ...`` (the words after ``run``) with ARCH's config
    fields as flags (an ARCH that names no architecture is a UsageError)."""
    try:
        cls = RunConfig if arch is None else get(arch).config
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    p = UsageParser(prog="archzoo run")
    add_run_arguments(p, cls)
    return p


def arch_from_argv(argv: list[str]) -> str | None:
    """ARCH of ``["run", ARCH, ...]``, else None."""
    if len(argv) >= 2 and argv[0] == "run" and not argv[1].startswith("-"):
        return argv[1]
    return None


CONFIG_FORMATS = {".toml": "TOML", ".json": "JSON"}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word``, or '' when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def config_text(value: str, arch: str | None) -> tuple[str, str, str]:
    """(what to call it in messages, its text, 'toml' or 'json') for ``--config VALUE``: a
    TOML or JSON file, or the name of a bundled preset (archzoo/presets/NAME/ARCH.toml)."""
    f = Path(value)
    formats = " or ".join(f"{kind} ({suffix})" for suffix, kind in CONFIG_FORMATS.items())
    if f.suffix and f.suffix.lower() not in CONFIG_FORMATS:
        raise UsageError(f"--config {value}: {f.suffix} files are not supported: use a "
                         f"{formats} file, or a bundled preset "
                         f"({', '.join(presets.names())}; archzoo list --configs)")
    if f.is_file():
        return value, f.read_text(), "toml" if f.suffix.lower() == ".toml" else "json"
    if not presets.is_preset_name(value):
        raise UsageError(f"--config: no such file {value!r}")
    bundled = presets.names()
    if value not in bundled:
        raise UsageError(f"--config {value}: no such file or bundled preset"
                         f"{did_you_mean(value, bundled)}; the bundled presets are "
                         f"{', '.join(bundled)} (archzoo list --configs)")
    if arch is None or presets.find(value, arch) is None:
        raise UsageError(f"--config {value}: the bundled preset has no file for "
                         f"{arch or 'this architecture'}; it has "
                         f"{', '.join(presets.archs(value))}")
    return f"{value} (archzoo/presets/{value}/{arch}.toml)", presets.read(value, arch), "toml"


def load_config_file(path: str, cls: type[RunConfig], arch: str | None = None
                     ) -> dict[str, Any]:
    """Flag values from a JSON or TOML file, or from ``arch``'s bundled preset when ``path``
    names one (``minatar``), keyed by field name, checked against ``cls``."""
    name, text, fmt = config_text(path, arch)
    try:
        if fmt == "toml":
            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except Exception as e:  # noqa: BLE001 - any parse error is bad input
        raise UsageError(f"--config {name}: cannot parse as {fmt.upper()}: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {name}: expected a table/object of flag values")
    values = {k.replace("-", "_"): v for k, v in data.items()}
    fields = {fl.name: fl for fl in flag_fields(cls)}
    unknown = [k for k in data if k.replace("-", "_") not in fields]
    if unknown:
        said = []
        for k in unknown:
            spelt = [n.replace("_", "-") for n in fields] if "-" in k else list(fields)
            said.append(f"{k!r}{did_you_mean(k, spelt)}")
        raise UsageError(f"--config {name}: unknown key{'s' if len(said) > 1 else ''} "
                         f"{', '.join(said)}")
    for k, v in values.items():
        kind = field_type(fields[k])
        if fields[k].metadata.get("repeat") and isinstance(v, list) and \
                all(isinstance(x, str) for x in v):
            v = values[k] = ",".join(v)  # a repeatable flag as a list of values
        ok = v is None or (isinstance(v, bool) if kind == "bool" else
                           isinstance(v, (int, float)) and not isinstance(v, bool)
                           if kind == "float" else isinstance(v, _TYPES[kind])
                           and not isinstance(v, bool))
        if not ok:
            raise UsageError(f"--config {name}: {k} = {v!r} is not a {kind}")
        if kind == "float" and v is not None:
            values[k] = float(v)
    return values


# What a resumed run may set anew; every other flag comes from the run's config.json.
RESUME_MAY_CHANGE = frozenset({
    "total_steps", "time_limit", "target_return", "log_interval", "quiet", "tensorboard",
    "comm_timeout", "startup_timeout", "checkpoint_interval", "keep_checkpoints", "threads",
    "device", "backend", "actors", "resume", "run_dir", "max_restarts", "min_actors",
    "checkpoint_replay", "record_video", "wandb"})


def resumed_values(run_dir: str, arch: str | None, given: dict[str, Any],
                   cls: type[RunConfig] | None = None) -> tuple[str, dict[str, Any]]:
    """``--resume RUN_DIR``: the architecture and flag values of the run in ``run_dir``
    (its config.json), with the ``given`` ones laid over where they may change."""
    cfg_file = Path(run_dir) / "config.json"
    if not cfg_file.is_file():
        raise UsageError(f"--resume {run_dir}: no config.json there (not a run directory)")
    saved = json.loads(cfg_file.read_text())
    if arch is not None and arch != saved.get("arch"):
        raise UsageError(f"--resume {run_dir}: that run is {saved.get('arch')!r}, not {arch!r}")
    arch = saved["arch"]
    check_checkpoint(run_dir, arch, saved.get("env"))
    try:
        cls = cls or get(arch).config
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    fixed = sorted(k for k in given if k not in RESUME_MAY_CHANGE)
    if fixed:
        raise UsageError(f"--resume takes {flag_name(fixed[0])} from {cfg_file}; only "
                         "the limits, logging, checkpoint, device, backend and actor "
                         "flags may be given anew")
    names = {f.name for f in flag_fields(cls)}
    # the launch decides backend and actors again unless given (an embedded run may be
    # resumed under mpiexec); the config file was already applied when the run began
    values = {k: v for k, v in saved.items()
              if k in names and k not in ("backend", "actors", "config", "run_dir", "resume")}
    if not {"backend", "actors"} & set(given) and "actors" in saved:
        values["actors"] = saved["actors"]
    if "backend" not in given and saved.get("backend"):
        if not detect_launch().under_launcher:  # archzoo starts the ranks: the run's engine
            values["backend"] = saved["backend"]
    values.update(given)
    values.update(run_dir=str(run_dir), resume=str(run_dir))
    return arch, values


def check_checkpoint(run_dir: str, arch: str, env: str | None) -> None:
    """The latest checkpoint of ``run_dir`` can be resumed as ``arch`` on ``env``: read it
    (a truncated or foreign file is a usage error, before anything is written)."""
    from archzoo.checkpoint import DIRNAME, CheckpointError, latest, load

    path = latest(run_dir)
    if path is None:
        raise UsageError(f"--resume {run_dir}: no checkpoint in {DIRNAME}/ (the run ended "
                         "before its first one, or was not made with checkpoints)")
    try:
        state = load(path)
    except CheckpointError as e:
        raise UsageError(f"--resume: {e}") from None
    for what, want in (("arch", arch), ("env", env)):
        if state.get(what) not in (None, want):
            raise UsageError(f"--resume: checkpoint {path} is of {what} {state.get(what)!r}, "
                             f"the run in {run_dir} is {want!r}")
    for own in sorted(path.parent.glob("*-rank*.pt")):  # the ranks' own (OwnCheckpoint)
        try:
            load(own)
        except CheckpointError as e:
            raise UsageError(f"--resume: {e}") from None


def check_run_dir(cfg: RunConfig) -> None:
    """A run never writes into another run's directory unless it resumes that run."""
    d = Path(filled(cfg.run_dir, "--run-dir"))
    if d.exists() and not d.is_dir():
        raise UsageError(f"--run-dir {cfg.run_dir}: exists and is not a directory")
    if cfg.resume is None and d.is_dir() and any(d.iterdir()):
        raise UsageError(f"--run-dir {cfg.run_dir} is not empty (another run's files?): "
                         f"continue that run with --resume {cfg.run_dir}, or choose another "
                         "--run-dir")


def _resume_arg(argv: list[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--resume" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--resume="):
            return a.split("=", 1)[1]
    return None


def parse_run(argv: list[str]) -> tuple[RunConfig, set[str]]:
    """``["run", ARCH, ...]`` (or ``["run", "--resume", RUN_DIR, ...]``), the words of
    ``archzoo run``, as the architecture's config, and the flags given."""
    resume = _resume_arg(argv)
    if resume is not None and arch_from_argv(argv) is None:  # the run names its arch
        argv = [argv[0], resumed_values(resume, None, {})[0], *argv[1:]]
    args = run_parser(arch_from_argv(argv)).parse_args(argv[1:])
    try:
        cls = get(args.arch).config
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    given = set(vars(args)) - {"arch"}
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
    run_dir = getattr(args, "run_dir", None)
    if resume is None and restarted and run_dir is not None:
        from archzoo.checkpoint import latest

        if latest(run_dir) is not None:  # torchrun restarted the group: go on from there
            resume = run_dir
            given = {k for k in given if k in RESUME_MAY_CHANGE}
    if resume is not None:
        arch, values = resumed_values(resume, args.arch, {k: getattr(args, k) for k in given},
                                      cls)
        return cls(arch=arch, **values), given | {"run_dir", "resume"}
    values = preset_values(args, cls)
    values.update({k: getattr(args, k) for k in given})
    return cls(arch=args.arch, **no_preset(values)), given


def no_preset(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with ``config="none"`` (no preset, not even the env family's) stored as
    None: the config is the flags alone, as with no ``--config`` off a preset's family."""
    return {**values, "config": None} if values.get("config") == presets.NONE else values


def preset_values(args: argparse.Namespace, cls: type[RunConfig]) -> dict[str, Any]:
    """The flag values beneath the command line: ``--config``'s file or preset, or with no
    ``--config`` the preset of the env's family (all but its env and limits), or none."""
    config = getattr(args, "config", None)
    if config == presets.NONE:
        return {}
    if config is not None:
        return load_config_file(config, cls, args.arch)
    name = family_preset(getattr(args, "env", cls.env), args.arch)  # cls.env: the default
    if name is None:
        return {}
    values = load_config_file(name, cls, args.arch)
    for key in presets.AUTO_SKIPS:
        values.pop(key.replace("-", "_"), None)
    return {**values, "config": name}


def _straggler_rank_problem(cfg: RunConfig) -> str | None:
    """``--straggler RANK:F`` names a rank that the run does not have."""
    got = cfg.straggler_rank() if cfg.straggler else None
    if got is None or cfg.actors is None or got[0] < world_size(cfg, cfg.actors):
        return None
    return (f"--straggler {cfg.straggler}: there is no rank {got[0]} (--actors {cfg.actors} "
            f"makes {world_size(cfg, cfg.actors)} processes)")


def family_preset(env: str, arch: str) -> str | None:
    """The bundled preset that ``env``'s family gives ``arch`` without ``--config``, or None."""
    name = presets.family(env)
    return name if name is not None and presets.find(name, arch) is not None else None


def validate_run(cfg: RunConfig, given: set[str]
                 ) -> tuple[Architecture, Launch, RunConfig, int]:
    """Check the config and the launch; resolve what the user left open.

    Returns (the Architecture record, Launch, resolved config, world size); the config
    that came in is not changed. The architecture's module (and with it torch) is not
    imported here: a parent that only starts the ranks never needs it."""
    from archzoo.envs import EnvError, env_spec

    try:
        record = get(cfg.arch)
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    rules = Rules()
    RunConfig.check(cfg, rules)  # the common flags first, before the env is made
    if rules.problem:
        raise UsageError(rules.problem)
    try:
        spec = env_spec(cfg.env, cfg.env_kwargs, episodic_life=cfg.episodic_life,
                        clip_rewards=cfg.clip_rewards, imports=cfg.env_import)
    except EnvError as e:
        raise UsageError(str(e)) from None
    _check_model(cfg, spec)
    changes: dict[str, object] = {}
    if cfg.target_return is None:
        from archzoo.envs import reward_threshold

        changes["target_return"] = reward_threshold(cfg.env, cfg.env_import)
    launch = detect_launch()
    if launch.launcher in ("torchrun", "embedded"):
        if cfg.backend == "mpi":
            raise UsageError("--backend mpi needs mpiexec (mpiexec -n N python -m archzoo ...); "
                             "under torchrun use gloo")
        changes["backend"] = "gloo"
    elif launch.launcher == "mpiexec":
        if cfg.backend == "gloo":
            raise UsageError("under mpiexec use --backend mpi (gloo needs torchrun or no launcher)")
        changes["backend"] = "mpi"
    else:
        changes["backend"] = cfg.backend or "gloo"
    if launch.under_launcher:
        expected = actors_for(cfg, launch.world_size)
        if "actors" in given and world_size(cfg, filled(cfg.actors, "--actors")) \
                != launch.world_size:
            raise UsageError(f"--actors {cfg.actors} contradicts the launcher's world size "
                             f"{launch.world_size} (that is --actors {expected})")
        if expected < 1 and launch.world_size > 1:
            raise UsageError(f"{cfg.arch} needs at least {world_size(cfg, 1)} processes with "
                             f"these flags, the launcher started {launch.world_size}")
        changes["actors"] = expected
    elif cfg.actors is None:
        changes["actors"] = 2
    if cfg.topology is None:
        changes["topology"] = cfg.default_topology
    cfg = cfg.replace(**changes)
    problem = cfg.problem() or _straggler_rank_problem(cfg)
    if problem:
        raise UsageError(problem)
    actors = filled(cfg.actors, "--actors")
    world = launch.world_size if launch.under_launcher else world_size(cfg, actors)
    if cfg.servers_on == "last":
        if launch.launcher not in ("torchrun", "mpiexec"):
            raise UsageError("--servers-on last chooses which node holds the servers: it "
                             "needs torchrun or mpiexec (on one machine there is nothing to "
                             "place)")
        launch = launch.servers_last(world - actors)
    if cfg.backend == "mpi":
        require("mpi", "--backend mpi")
        if not launch.under_launcher and world > 1 and find_mpiexec() is None:
            raise UsageError("--backend mpi: mpiexec not found (pip install "
                             "'archzoo[mpi]': the mpich wheel brings one)")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available "
                             "(use --device auto or cpu)")
    if cfg.run_dir is not None and launch.rank == 0:
        # only rank 0 writes the run directory; on other hosts it may not exist, or (a shared
        # file system) rank 0 may have made it already
        check_run_dir(cfg)
    if cfg.run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{dir_name(record.name)}-{cfg.env}-{cfg.backend}-{stamp}"
        cfg = cfg.replace(run_dir=str(Path("runs") / name))
    return record, launch, cfg, world


def _check_model(cfg: RunConfig, spec: EnvSpec) -> None:
    """The chosen torso must take this env's observations: the built-in ones by their
    shape rules, a user's factory by building it once on the CPU."""
    try:
        if check_builtin(cfg.model, spec.obs_shape) in MODELS:
            return
    except ValueError as e:
        raise UsageError(str(e)) from None
    import torch

    from archzoo.nets import make_torso

    try:
        torso = make_torso(cfg.model, spec.obs_shape, spec.obs_dtype,
                           getattr(cfg, "hidden", 64), spec.num_actions)
    except ValueError as e:  # an unknown name, a factory that cannot load, a misfit
        raise UsageError(str(e)) from None
    try:
        with torch.no_grad():
            torso(torch.zeros((1, *spec.obs_shape), dtype=torch.float32))
    except Exception as e:  # noqa: BLE001 - any failure here is a model that does not fit
        raise UsageError(f"--model {cfg.model} does not fit {cfg.env}'s observations "
                         f"{tuple(spec.obs_shape)} {spec.obs_dtype}: {e}") from None


def forward_argv(argv: list[str], args: RunConfig) -> list[str]:
    """The child command: the user's flags plus what the parent resolved."""
    out = list(argv)
    if "--run-dir" not in argv:
        out += ["--run-dir", filled(args.run_dir, "--run-dir")]
    if "--backend" not in argv:
        out += ["--backend", filled(args.backend, "--backend")]
    return out


def config_argv(cfg: RunConfig, names: Iterable[str]) -> list[str]:
    """``["run", ARCH, "--flag", "value", ...]`` for the fields ``names`` of ``cfg``: the
    command line that parses back into the same values (booleans as ``--x``/``--no-x``,
    always spelled: a false that is the class's default may still turn off a preset's
    true; ``--config none`` where the config has no preset but its env's family has one)."""
    fields = {f.name: f for f in flag_fields(type(cfg))}
    argv = ["run", cfg.arch]
    for name in sorted(names):
        value, flag, f = getattr(cfg, name), flag_name(name), fields[name]
        if value is None:
            continue  # None is never spelled
        if field_type(f) == "bool":
            argv.append(flag if value else f"--no-{flag[2:]}")
        else:
            argv += [flag, str(value)]
    if cfg.config is None and family_preset(cfg.env, cfg.arch) is not None:
        argv += ["--config", presets.NONE]  # no preset: not the env family's either
    return argv


def restart_argv(cfg: RunConfig, given: set[str], run_dir: str) -> list[str]:
    """The command line that resumes ``run_dir`` with the flags a resume may set anew."""
    keep = {k for k in given if k in RESUME_MAY_CHANGE} - {"resume", "run_dir"}
    return [*config_argv(cfg, keep), "--resume", str(run_dir)]
