"""Cluster administration against etcd and three real brokers (one cluster for the module):
internal topics waiting for enough brokers, CreatePartitions, manual replica assignments,
automatic preferred-leader rebalancing and partition reassignment."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
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
