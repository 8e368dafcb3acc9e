"""Environment ids, spaces and gymnasium vector environments.

Gymnasium 1.x vector envs autoreset on the *next* step (``AutoresetMode.NEXT_STEP``):
after an episode ends, the following step returns the reset observation with reward 0
and ignores the action. Actors mask that step out (actors/base.py).

Any gymnasium id with a Box observation (of any dtype) and a Discrete action space works.
Observations keep their dtype: uint8 frames and bool grids stay uint8/bool in every
message and in replay, and become float only inside the network.

- ALE ids (``ALE/Pong-v5`` ...) run in ale-py's own C++ vector env (``AtariVectorEnv``)
  with the preprocessing of the DQN and IMPALA papers (Mnih et al. 2015; Espeholt et al.
  2018): up to 30 no-op starts, frame skip 4 with the max over the last two frames,
  84×84 grayscale, a stack of the last 4 frames (zeros before the first), sticky actions
  with probability 0.25 as ALE v5 defines them, raw game rewards.
- MinAtar ids (``MinAtar/Breakout-v1`` ...; Young & Tian 2019) are registered here and run
  as they are: 10×10×C bool grids.
- ``--env-kwargs`` (a JSON object) go to ``gym.make``, or to ``AtariVectorEnv`` for ALE ids
  (e.g. ``{"repeat_action_probability": 0.0}``).
- ``--env-latency-ms`` (:class:`archzoo.latency.Latency`): every vector step of an actor
  waits that long in a sleep, once for all its envs, as a remote or slow simulator would.
- ``render_mode="rgb_array"`` (:func:`make_vector_env`; archzoo/video.py films with it):
  ``env.render()`` returns each env's own frame (CartPole's cart, MinAtar's grid in colour,
  the Atari screen). ``AtariVectorEnv`` cannot render, so an ALE id is then one gymnasium
  ``AtariEnv`` per env (``frameskip=1``) under gymnasium's ``AtariPreprocessing`` and
  ``FrameStackObservation``, which do the same preprocessing (no-op starts, frame skip with
  the max over the last two frames, resize, grayscale, zero-padded stack).

The user's own environments come in three forms (:func:`gym_spec`):

- ``module:Id`` (gymnasium's own form): ``module`` is imported, then ``Id`` is looked up in
  gymnasium's registry, where the import registered it;
- ``--env-import MODULE`` (repeatable, or comma-separated): modules imported before the env
  is made, for a plain ``Id`` that one of them registers;
- ``package.module:make_env``: when the part after the colon is a callable of that module
  (not an id), it is the env's factory: ``make_env(**env_kwargs)`` returns one gymnasium
  env; archzoo vectorises it with ``SyncVectorEnv``. ``make_env.reward_threshold``, if set,
  is the default ``--target-return``.

Every rank imports these modules itself (the parent's validation too), with the current
directory first on ``sys.path`` as under ``python -m``; the directories they came from go
to the child ranks' ``PYTHONPATH`` (:func:`user_paths`, archzoo/launcher.py).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from archzoo.extras import require
from archzoo.records import JSONObject

if TYPE_CHECKING:
    from gymnasium.envs.registration import EnvSpec as GymSpec

    from archzoo.latency import EnvLatency

ATARI_DEFAULTS: dict[str, bool | int | float] = {
    "repeat_action_probability": 0.25, "noop_max": 30, "frameskip": 4, "maxpool": True,
    "img_height": 84, "img_width": 84, "grayscale": True, "stack_num": 4,
    "reward_clipping": False, "use_fire_reset": False, "episodic_life": False,
    "num_threads": 1,
}


# The longest evaluation episode, in agent steps: ALE's own limit, 108,000 frames at frame
# skip 4 (Machado et al. 2018). Training episodes run as the env defines them, but a greedy
# episode of an env without a limit may never end: MinAtar's Seaquest sub that stays at the
# surface lives forever, and so would an evaluation that waits for it.
EVAL_MAX_STEPS = 27_000


class EnvError(ValueError):
    """An environment id that can't be used (unknown, or unsupported spaces)."""


@dataclass(frozen=True)
class EnvSpec:
    """What every rank needs to derive message schemas and networks, and to make the envs.

    ``episodic_life`` (ALE): a lost life ends the episode for the losses, not for the
    logged returns; ``clip_rewards``: the losses see rewards clipped to [−1, 1], the
    logged returns stay raw game scores.
    """

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    kwargs: tuple[tuple[str, object], ...] = ()  # --env-kwargs, sorted
    atari: bool = False
    episodic_life: bool = False
    clip_rewards: bool = False
    imports: tuple[str, ...] = ()  # --env-import: modules that register the id
    latency: EnvLatency | None = None  # --env-latency-ms: each actor's vector step waits

    @property
    def image(self) -> bool:
        """A 3-D observation (channels and two spatial axes): a CNN's input."""
        return len(self.obs_shape) == 3


