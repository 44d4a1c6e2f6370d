"""Apache Kafka beside Gregor in `make bench`: the servers each benchmark runs its workloads on,
and the table of Gregor's figure, Kafka's and their ratio.

A benchmark runs every workload on a fresh Gregor (one broker, or three on etcd) and then on a
fresh Apache Kafka of the same shape (one KRaft node, or three nodes with the same replication
factors), in the same run, one after the other, each server alone on the machine while it is
measured. Kafka runs as its own scripts start it (kafka-server-start.sh: -Xmx1G -Xms1G, G1), from
the jars of `make kafka-deps`.

`Comparison` collects the rows: each printed as measured, then one table of Gregor, Kafka and
Gregor's speed relative to Kafka (>1: Gregor is faster, whichever way the unit points). Gregor's
figures alone are compared with bench/baseline.json (bench/baseline.py: REGRESSION, exit 1) and
recorded by `--update-baseline`; Kafka's never are.
"""

from __future__ import annotations

import argparse
import contextlib
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
from tests.integration.wire import WireClient

GREGOR, KAFKA = "Gregor", f"Kafka {KAFKA_VERSION}"
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
class KafkaBroker(Server):
    node: KafkaNode
    side: str = KAFKA

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    def pid(self) -> int:
        assert self.node.proc is not None
        return self.node.proc.pid

    def log_text(self) -> str:
        return self.node.log_path.read_text(errors="replace")

    def bounce(self, kill9: bool) -> None:
        if kill9:
            self.node.kill9()
        else:
            self.node.stop()
        self.node.start()


@dataclass
class GregorCluster(Server):
    cluster: Cluster
    side: str = GREGOR

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.cluster.brokers)

    def node_bootstrap(self, node_id: int) -> str:
        return self.cluster.broker(node_id).bootstrap

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
CLUSTER: list[Start] = [gregor_cluster, kafka_cluster]


@dataclass
class Comparison:
    """The rows of one benchmark: each workload's figure on Gregor and on Kafka."""

    benchmark: str
    figures: dict[str, dict[str, float]] = field(default_factory=dict)  # row -> side -> figure
    units: dict[str, tuple[str, bool]] = field(default_factory=dict)  # row -> (unit, higher is better)

    def record(
        self, side: str, row: str, figure: float, unit: str, detail: str = "", higher: bool = True
    ) -> None:
        """One measured figure, printed at once (Gregor's with its baseline verdict)."""
        self.figures.setdefault(row, {})[side] = figure
        self.units[row] = (unit, higher)
        verdict = self.verdict(row, figure) if side == GREGOR else "reference"
        print(f"{side:<12} {row:<62} {figure:>10,.1f} {unit:<6} {detail}  {verdict}", flush=True)

    def verdict(self, row: str, figure: float) -> str:
        _unit, higher = self.units[row]
        return baseline.verdict(self.benchmark, row).text(figure) if higher else "(lower is better)"

    def ratio(self, row: str) -> float | None:
        """Gregor's speed relative to Kafka's on this row (>1: Gregor is faster)."""
        sides = self.figures[row]
        if GREGOR not in sides or KAFKA not in sides or sides[GREGOR] <= 0 or sides[KAFKA] <= 0:
            return None  # e.g. a cost measured below zero: no ratio to speak of
        _unit, higher = self.units[row]
        return sides[GREGOR] / sides[KAFKA] if higher else sides[KAFKA] / sides[GREGOR]

    def print_table(self) -> None:
        print(f"\n{self.benchmark}: {'workload':<62} {GREGOR:>10} {KAFKA:>12} {'ratio':>6}")
        for row, sides in self.figures.items():
            unit, _higher = self.units[row]
            ratio = self.ratio(row)
            cells = [f"{sides[s]:>10,.1f}" if s in sides else f"{'-':>10}" for s in (GREGOR, KAFKA)]
            shown = f"{ratio:>6.2f}" if ratio is not None else f"{'-':>6}"
            print(f"{' ' * len(self.benchmark)}  {row:<62} {cells[0]} {cells[1]:>12} {shown}  ({unit})")

    def finish(self, update_baseline: bool) -> None:
        """The table; then Gregor's higher-is-better rows against (or into) the baseline."""
        self.print_table()
        ours = {row: s[GREGOR] for row, s in self.figures.items() if GREGOR in s and self.units[row][1]}
        if update_baseline:
            baseline.update(self.benchmark, ours)
            print(f"baseline updated: {baseline.BASELINE}")
            return
        regressed = [row for row, v in ours.items() if baseline.verdict(self.benchmark, row).regressed(v)]
        if regressed:
            sys.exit(f"REGRESSION in {len(regressed)} rows: {', '.join(regressed)}")


def arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--update-baseline", action="store_true",
                        help="record this run's Gregor figures in bench/baseline.json")
    return parser
