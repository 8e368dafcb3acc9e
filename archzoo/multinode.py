"""One job across several hosts: torchrun on every host (gloo), or one mpiexec (MPI).

The commands are the ones docs/multinode.md gives for real machines; here they run on
:mod:`archzoo.simhosts` namespaces, started and watched by :func:`archzoo.spawn.run_ranks`
(``hosts=``, ``slots=``), which is how the tests, ``archzoo bench comm --link`` and
``archzoo study --link`` cross a (simulated) machine boundary.

Placement is by rank: both launchers number the ranks host by host (torchrun: node 0's
processes first; hydra: the host file's order and slots), and every architecture gives the
lowest ranks its servers (learner, replay and parameter-server shards, inference server),
so they land on the first host. ``slots`` (processes per host) is how a user chooses
otherwise: ``[1, 8]`` puts the learner alone on host 0 and the 8 actors on host 1.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from archzoo.simhosts import IFACE, SimHosts


def spread(n: int, hosts: int) -> list[int]:
    """``n`` processes over ``hosts`` hosts as evenly as they go, the first hosts fuller."""
    if hosts < 1 or n < hosts:
        raise ValueError(f"{n} processes cannot fill {hosts} hosts")
    return [n // hosts + (1 if i < n % hosts else 0) for i in range(hosts)]


def cross_env(backend: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a job that crosses hosts: gloo on the hosts' interface; MPICH over
    TCP only, never shared memory (ch4 would use it between namespaces of one machine)."""
    env = dict(os.environ if base is None else base, PYTHONUNBUFFERED="1")
    if backend == "gloo":
        env["GLOO_SOCKET_IFNAME"] = IFACE
    else:
        env.update(UCX_TLS="tcp,self", UCX_NET_DEVICES=IFACE, MPIR_CVAR_NOLOCAL="1")
    return env


def _beside_python(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found beside {sys.executable} or on PATH")
    return found


def torchrun_commands(sim: SimHosts, slots: Sequence[int], module_argv: Sequence[str],
                      port: int = 29500) -> list[list[str]]:
    """One ``torchrun`` per host (node ``i`` runs ``slots[i]`` processes), the rendezvous
    at host 0's address; ``module_argv`` is e.g. ``["-m", "archzoo", "run", "impala"]``."""
    exe = _beside_python("torchrun")
    return [h.argv([exe, "--nnodes", str(len(slots)), "--node_rank", str(i),
                    "--nproc_per_node", str(k), "--master_addr", sim[0].addr,
                    "--master_port", str(port), *module_argv])
            for i, (h, k) in enumerate(zip(sim.hosts, slots, strict=False))]


def mpiexec_command(sim: SimHosts, slots: Sequence[int], module_argv: Sequence[str]) -> list[str]:
    """hydra started on host 0 with a host file (``NAME:slots`` per line, in the hosts'
    scratch directory) and the namespace launcher in place of ssh; ``module_argv`` follows
    ``python``."""
    hostfile = sim.scratch / "hosts.txt"
    hostfile.write_text("".join(f"{h.name}:{k}\n" for h, k in zip(sim.hosts, slots,
                                                                   strict=False) if k))
    return sim[0].argv([_beside_python("mpiexec"), "-f", str(hostfile), "-n", str(sum(slots)),
                        "-launcher", "ssh", "-launcher-exec", sim.launcher_exec,
                        "-iface", IFACE, "-genvall", sys.executable, *module_argv])


def commands(sim: SimHosts, slots: Sequence[int], backend: str, module_argv: Sequence[str],
             port: int = 29500) -> list[list[str]]:
    """The launcher commands of one job: a torchrun per host (gloo), or one mpiexec (MPI)."""
    if backend == "gloo":
        return torchrun_commands(sim, slots, module_argv, port)
    return [mpiexec_command(sim, slots, module_argv)]


def reach(addr: str, port: int, timeout_s: float) -> str | None:
    """Try a TCP connection to ``addr:port`` until it succeeds or ``timeout_s`` passes
    (node 0 may not be listening yet); None when it did, else the last error."""
    deadline = time.monotonic() + timeout_s
    last = "no attempt"
    while True:
        try:
            with socket.create_connection((addr, port), timeout=min(5.0, timeout_s)):
                return None
        except OSError as e:
            last = e.strerror or str(e)
        if time.monotonic() > deadline:
            return last
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """``python -m archzoo.multinode reach ADDR PORT [SECONDS]``: launch/torchrun.sh's check,
    on every node but node 0, that the rendezvous answers before torchrun waits on it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (3, 4) or args[0] != "reach":
        print("usage: python -m archzoo.multinode reach ADDR PORT [SECONDS]", file=sys.stderr)
        return 2
    addr, port = args[1], int(args[2])
    timeout_s = float(args[3]) if len(args) == 4 else 120.0
    why = reach(addr, port, timeout_s)
    if why is None:
        return 0
    node = os.environ.get("NODE_RANK", "?")
    print(f"archzoo: error: node {node} cannot reach the rendezvous at MASTER_ADDR={addr} "
          f"MASTER_PORT={port} within {timeout_s:g} s ({why}): check that MASTER_ADDR is "
          "node 0's address on a network this host reaches, that node 0 has started, and "
          "that no firewall blocks the port", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
