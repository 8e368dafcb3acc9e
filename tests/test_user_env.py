"""The user's own environments (archzoo/envs.py): ``--env module:Id``, ``--env-import
MODULE --env Id`` and ``--env package.module:factory``, from a module in the current
directory, outside archzoo, under each launcher: every rank imports it, the parent's
validation too (the ``archzoo`` script's ``sys.path`` does not hold the current directory;
archzoo adds it and hands it to the child ranks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runs import clean_env, load_run, torchrun

ARCHZOO_SCRIPT = str(Path(sys.executable).parent / "archzoo")
SMALL = ["--total-steps", "3000", "--quiet", "--envs-per-actor", "2"]

MODULE = '''
import gymnasium as gym
import numpy as np


class Cart(gym.ObservationWrapper):
    """CartPole, its observation scaled: a different env than gymnasium's own."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = env.observation_space

    def observation(self, obs):
        return np.asarray(obs, dtype=np.float32)


def _cart(**kwargs):
    from gymnasium.envs.classic_control import CartPoleEnv

    return Cart(CartPoleEnv(**kwargs))


def make_env(**kwargs):
    return gym.wrappers.TimeLimit(_cart(**kwargs), 100)


make_env.reward_threshold = 90.0

if "UserCart-v0" not in gym.registry:
    gym.register("UserCart-v0", entry_point=_cart, max_episode_steps=100,
                 reward_threshold=90.0)
'''


def _user_module(tmp_path: Path) -> Path:
    (tmp_path / "mymod.py").write_text(MODULE)
    return tmp_path


def _script(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The ``archzoo`` console script in ``cwd``: no launcher, the ranks are its children."""
    return subprocess.run([ARCHZOO_SCRIPT, *args], capture_output=True, text=True,
                          timeout=120, env=clean_env(), cwd=cwd)


def test_module_colon_id_embedded_gloo(tmp_path: Path) -> None:
    cwd = _user_module(tmp_path)
    r = _script(cwd, "run", "impala", "--env", "mymod:UserCart-v0", "--actors", "1",
                *SMALL, "--run-dir", "run")
    assert r.returncode == 0, r.stderr[-3000:]
    s = load_run(cwd / "run")
    assert s["env"] == "mymod:UserCart-v0" and s["backend"] == "gloo"
    assert json.loads((cwd / "run" / "config.json").read_text())["target_return"] == 90.0


def test_env_import_under_torchrun(tmp_path: Path) -> None:
    cwd = _user_module(tmp_path)
    torchrun(2, "run", "seed", "--env-import", "mymod", "--env", "UserCart-v0", *SMALL,
             "--run-dir", "run", timeout=120, cwd=cwd)
    s = load_run(cwd / "run")
    assert s["env"] == "UserCart-v0" and s["world_size"] == 2


def test_factory_embedded_mpi(tmp_path: Path) -> None:
    cwd = _user_module(tmp_path)
    r = _script(cwd, "run", "impala", "--env", "mymod:make_env", "--backend", "mpi",
                "--actors", "1", *SMALL, "--run-dir", "run")
    assert r.returncode == 0, r.stderr[-3000:]
    s = load_run(cwd / "run")
    assert s["env"] == "mymod:make_env" and s["backend"] == "mpi"
    assert json.loads((cwd / "run" / "config.json").read_text())["target_return"] == 90.0


def test_import_failure_is_one_line(tmp_path: Path) -> None:
    """A module that cannot be imported: one line naming it, exit code 2, for each form."""
    (tmp_path / "broken.py").write_text("raise RuntimeError('no display')\n")
    for flags, module in ((["--env", "nosuch:Foo-v0"], "nosuch"),
                          (["--env-import", "broken", "--env", "Foo-v0"], "broken"),
                          (["--env", "broken:make_env"], "broken")):
        r = _script(tmp_path, "run", "impala", *flags, "--total-steps", "100")
        assert r.returncode == 2, (flags, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"cannot import module {module!r}" in lines[0], r.stderr
