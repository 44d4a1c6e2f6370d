"""The reference brokers beside Gregor in `make bench`: Apache Kafka and Tansu, the servers each
benchmark runs its workloads on, and the table of Gregor's figure, theirs and the ratios.

A benchmark runs every workload on a fresh Gregor (one broker, or three on etcd) and then on a
fresh Apache Kafka of the same shape (one KRaft node, or three nodes with the same replication
factors), in the same run, one after the other, each server alone on the machine while it is
measured. Kafka runs as its own scripts start it (kafka-server-start.sh: -Xmx1G -Xms1G, G1), from
the jars of `make kafka-deps`. Some benchmarks (`WITH_TANSU`) run a third, Tansu 0.6 (a Rust
Kafka-compatible broker, one node, its data in memory; `make tansu-deps`), the same way.

`Comparison` collects the rows: each printed as measured, with the broker's CPU per operation
where the workload measured it (`broker_cpu_s`: utime + stime from /proc of the broker processes
and their children), then one table of every broker's figure and Gregor's speed relative to Kafka
and to Tansu (>1: Gregor is faster, whichever way the unit points). A workload that fails on a
reference broker (an API it lacks) says so in its row; one that fails on Gregor fails the
benchmark. Gregor's rows alone are judged against bench/baseline.json (bench/baseline.py: on the
ratio to Kafka of the same run and on the CPU per operation; REGRESSION, exit 1) and recorded by
`--update-baseline`; the other brokers' figures never are.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench import baseline
from tests.integration.cluster import SESSION_MS, Cluster, running_cluster, wait_until_served
from tests.integration.harness import BrokerProcess
from tests.integration.kafka import KAFKA_VERSION, SCRIPT_JVM_OPTS, KafkaCluster, KafkaNode
from tests.integration.tansu import TANSU_VERSION, TansuNode
from tests.integration.wire import WireClient

GREGOR, KAFKA, TANSU = "Gregor", f"Kafka {KAFKA_VERSION}", f"Tansu {TANSU_VERSION}"
SIDES = (GREGOR, KAFKA, TANSU)
NOTES = {TANSU: f"{TANSU} keeps its data in memory (memory://); Gregor and Kafka write theirs to disk"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Kafka's single node as Gregor's: internal topics of as many partitions (the fixture's are 1).
KAFKA_NODE: dict[str, object] = {
    "transaction.state.log.num.partitions": 50,
    "offsets.topic.num.partitions": 50,
}
# Kafka's cluster notices a dead broker as soon as Gregor's does (tests/integration/cluster.py:
# a 2 s broker session and replica lag).
KAFKA_CLUSTER: dict[str, object] = {
    "broker.session.timeout.ms": SESSION_MS,
    "broker.heartbeat.interval.ms": SESSION_MS // 4,
    "replica.lag.time.max.ms": SESSION_MS,
}


class Server:
    """One side of a comparison, as a workload sees it."""

    side: str
    bootstrap: str

    def pid(self) -> int:
        """The process of a single server (CPU accounting)."""
        raise NotImplementedError

    def pids(self) -> list[int]:
        """Every broker process of the server (CPU accounting; a cluster's etcd is not one)."""
        return [self.pid()]

    def log_text(self) -> str:
        """A single server's log so far."""
        raise NotImplementedError

    def node_bootstrap(self, node_id: int) -> str:
        raise NotImplementedError

    def kill9(self, node_id: int) -> None:
        raise NotImplementedError

    def restart(self, node_id: int) -> None:
        raise NotImplementedError

    def bounce(self, kill9: bool) -> None:
        """A single server stopped (cleanly, or by kill -9) and started again, until it answers."""
        raise NotImplementedError

    def create_topic(self, name: str, partitions: int, rf: int, config: dict[str, str] | None = None) -> str:
        """A new topic, once every partition has a leader and an ISR of `rf` on every node."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        admin.create_topics([NewTopic(name, partitions, rf, config=config or {})], operation_timeout=30)[
            name
        ].result(60)
        for address in self.bootstrap.split(","):
            wait_replicated(address, name, partitions, rf)
        return name

    def leader(self, topic: str, partition: int = 0) -> int:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})
        found = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]
        return int(found.leader)

    def coordinator(self, transactional_id: str) -> int:
        """The node id coordinating a transactional id (FindCoordinator)."""
        from tests.differential.messages import build

        port = int(self.bootstrap.split(",")[0].rsplit(":", 1)[1])
        with WireClient(port) as c:
            req = build(10, 4, {"key_type": 1, "coordinator_keys": [transactional_id]})
            found = c.call(req, 4).coordinators[0]
        assert found.error_code == 0, found
        return int(found.node_id)


def wait_replicated(address: str, topic: str, partitions: int, rf: int, timeout_s: float = 60) -> None:
    """Until this node's Metadata lists every partition of `topic` with a leader and `rf` in sync."""
    admin = AdminClient({"bootstrap.servers": address, "log_level": 2})
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            found is not None
            and found.error is None
            and len(found.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == rf for p in found.partitions.values())
        ):
            return
        assert time.monotonic() < deadline, f"{address} does not serve {topic} with ISR {rf}: {found}"
        time.sleep(0.1)


