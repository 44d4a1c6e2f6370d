"""Hosts that can be cut apart: one network namespace per host on a bridge of our own.

`Network` makes, for a run, a namespace holding only a bridge, and for each host a
namespace joined to that bridge by a veth pair, with an address of a private /24 that
exists only inside these namespaces (nothing is ever sent elsewhere: the root namespace
gets no interface, no route, no rule). A process runs on a host through `ip netns exec`.
Partitions are iptables DROP rules inside the namespaces; `heal` flushes them all.
`close` deletes every namespace (their veths and rules go with them), also after a
failure, and `sweep` removes what a killed run of the same id left behind. A run holds its
id (`claim`) while it runs, so a second campaign given the same id stops with one line
instead of sweeping away the first one's namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NewType

HostName = NewType("HostName", str)
SUBNET = "10.222.{run}.{host}"
PREFIX = "gch"  # every namespace of ours starts with it
CLAIMS = Path(tempfile.gettempdir())  # gregor-chaos-<run id>.lock: flock-ed by the run holding the id


class RunIdTaken(Exception):
    """Another live process holds this run id (its namespaces are in use)."""


def require_tools() -> None:
    """Fail (never skip) without root, ip or iptables: `make chaos-deps` installs them."""
    missing = [t for t in ("ip", "iptables") if shutil.which(t) is None]
    if missing:
        raise AssertionError(f"missing {missing}: run `make chaos-deps` (scripts/chaos-deps.sh)")
    if os.geteuid() != 0:
        raise AssertionError("network namespaces need root")


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True, slots=True)
class Host:
    name: HostName
    namespace: str
    address: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    def ns(self, *command: str) -> str:
        return run(*self.exec_prefix(), *command)


class Network:
    def __init__(self, names: list[str], run_id: int) -> None:
        require_tools()
        self.run_id = run_id
        self.bridge_ns = f"{PREFIX}{run_id}-br"
        self.hosts: dict[HostName, Host] = {}
        try:
            self._make_bridge()
            for i, name in enumerate(names, start=1):
                self._add_host(HostName(name), i)
        except BaseException:
            self.close()
            raise

    def _make_bridge(self) -> None:
        run("ip", "netns", "add", self.bridge_ns)
        run("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")

    def _add_host(self, name: HostName, index: int) -> None:
        namespace = f"{PREFIX}{self.run_id}-{name}"
        address = SUBNET.format(run=self.run_id, host=index)
        run("ip", "netns", "add", namespace)
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        outer = f"v{index}"
        run("ip", "-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", outer,
            "netns", self.bridge_ns)
        run("ip", "-n", self.bridge_ns, "link", "set", outer, "master", "br0", "up")
        run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        run("ip", "-n", namespace, "link", "set", "eth0", "up")
        self.hosts[name] = Host(name, namespace, address)

    def host(self, name: str) -> Host:
        return self.hosts[HostName(name)]

    # -- partitions ------------------------------------------------------------------------

    def drop(self, source: str, destination: str) -> None:
        """Packets from `source` no longer reach `destination` (one way)."""
        src, dst = self.host(source), self.host(destination)
        dst.ns("iptables", "-A", "INPUT", "-s", src.address, "-j", "DROP")
        src.ns("iptables", "-A", "OUTPUT", "-d", dst.address, "-j", "DROP")

    def cut(self, a: str, b: str) -> None:
        self.drop(a, b)
        self.drop(b, a)

    def isolate(self, groups: list[list[str]]) -> None:
        """Each host reaches only the hosts of its own group (hosts in no group: everyone)."""
        for i, group in enumerate(groups):
            for other in groups[i + 1:]:
                for a in group:
                    for b in other:
                        self.cut(a, b)

    def heal(self) -> None:
        for host in self.hosts.values():
            host.ns("iptables", "-F")

    def close(self) -> None:
        for host in list(self.hosts.values()):
            _delete(host.namespace)
        self.hosts.clear()
        _delete(self.bridge_ns)


def _delete(namespace: str) -> None:
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@contextlib.contextmanager
def claim(run_id: int) -> Iterator[None]:
    """Hold `run_id` while the block runs: an exclusive flock on its claim file (the kernel
    drops it when the process ends, even by kill -9), the holder's pid written in it."""
    with open(CLAIMS / f"gregor-chaos-{run_id}.lock", "a+") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            raise RunIdTaken(f"run id {run_id} is in use by another campaign (pid {holder}); "
                             "give this one another --run-id") from None
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def free_run_id(first: int, last: int) -> int:
    """The first run id in [first, last] no live process holds (for tests that share a machine)."""
    for run_id in range(first, last + 1):
        with contextlib.suppress(RunIdTaken), claim(run_id):
            return run_id
    raise AssertionError(f"every run id from {first} to {last} is in use")


def sweep(run_id: int) -> None:
    """Delete the namespaces a killed run with this id left behind (never another run's)."""
    mine = f"{PREFIX}{run_id}-"
    for line in run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(mine):
            _delete(name)


@contextlib.contextmanager
def network(names: list[str], run_id: int) -> Iterator[Network]:
    net = Network(names, run_id)
    try:
        yield net
    finally:
        net.close()
