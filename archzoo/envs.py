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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

ATARI_DEFAULTS: dict[str, Any] = {
    "repeat_action_probability": 0.25, "noop_max": 30, "frameskip": 4, "maxpool": True,
    "img_height": 84, "img_width": 84, "grayscale": True, "stack_num": 4,
    "reward_clipping": False, "use_fire_reset": False, "episodic_life": False,
    "num_threads": 1,
}


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
    kwargs: tuple[tuple[str, Any], ...] = ()
    atari: bool = False
    episodic_life: bool = False
    clip_rewards: bool = False

    @property
    def image(self) -> bool:
        """A 3-D observation (channels and two spatial axes): a CNN's input."""
        return len(self.obs_shape) == 3


def _gym(env_id: str = ""):
    """gymnasium, with archzoo's and ale-py's environments registered, and MinAtar's when
    ``env_id`` is one of them (importing MinAtar takes 1.4 s: it imports matplotlib and
    scipy, and every rank of every run would pay for it)."""
    import gymnasium as gym

    from archzoo.synthetic import register_synthetic

    register_synthetic()
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass
    if env_id.startswith("MinAtar/"):
        try:
            import minatar.gym

            if "MinAtar/Breakout-v1" not in gym.registry:
                minatar.gym.register_envs()
        except ImportError:
            pass
    return gym


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def parse_env_kwargs(text: str | dict | None) -> dict[str, Any]:
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


def check_env_id(env_id: str) -> None:
    """Raise EnvError with one clear line if gymnasium doesn't know ``env_id``."""
    gym = _gym(env_id)

    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        hint = " (pip install ale-py)" if is_atari(env_id) else \
            " (pip install minatar)" if env_id.startswith("MinAtar/") else ""
        raise EnvError(f"unknown environment {env_id!r}: {e}{hint}") from None


def env_spec(env_id: str, kwargs: dict[str, Any] | str | None = None, *,
             episodic_life: bool = False, clip_rewards: bool | None = None) -> EnvSpec:
    """Spaces of ``env_id`` made with ``kwargs``; only Box observations and Discrete actions.

    ``clip_rewards`` None means: on for ALE ids, off otherwise."""
    gym = _gym(env_id)
    check_env_id(env_id)
    kw = parse_env_kwargs(kwargs)
    atari = is_atari(env_id)
    if episodic_life and not atari:
        raise EnvError(f"--episodic-life: {env_id} is not an ALE game (it needs lives)")
    try:
        envs = _make(env_id, 1, kw, atari, episodic_life)
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
                   atari if clip_rewards is None else clip_rewards)


def _make(env_id: str, num_envs: int, kwargs: dict[str, Any], atari: bool,
          episodic_life: bool):
    gym = _gym(env_id)
    if atari:
        from ale_py.vector_env import AtariVectorEnv

        game = gym.spec(env_id).kwargs.get("game")
        unknown = set(kwargs) - set(ATARI_DEFAULTS) - {"full_action_space",
                                                        "max_num_frames_per_episode"}
        if unknown:
            raise EnvError(f"--env-kwargs: {', '.join(sorted(unknown))} not understood for "
                           f"{env_id} (known: {', '.join(sorted(ATARI_DEFAULTS))}, "
                           "full_action_space, max_num_frames_per_episode)")
        # lives are tracked by the actor (episodic_life), the game goes on to its end
        return AtariVectorEnv(game=game, num_envs=num_envs, **{**ATARI_DEFAULTS, **kwargs})
    spec = gym.spec(env_id)
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    autoreset = envs.metadata.get("autoreset_mode")
    if autoreset is not None and getattr(autoreset, "name", str(autoreset)) != "NEXT_STEP":
        raise EnvError(f"{env_id}: vector env autoreset mode {autoreset} is not NEXT_STEP")
    return envs


def make_vector_env(env: str | EnvSpec, num_envs: int):
    """A vector env with next-step autoreset, for an id or an :class:`EnvSpec`.

    ALE games run in ale-py's ``AtariVectorEnv`` (C++ threads); other ids use the env's own
    vectorised implementation when it registers one (CartPole does: a numpy batch of all
    envs), else ``SyncVectorEnv`` (one process, envs in a loop).
    """
    if isinstance(env, str):
        return _make(env, num_envs, {}, is_atari(env), False)
    return _make(env.env_id, num_envs, dict(env.kwargs), env.atari, env.episodic_life)
