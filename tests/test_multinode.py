"""Runs that cross a machine boundary: two simulated hosts (network namespaces on a veth
switch, archzoo.simhosts), every architecture under torchrun (one per host) or under
mpiexec (hydra starting the other host's ranks through the namespace launcher).

Each run proves it crossed: summary.json's ``hosts_by_rank`` puts every rank in the
namespace the launcher's placement says, and the hosts' interface counters moved. Skipped
only where namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from archzoo import multinode
from archzoo.simhosts import SimHost, SimHosts, unavailable
from archzoo.spawn import Group, run_ranks
from tests.runs import clean_env, load_run

WHY = unavailable()
pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"simulated hosts: {WHY}"),
              # one xdist worker runs this module's tests in turn: they share its hosts
              pytest.mark.xdist_group("simhosts")]
_PORTS = itertools.count(29600)

# every architecture, 4 processes (2 per host), briefly
SMOKE: dict[str, list[str]] = {
    "impala": [],
    "apex": ["--replay-shards", "1", "--learning-starts", "500"],
    "a3c": [],
    "gorila": [],
    "gala": [],
    "seed": [],
    "ga3c": [],
}


@pytest.fixture(scope="module")
def hosts():
    with SimHosts(2) as sim:
        yield sim
    assert not SimHosts.leftovers(sim.prefix), "a namespace was left behind"


def cross(sim: SimHosts, backend: str, slots: list[int], argv: list[str], tmp: Path,
          timeout_s: float = 120) -> tuple[int, str]:
    """Run ``archzoo ARGV`` across the hosts; (exit code, output)."""
    job = run_ranks(sum(slots), ["-m", "archzoo", *argv], backend, hosts=sim, slots=slots,
                    env=clean_env(), capture=True, timeout_s=timeout_s)
    return job.returncode, job.output


def finished(procs: list[subprocess.Popen], timeout_s: float) -> tuple[int, str]:
    """Launchers a test started one by one, each host its own way (a user's launch script,
    a host with another archzoo or other flags), waited for: (the first non-zero exit code,
    or 124 if they were killed at ``timeout_s``, else 0; their output)."""
    deadline = time.monotonic() + timeout_s
    try:
        codes = [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]
        code = next((c for c in codes if c), 0)
    except subprocess.TimeoutExpired:
        code = 124
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return code, "".join(p.stdout.read() for p in procs)


def link_bytes(host: SimHost) -> tuple[int, int]:
    """(received, transmitted) bytes of ``host``'s interface so far."""
    out = []
    for what in ("rx_bytes", "tx_bytes"):
        r = subprocess.run(host.argv(["cat", f"/sys/class/net/{host.iface}/statistics/{what}"]),
                           capture_output=True, text=True)
        out.append(int(r.stdout.strip() or 0))
    return out[0], out[1]


def until(cond, timeout_s: float, what: str) -> None:
    """Wait for ``cond()`` to hold (polled every 0.1 s); fail naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s:g}s"
        time.sleep(0.1)


def placed(summary: dict, sim: SimHosts, slots: list[int]) -> None:
    """Every rank ran on the host the launcher's order gives it."""
    want = [sim[i].name for i, k in enumerate(slots) for _ in range(k)]
    got = {int(r): p["netns"] for r, p in summary["hosts_by_rank"].items()}
    assert got == dict(enumerate(want)), got


# slots per host: 2 and 2, but IMPALA's learner alone on host 0 and its three actors on
# host 1 (the slots choose the placement)
SLOTS = {"impala": [1, 3]}


# each architecture on one launcher, the two taking turns (both launch every architecture's
# roles the same way, and each also runs the launch scripts, a server host and host B's
# death below)
ACROSS = [(arch, ("gloo", "mpi")[i % 2]) for i, arch in enumerate(SMOKE)]


