"""Simulated hosts on one machine: network namespaces joined by a switch.

Each host is a network namespace with loopback and one interface, ``az0``, on a private
subnet (``10.213.0.0/24``) that exists only inside these namespaces; a further namespace
holds the bridge (the switch) that every host's veth pair plugs into. ``rate`` shapes each
host's uplink with a token bucket (``tc qdisc ... tbf``), e.g. ``"1gbit"``: this kernel has
no delay emulation (netem), so the link has a bandwidth, not a latency.

Processes run on a host with :meth:`SimHost.argv` (``ip netns exec NAME ...``); they share
the machine's file system, so a test that wants two machines' worth of isolation must
keep its ranks from relying on it. Everything is removed on :meth:`SimHosts.down` (the
context manager calls it on every exit path, processes still inside are killed first).

Needs root and iproute2's ``ip`` and ``tc``: :func:`unavailable` says why not, or None.

As a script (``launch/simhosts.sh`` wraps it)::

    python -m archzoo.simhosts up --hosts 2 --rate 1gbit   # prints the hosts, then waits
    python -m archzoo.simhosts down --prefix az            # remove leftovers
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

IFACE = "az0"
SUBNET = "10.213.0"
_LAUNCH_SCRIPT = """#!/bin/sh
# hydra's ssh launcher calls: SCRIPT -x HOST CMD...; run CMD in network namespace HOST
[ "$1" = "-x" ] && shift
host=$1
shift
if [ ! -e "/run/netns/$host" ]; then
    # like ssh: name the host, exit 255; pause first so that hydra forwards this line
    # before it sees the exit (under load it may otherwise print only its own error)
    echo "netns-launch: could not resolve hostname $host: no such simulated host" >&2
    sleep 1
    exit 255
fi
exec ip netns exec "$host" sh -c "$*"
"""


class SimHostsError(RuntimeError):
    """A namespace, link or qdisc could not be made."""


def unavailable() -> str | None:
    """Why simulated hosts cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool!r} (iproute2) is not installed"
    probe = f"azprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SimHostsError(f"ip {' '.join(args)}: {r.stderr.strip()}")


@dataclass(frozen=True)
class SimHost:
    """One simulated host: its namespace, its address on the shared subnet."""

    name: str
    addr: str
    iface: str = IFACE

    def argv(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def pids(self) -> list[int]:
        r = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]


class SimHosts:
    """``n`` hosts on one switch; a context manager that removes them on exit."""

    def __init__(self, n: int = 2, rate: str | None = None, prefix: str | None = None) -> None:
        if not 2 <= n <= 200:
            raise ValueError(f"simulated hosts: 2 to 200 hosts, not {n}")
        self.prefix = prefix or f"az{os.getpid()}"
        self.rate = rate
        self.hosts = [SimHost(f"{self.prefix}h{i}", f"{SUBNET}.{i + 1}") for i in range(n)]
        self.switch = f"{self.prefix}sw"
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def scratch(self) -> Path:
        """A directory for files the hosts' launchers need (removed by :meth:`down`)."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="archzoo-simhosts-")
        return Path(self._tmp.name)

    @property
    def launcher_exec(self) -> str:
        """A script for MPICH hydra's ``-launcher ssh -launcher-exec``: hydra calls it as
        ``SCRIPT -x HOST CMD...``, and it runs CMD inside namespace HOST (no ssh server)."""
        path = self.scratch / "netns-launch"
        if not path.exists():
            path.write_text(_LAUNCH_SCRIPT)
            path.chmod(0o755)
        return str(path)

    def __enter__(self) -> SimHosts:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __getitem__(self, i: int) -> SimHost:
        return self.hosts[i]

    def up(self) -> None:
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i, h in enumerate(self.hosts):
                _ip("netns", "add", h.name)
                _ip("-n", h.name, "link", "set", "lo", "up")
                _ip("link", "add", h.iface, "netns", h.name, "type", "veth",
                    "peer", "name", f"p{i}", "netns", self.switch)
                _ip("-n", h.name, "addr", "add", f"{h.addr}/24", "dev", h.iface)
                _ip("-n", h.name, "link", "set", h.iface, "up")
                _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0")
                _ip("-n", self.switch, "link", "set", f"p{i}", "up")
                if self.rate:
                    self._shape(h, self.rate)
        except BaseException:
            self.down()
            raise

    def _shape(self, h: SimHost, rate: str) -> None:
        """A token bucket on the host's uplink: ``rate``, a burst of 1 ms at that rate."""
        cmd = ["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface, "root",
               "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SimHostsError(f"tc tbf on {h.name}: {r.stderr.strip()}")

    def down(self) -> None:
        """Kill what still runs on the hosts, remove the namespaces (and with them the links)."""
        for name in [h.name for h in self.hosts] + [self.switch]:
            remove_netns(name)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @staticmethod
    def leftovers(prefix: str) -> list[str]:
        """Namespaces whose names start with ``prefix`` (left by a run that was killed)."""
        d = Path("/run/netns")
        return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix)) \
            if d.is_dir() else []


def remove_netns(name: str) -> None:
    """Kill the processes inside namespace ``name``, then delete it (if it exists)."""
    if not Path("/run/netns", name).exists():
        return
    for _ in range(40):
        pids = SimHost(name, "").pids()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def netns_name() -> str | None:
    """The name (``ip netns``) of this process's network namespace, or None for the
    machine's own or an unnamed one."""
    try:
        mine = os.stat("/proc/self/ns/net")
        d = Path("/run/netns")
        for p in d.iterdir() if d.is_dir() else []:
            st = os.stat(p)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                return p.name
    except OSError:
        pass
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m archzoo.simhosts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="make the hosts, print them, wait for Ctrl-C, remove them")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--rate", default=None, help="shape each uplink, e.g. 1gbit")
    up.add_argument("--prefix", default="az")
    down = sub.add_parser("down", help="remove hosts left behind")
    down.add_argument("--prefix", default="az")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "down":
        for name in SimHosts.leftovers(args.prefix):
            remove_netns(name)
            print(f"removed {name}")
        return 0
    why = unavailable()
    if why:
        print(f"simhosts: {why}", file=sys.stderr)
        return 2
    with SimHosts(args.hosts, args.rate, args.prefix) as sh:
        for h in sh.hosts:
            print(f"{h.name} {h.addr} dev {h.iface}" + (f" rate {args.rate}" if args.rate
                                                           else ""), flush=True)
        print("ready; Ctrl-C removes them", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
