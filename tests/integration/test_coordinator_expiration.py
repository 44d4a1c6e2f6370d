"""After a failover the successors expire what the dead broker would have: the new
transaction coordinator forgets transactional ids idle for `transactional.id.expiration.ms`
(Kafka's TransactionalIdNotFound afterwards), and the new leader of a data partition forgets
producer ids idle for `producer.id.expiration.ms` (DescribeProducers no longer lists them).
Its own cluster: the expirations are seconds here, which the other modules cannot have."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from coordinator.hashing import coordinator_partition
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.cluster import Cluster, running_cluster
from tests.integration.harness import wait_until
from tests.integration.test_idempotence_wire import describe_producers
from tests.integration.wire import WireClient

pytestmark = pytest.mark.integration

PARTITIONS = 3
EXPIRATION_MS = 6000  # past a failover (about 2 s), so the successor shows the ids first
DESCRIBE_TRANSACTIONS = 65
TXN_STATE = "__transaction_state"
RETRIABLE = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
             ErrorCode.COORDINATOR_NOT_AVAILABLE)
OVERRIDES = {
    "transactional.id.expiration.ms": EXPIRATION_MS,
    "producer.id.expiration.ms": EXPIRATION_MS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
    "transaction.state.log.num.partitions": PARTITIONS,
    "offsets.topic.num.partitions": PARTITIONS,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("expiration")), overrides=OVERRIDES) as c:
        yield c


def test_the_successors_expire_idle_transactional_and_producer_ids(cluster: Cluster) -> None:
    """One broker leads both the id's `__transaction_state` partition and the data partition;
    it dies right after the transaction, before either expiration is due."""
    tid = f"idle-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    index = coordinator_partition(tid, PARTITIONS)
    victim = cluster.partition(TXN_STATE, index).leader
    topic = cluster.create_topic(partitions=3)
    partition = next(i for i in range(3) if cluster.partition(topic, i).leader == victim)
    p.begin_transaction()
    p.produce(topic, b"once", partition=partition)
    p.commit_transaction(30)
    with WireClient(cluster.broker(victim).port) as c:
        rows = describe_producers(c, topic, [partition])[partition].active_producers
    (pid,) = [row.producer_id for row in rows]

    cluster.broker(victim).kill9()
    try:
        moved = ((TXN_STATE, index), (topic, partition))
        image = cluster.wait_for(lambda i: all(i.partitions[tp].leader not in (victim, -1) for tp in moved))
        with (
            WireClient(cluster.broker(image.partitions[(topic, partition)].leader).port) as leader,
            WireClient(cluster.broker(image.partitions[(TXN_STATE, index)].leader).port) as coordinator,
        ):
            assert producers(leader, topic, partition) == [pid], "the new leader knows the producer"
            # Loaded, and done: the victim may have died before writing CompleteCommit, which
            # the successor then writes after re-sending the markers.
            found = wait_until(lambda: (s := describe(coordinator, tid)).error_code not in RETRIABLE
                               and s.transaction_state != "PrepareCommit" and s, timeout=10,
                               msg="the new coordinator loaded")
            assert found.error_code == ErrorCode.NONE and found.transaction_state == "CompleteCommit", found
            wait_until(lambda: not producers(leader, topic, partition), timeout=20,
                       msg=f"producer id {pid} expired on the new leader")
            wait_until(lambda: describe(coordinator, tid).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                       timeout=20, msg=f"transactional id {tid} expired on the new coordinator")
    finally:
        cluster.broker(victim).start()


def producers(c: WireClient, topic: str, partition: int) -> list[int]:
    return [row.producer_id for row in describe_producers(c, topic, [partition])[partition].active_producers]


def describe(c: WireClient, tid: str) -> Any:
    return c.call(REQUESTS[DESCRIBE_TRANSACTIONS](transactional_ids=[tid]), 0).transaction_states[0]