@pytest.mark.parametrize("arch,backend", ACROSS, ids=["-".join(c) for c in ACROSS])
def test_every_architecture_across_two_hosts(hosts: SimHosts, tmp_path: Path, arch: str,
                                              backend: str) -> None:
    d = tmp_path / "run"
    slots = SLOTS.get(arch, [2, 2])
    before = link_bytes(hosts[1])
    code, out = cross(hosts, backend, slots,
                      ["run", arch, "--backend", backend, "--total-steps", "6000", "--quiet",
                       "--run-dir", str(d), *SMOKE[arch]], tmp_path)
    assert code == 0, out[-3000:]
    s = load_run(d)
    assert s["world_size"] == 4 and s["backend"] == backend
    assert s["launcher"] == ("torchrun" if backend == "gloo" else "mpiexec")
    placed(s, hosts, slots)
    rx, tx = (a - b for a, b in zip(link_bytes(hosts[1]), before, strict=True))
    assert rx > 50_000 and tx > 50_000, (rx, tx)  # the model out, the experience back


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_launch_scripts_across_two_hosts(hosts: SimHosts, tmp_path: Path, backend: str) -> None:
    """launch/torchrun.sh on each host (NNODES=2), launch/mpirun.sh with a host file: the
    commands docs/multinode.md gives for two machines."""
    d, repo = tmp_path / "run", Path(__file__).resolve().parent.parent
    flags = ["--total-steps", "6000", "--quiet", "--run-dir", str(d)]
    env = dict(clean_env(), PYTHON=sys.executable, IFACE="az0")
    if backend == "gloo":
        port = str(next(_PORTS))
        procs = [subprocess.Popen(h.argv(["bash", "launch/torchrun.sh", *flags]), cwd=repo,
                                  env=dict(env, NNODES="2", NODE_RANK=str(i), NPROC="2",
                                           MASTER_ADDR=hosts[0].addr, MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i, h in enumerate(hosts.hosts)]
    else:
        hostfile = tmp_path / "hosts.txt"
        hostfile.write_text(f"{hosts[0].name}:2\n{hosts[1].name}:2\n")
        procs = [subprocess.Popen(hosts[0].argv(["bash", "launch/mpirun.sh", *flags]), cwd=repo,
                                  env=dict(env, HOSTFILE=str(hostfile), NP="4",
                                           LAUNCHER_EXEC=hosts.launcher_exec,
                                           UCX_TLS="tcp,self", MPIR_CVAR_NOLOCAL="1"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    code, out = finished(procs, 120)
    assert code == 0, out[-3000:]
    placed(load_run(d), hosts, [2, 2])


@pytest.mark.parametrize("arch,backend,servers", [("impala", "gloo", 1), ("apex", "mpi", 2)])
def test_servers_on_the_last_host(hosts: SimHosts, tmp_path: Path, arch: str, backend: str,
                                  servers: int) -> None:
    """``--servers-on last``: archzoo's ranks rotate so its servers (IMPALA's learner;
    Ape-X's learner and replay shard) run on the launcher's last processes, on host 1, and
    the run directory is written there (by archzoo's rank 0)."""
    d = tmp_path / "run"
    code, out = cross(hosts, backend, [2, 2],
                      ["run", arch, "--backend", backend, "--servers-on", "last",
                       "--total-steps", "6000", "--quiet", "--run-dir", str(d),
                       *SMOKE[arch]], tmp_path)
    assert code == 0, out[-3000:]
    s = load_run(d)
    got = {int(r): p["netns"] for r, p in s["hosts_by_rank"].items()}
    started = [hosts[0].name] * 2 + [hosts[1].name] * 2  # by the launcher's rank
    assert got == {(p + servers) % 4: ns for p, ns in enumerate(started)}, got
    assert all(got[r] == hosts[1].name for r in range(servers)), got


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_host_b_dies(hosts: SimHosts, tmp_path: Path, backend: str) -> None:
    """Every process on host 1 (two actors, their launcher) is killed mid-run.

    torchrun: async IMPALA's learner on host 0 carries on with the actor there and ends
    the run (summary.json counts the two dead actors); node 0's torchrun agent then waits
    in its exit barrier for the dead node's agent (300 s, fixed in torch), so the test
    ends it once its workers are gone. mpiexec: hydra ends the whole job when a host's
    proxy dies, as on one machine. Either way no process is left on either host."""
    d = tmp_path / "run"
    argv = ["-m", "archzoo", "run", "impala", "--backend", backend, "--mode", "async",
            "--total-steps", "10000000", "--time-limit", "15", "--comm-timeout", "10",
            "--quiet", "--run-dir", str(d)]
    killed = threading.Event()
    looked = [0.0]

    def agent_alone() -> int | None:
        """gloo, once host 1 is dead and host 0's workers have ended: stop node 0's agent,
        which sits in its exit barrier."""
        if backend != "gloo" or not killed.is_set() or time.time() - looked[0] < 0.2:
            return None
        looked[0] = time.time()
        return signal.SIGTERM if len(hosts[0].pids()) <= 1 else None

    out: dict[str, Group] = {}
    job_thread = threading.Thread(target=lambda: out.update(job=run_ranks(
        4, argv, backend, hosts=hosts, slots=[2, 2], env=clean_env(), capture=True,
        timeout_s=120, stop=agent_alone)))
    job_thread.start()
    try:
        # the run is under way (a metrics row: the actors' first episodes are in) with host
        # 1's launcher and its two actors running
        until(lambda: (d / "metrics.csv").exists()
              and len((d / "metrics.csv").read_text().splitlines()) >= 2, 60,
              "a metrics row")
        until(lambda: len(hosts[1].pids()) >= 3, 10, "host 1's launcher and two actors")
        for pid in hosts[1].pids():
            subprocess.run(["kill", "-9", str(pid)], capture_output=True)
    finally:
        killed.set()
        job_thread.join(150)
    job = out["job"]
    assert not job.timed_out, job.output[-2000:]
    if backend == "gloo":  # the workers on host 0 ended; the agent was stopped
        assert job.stopped == signal.SIGTERM, job.output[-2000:]
        s = json.loads((d / "summary.json").read_text())
        assert s["stop_reason"] in ("time", "target"), (s["stop_reason"], job.output[-2000:])
        assert {int(r) for r in s["dead_actors"]} == {2, 3}, s["dead_actors"]
    else:  # hydra ended the job
        assert job.returncode != 0, job.output[-2000:]
    deadline = time.time() + 10  # what hydra killed as the job ended may take a moment
    while (hosts[0].pids() or hosts[1].pids()) and time.time() < deadline:
        time.sleep(0.2)
    left = hosts[0].pids() + hosts[1].pids()
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
                      for p in left if Path(f"/proc/{p}").exists()]


def test_wrong_master_addr_is_named(hosts: SimHosts, tmp_path: Path) -> None:
    """Node 1 given an address where no rendezvous listens: one line naming the address,
    non-zero exit, no hang."""
    env = dict(multinode.cross_env("gloo", clean_env()), NNODES="2", NODE_RANK="1",
               MASTER_ADDR="10.213.0.77", MASTER_PORT=str(next(_PORTS)), NPROC="1",
               ARCHZOO_RDZV_TIMEOUT="5", PYTHON=sys.executable)
    r = subprocess.run(hosts[1].argv(["bash", "launch/torchrun.sh", "--quiet"]), env=env,
                       capture_output=True, text=True, timeout=60,  # a hang fails here
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode != 0
    assert "10.213.0.77" in r.stderr and "MASTER_ADDR" in r.stderr, r.stderr[-2000:]


def test_rendezvous_timeout_is_named(hosts: SimHosts) -> None:
    """Node 0 started, node 1 never: torchrun gives up after ARCHZOO_RDZV_TIMEOUT and the
    launch script's last line says what to check."""
    env = dict(multinode.cross_env("gloo", clean_env()), NNODES="2", NODE_RANK="0",
               MASTER_ADDR=hosts[0].addr, MASTER_PORT=str(next(_PORTS)), NPROC="1",
               ARCHZOO_RDZV_TIMEOUT="5", PYTHON=sys.executable)
    r = subprocess.run(hosts[0].argv(["bash", "launch/torchrun.sh", "--quiet"]), env=env,
                       capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parent.parent)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last.startswith("archzoo: error: node 0:"), r.stderr[-2000:]
    assert f"{hosts[0].addr}:" in last and "NNODES" in last


def test_unreachable_mpi_host_is_named(hosts: SimHosts, tmp_path: Path) -> None:
    """A host file naming a host that cannot be started: hydra's error, non-zero, no hang."""
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text(f"{hosts[0].name}:2\nnosuchhost:2\n")
    cmd = hosts[0].argv([multinode._beside_python("mpiexec"), "-f", str(hostfile), "-n", "4",
                         "-launcher", "ssh", "-launcher-exec", hosts.launcher_exec,
                         "-iface", "az0", sys.executable, "-m", "archzoo", "run", "impala",
                         "--backend", "mpi", "--quiet", "--run-dir", str(tmp_path / "run")])
    r = subprocess.run(cmd, env=multinode.cross_env("mpi", clean_env()), capture_output=True,
                       text=True, timeout=90)
    assert r.returncode != 0
    assert "nosuchhost" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]


def test_other_archzoo_version_is_refused(hosts: SimHosts, tmp_path: Path) -> None:
    """Host 1 imports a copy of archzoo with another version: rank 0 names the rank, its
    host and both versions, and the run ends non-zero."""
    root = Path(__file__).resolve().parent.parent
    copy = tmp_path / "other"
    for pkg in ("archzoo", "actors", "learners", "replay", "paramserver"):
        shutil.copytree(root / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "archzoo" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "9.9.9+'))
    port = next(_PORTS)
    cmds = multinode.torchrun_commands(hosts, [2, 2], ["-m", "archzoo", "run", "impala",
                                                       "--quiet", "--run-dir",
                                                       str(tmp_path / "run")], port)
    base = multinode.cross_env("gloo", clean_env())
    procs = [subprocess.Popen(cmds[0], env=base, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True),
             subprocess.Popen(cmds[1], env=dict(base, PYTHONPATH=str(copy)), cwd=copy,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    code, out = finished(procs, 90)
    assert code not in (0, 124), out[-3000:]
    assert "9.9.9+" in out and "install the same archzoo on every host" in out, out[-3000:]


def test_bench_comm_across_a_shaped_link(tmp_path: Path) -> None:
    """``archzoo bench comm --link loopback,netns:1gbit``: the same collectives on both
    links, counted by the formulas, tabulated and fitted apart."""
    r = subprocess.run([sys.executable, "-m", "archzoo", "bench", "comm", "--backend", "gloo,mpi",
                        "--procs", "2", "--sizes", "64KiB", "--ops", "broadcast",
                        "--topologies", "star,tree,native", "--iters", "3", "--repeats", "1",
                        "--link", "loopback,netns:1gbit", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    import csv

    rows = list(csv.DictReader(open(tmp_path / "comm.csv")))
    links = {(x["backend"], x["link"]) for x in rows}
    assert links == {(b, k) for b in ("gloo", "mpi") for k in ("loopback", "netns:1gbit")}
    assert all(x["counts_ok"] in ("True", "") for x in rows)
    assert "## gloo over netns:1gbit broadcast" in r.stdout
    assert "mpi over netns:1gbit: α =" in r.stdout


def test_study_with_actors_on_the_other_host(tmp_path: Path) -> None:
    """``archzoo study --link netns``: the learner alone on host 0, the actors on host 1."""
    r = subprocess.run([sys.executable, "-m", "archzoo", "study", "--arch", "impala",
                        "--actors", "2", "--topology", "star", "--link", "netns:1gbit",
                        "--out", str(tmp_path), "--", "--total-steps", "6000"],
                       capture_output=True, text=True, timeout=300, env=clean_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    import csv

    (row,) = list(csv.DictReader(open(tmp_path / "study.csv")))
    assert row["link"] == "netns:1gbit" and row["exit_code"] == "0" and float(row["fps"]) > 0
    s = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
    netns = {int(k): v["netns"] for k, v in s["hosts_by_rank"].items()}
    assert netns[0] != netns[1] == netns[2]


def test_other_flags_on_host_b_are_refused(hosts: SimHosts, tmp_path: Path) -> None:
    """Node 1 started with another --hidden: its messages' schemas differ, and rank 0 names
    the rank and the schema before any training."""
    port = next(_PORTS)
    argv = ["-m", "archzoo", "run", "impala", "--quiet", "--run-dir", str(tmp_path / "run")]
    cmds = [multinode.torchrun_commands(hosts, [2, 2], argv, port)[0],
            multinode.torchrun_commands(hosts, [2, 2], [*argv, "--hidden", "32"], port)[1]]
    procs = [subprocess.Popen(c, env=multinode.cross_env("gloo", clean_env()),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in cmds]
    code, out = finished(procs, 90)
    assert code not in (0, 124), out[-3000:]
    assert "rank 2's 'params' message schema differs from rank 0's" in out, out[-3000:]
