"""Replication, client-level: a three-node Apache Kafka cluster (KRaft, tests/integration/kafka.py)
beside Gregor's three brokers on etcd (tests/integration/cluster.py), the same scenario run on
each with real clients and the outcomes compared after normalising the ids a run makes up.

On a topic of replication factor 3 with min.insync.replicas 3: the partitions' replicas and ISR,
acks=all idempotent produce, a committed and an open transaction, the Java Admin client's
listTransactions, describeTransactions, describeProducers and abortTransaction (TxnTools.java)
on the replicated partition, what read_committed reads after the abort, a preferred leader
election, the topic's min.insync.replicas as DescribeConfigs shows it. The clusters live for
this module only (the only one that starts them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from tests.differential.test_clients import assert_same
from tests.integration.cluster import Cluster, running_cluster
from tests.integration.harness import require_java, run_java
from tests.integration.kafka import KafkaCluster, started_kafka_cluster

# Both clusters: internal topics of one partition (replication factor 3, from each fixture).
SHARED = {"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}
PARTITIONS = 2
WAIT_S = 30.0


@dataclass(frozen=True)
class Clusters:
    kafka_cluster: KafkaCluster
    gregor_cluster: Cluster

    @property
    def kafka(self) -> str:
        return self.kafka_cluster.bootstrap

    @property
    def gregor(self) -> str:
        return ",".join(b.bootstrap for b in self.gregor_cluster.brokers)

    def stop(self, bootstrap: str, node_id: int) -> str:
        """A clean shutdown of one node of the cluster behind `bootstrap`; the others' bootstrap."""
        if bootstrap == self.kafka:
            self.kafka_cluster.nodes[node_id - 1].stop()
            return ",".join(n.bootstrap for n in self.kafka_cluster.nodes if n.proc is not None)
        self.gregor_cluster.broker(node_id).stop()
        return ",".join(b.bootstrap for b in self.gregor_cluster.brokers if b.running)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with (
        started_kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), SHARED) as kafka,
        running_cluster(tmp_path_factory.mktemp("gregor-cluster"), True, overrides=SHARED) as gregor,
    ):
        yield Clusters(kafka, gregor)


def _fully_replicated(admin: AdminClient, topic: str, isr: int = 3) -> list[Any]:
    """The topic's partitions once each has a leader and an ISR of `isr` (as this client sees them)."""
    deadline = time.monotonic() + WAIT_S
    seen: Any = None
    while True:
        try:
            seen = admin.describe_topics(TopicCollection([topic]))[topic].result(10).partitions
            if len(seen) == PARTITIONS and all(p.leader is not None and len(p.isr) == isr for p in seen):
                return list(seen)
        except (KafkaException, TimeoutError) as e:  # asked a broker just stopped
            seen = e
        assert time.monotonic() < deadline, f"{topic}: no ISR of {isr}: {seen}"
        time.sleep(0.1)


def _txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    return p


