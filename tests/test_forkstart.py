"""Ranks forked from archzoo.forkstart's server are what ``python SCRIPT`` or ``python -m
MODULE`` would be: the same argv, environment, working directory, import path, ``__main__``
and exit codes as ranks started afresh (``ARCHZOO_FORK=0``), with the command line they
stand for as their title; and the caller's own ``__main__`` does not run again in them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from archzoo import forkstart
from archzoo.spawn import clean_env, run_ranks

RANK_SCRIPT = '''
import json, os, signal, sys
import helper  # found on PYTHONPATH only
rank = int(os.environ["RANK"])
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "name": __name__,
                  "x": os.environ.get("X"), "helper": helper.WHERE,
                  "stdin": sys.stdin.read(),
                  "cmdline": open("/proc/self/cmdline", "rb").read().decode()}), flush=True)
if rank == 1:
    sys.exit(3)
if rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
'''


def _ranks(tmp_path: Path, fork: str) -> list:
    (tmp_path / "lib").mkdir(exist_ok=True)
    (tmp_path / "lib" / "helper.py").write_text("WHERE = 'lib'\n")
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    env = clean_env({"X": "7", "PYTHONPATH": str(tmp_path / "lib"), "ARCHZOO_FORK": fork})
    old = os.environ.get("ARCHZOO_FORK")
    os.environ["ARCHZOO_FORK"] = fork  # what run_ranks reads: this process's choice
    try:
        job = run_ranks(3, ["rank.py", "a b", "--c"], "gloo", env=env, cwd=tmp_path,
                        capture=True, timeout_s=120)
    finally:
        os.environ.pop("ARCHZOO_FORK") if old is None else os.environ.update(ARCHZOO_FORK=old)
    return job.ranks


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_rank_is_what_python_script_would_be(tmp_path: Path, fork: str) -> None:
    ranks = _ranks(tmp_path, fork)
    assert [r.returncode for r in ranks] == [0, 3, -9], [r.output for r in ranks]
    for r in ranks:
        seen = json.loads(r.output.splitlines()[0])
        assert seen["argv"] == ["rank.py", "a b", "--c"]
        assert Path(seen["cwd"]) == tmp_path
        assert (seen["name"], seen["x"], seen["helper"], seen["stdin"]) == (
            "__main__", "7", "lib", "")
        if fork == "1":
            assert seen["cmdline"].startswith(f"{sys.executable} rank.py 'a b' --c [rank ")
            assert seen["cmdline"].rstrip("\0").endswith(f"[rank {r.rank} of 3]")
        else:
            assert seen["cmdline"].split("\0")[:2] == [sys.executable, "rank.py"]


def test_the_callers_main_does_not_run_again_in_the_ranks(tmp_path: Path) -> None:
    """A user's script that starts ranks without an ``if __name__ == "__main__"`` guard
    (as with archzoo.api): multiprocessing would import it into every forked rank. The
    script runs without OMP_NUM_THREADS; its ranks get OMP_NUM_THREADS=1 (clean_env), and
    torch in them keeps to 1 thread (the server loaded torch with the ranks' setting)."""
    (tmp_path / "rank.py").write_text(
        "import torch\nprint('rank', torch.get_num_threads(), flush=True)\n")
    (tmp_path / "user.py").write_text(
        "import sys\n"
        "from archzoo.spawn import run_ranks\n"
        f"open({str(tmp_path / 'ran')!r}, 'a').write('user\\n')\n"
        f"job = run_ranks(2, ['rank.py'], 'gloo', cwd={str(tmp_path)!r}, capture=True,\n"
        "                 timeout_s=120)\n"
        "print([r.output for r in job.ranks], job.returncode)\n")
    out = subprocess.run([sys.executable, "user.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180,
                         env={k: v for k, v in clean_env().items() if k != "OMP_NUM_THREADS"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['rank 1\\n', 'rank 1\\n'] 0", out.stdout
    assert (tmp_path / "ran").read_text() == "user\n"


def test_only_a_module_or_a_script_is_forked() -> None:
    assert forkstart.forkable(["-m", "archzoo", "run"]) and forkstart.forkable(["x.py"])
    assert not forkstart.forkable(["-c", "print(1)"]) and not forkstart.forkable(["-m"])
    with pytest.raises(ValueError, match="cannot fork"):
        forkstart.start(["-c", "1"], {}, None, None, False)


def test_a_tmpdir_too_long_for_the_servers_socket_starts_ranks_afresh(tmp_path: Path) -> None:
    """multiprocessing puts the fork server's socket at TMPDIR/pymp-*/listener-*; under a
    long TMPDIR that passes AF_UNIX's 107 bytes ("AF_UNIX path too long"). The ranks then
    start afresh, with ARCHZOO_FORK=1, and run as they would."""
    long_tmp = tmp_path / ("t" * max(1, 110 - len(str(tmp_path)) - len(forkstart.SOCKET_NAME)))
    long_tmp.mkdir()
    (tmp_path / "rank.py").write_text(
        "print(open('/proc/self/cmdline', 'rb').read().decode().split(chr(0))[:2])\n")
    (tmp_path / "user.py").write_text(
        "from archzoo import forkstart\n"
        "from archzoo.spawn import run_ranks\n"
        f"job = run_ranks(2, ['rank.py'], 'gloo', cwd={str(tmp_path)!r}, capture=True,\n"
        "                 timeout_s=120)\n"
        "print(forkstart.forkable(['rank.py']), [r.output for r in job.ranks], job.returncode)\n")
    env = clean_env({"TMPDIR": str(long_tmp), "ARCHZOO_FORK": "1"})
    out = subprocess.run([sys.executable, "user.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    fresh = str([sys.executable, "rank.py"])
    assert out.stdout.strip() == f"False {[fresh + chr(10)] * 2} 0", out.stdout
