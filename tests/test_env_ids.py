"""A misspelt ALE or MinAtar id, with ale-py and MinAtar installed, is named with the close
ids that are registered, not answered with an install hint."""

from __future__ import annotations

import pytest

from archzoo.cli import main
from archzoo.envs import EnvError, gym_spec


@pytest.mark.parametrize("env_id, close", [("ALE/Pongg-v5", "ALE/Pong-v5"),
                                           ("ALE/spaceinvaders-v5", "ALE/SpaceInvaders-v5"),
                                           ("MinAtar/Breakot-v1", "MinAtar/Breakout-v1")])
def test_a_misspelt_id_names_close_ids(env_id: str, close: str) -> None:
    with pytest.raises(EnvError) as e:
        gym_spec(env_id)
    msg = str(e.value)
    assert "is installed and registers no such id" in msg and close in msg, msg
    assert "pip install" not in msg


def test_the_command_line_says_it_in_one_line(capsys) -> None:
    assert main(["run", "impala", "--env", "ALE/Pongg-v5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean ALE/Pong-v5?" in err[0], err
