"""Consumer-protocol groups (KIP-848) when their group coordinator dies, on a real cluster: etcd +
three brokers, `__consumer_offsets` RF 3 with min.insync.replicas 2.

- two confluent-kafka members with ``group.protocol=consumer``: the broker leading the group's
  `__consumer_offsets` partition is killed with kill -9; another broker loads the group from its
  replicated records, the members carry on there, and every record is consumed and committed
  exactly once;
- the Java 4.3 client with ``group.protocol=consumer`` in a consume-transform-produce
  transaction: the group coordinator is killed between transactions and the output is exactly
  once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, running_cluster
from tests.integration.harness import require_java
from tests.integration.shop import Shop, kill_processors
from tests.integration.test_consumer_protocol import (
    HEARTBEAT_MS,
    LIB,
    PARTITIONS,
    SESSION_MS,
    assert_once_and_committed,
    describe,
    wait_balanced,
)
from tests.integration.test_coordinator_failover import (
    INTERNAL_PARTITIONS,
    OFFSETS,
    all_bootstrap,
    coordinator_of,
    wait_for_new_coordinator,
)
from tests.integration.test_groups_member import (
    Members,
    phase_values,
    produce,
    wait_consumed,
)

pytestmark = pytest.mark.integration

OVERRIDES = {
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("kip848-cluster"), overrides=OVERRIDES) as c:
        yield c


@pytest.fixture(autouse=True)
def whole_cluster(cluster: Cluster) -> Iterator[None]:
    cluster.restore()
    yield
    kill_processors()


def test_members_carry_on_when_the_group_coordinator_is_killed(cluster: Cluster) -> None:
    bootstrap = all_bootstrap(cluster)
    topic = cluster.create_topic(PARTITIONS, rf=3, prefix="kip848-failover")
    group = f"group-{topic}"
    members = Members(bootstrap, None)
    try:
        ms = members.start(LIB, group, topic, ["m1", "m2"], session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS)
        wait_balanced(ms, PARTITIONS)
        first = phase_values("first", {p: 5 for p in range(PARTITIONS)})
        produce(bootstrap, topic, first)
        wanted = {v for vs in first.values() for v in vs}
        wait_consumed(ms, wanted)
        victim = coordinator_of(cluster, OFFSETS, group)
        cluster.broker(victim).kill9()
        successor = cluster.broker(wait_for_new_coordinator(cluster, OFFSETS, group, victim))
        second = phase_values("second", {p: 5 for p in range(PARTITIONS)})
        produce(bootstrap, topic, second)
        wanted |= {v for vs in second.values() for v in vs}
        wait_consumed(ms, wanted, timeout=45)
        wait_balanced(ms, PARTITIONS)
        assert_once_and_committed(ms, wanted)
        described = describe(successor, group)
        assert described.group_state == "Stable" and len(described.members) == 2, described
    finally:
        members.close()


@pytest.mark.java
def test_java_consume_transform_produce_survives_the_group_coordinator(cluster: Cluster) -> None:
    require_java("4.3")
    shop = Shop(all_bootstrap(cluster), purchases=300, partitions=(3, 3), replication=3)
    txn_id = f"shop-{uuid.uuid4().hex[:8]}"
    run = shop.processor(txn_id, java="4.3", batch=10, max_seconds=150, group_protocol="consumer")
    run.wait_event("committed", 5, timeout=60)
    victim = coordinator_of(cluster, OFFSETS, shop.group)
    cluster.broker(victim).kill9()
    wait_for_new_coordinator(cluster, OFFSETS, shop.group, victim)
    progress = len(run.of("committed"))
    deadline = time.monotonic() + 60
    while len(run.of("committed")) <= progress + 3 and run.proc.poll() is None:
        assert time.monotonic() < deadline, run.transcript()
        time.sleep(0.05)
    cluster.broker(victim).start()
    assert run.wait(150) == 0 and run.of("done"), run.transcript()
    shop.assert_exactly_once(expect_aborted=False)
