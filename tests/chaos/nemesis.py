"""Named nemeses: each a fault with a start (which returns the target it chose) and a stop.

Partitions are iptables drops between the namespaces (tests.chaos.netns); the rest act on
processes, clocks and disks. Targets are drawn with the campaign's seeded `Random`, and
"the leader" / "the controller" are read from etcd at the start of the fault.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.hosts import BROKERS, SESSION_MS, ChaosCluster
from tests.integration.disks import FILLER, fill, free

Start = Callable[[ChaosCluster, random.Random], str]
Stop = Callable[[ChaosCluster, str], None]  # given the target its start returned


@dataclass(frozen=True, slots=True)
class Nemesis:
    name: str
    start: Start
    stop: Stop
    about: str


def _heal(cluster: ChaosCluster, _target: str) -> None:
    cluster.net.heal()


def _any_broker(rng: random.Random) -> str:
    return rng.choice(BROKERS)


def _leader(cluster: ChaosCluster, rng: random.Random) -> str:
    leaders = [n for key, n in sorted(cluster.view().get("leaders", {}).items())
               if key.startswith(("queue/", "txn/")) and n > 0]
    name = cluster.name_of(rng.choice(leaders)) if leaders else None
    return name or _any_broker(rng)


def _controller(cluster: ChaosCluster, rng: random.Random) -> str:
    return cluster.name_of(cluster.view().get("controller")) or _any_broker(rng)


def _others(*names: str) -> list[str]:
    return [h for h in ("etcd", *BROKERS, "client") if h not in names]


# -- partitions ----------------------------------------------------------------------------


def isolate_one(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    cluster.net.isolate([[b], _others(b)])
    return b


def leader_from_etcd(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _leader(cluster, rng)
    cluster.net.cut(b, "etcd")
    return b


def controller_from_etcd(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _controller(cluster, rng)
    cluster.net.cut(b, "etcd")
    return b


def majority_minority(cluster: ChaosCluster, rng: random.Random) -> str:
    """One broker alone on the minority side; the clients still reach both sides."""
    minority = _any_broker(rng)
    majority = [b for b in ("etcd", *BROKERS) if b != minority]
    cluster.net.isolate([[minority], majority])
    return f"{minority} | {','.join(majority)}"


def ring(cluster: ChaosCluster, rng: random.Random) -> str:
    """etcd and the brokers in a shuffled ring: each reaches only its two neighbours."""
    nodes = ["etcd", *BROKERS]
    rng.shuffle(nodes)
    for i, a in enumerate(nodes):
        for b in nodes[i + 2:]:
            if not (i == 0 and b == nodes[-1]):
                cluster.net.cut(a, b)
    return "-".join(nodes)


def one_way(cluster: ChaosCluster, rng: random.Random) -> str:
    """What one broker sends to etcd and the other brokers is dropped; what it receives is not."""
    b = _any_broker(rng)
    for other in ("etcd", *BROKERS):
        if other != b:
            cluster.net.drop(b, other)
    return f"{b} ->x"


def clients_from_leader(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _leader(cluster, rng)
    cluster.net.cut("client", b)
    return b


# -- processes, clocks, disks ------------------------------------------------------------------


def _host(target: str) -> str:
    return target.split()[0]


def pause(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    cluster.brokers[b].pause()
    return b


def resume(cluster: ChaosCluster, target: str) -> None:
    cluster.brokers[target].resume()


def kill_restart(cluster: ChaosCluster, rng: random.Random) -> str:
    """kill -9 and an immediate restart, as a supervisor does (within the session timeout)."""
    b = _any_broker(rng)
    cluster.brokers[b].kill9()
    cluster.brokers[b].start(timeout=40)
    return b


def kill(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    cluster.brokers[b].kill9()
    return b


def restart(cluster: ChaosCluster, target: str) -> None:
    cluster.brokers[_host(target)].start(timeout=40)


def kill_long(cluster: ChaosCluster, rng: random.Random) -> str:
    """kill -9, and the fault holds only once etcd has dropped the broker's registration (its
    session timed out): the cluster has moved on without it, and it comes back as a returning
    broker rather than within its own session."""
    b = _any_broker(rng)
    node_id = BROKERS.index(b) + 1
    cluster.brokers[b].kill9()
    started = time.monotonic()
    deadline = started + 10 * SESSION_MS / 1000
    while node_id in cluster.view().get("brokers", [node_id]):
        if time.monotonic() > deadline:
            return f"{b} still registered after {time.monotonic() - started:.1f}s"
        time.sleep(0.3)
    return f"{b} lapsed after {time.monotonic() - started:.1f}s"


def skew(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    seconds = rng.choice([-1, 1]) * rng.randint(5, 300)
    cluster.brokers[b].skew(seconds)
    return f"{b} {seconds:+d}s"


def unskew(cluster: ChaosCluster, target: str) -> None:
    cluster.brokers[_host(target)].skew(0)  # a jump back while it runs


class _Jumps:
    """A broker's realtime clock jumping while it runs: every `every_s`, the next offset of an
    alternating sequence (ahead, behind, ahead, ...); libfaketime re-reads its file each second."""

    running: dict[str, _Jumps] = {}

    def __init__(self, cluster: ChaosCluster, broker: str, offsets: list[int], every_s: float) -> None:
        self.broker, self.offsets, self.every_s = cluster.brokers[broker], offsets, every_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.done.is_set():
            self.broker.skew(self.offsets[i % len(self.offsets)])
            i += 1
            self.done.wait(self.every_s)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        self.broker.skew(0)


def clock_jumps(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    offsets = [sign * rng.randint(5, 300) for _ in range(4) for sign in (1, -1)]
    jumps = _Jumps(cluster, b, offsets, every_s=1.0)
    _Jumps.running[b] = jumps
    jumps.thread.start()
    return f"{b} {'/'.join(f'{o:+d}' for o in offsets)}s"


def clock_jumps_stop(cluster: ChaosCluster, target: str) -> None:
    _Jumps.running.pop(_host(target)).stop()


def _disk(cluster: ChaosCluster, broker: str) -> Path:
    return Path(str(cluster.brokers[broker].config["log.dirs"])).parent


def fill_disk(cluster: ChaosCluster, rng: random.Random) -> str:
    b = _any_broker(rng)
    fill(_disk(cluster, b))
    return b


def free_disk(cluster: ChaosCluster, target: str) -> None:
    free(_disk(cluster, target) / FILLER)


def etcd_down(cluster: ChaosCluster, rng: random.Random) -> str:
    cluster.etcd.pause()
    return "etcd"


def etcd_up(cluster: ChaosCluster, _target: str) -> None:
    cluster.etcd.resume()


NEMESES = {n.name: n for n in (
    Nemesis("isolate-broker", isolate_one, _heal, "one broker cut from everyone"),
    Nemesis("leader-from-etcd", leader_from_etcd, _heal, "a partition leader cut from etcd only"),
    Nemesis("controller-from-etcd", controller_from_etcd, _heal, "the controller cut from etcd only"),
    Nemesis("majority-minority", majority_minority, _heal, "one broker vs the rest and etcd"),
    Nemesis("ring", ring, _heal, "each of etcd and the brokers sees only its two neighbours"),
    Nemesis("one-way", one_way, _heal, "a broker's outgoing packets to the cluster dropped"),
    Nemesis("clients-from-leader", clients_from_leader, _heal, "the clients cut from a leader"),
    Nemesis("pause", pause, resume, "SIGSTOP a broker beyond session and lag timeouts"),
    Nemesis("kill-restart", kill_restart, lambda c, t: None, "kill -9 and an immediate restart"),
    Nemesis("kill", kill, restart, "kill -9, restarted when the fault ends"),
    Nemesis("kill-long", kill_long, restart,
            "kill -9, down until etcd dropped its registration and the fault ends, then restarted"),
    Nemesis("clock-skew", skew, unskew, "a broker's realtime clock 5-300 s ahead or behind"),
    Nemesis("clock-jumps", clock_jumps, clock_jumps_stop,
            "a broker's realtime clock jumping each second while it runs, 5-300 s ahead then behind"),
    Nemesis("full-disk", fill_disk, free_disk, "a broker's data dir (tmpfs) full"),
    Nemesis("etcd-down", etcd_down, etcd_up, "etcd paused beyond the session timeout"),
)}
