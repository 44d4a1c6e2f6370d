"""A replicated cluster (etcd + three brokers) driven by real clients: RF 3 topics,
min.insync.replicas 2, acks=all; leaders killed with kill -9, followers paused,
two of three brokers down; nothing acknowledged is ever lost or duplicated."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.clients import read_to_eof
from tests.integration.cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.wait_for(lambda i: len(i.brokers) == 3 and i.controller is not None)
        yield c
    finally:
        c.close()


def create_topic(cluster: Cluster, partitions: int = 1, rf: int = 3) -> str:
    name = f"r-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=20)
    futures[name].result(30)
    cluster.wait_for(lambda i: all(
        (name, p) in i.partitions and len(i.partitions[(name, p)].isr) == rf for p in range(partitions)
    ))
    return name


def test_a_topic_is_replicated_to_every_broker(cluster: Cluster) -> None:
    topic = create_topic(cluster, partitions=3)
    image = cluster.image()
    states = [image.partitions[(topic, p)] for p in range(3)]
    assert {s.leader for s in states} == {1, 2, 3}
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(300):
        p.produce(topic, value=str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    for b in cluster.brokers:
        assert all(b.partition_dir(topic, i).exists() for i in range(3)), b.bootstrap
    got = read_to_eof(cluster.bootstrap, [(topic, i) for i in range(3)], "read_committed", "rep", 30, "all")
    assert sorted(int(m.value()) for _, m in got) == list(range(300))


def produce_while(cluster: Cluster, topic: str, count: int, during: object) -> list[int]:
    """Idempotent acks=all sends of 0..count-1; `during()` runs half-way. Returns the acknowledged."""
    acked: list[int] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]
        else:
            errors.append(err)

    p = Producer({
        "bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000,
    })
    for i in range(count):
        p.produce(topic, value=str(i).encode(), partition=0, on_delivery=report)
        p.poll(0)
        if i == count // 2:
            p.flush(30)
            during()  # type: ignore[operator]
    assert p.flush(90) == 0
    assert not errors, errors[:3]
    return acked


def test_killing_the_leader_loses_no_acknowledged_record(cluster: Cluster) -> None:
    topic = create_topic(cluster)
    leader = cluster.partition(topic).leader
    victim = cluster.broker(leader)

    def kill_leader() -> None:
        victim.kill9()
        cluster.wait_for(lambda i: i.partitions[(topic, 0)].leader not in (leader, -1))

    try:
        acked = produce_while(cluster, topic, 2000, kill_leader)
        state = cluster.partition(topic)
        assert state.leader != leader and leader not in state.isr
        got = read_to_eof(cluster.bootstrap, [(topic, 0)], "read_committed", "kill", 30, "all")
        values = [int(m.value()) for _, m in got]
        assert values == sorted(values) and len(values) == len(set(values)), "in order, no duplicates"
        assert set(acked) <= set(values), f"lost {sorted(set(acked) - set(values))[:10]}"
        assert len(acked) == 2000
    finally:
        victim.start()
    cluster.wait_for(lambda i: len(i.partitions[(topic, 0)].isr) == 3, 30)