def _txn_tools(bootstrap: str, topic: str, start: int, tid: str) -> list[str]:
    """TxnTools.java's lines about this scenario's transaction, its producer id named `pid`."""
    done = run_java("TxnTools.java", bootstrap, topic, "0", str(start), tid, timeout=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    lines = done.stdout.splitlines()
    pids = {line.split()[1] for line in lines if line.startswith(("producer ", "aborted "))}
    assert len(pids) == 1, lines
    ours = [line.split() for line in lines if not line.startswith("listing ") or line.split()[1] == tid]
    for words in ours:  # the producer id's place: "described STATE pid PID ...", "producer PID ..."
        at = 3 if words[0] == "described" else 1
        if words[0] != "listing" and words[at] in pids:
            words[at] = "pid"
    return [" ".join(words) for words in ours]


def _read_committed(bootstrap: str, topic: str) -> list[str]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    try:
        while (m := c.poll(3)) is not None:
            if m.error() is None:
                values.append(m.value().decode())
    finally:
        c.close()
    return values


def replicated(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "3"}
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config=config)])[topic].result(30)
    parts = _fully_replicated(admin, topic)
    layout = [(len(p.replicas), len(p.isr), p.leader.id in [r.id for r in p.replicas]) for p in parts]

    acked: list[tuple[int, int, str | None]] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
    for i in range(10):
        p.produce(
            topic,
            b"i%d" % i,
            partition=i % PARTITIONS,
            on_delivery=lambda e, m: acked.append((m.partition(), m.offset(), e and e.name())),
        )
    assert p.flush(30) == 0

    tid = f"tx-{topic}"
    txn = _txn_producer(bootstrap, tid)
    txn.begin_transaction()
    txn.produce(topic, b"committed", partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(30) == 0
    tp = TopicPartition(topic, 0)
    lso = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
    tools = _txn_tools(bootstrap, topic, 7, tid)  # 5 idempotent records, 1 committed, its marker
    read = _read_committed(bootstrap, topic)
    latest = {
        level.name: admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result(30).offset
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)
    }
    try:
        txn.abort_transaction(30)
        after_abort = "aborted"
    except KafkaException as e:
        after_abort = e.args[0].name()

    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    elected = admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(30)["min.insync.replicas"]
    return {
        "layout": layout,
        "acked": sorted(acked),
        "lso_while_open": lso[tp].result(30).offset,
        "txn_tools": tools,
        "read_committed": read,
        "latest": latest,
        "client_abort": after_abort,
        "elect_preferred": {t.partition: e and e.name() for t, e in elected.items()},
        "min_insync": (entry.value, str(entry.source)),
    }


def test_replicated_topic(clusters: Clusters) -> None:
    """acks=all with min.insync.replicas 3, transactions and their admin calls, a preferred
    election, on replication factor 3."""
    require_java("3.9")
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    assert_same(replicated(clusters.kafka, topic), replicated(clusters.gregor, topic))


def _send(bootstrap: str, topic: str, acks: str) -> str | None:
    """One record, not retried: the error the leader answered, by name (None: acknowledged)."""
    outcome: list[str | None] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "retries": 0,
            "enable.idempotence": False,
            "linger.ms": 0,
            "log_level": 2,
        }
    )
    p.produce(topic, b"x", partition=0, on_delivery=lambda e, _m: outcome.append(e and e.name()))
    assert p.flush(30) == 0
    return outcome[0]


def under_replicated(clusters: Clusters, bootstrap: str, name: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    strict, lenient = f"{name}-3", f"{name}-2"
    for topic, min_isr in ((strict, "3"), (lenient, "2")):
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": min_isr})])[
            topic
        ].result(30)
        _fully_replicated(admin, topic)
    # Kafka's controller leads from the first replica: stop one that leads neither partition 0.
    leaders = {p.leader.id for t in (strict, lenient) for p in _fully_replicated(admin, t)[:1]}
    running = clusters.stop(bootstrap, max({1, 2, 3} - leaders))
    admin = AdminClient({"bootstrap.servers": running, "log_level": 2})
    for topic in (strict, lenient):
        _fully_replicated(admin, topic, isr=2)
    return {
        "acks=all, min.insync.replicas 3": _send(bootstrap, strict, "all"),
        "acks=1, min.insync.replicas 3": _send(bootstrap, strict, "1"),
        "acks=all, min.insync.replicas 2": _send(bootstrap, lenient, "all"),
    }


def test_min_insync_replicas_with_a_broker_down(clusters: Clusters) -> None:
    """A follower stopped: acks=all is refused (NOT_ENOUGH_REPLICAS) where min.insync.replicas
    is 3, accepted where it is 2, and acks=1 is accepted. The module's last test: it leaves
    each cluster a broker short."""
    name = f"isr-{uuid.uuid4().hex[:8]}"
    kafka = under_replicated(clusters, clusters.kafka, name)
    assert kafka["acks=all, min.insync.replicas 3"] == "NOT_ENOUGH_REPLICAS", kafka  # the scenario holds
    assert_same(kafka, under_replicated(clusters, clusters.gregor, name))