@dataclass
class GregorBroker(Server):
    broker: BrokerProcess
    side: str = GREGOR

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def pid(self) -> int:
        assert self.broker.proc is not None
        return self.broker.proc.pid

    def log_text(self) -> str:
        return self.broker.log_text()

    def bounce(self, kill9: bool) -> None:
        if kill9:
            self.broker.kill9()
        else:
            self.broker.stop()
        self.broker.start()


@dataclass
class NodeBroker(Server):
    """A reference broker of one process (a Kafka node, a Tansu node)."""

    node: KafkaNode | TansuNode
    side: str

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    def pid(self) -> int:
        assert self.node.proc is not None
        return self.node.proc.pid

    def log_text(self) -> str:
        return self.node.log_path.read_text(errors="replace")

    def bounce(self, kill9: bool) -> None:
        """Stopped and started again (a Tansu node's topics and records, in memory, are gone)."""
        if kill9:
            self.node.kill9()
        else:
            self.node.stop()
        self.node.start()


@dataclass
class KafkaBroker(NodeBroker):
    side: str = KAFKA


@dataclass
class TansuBroker(NodeBroker):
    side: str = TANSU


@dataclass
class GregorCluster(Server):
    cluster: Cluster
    side: str = GREGOR

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.cluster.brokers)

    def node_bootstrap(self, node_id: int) -> str:
        return self.cluster.broker(node_id).bootstrap

    def pids(self) -> list[int]:
        return [b.proc.pid for b in self.cluster.brokers if b.proc is not None]

    def kill9(self, node_id: int) -> None:
        self.cluster.broker(node_id).kill9()

    def restart(self, node_id: int) -> None:
        self.cluster.broker(node_id).start()

    def create_topic(self, name: str, partitions: int, rf: int, config: dict[str, str] | None = None) -> str:
        super().create_topic(name, partitions, rf, config)
        self.cluster.wait_for(lambda i: all(
            (name, p) in i.partitions and len(i.partitions[(name, p)].isr) == rf for p in range(partitions)
        ))
        for b in self.cluster.brokers:
            wait_until_served(b.bootstrap, name, partitions)
        return name


@dataclass
class KafkaNodes(Server):
    cluster: KafkaCluster
    side: str = KAFKA

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def node_bootstrap(self, node_id: int) -> str:
        return self.cluster.nodes[node_id - 1].bootstrap

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.cluster.nodes if n.proc is not None]

    def kill9(self, node_id: int) -> None:
        self.cluster.nodes[node_id - 1].kill9()

    def restart(self, node_id: int) -> None:
        self.cluster.nodes[node_id - 1].start()


