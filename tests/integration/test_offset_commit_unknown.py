"""OffsetCommit for a topic or partition that does not exist (issue 12).

Kafka's KafkaApis.handleOffsetCommitRequest answers every partition of an unknown topic,
and every unknown partition of a known topic, with UNKNOWN_TOPIC_OR_PARTITION before it
asks the group coordinator; the rest are committed as usual. Nothing is stored for the
unknown ones and no topic is auto-created. Checked at byte level (v2, v8, v9) and through
the Admin APIs that are OffsetCommit underneath (confluent-kafka
alter_consumer_group_offsets, kafka-python alter_group_offsets).
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.errors import NoError, UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition

from protocol.messages import REQUESTS
from tests.integration.harness import BrokerProcess, unique_topic
from tests.integration.wire import WireClient, create_topic

UNKNOWN = 3
COMMIT, FETCH = 8, 9


def commit_request(group: str, offsets: dict[tuple[str, int], int], version: int) -> object:
    cls = REQUESTS[COMMIT]
    T = cls.OffsetCommitRequestTopic
    by_topic: dict[str, list[object]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            T.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                commit_timestamp=-1, committed_metadata="m",
            )
        )
    return cls(
        version=version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, retention_time_ms=-1,
        topics=[T(name=t, partitions=p) for t, p in by_topic.items()],
    )


TP = tuple[str, int]


def commit(c: WireClient, group: str, offsets: dict[TP, int], version: int) -> dict[TP, int]:
    resp = c.call(commit_request(group, offsets, version), version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetched(c: WireClient, group: str, partitions: list[TP]) -> dict[TP, int]:
    cls = REQUESTS[FETCH]
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    req = cls(
        version=5, group_id=group,
        topics=[cls.OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )
    resp = c.call(req, 5)
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions}


@pytest.mark.parametrize("version", [2, 8, 9])
def test_unknown_topic_and_partition_answered_per_partition(
    module_broker: BrokerProcess, version: int
) -> None:
    known, missing = unique_topic("commit-known"), unique_topic("commit-missing")
    group = unique_topic("commit-group")
    with WireClient(module_broker.port) as c:
        create_topic(c, known, partitions=2)
        offsets = {(known, 0): 10, (known, 1): 11, (known, 2): 12, (known, -1): 13, (missing, 0): 14}
        assert commit(c, group, offsets, version) == {
            (known, 0): 0, (known, 1): 0, (known, 2): UNKNOWN, (known, -1): UNKNOWN, (missing, 0): UNKNOWN,
        }
        assert fetched(c, group, list(offsets)) == {
            (known, 0): 10, (known, 1): 11, (known, 2): -1, (known, -1): -1, (missing, 0): -1,
        }
        # OffsetCommit never creates the topic, even with auto-creation on.
        meta = c.metadata([missing], version=4, auto_create=False)
        assert meta.topics[0].error_code == UNKNOWN


def test_only_unknown_partitions_skip_the_coordinator(module_broker: BrokerProcess) -> None:
    """Kafka answers before the group checks: an empty group id does not turn into
    INVALID_GROUP_ID when no partition of the request exists."""
    with WireClient(module_broker.port) as c:
        missing = unique_topic("commit-missing")
        answer = commit(c, "", {(missing, 0): 1, (missing, 1): 2}, 8)
        assert answer == {(missing, 0): UNKNOWN, (missing, 1): UNKNOWN}
        known = unique_topic("commit-known")
        create_topic(c, known)
        assert commit(c, "", {(known, 0): 1, (missing, 0): 2}, 8) == {(known, 0): 24, (missing, 0): UNKNOWN}


def test_confluent_alter_consumer_group_offsets(module_broker: BrokerProcess) -> None:
    known, missing = unique_topic("alter-known"), unique_topic("alter-missing")
    group = unique_topic("alter-group")
    with WireClient(module_broker.port) as c:
        create_topic(c, known)
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(known, 0, 5), TopicPartition(known, 3, 6), TopicPartition(missing, 0, 7)]
    )
    result = admin.alter_consumer_group_offsets([request])[group].result(timeout=30)
    errors = {(tp.topic, tp.partition): tp.error and tp.error.code() for tp in result.topic_partitions}
    assert errors == {(known, 0): None, (known, 3): UNKNOWN, (missing, 0): UNKNOWN}
    listing = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    listed = listing[group].result(timeout=30)
    assert {(tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions} == {(known, 0, 5)}


def test_kafka_python_alter_group_offsets(module_broker: BrokerProcess) -> None:
    known, missing = unique_topic("kp-known"), unique_topic("kp-missing")
    group = unique_topic("kp-group")
    with WireClient(module_broker.port) as c:
        create_topic(c, known)
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        result = admin.alter_group_offsets(
            group,
            {
                KafkaTopicPartition(known, 0): OffsetAndMetadata(3, "", -1),
                KafkaTopicPartition(missing, 0): OffsetAndMetadata(4, "", -1),
            },
        )
        assert result == {
            KafkaTopicPartition(known, 0): NoError,
            KafkaTopicPartition(missing, 0): UnknownTopicOrPartitionError,
        }
        committed = admin.list_group_offsets(group)[group]
        assert {tp: o.offset for tp, o in committed.items()} == {KafkaTopicPartition(known, 0): 3}
    finally:
        admin.close()