def _gym(env_id: str = ""):
    """gymnasium, with archzoo's and ale-py's environments registered, and MinAtar's when
    ``env_id`` is one of them (importing MinAtar takes 1.4 s: it imports matplotlib and
    scipy, and every rank of every run would pay for it)."""
    import gymnasium as gym

    from archzoo.memory_envs import register_memory_envs
    from archzoo.synthetic import register_synthetic

    register_synthetic()
    register_memory_envs()
    name = _name(env_id)
    if name.startswith("ALE/"):
        require("atari", f"--env {env_id}")
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass
    if name.startswith("MinAtar/"):
        require("minatar", f"--env {env_id}")
        import minatar.gym

        if "MinAtar/Breakout-v1" not in gym.registry:
            minatar.gym.register_envs()
    return gym


def _name(env_id: str) -> str:
    """The registered id in ``module:Id`` (``env_id`` itself without a module)."""
    return env_id.split(":", 1)[-1]


def is_atari(env_id: str) -> bool:
    return _name(env_id).startswith("ALE/")


_USER_PATHS: list[str] = []  # where the user's env modules were imported from


def user_paths() -> list[str]:
    """The directories the user's env modules came from (not installed packages): child
    ranks need them on their ``PYTHONPATH`` to import the same modules."""
    return list(_USER_PATHS)


