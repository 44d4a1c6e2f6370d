"""Authorized operations (KIP-430) with no authorizer configured (issue 12).

Kafka without an authorizer answers a request that asks for authorized operations with every
operation the resource type supports (AclEntry.supportedOperations): topic 0xDF8, group 0xD48,
cluster 0x1FA0; a request that does not ask gets INT32_MIN ("not provided"). Metadata carries
the cluster's only in v8-v10 and the topics' from v8 (every topic looked up by name, found or
not, but not an unknown topic id); DescribeGroups from v3, only for groups without an error;
DescribeCluster in every version. Checked at byte level and through confluent-kafka's
describe_topics / describe_cluster / describe_consumer_groups and the Java Admin
(java/ConfigsAdmin.java; its describeTopics falls back to Metadata as Gregor does not serve
DescribeTopicPartitions).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient

from protocol.messages import REQUESTS
from tests.integration.harness import BrokerProcess, prefixed_json, require_java, run_java, unique_topic
from tests.integration.wire import WireClient, create_topic

TOPIC_OPS, GROUP_OPS, CLUSTER_OPS = 0xDF8, 0xD48, 0x1FA0
NOT_PROVIDED = -(2**31)
METADATA, DESCRIBE_GROUPS, DESCRIBE_CLUSTER = 3, 15, 60


def wire_value(decoded: Iterable[int] | None) -> int:
    """The signed 32-bit field the broker sent (kafka-python decodes it as a set of bits,
    and INT32_MIN as None)."""
    if decoded is None:
        return NOT_PROVIDED
    value = sum(1 << bit for bit in decoded)
    return value - (1 << 32) if value >= 1 << 31 else value


def metadata(c: WireClient, version: int, topics: list[Any], asks_topic: bool, asks_cluster: bool) -> Any:
    cls = REQUESTS[METADATA]
    req = cls(
        version=version, topics=topics, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=asks_cluster, include_topic_authorized_operations=asks_topic,
    )
    return c.call(req, version)


def by_name(names: list[str]) -> list[Any]:
    return [REQUESTS[METADATA].MetadataRequestTopic(name=n) for n in names]


@pytest.mark.parametrize("version", [8, 10, 12, 13])
def test_metadata_answers_topic_and_cluster_operations_when_asked(
    module_broker: BrokerProcess, version: int
) -> None:
    known, missing = unique_topic("authz-known"), unique_topic("authz-missing")
    with WireClient(module_broker.port) as c:
        create_topic(c, known)
        asked = metadata(c, version, by_name([known, missing]), asks_topic=True, asks_cluster=True)
        ops = {t.name: wire_value(t.authorized_operations) for t in asked.topics}
        assert ops == {known: TOPIC_OPS, missing: TOPIC_OPS}
        assert [t.error_code for t in asked.topics] == [0, 3]
        # The cluster's field exists only in v8-v10 (then DescribeCluster carries it).
        if version <= 10:
            assert wire_value(asked.authorized_operations) == CLUSTER_OPS
        not_asked = metadata(c, version, by_name([known]), asks_topic=False, asks_cluster=False)
        assert wire_value(not_asked.topics[0].authorized_operations) == NOT_PROVIDED
        if version <= 10:
            assert wire_value(not_asked.authorized_operations) == NOT_PROVIDED
        # Only what was asked for: topic operations without the cluster's, and vice versa.
        topic_only = metadata(c, version, by_name([known]), asks_topic=True, asks_cluster=False)
        assert wire_value(topic_only.topics[0].authorized_operations) == TOPIC_OPS
        cluster_only = metadata(c, version, by_name([known]), asks_topic=False, asks_cluster=True)
        assert wire_value(cluster_only.topics[0].authorized_operations) == NOT_PROVIDED
        if version <= 10:
            assert wire_value(topic_only.authorized_operations) == NOT_PROVIDED
            assert wire_value(cluster_only.authorized_operations) == CLUSTER_OPS


def test_metadata_all_topics_and_unknown_topic_id(module_broker: BrokerProcess) -> None:
    known = unique_topic("authz-all")
    with WireClient(module_broker.port) as c:
        create_topic(c, known)
        every = metadata(c, 12, None, asks_topic=True, asks_cluster=False)  # type: ignore[arg-type]
        assert {wire_value(t.authorized_operations) for t in every.topics} == {TOPIC_OPS}
        assert known in {t.name for t in every.topics}
        unknown_id = REQUESTS[METADATA].MetadataRequestTopic(name=None, topic_id=uuid.uuid4())
        answer = metadata(c, 12, [unknown_id], asks_topic=True, asks_cluster=False)
        assert answer.topics[0].error_code == 100  # UNKNOWN_TOPIC_ID
        assert wire_value(answer.topics[0].authorized_operations) == NOT_PROVIDED


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(module_broker: BrokerProcess, version: int) -> None:
    cls = REQUESTS[DESCRIBE_CLUSTER]
    with WireClient(module_broker.port) as c:
        for asks, expected in ((True, CLUSTER_OPS), (False, NOT_PROVIDED)):
            req = cls(version=version, include_cluster_authorized_operations=asks)
            answer = c.call(req, version)
            assert answer.error_code == 0
            assert wire_value(answer.authorized_operations) == expected


def commit_offset(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [3, 5])
def test_describe_groups(module_broker: BrokerProcess, version: int) -> None:
    topic, group, absent = unique_topic("authz-g"), unique_topic("authz-group"), unique_topic("authz-none")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)
        commit_offset(module_broker.bootstrap, group, topic)
        cls = REQUESTS[DESCRIBE_GROUPS]
        request = cls(version=version, groups=[group, absent], include_authorized_operations=True)
        asked = c.call(request, version)
        got = {g.group_id: (g.error_code, wire_value(g.authorized_operations)) for g in asked.groups}
        # A group that does not exist is described as Dead without an error, so it gets them too.
        assert got[group] == (0, GROUP_OPS)
        assert got[absent] == (0, GROUP_OPS)
        not_asked = c.call(cls(version=version, groups=[group], include_authorized_operations=False), version)
        assert wire_value(not_asked.groups[0].authorized_operations) == NOT_PROVIDED


def test_confluent_admin(module_broker: BrokerProcess) -> None:
    topic, group = unique_topic("authz-cf"), unique_topic("authz-cf-group")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)
    commit_offset(module_broker.bootstrap, group, topic)
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    all_topic_ops = {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    assert set(described[topic].result(timeout=30).authorized_operations) == all_topic_ops
    plain = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=False)
    assert plain[topic].result(timeout=30).authorized_operations is None

    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
    }
    assert admin.describe_cluster().result(timeout=30).authorized_operations is None

    groups = admin.describe_consumer_groups([group], include_authorized_operations=True)
    assert set(groups[group].result(timeout=30).authorized_operations) == {
        AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }
    assert admin.describe_consumer_groups([group])[group].result(timeout=30).authorized_operations is None


def test_java_admin(module_broker: BrokerProcess) -> None:
    require_java()
    topic, group = unique_topic("authz-java"), unique_topic("authz-java-group")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)
    commit_offset(module_broker.bootstrap, group, topic)
    proc = run_java("ConfigsAdmin.java", module_broker.bootstrap, "authz", topic, group, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [answer] = prefixed_json(proc.stdout)
    assert answer == {
        "cluster": [
            "ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
            "IDEMPOTENT_WRITE",
        ],
        "cluster_plain": None,
        "topic": [
            "ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE",
        ],
        "group": ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"],
    }