@contextlib.contextmanager
def gregor_broker(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[Server]:
    broker = BrokerProcess(base / "gregor", overrides or {}).start()
    try:
        yield GregorBroker(broker)
    finally:
        broker.close()


@contextlib.contextmanager
def kafka_broker(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[Server]:
    node = KafkaNode(base / "kafka", {**KAFKA_NODE, **(overrides or {})}, jvm_opts=SCRIPT_JVM_OPTS)
    try:
        yield KafkaBroker(node.start())
    finally:
        node.stop()


@contextlib.contextmanager
def tansu_broker(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[Server]:
    """One Tansu node; `overrides` (Gregor's and Kafka's settings) do not apply to it."""
    node = TansuNode(base / "tansu")
    try:
        yield TansuBroker(node.start())
    finally:
        node.stop()


@contextlib.contextmanager
def gregor_cluster(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[Server]:
    (base / "gregor").mkdir(parents=True)
    with running_cluster(base / "gregor", True, overrides=overrides or {}) as cluster:
        yield GregorCluster(cluster)


@contextlib.contextmanager
def kafka_cluster(base: Path, overrides: dict[str, Any] | None = None) -> Iterator[Server]:
    config = {**KAFKA_NODE, **KAFKA_CLUSTER, **(overrides or {})}
    cluster = KafkaCluster(base / "kafka", config, jvm_opts=SCRIPT_JVM_OPTS)
    try:
        yield KafkaNodes(cluster.start())
    finally:
        cluster.stop()


Start = Callable[[Path, "dict[str, Any] | None"], contextlib.AbstractContextManager[Server]]
SINGLE: list[Start] = [gregor_broker, kafka_broker]
WITH_TANSU: list[Start] = [gregor_broker, kafka_broker, tansu_broker]
CLUSTER: list[Start] = [gregor_cluster, kafka_cluster]


def broker_cpu_s(server: Server) -> float:
    """The CPU seconds the server's broker processes have used so far: utime + stime of each, of
    its live descendants, and of its children that ended (cutime + cstime), from /proc."""
    parents = _parents()
    return sum(_cpu_s(pid) for pid in _descendants(server.pids(), parents))


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (fields 4 of /proc/<pid>/stat)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                found[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
    return found


def _descendants(pids: list[int], parents: dict[int, int]) -> list[int]:
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (the third field on)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime (fields 14-17 of /proc/<pid>/stat); 0 once it ended."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / CLOCK_TICKS


@dataclass
class Comparison:
    """The rows of one benchmark: each workload's figure on Gregor and on the reference brokers."""

    benchmark: str
    rows: list[str] = field(default_factory=list)  # in the order first measured
    figures: dict[str, dict[str, float]] = field(default_factory=dict)  # row -> side -> figure
    units: dict[str, tuple[str, bool]] = field(default_factory=dict)  # row -> (unit, higher is better)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # row -> side -> broker CPU ms per op
    cpu_units: dict[str, str] = field(default_factory=dict)  # row -> "ms/txn", "ms/MiB"
    failures: dict[str, dict[str, str]] = field(default_factory=dict)  # row -> side -> what failed

    def record(
        self, side: str, row: str, figure: float, unit: str, detail: str = "", higher: bool = True,
        cpu_ms: float | None = None, per: str = "",
    ) -> None:
        """One measured figure, and the broker CPU in ms `per` operation if measured, printed at once."""
        self._row(row)
        self.figures.setdefault(row, {})[side] = figure
        self.units[row] = (unit, higher)
        cpu = ""
        if cpu_ms is not None:
            self.cpu.setdefault(row, {})[side] = cpu_ms
            self.cpu_units[row] = f"ms/{per}"
            cpu = f"  broker CPU {cpu_ms:.2f} ms/{per}"
        print(f"{side:<12} {row:<62} {figure:>10,.1f} {unit:<6} {detail}{cpu}", flush=True)

    @contextlib.contextmanager
    def attempt(self, side: str, row: str) -> Iterator[None]:
        """A workload on one side: an exception ends only it, recorded in its row (a reference
        broker lacking an API; on Gregor, `finish` fails the benchmark)."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure of the workload is the row's answer
            self._row(row)
            why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            self.failures.setdefault(row, {})[side] = why
            print(f"{side:<12} {row:<62} FAILED: {why}", flush=True)

    def _row(self, row: str) -> None:
        if row not in self.rows:
            self.rows.append(row)

    def ratio(self, row: str, against: str = KAFKA) -> float | None:
        """Gregor's speed relative to `against`'s on this row (>1: Gregor is faster)."""
        sides = self.figures.get(row, {})
        ours, theirs = sides.get(GREGOR), sides.get(against)
        if ours is None or theirs is None or ours <= 0 or theirs <= 0:
            return None  # a side not measured, or a cost measured below zero: no ratio to speak of
        _unit, higher = self.units[row]
        return ours / theirs if higher else theirs / ours

    def measured(self, row: str) -> baseline.Measured:
        """Gregor's row as the baseline judges it."""
        cpu_ms = self.cpu.get(row, {}).get(GREGOR)
        return baseline.Measured(self.figures[row][GREGOR], self.ratio(row), cpu_ms)

    def judged(self) -> list[str]:
        """Gregor's measured rows where higher is better: those the baseline judges."""
        return [row for row in self.rows if GREGOR in self.figures.get(row, {}) and self.units[row][1]]

    def sides(self) -> list[str]:
        present = {s for d in self.figures.values() for s in d}
        present |= {s for d in self.failures.values() for s in d}
        return [s for s in SIDES if s in present]

    def print_table(self) -> None:
        sides = self.sides()
        others = [s for s in sides if s != GREGOR]
        head = [f"{s:>12}" for s in sides] + [f"{'vs ' + s.split()[0]:>9}" for s in others]
        cpu = f"  {'broker CPU per op: ' + ' / '.join(s.split()[0] for s in sides):<34}" if self.cpu else ""
        print(f"\n{self.benchmark}: {'workload':<62} {' '.join(head)}{cpu}  verdict")
        judged = self.judged()
        for row in self.rows:
            cells = [f"{self._cell(row, s):>12}" for s in sides]
            ratios = [f"{r:>9.2f}" if (r := self.ratio(row, s)) is not None else f"{'-':>9}" for s in others]
            spent = f"  {self._cpu_cell(row, sides):<34}" if self.cpu else ""
            verdict = (baseline.verdict(self.benchmark, row).text(self.measured(row)) if row in judged
                       else "FAILED" if GREGOR in self.failures.get(row, {})
                       else "lower is better: not judged" if GREGOR in self.figures.get(row, {}) else "")
            unit = self.units.get(row, ("", True))[0]
            line = " ".join(cells + ratios)
            print(f"{' ' * len(self.benchmark)}  {row:<62} {line}{spent}  {verdict} ({unit})")
        for side in sides:
            if side in NOTES:
                print(NOTES[side])
        for row, failed in self.failures.items():
            for side, why in failed.items():
                print(f"{side} failed on {row}: {why}")

    def _cell(self, row: str, side: str) -> str:
        if side in self.failures.get(row, {}):
            return "failed"
        figure = self.figures.get(row, {}).get(side)
        return "-" if figure is None else f"{figure:,.1f}"

    def _cpu_cell(self, row: str, sides: list[str]) -> str:
        spent = self.cpu.get(row)
        if not spent:
            return ""
        return " / ".join(f"{spent[s]:.2f}" if s in spent else "-" for s in sides) + f" {self.cpu_units[row]}"

    def finish(self, update_baseline: bool) -> None:
        """The table; then Gregor's judged rows against (or into) the baseline, and its failures."""
        self.print_table()
        failed = [row for row in self.rows if GREGOR in self.failures.get(row, {})]
        ours = {row: self.measured(row) for row in self.judged()}
        if update_baseline and not failed:
            baseline.update(self.benchmark, ours)
            print(f"baseline updated: {baseline.BASELINE}")
            return
        problems = [f"FAILED on {GREGOR} in {len(failed)} rows: {', '.join(failed)}"] if failed else []
        regressed = [row for row, m in ours.items() if baseline.verdict(self.benchmark, row).regressed(m)]
        if regressed:
            problems.append(f"REGRESSION in {len(regressed)} rows: {', '.join(regressed)}")
        if problems:
            sys.exit("; ".join(problems))


def arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--update-baseline", action="store_true",
                        help="record this run's Gregor figures in bench/baseline.json")
    return parser