def parse_env_imports(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``--env-import``: module names, comma-separated (or a list), without blanks."""
    if not value:
        return ()
    parts = value.split(",") if isinstance(value, str) else \
        [p for v in value for p in str(v).split(",")]
    return tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))


def import_env_module(module: str, what: str) -> ModuleType:
    """Import the user's ``module`` (``what``: the flag that named it, for the error), the
    current directory first on ``sys.path`` as under ``python -m``; EnvError with one line
    naming the module when it cannot be imported."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - the module's own code may raise anything
        missing = isinstance(e, ModuleNotFoundError) and f"{module}.".startswith(f"{e.name}.")
        hint = " (is its directory the current one or on PYTHONPATH?)" if missing else ""
        msg = str(e).splitlines()[0] if str(e) else ""
        raise EnvError(f"{what}: cannot import module {module!r}: {type(e).__name__}: "
                       f"{msg}{hint}") from None
    _remember_path(module)
    return mod


def _remember_path(module: str) -> None:
    """Note the directory that ``module``'s top-level package was imported from, unless it
    is installed (site-packages)."""
    top = sys.modules.get(module.split(".")[0])
    file = getattr(top, "__file__", None)
    if file:
        path = Path(file).parent
        path = path.parent if Path(file).name == "__init__.py" else path
    elif top is not None and getattr(top, "__path__", None):  # a namespace package
        path = Path(next(iter(top.__path__))).parent
    else:
        return
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    if str(path) not in installed and str(path) not in _USER_PATHS:
        _USER_PATHS.append(str(path))


def gym_spec(env_id: str, imports: tuple[str, ...] | str = ()) -> GymSpec:
    """gymnasium's EnvSpec for ``env_id``, after importing ``imports`` (``--env-import``).

    ``module:Id`` imports ``module`` and looks ``Id`` up; ``module:factory``, where
    ``factory`` is a callable of that module, is an unregistered spec whose entry point is
    the factory. EnvError with one line if the id is unknown or a module cannot be
    imported."""
    gym = _gym(_name(env_id))
    for module in parse_env_imports(imports):
        import_env_module(module, f"--env-import {module}")
    module, colon, name = env_id.partition(":")
    if colon:
        if not module or not name:
            raise EnvError(f"--env {env_id!r}: expected module:Id or package.module:factory")
        mod = import_env_module(module, f"--env {env_id}")
        factory = getattr(mod, name, None) if name.isidentifier() else None
        if callable(factory) and name not in gym.registry:
            from gymnasium.envs.registration import EnvSpec as GymSpec

            return GymSpec(id=env_id, entry_point=factory,
                           reward_threshold=getattr(factory, "reward_threshold", None))
    else:
        name = env_id
    try:
        return gym.spec(name)
    except gym.error.Error as e:
        known = _package_ids(gym, name)
        if known is not None:  # ale-py or MinAtar is installed: the id is misspelt
            raise EnvError(f"unknown environment {env_id!r}: {_close_ids(name, known)}"
                           ) from None
        hint = " (pip install 'archzoo[atari]')" if is_atari(name) else \
            " (pip install 'archzoo[minatar]')" if name.startswith("MinAtar/") else \
            f" (module {module!r} was imported but registers no such id)" if colon else \
            " (a module of yours registers it? --env module:Id or --env-import module)"
        raise EnvError(f"unknown environment {env_id!r}: {e}{hint}") from None


_ID_PACKAGES = {"ALE/": ("ale_py", "ale-py"), "MinAtar/": ("minatar.gym", "MinAtar")}


def _package_ids(gym: ModuleType, name: str) -> tuple[str, list[str]] | None:
    """(package, its registered ids) when ``name`` is in the namespace of a package that
    imports fine (ale-py for ``ALE/``, MinAtar for ``MinAtar/``); None otherwise (then the
    package is what is missing)."""
    for prefix, (module, package) in _ID_PACKAGES.items():
        if name.startswith(prefix):
            try:
                importlib.import_module(module)
            except ImportError:
                return None
            return package, sorted(i for i in gym.registry if i.startswith(prefix))
    return None


def _close_ids(name: str, known: tuple[str, list[str]]) -> str:
    """'PACKAGE is installed and registers no such id; did you mean X or Y?', comparing the
    games' names (``ALE/Pongg-v5`` -> ``ALE/Pong-v5``; case and version aside)."""
    import difflib

    def game(env_id: str) -> str:
        return env_id.split("/", 1)[-1].rsplit("-v", 1)[0].lower()

    package, ids = known
    games: dict[str, list[str]] = {}
    for i in ids:
        games.setdefault(game(i), []).append(i)
    version = name.rsplit("-v", 1)[-1]
    close = [i for g in difflib.get_close_matches(game(name), list(games), n=3, cutoff=0.75)
             for i in sorted(games[g], key=lambda i: (not i.endswith(f"-v{version}"), i))][:3]
    said = f"did you mean {' or '.join(close)}?" if close else \
        f"its ids look like {ids[0]}" if ids else "it registers none"
    return f"{package} is installed and registers no such id; {said}"


def reward_threshold(env_id: str, imports: tuple[str, ...] | str = ()) -> float | None:
    """The env's ``reward_threshold`` (a factory's attribute of that name): the default
    ``--target-return``."""
    return gym_spec(env_id, imports).reward_threshold


def parse_env_kwargs(text: str | dict | None) -> JSONObject:
    """``--env-kwargs``: a JSON object; EnvError with one line otherwise."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        return dict(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise EnvError(f"--env-kwargs {text!r}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise EnvError(f"--env-kwargs {text!r}: expected a JSON object such as "
                       '\'{"step_cost_us": 50}\'')
    return value


def check_env_id(env_id: str, imports: tuple[str, ...] | str = ()) -> None:
    """Raise EnvError with one clear line if gymnasium doesn't know ``env_id`` (after
    importing ``imports``) and it names no factory."""
    gym_spec(env_id, imports)


def env_spec(env_id: str, kwargs: JSONObject | str | None = None, *,
             episodic_life: bool = False, clip_rewards: bool | None = None,
             imports: tuple[str, ...] | str = (),
             latency: EnvLatency | None = None) -> EnvSpec:
    """Spaces of ``env_id`` made with ``kwargs``; only Box observations and Discrete actions.

    ``clip_rewards`` None means: on for ALE ids, off otherwise. ``imports``: the modules
    of ``--env-import``; ``latency``: the wait of an actor's vector step (archzoo/latency.py).
    """
    gym = _gym(_name(env_id))
    imports = parse_env_imports(imports)
    check_env_id(env_id, imports)
    kw = parse_env_kwargs(kwargs)
    atari = is_atari(env_id)
    if episodic_life and not atari:
        raise EnvError(f"--episodic-life: {env_id} is not an ALE game (it needs lives)")
    try:
        envs = _make(env_id, 1, kw, atari, episodic_life, imports)
    except EnvError:
        raise
    except Exception as e:  # noqa: BLE001 - a bad kwarg surfaces as any error type
        raise EnvError(f"{env_id} with --env-kwargs {json.dumps(kw)}: "
                       f"{type(e).__name__}: {e}") from None
    try:
        obs, act = envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
    if not isinstance(act, gym.spaces.Discrete):
        raise EnvError(f"{env_id}: needs a Discrete action space, got {act}")
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(f"{env_id}: needs a Box observation space, got {obs}")
    dtype = np.dtype(obs.dtype)
    if dtype.kind not in "biuf":
        raise EnvError(f"{env_id}: observations of dtype {dtype} are not supported")
    return EnvSpec(env_id, tuple(obs.shape), dtype.str, int(act.n),
                   tuple(sorted(kw.items())), atari, episodic_life,
                   atari if clip_rewards is None else clip_rewards, imports,
                   latency if latency else None)


def _make(env_id: str, num_envs: int, kwargs: dict[str, Any], atari: bool,
          episodic_life: bool, imports: tuple[str, ...] = (), render_mode: str | None = None):
    gym = _gym(_name(env_id))
    spec = gym_spec(env_id, imports)
    if atari:
        from ale_py.vector_env import AtariVectorEnv

        game = spec.kwargs["game"]  # ale-py registers each ALE id with its game
        unknown = set(kwargs) - set(ATARI_DEFAULTS) - {"full_action_space",
                                                        "max_num_frames_per_episode"}
        if unknown:
            raise EnvError(f"--env-kwargs: {', '.join(sorted(unknown))} not understood for "
                           f"{env_id} (known: {', '.join(sorted(ATARI_DEFAULTS))}, "
                           "full_action_space, max_num_frames_per_episode)")
        if render_mode is not None:
            return gym.vector.SyncVectorEnv(
                [lambda: _atari_rendered(spec, {**ATARI_DEFAULTS, **kwargs}, render_mode)
                 for _ in range(num_envs)])
        # lives are tracked by the actor (episodic_life), the game goes on to its end
        return AtariVectorEnv(game=game, num_envs=num_envs, **{**ATARI_DEFAULTS, **kwargs})
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    if render_mode is not None:
        kwargs = {**kwargs, "render_mode": render_mode}
    envs = gym.make_vec(spec, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    autoreset = envs.metadata.get("autoreset_mode")
    if autoreset is not None and getattr(autoreset, "name", str(autoreset)) != "NEXT_STEP":
        raise EnvError(f"{env_id}: vector env autoreset mode {autoreset} is not NEXT_STEP")
    return envs


def _atari_rendered(spec: GymSpec, kw: dict[str, Any], render_mode: str):
    """One ALE game that renders its screen, preprocessed as ``AtariVectorEnv`` does with
    the options ``kw`` (:data:`ATARI_DEFAULTS` and the user's): its observations are the
    vector env's, one env at a time."""
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

    cannot = [k for k, v in (("use_fire_reset", True), ("episodic_life", True),
                             ("maxpool", False)) if bool(kw[k]) is v]
    if cannot:
        raise EnvError(f"{spec.id}: cannot render with --env-kwargs {cannot[0]}="
                       f"{kw[cannot[0]]} (gymnasium's AtariPreprocessing has no such option)")
    env = gym.make(spec, frameskip=1, render_mode=render_mode,
                   repeat_action_probability=kw["repeat_action_probability"],
                   full_action_space=kw.get("full_action_space", False),
                   max_num_frames_per_episode=kw.get("max_num_frames_per_episode", 108_000))
    env = AtariPreprocessing(env, noop_max=kw["noop_max"], frame_skip=kw["frameskip"],
                             screen_size=(kw["img_width"], kw["img_height"]),
                             grayscale_obs=kw["grayscale"])
    if kw["reward_clipping"]:
        env = ClipReward(env, -1, 1)
    env = FrameStackObservation(env, kw["stack_num"], padding_type="zero")
    env.metadata = {**env.metadata, "render_fps": 60 / kw["frameskip"]}  # the game's speed
    return env


def make_vector_env(env: str | EnvSpec, num_envs: int, render_mode: str | None = None,
                    latency: EnvLatency | None = None, seed: int | None = None):
    """A vector env with next-step autoreset, for an id or an :class:`EnvSpec`.

    ALE games run in ale-py's ``AtariVectorEnv`` (C++ threads); other ids use the env's own
    vectorised implementation when it registers one (CartPole does: a numpy batch of all
    envs), else ``SyncVectorEnv`` (one process, envs in a loop); so do a user's factories.
    ``render_mode`` (``"rgb_array"``) goes to the envs (see the module's docstring for ALE
    ids); ``render()`` then returns one frame per env. ``latency``: every step waits, in
    :class:`archzoo.latency.Latency` (its jitter drawn from ``seed``); actors pass their
    spec's (actors/base.py), evaluation envs none.
    """
    if isinstance(env, str):
        envs = _make(env, num_envs, {}, is_atari(env), False, render_mode=render_mode)
    else:
        envs = _make(env.env_id, num_envs, dict(env.kwargs), env.atari, env.episodic_life,
                     env.imports, render_mode)
    if latency:
        from archzoo.latency import with_latency

        envs = with_latency(envs, latency, seed)
    return envs
