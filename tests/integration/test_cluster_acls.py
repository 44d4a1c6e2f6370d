"""ACLs in a 3-broker cluster (issue 21): stored in etcd, created on one broker (forwarded to
the controller), in force on every broker within a second.

Until SASL lands the brokers reach each other as `User:ANONYMOUS` too, so this cluster runs
with `allow.everyone.if.no.acl.found` (no ACL on the cluster: its ClusterAction is allowed)
and, once the test puts ACLs on the cluster, with ClusterAction granted to ANONYMOUS:
replication and forwarding keep working under the authorizer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.cluster import Cluster, running_cluster
from tests.integration.harness import BrokerProcess
from tests.integration.wire import WireClient

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
TOPIC_AUTHORIZATION_FAILED = 29
LITERAL = ResourcePatternType.LITERAL
ALLOW = AclPermissionType.ALLOW
PROPAGATION_BOUND_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("acl-cluster"), show_logs_on_error=True, overrides={
        "authorizer.class.name": STANDARD, "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": True,
    }) as c:
        yield c


def described_error(broker: BrokerProcess, topic: str) -> int:
    with WireClient(broker.port) as c:
        return int(c.metadata([topic], version=9).topics[0].error_code)


def seconds_until(cluster: Cluster, topic: str, error: int, started: float) -> list[float]:
    """For each broker, when (since `started`) its Metadata answer for `topic` had `error`."""
    took = []
    for broker in cluster.brokers:
        while described_error(broker, topic) != error:
            assert time.monotonic() - started < 10, f"broker {broker.node_id} still answers otherwise"
            time.sleep(0.01)
        took.append(time.monotonic() - started)
    return took


def non_controller(cluster: Cluster, skip: int = 0) -> BrokerProcess:
    controller = cluster.image().controller
    assert controller is not None
    others = [b for b in cluster.brokers if b.node_id != controller.node_id]
    return others[skip % len(others)]


def create(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


def committed_transaction(cluster: Cluster, topic: str, admin: AdminClient) -> None:
    """A transaction commits across brokers under the authorizer: the partition leader checks
    it with the coordinator (AddPartitionsToTxn v4+) and the coordinator writes its markers
    (WriteTxnMarkers), both as ANONYMOUS with ClusterAction; read_committed sees it."""
    tid = f"acl-tid-{uuid.uuid4().hex[:8]}"
    write = AclOperation.WRITE
    create(admin, [AclBinding(ResourceType.TRANSACTIONAL_ID, tid, LITERAL, ANON, "*", write, ALLOW)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-a-transaction")
    producer.commit_transaction(30)
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{tid}",
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        reader.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == [b"replicated", b"in-a-transaction"]
    finally:
        reader.close()


def test_acls_written_on_one_broker_apply_on_every_broker_within_a_second(cluster: Cluster) -> None:
    topic = cluster.create_topic(prefix="acl")
    assert described_error(cluster.brokers[0], topic) == 0  # no ACL on it: everyone may
    via = non_controller(cluster)
    admin = AdminClient({"bootstrap.servers": via.bootstrap})  # forwarded to the controller
    started = time.monotonic()
    create(admin, [AclBinding(ResourceType.TOPIC, topic, LITERAL, "User:bob", "*", AclOperation.READ, ALLOW)])
    took = seconds_until(cluster, topic, TOPIC_AUTHORIZATION_FAILED, started)
    print(f"ACL created through broker {via.node_id}: in force on each broker after {took} s")
    assert max(took) < PROPAGATION_BOUND_S, took

    # ACLs on the cluster: the brokers need ClusterAction for replication from now on.
    cluster_ops = (AclOperation.CLUSTER_ACTION, AclOperation.ALTER, AclOperation.DESCRIBE,
                   AclOperation.CREATE, AclOperation.IDEMPOTENT_WRITE)
    create(admin, [AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, ANON, "*", op, ALLOW)
                   for op in cluster_ops])
    create(admin, [AclBinding(ResourceType.TOPIC, topic, LITERAL, ANON, "*", op, ALLOW)
                   for op in (AclOperation.WRITE, AclOperation.READ)])
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    producer.produce(topic, b"replicated", on_delivery=lambda err, _m: reports.append(err))
    producer.flush(30)
    assert reports == [None]  # replicated to the ISR (followers fetch with ClusterAction)
    committed_transaction(cluster, topic, admin)

    other = non_controller(cluster, skip=1)
    started = time.monotonic()
    other_admin = AdminClient({"bootstrap.servers": other.bootstrap})
    on_topic = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    deleted = other_admin.delete_acls([on_topic])
    assert len(next(iter(deleted.values())).result(timeout=30)) == 3
    took = seconds_until(cluster, topic, 0, started)
    print(f"ACLs deleted through broker {other.node_id}: gone on each broker after {took} s")
    assert max(took) < PROPAGATION_BOUND_S, took
