"""The cluster under test on hosts that can be cut apart: etcd, three brokers and the
clients, each in its own network namespace (tests.chaos.netns), each broker's data dir on
a small tmpfs of its own (the full-disk nemesis) and its realtime clock behind libfaketime
driven by a file (the clock nemesis writes "+90" or "-60" there; the monotonic clock stays
true, as with a skewed NTP). Waits are short by configuration, as in tests/integration."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.chaos.netns import Host, Network
from tests.integration.disks import small_tmpfs
from tests.integration.etcd import EtcdProcess
from tests.integration.harness import BrokerProcess, api_versions_answered

BROKERS = ("n1", "n2", "n3")
HOSTS = ("etcd", *BROKERS, "client")
PORT = 9092
SESSION_MS = 2000
LAG_MS = 2000
# Each broker's data dir (a tmpfs: RAM only as far as it is written). The workloads' data stays
# (the checker reads it all at the end): seed 112 wrote 190 MiB to each broker in 82 minutes,
# filled the 192 MiB it had then, and a broker could not start again. 1 GiB holds some 7 hours
# of that; the full-disk nemesis fills what is left, in under a second.
DISK_MB = 1024
# Kafka 4's smallest segment (KIP-1030). With the default flush settings a log's recovery point
# moves only when a segment rolls, and recovery after kill -9 re-validates from the segment
# holding it, as Kafka's does: with the default 1 GiB that was all of a partition's data, so
# recovery grew with the run (seed 106's brokers: 2.6 s at minute 4, 6 s at minute 12). Small
# segments also make the faults meet segment rolls, producer snapshots and the cleaner of the
# compacted internal topics.
SEGMENT_BYTES = 1 << 20
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


class NamespacedBroker(BrokerProcess):
    """A broker on its own host: its address, `ip netns exec`, a clock file for libfaketime."""

    def __init__(self, workdir: Path, host: Host, node_id: int, overrides: dict[str, Any]) -> None:
        super().__init__(workdir, {**overrides, "listeners": f"PLAINTEXT://{host.address}:{PORT}"},
                         node_id=node_id, port=PORT)
        self.host = host
        self.wrapper = host.exec_prefix()
        self.clock_file = workdir / "faketime"
        self.clock_file.write_text("+0\n")
        self.env = {
            "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME_TIMESTAMP_FILE": str(self.clock_file),
            "FAKETIME_CACHE_DURATION": "1", "DONT_FAKE_MONOTONIC": "1",
        }

    @property
    def bootstrap(self) -> str:
        return f"{self.host.address}:{PORT}"

    def answers(self) -> bool:
        return api_versions_answered(self.host.address, PORT, self.wrapper)

    def skew(self, seconds: int) -> None:
        self.clock_file.write_text(f"{seconds:+d}\n")


class ChaosCluster:
    def __init__(self, base: Path, run_id: int) -> None:
        if not FAKETIME_LIB.exists():
            raise AssertionError(f"libfaketime missing ({FAKETIME_LIB}): run `make chaos-deps`")
        self._stack = contextlib.ExitStack()
        self.brokers: dict[str, NamespacedBroker] = {}
        try:
            self.net = self._stack.enter_context(_closing(Network(list(HOSTS), run_id)))
            etcd = self.net.host("etcd")
            self.etcd = EtcdProcess(base / "etcd", host=etcd.address, wrapper=etcd.exec_prefix())
            self._stack.callback(self.etcd.close)
            self.etcd.start()
            self.url = f"{self.etcd.url}/chaos"
            for node_id, name in enumerate(BROKERS, start=1):
                self._add_broker(base, name, node_id)
        except BaseException:
            self.close()
            raise

    def _add_broker(self, base: Path, name: str, node_id: int) -> None:
        disk = self._stack.enter_context(small_tmpfs(base / f"{name}-disk", DISK_MB))
        broker = NamespacedBroker(base / name, self.net.host(name), node_id, {
            "metadata.store": self.url, "log.dirs": str(disk / "data"),
            "broker.session.timeout.ms": SESSION_MS, "replica.lag.time.max.ms": LAG_MS,
            "default.replication.factor": 3, "min.insync.replicas": 2,
            "offsets.topic.replication.factor": 3, "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
            "transaction.state.log.num.partitions": 3, "log.segment.bytes": SEGMENT_BYTES,
            "offsets.topic.segment.bytes": SEGMENT_BYTES,
            "transaction.state.log.segment.bytes": SEGMENT_BYTES,
        })
        self._stack.callback(broker.close)
        self.brokers[name] = broker
        broker.start(timeout=40)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def client(self, *command: str, **kw: Any) -> subprocess.Popen[bytes]:
        """A Python module run on the clients' host."""
        return subprocess.Popen([*self.net.host("client").exec_prefix(), sys.executable, *command], **kw)

    def view(self) -> dict[str, Any]:
        """Brokers, controller and leaders as etcd holds them (asked from the clients' host)."""
        done = subprocess.run(
            [*self.net.host("client").exec_prefix(), sys.executable, "-m", "tests.chaos.image", self.url],
            capture_output=True, text=True, timeout=30,
        )
        return dict(json.loads(done.stdout)) if done.returncode == 0 else {}

    def name_of(self, node_id: int | None) -> str | None:
        return BROKERS[node_id - 1] if node_id and 1 <= node_id <= len(BROKERS) else None

    def restore(self) -> None:
        """Every fault undone: links healed, processes resumed or started, clocks and disks back."""
        self.net.heal()
        self.etcd.resume()
        for broker in self.brokers.values():
            broker.skew(0)
            if broker.proc is not None:
                broker.resume()
            if not broker.running:
                broker.start(timeout=40)

    def restart_exited(self) -> list[str]:
        """The brokers whose process had exited on its own (e.g. started on a full disk), each
        started again, as a supervisor does: "n2 (exit code 1)" for each."""
        exited = []
        for name, broker in self.brokers.items():
            if broker.proc is not None and broker.proc.poll() is not None:
                exited.append(f"{name} (exit code {broker.proc.returncode})")
                broker.start(timeout=40)
        return exited

    def close(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def _closing(net: Network) -> Any:
    try:
        yield net
    finally:
        net.close()
