"""A cluster whose brokers talk to each other over SASL_SSL (issue 21): replication, the
transaction coordinator's checks and markers, and forwarding to the controller all authenticate
on the inter-broker listener (PLAIN over TLS, `sasl.mechanism.inter.broker.protocol`), as the
principal `User:broker`, the only one the authorizer lets do ClusterAction. Clients use a
PLAINTEXT listener (ANONYMOUS, allowed to manage topics and ACLs, not ClusterAction) and the
SASL_SSL one with SCRAM credentials created on another broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.differential.messages import build
from tests.integration.certs import Pki, make_pki
from tests.integration.cluster import Cluster, running_cluster
from tests.integration.harness import free_port
from tests.integration.wire import WireClient

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret";')
TOPIC_AUTHORIZATION_FAILED = 29
REAUTH_MS = 5000  # the inter-broker listener's SASL sessions (KIP-368)
EXPIRED = "expired (connections.max.reauth.ms)"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Pki, dict[int, int]]]:
    base = tmp_path_factory.mktemp("cluster-security")
    pki = make_pki(base / "pki")
    ports = {n: free_port() for n in (1, 2, 3)}
    internal = {n: free_port() for n in (1, 2, 3)}

    def per_broker(n: int) -> dict[str, Any]:
        return {"listeners": f"PLAINTEXT://127.0.0.1:{ports[n]},INTERNAL://127.0.0.1:{internal[n]}"}

    with running_cluster(base, show_logs_on_error=True, per_broker=per_broker, ports=ports, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "listener.name.internal.connections.max.reauth.ms": REAUTH_MS,
        "ssl.keystore.location": str(pki.keystore), "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": STANDARD, "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": True,  # until the first ACLs (anonymous_may_manage)
    }) as cluster:
        yield cluster, pki, internal


def anonymous_may_manage(cluster: Cluster) -> None:
    """ANONYMOUS may create topics and ACLs and use topics, groups and transactional ids,
    but not ClusterAction (the cluster resource has ACLs, none of them granting it)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    operations = (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                  AclOperation.IDEMPOTENT_WRITE)
    acls = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                       "*", op, AclPermissionType.ALLOW)
            for op in operations]
    acls += [AclBinding(rtype, "*", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALL,
                        AclPermissionType.ALLOW)
             for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)]
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


def test_replication_and_transactions_over_sasl_ssl_between_brokers(
    secured: tuple[Cluster, Pki, dict[int, int]],
) -> None:
    cluster, _pki, _internal = secured
    anonymous_may_manage(cluster)
    topic = cluster.create_topic(partitions=3, rf=3)  # every ISR of 3: the followers fetch over SASL_SSL
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)  # markers to the partitions' leaders over SASL_SSL
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got: list[bytes] = []
    try:
        for _ in range(120):
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 30:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
    cluster.wait_for(lambda i: all(len(i.partitions[(topic, p)].isr) == 3 for p in range(3)))
    for b in cluster.brokers:
        assert "Traceback" not in b.log_text()


def test_brokers_renew_their_sessions_before_they_expire(
    secured: tuple[Cluster, Pki, dict[int, int]],
) -> None:
    """The inter-broker listener's sessions last REAUTH_MS: the brokers' own connections
    (follower fetches, markers, forwarding) are renewed before that, so none of their requests
    arrives after its session expired (which the other broker answers by closing it)."""
    cluster, _pki, _internal = secured
    anonymous_may_manage(cluster)
    topic = cluster.create_topic(partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    started = time.monotonic()
    while time.monotonic() - started < 1.5 * REAUTH_MS / 1000:  # past the first sessions' end
        producer.begin_transaction()
        producer.produce(topic, b"v", partition=0)
        producer.commit_transaction(30)
    assert len(cluster.image().partitions[(topic, 0)].isr) == 3
    for b in cluster.brokers:
        assert EXPIRED not in b.log_text()


def test_cluster_action_is_the_brokers_alone(secured: tuple[Cluster, Pki, dict[int, int]]) -> None:
    """A follower fetch from a client (ANONYMOUS, no ClusterAction) is refused, as Kafka refuses
    it (TOPIC_AUTHORIZATION_FAILED per partition, whatever the topic ACLs), while the brokers' own
    fetches (User:broker) keep every ISR full."""
    cluster, _pki, _internal = secured
    topic = cluster.create_topic(partitions=1, rf=3)
    with WireClient(cluster.broker(1).port) as c:
        fetch = c.call(_follower_fetch(topic), 4)
        assert fetch.responses[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
    assert len(cluster.image().partitions[(topic, 0)].isr) == 3


def _follower_fetch(topic: str) -> Any:
    return build(1, 4, {"replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})


def test_scram_users_created_on_one_broker_authenticate_on_another(
    secured: tuple[Cluster, Pki, dict[int, int]],
) -> None:
    cluster, pki, internal = secured
    admin = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    other = AdminClient({
        "bootstrap.servers": f"127.0.0.1:{internal[3]}", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret",
        "ssl.ca.location": str(pki.ca),
    })
    assert len(other.list_topics(timeout=20).brokers) == 3
