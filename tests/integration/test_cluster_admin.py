"""Cluster administration against etcd and three real brokers (one cluster for the module):
internal topics waiting for enough brokers, CreatePartitions, manual replica assignments,
automatic preferred-leader rebalancing and partition reassignment."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.cluster import Cluster
from tests.integration.harness import wait_until
from tests.integration.wire import WireClient

FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.wait_for(lambda i: len(i.brokers) == 3 and i.controller is not None)
        yield c
    finally:
        c.close()


def find_coordinator(port: int, key: str, key_type: int = 0) -> Any:
    with WireClient(port) as c:
        return c.call(REQUESTS[FIND_COORDINATOR](version=3, key=key, key_type=key_type), 3)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def non_controller(cluster: Cluster) -> str:
    """The bootstrap address of a broker that is not the controller (admin is forwarded)."""
    controller = cluster.image().controller
    assert controller is not None
    return next(b.bootstrap for b in cluster.brokers if b.node_id != controller.node_id and b.running)


def wait_until_served(bootstrap: str, topic: str, partitions: int, timeout_s: float = 20) -> None:
    """Until this broker's own Metadata answer lists the topic with a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions and all(
            p.leader >= 0 for p in found.partitions.values()
        ):
            return
        assert time.monotonic() < deadline, f"{bootstrap} does not serve {topic}: {found}"
        time.sleep(0.1)


def served_everywhere(cluster: Cluster, topic: str, partitions: int) -> None:
    cluster.wait_for(lambda i: all(
        (topic, p) in i.partitions and i.partitions[(topic, p)].isr == i.partitions[(topic, p)].replicas
        for p in range(partitions)
    ))
    for b in cluster.brokers:
        wait_until_served(b.bootstrap, topic, partitions)


def produce_values(bootstrap: str, topic: str, values: list[int], partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for v in values:
        p.produce(topic, value=str(v).encode(), partition=v % partitions)
    assert p.flush(30) == 0


def read_values(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    got = read_to_eof(cluster.bootstrap, [(topic, i) for i in range(partitions)], "read_committed",
                      unique("read"), 30, "all")
    by_partition: dict[int, list[int]] = {}
    for (_, index), m in got:
        by_partition.setdefault(index, []).append(int(m.value()))
    return by_partition


# -- 1. internal topics wait for their replication factor ---------------------------------


def test_internal_topics_wait_for_enough_brokers_then_get_their_replication_factor(cluster: Cluster) -> None:
    for node in (2, 3):
        cluster.broker(node).stop()
    cluster.wait_for(lambda i: set(i.brokers) == {1} and i.controller is not None)
    port = cluster.broker(1).port
    for key_type in (0, 1):  # group, transaction
        answer = find_coordinator(port, unique("k"), key_type)
        assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE, answer
    with WireClient(port) as c:
        # An idempotent producer still gets its id (no internal topic involved, as in Kafka) ...
        init = c.call(REQUESTS[INIT_PRODUCER_ID](
            version=4, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), 4)
        assert init.error_code == ErrorCode.NONE and init.producer_id >= 0
        # ... and a topic auto-created with default.replication.factor 3 is a retriable wait.
        topic = unique("auto")
        meta = c.metadata([topic], version=4, auto_create=True)
        assert meta.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE, meta
    assert not any(t.startswith("__") for t in cluster.image().topics)
    for node in (2, 3):
        cluster.broker(node).start()
    cluster.wait_for(lambda i: len(i.brokers) == 3)
    group = unique("g")
    wait_until(lambda: find_coordinator(port, group).error_code == ErrorCode.NONE, timeout=30)
    offsets = cluster.image().topics["__consumer_offsets"]
    assert offsets.replication_factor == 3
    assert {n for replicas in offsets.assignment for n in replicas} == {1, 2, 3}


# -- 2. CreatePartitions --------------------------------------------------------------------


def test_create_partitions_through_a_non_controller_and_produce_to_the_new_ones(cluster: Cluster) -> None:
    topic = unique("grow")
    admin = AdminClient({"bootstrap.servers": non_controller(cluster)})
    admin.create_topics([NewTopic(topic, 2, 3)], operation_timeout=20)[topic].result(30)
    served_everywhere(cluster, topic, 2)
    produce_values(cluster.bootstrap, topic, list(range(0, 20)), 2)
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=20)[topic].result(30)
    image = cluster.image()
    assert image.topics[topic].partitions == 5
    new_states = [image.partitions[(topic, p)] for p in (2, 3, 4)]
    assert {s.leader for s in new_states} == {1, 2, 3}
    assert all(len(set(s.replicas)) == 3 for s in new_states)
    served_everywhere(cluster, topic, 5)
    for b in cluster.brokers:
        assert all(b.partition_dir(topic, p).exists() for p in range(5)), b.bootstrap
    produce_values(cluster.bootstrap, topic, list(range(20, 70)), 5)
    got = read_values(cluster, topic, 5)
    assert sorted(v for vs in got.values() for v in vs) == list(range(70))
    assert all(got[p] for p in (2, 3, 4))
    shrink = admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=20)[topic]
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        shrink.result(30)
