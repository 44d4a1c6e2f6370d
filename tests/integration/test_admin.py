"""Topic administration through real clients' admin APIs: configs, partitions,
record deletion, topic deletion, cluster and log-dir description."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from tests.integration.harness import BrokerProcess, unique_topic

TIMEOUT = 15


@pytest.fixture(scope="module")
def admin(module_broker: BrokerProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": module_broker.bootstrap})


def _create(admin: AdminClient, topic: str, partitions: int = 1, **configs: str) -> None:
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs)
    admin.create_topics([new])[topic].result(TIMEOUT)


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0


def _topic_config(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def test_create_topic_with_configs_and_describe(admin: AdminClient) -> None:
    topic = unique_topic("cfg")
    _create(admin, topic, 2, **{"retention.ms": "3600000", "cleanup.policy": "delete"})
    entries = _topic_config(admin, topic)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].value == "1073741824"
    assert entries["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value  # the harness sets it
    assert entries["segment.ms"].is_default


def test_create_topic_rejects_bad_config_and_duplicates(admin: AdminClient) -> None:
    topic = unique_topic("badcfg")
    bad = NewTopic(topic, 1, 1, config={"retention.ms": "soon"})
    with pytest.raises(KafkaException) as err:
        admin.create_topics([bad])[topic].result(TIMEOUT)
    assert err.value.args[0].name() == "INVALID_CONFIG"
    unknown = NewTopic(topic, 1, 1, config={"no.such.config": "1"})
    with pytest.raises(KafkaException) as err:
        admin.create_topics([unknown])[topic].result(TIMEOUT)
    assert err.value.args[0].name() == "INVALID_CONFIG"
    _create(admin, topic)
    with pytest.raises(KafkaException) as err:
        _create(admin, topic)
    assert err.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(KafkaException) as err:
        _create(admin, "bad/name")
    assert err.value.args[0].name() == "TOPIC_EXCEPTION"


def test_incremental_alter_configs(admin: AdminClient) -> None:
    topic = unique_topic("incr")
    _create(admin, topic)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    entries = _topic_config(admin, topic)
    assert entries["retention.ms"].value == "120000"
    assert entries["cleanup.policy"].value == "delete,compact"
    delete = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([delete])[delete].result(TIMEOUT)
    assert _topic_config(admin, topic)["retention.ms"].value == "604800000"


def test_alter_configs_replaces_the_set(admin: AdminClient) -> None:
    topic = unique_topic("alter")
    _create(admin, topic, **{"retention.ms": "1000000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.ms": "500000"})
    with pytest.warns(DeprecationWarning):  # the legacy AlterConfigs API, still served
        admin.alter_configs([resource])[resource].result(TIMEOUT)
    entries = _topic_config(admin, topic)
    assert entries["segment.ms"].value == "500000"
    assert entries["retention.ms"].value == "604800000"  # not in the new set: back to default
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.bytes": "3"})
    with pytest.raises(KafkaException) as err, pytest.warns(DeprecationWarning):
        admin.alter_configs([bad])[bad].result(TIMEOUT)
    assert err.value.args[0].name() == "INVALID_CONFIG"


def test_describe_broker_config(admin: AdminClient, module_broker: BrokerProcess) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert entries["node.id"].value == "1"
    assert entries["auto.create.topics.enable"].value == "true"


def test_add_partitions_then_produce_and_consume(
    admin: AdminClient, module_broker: BrokerProcess
) -> None:
    topic = unique_topic("parts")
    _create(admin, topic, 1)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT)
    metadata = admin.list_topics(topic, timeout=TIMEOUT)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    _produce(module_broker.bootstrap, topic, 5, partition=2)
    with pytest.raises(KafkaException) as err:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(TIMEOUT)
    assert err.value.args[0].name() == "INVALID_PARTITIONS"
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 2, 0)])
    values = [consumer.poll(TIMEOUT).value() for _ in range(5)]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]


def test_delete_records_moves_log_start(admin: AdminClient, module_broker: BrokerProcess) -> None:
    topic = unique_topic("delrec")
    _create(admin, topic)
    _produce(module_broker.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0, 4)
    result = admin.delete_records([tp])[tp].result(TIMEOUT)
    assert result.low_watermark == 4
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(TIMEOUT).offset == 4
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])  # below log start: reset to earliest
    first = consumer.poll(TIMEOUT)
    consumer.close()
    assert first.offset() == 4 and first.value() == b"v4"
    beyond = TopicPartition(topic, 0, 11)
    with pytest.raises(KafkaException) as err:
        admin.delete_records([beyond])[beyond].result(TIMEOUT)
    assert err.value.args[0].name() == "OFFSET_OUT_OF_RANGE"


def test_delete_topic(admin: AdminClient, module_broker: BrokerProcess) -> None:
    topic = unique_topic("deltopic")
    _create(admin, topic, 2)
    _produce(module_broker.bootstrap, topic, 3)
    assert module_broker.partition_dir(topic, 0).exists()
    admin.delete_topics([topic])[topic].result(TIMEOUT)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    assert not module_broker.partition_dir(topic, 0).exists()
    with pytest.raises(KafkaException) as err:
        admin.delete_topics([topic])[topic].result(TIMEOUT)
    assert err.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_describe_cluster_and_log_dirs(admin: AdminClient, module_broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster().result(TIMEOUT)
    assert [n.id for n in cluster.nodes] == [1] and cluster.controller.id == 1
    topic = unique_topic("logdirs")
    _create(admin, topic)
    _produce(module_broker.bootstrap, topic, 7)
    kadmin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        dirs = kadmin.describe_log_dirs()
    finally:
        kadmin.close()
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for broker in dirs for result in broker["log_dirs"]
        for t in result["topics"] for p in t["partitions"]
    }
    assert sizes[(topic, 0)] > 0


def test_kafka_python_admin_round_trip(module_broker: BrokerProcess) -> None:
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    topic = unique_topic("kpadmin")
    kadmin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        kadmin.create_topics([KNewTopic(topic, 1, 1)])
        kadmin.create_partitions({topic: KNewPartitions(2)})
        assert topic in kadmin.list_topics()
        kadmin.delete_topics([topic])
        assert topic not in kadmin.list_topics()
        with pytest.raises(KafkaError):
            kadmin.delete_topics([topic])
    finally:
        kadmin.close()


def test_list_offsets_by_timestamp_and_max_timestamp(
    admin: AdminClient, module_broker: BrokerProcess
) -> None:
    topic = unique_topic("ts")
    _create(admin, topic)
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 0})
    for i, ts in enumerate([1_000_000, 3_000_000, 2_000_000, 4_000_000]):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=ts)
        assert producer.flush(TIMEOUT) == 0
    tp = TopicPartition(topic, 0)

    def query(spec: OffsetSpec) -> Any:
        return next(iter(admin.list_offsets({tp: spec}).values())).result(TIMEOUT)

    assert query(OffsetSpec.earliest()).offset == 0
    assert query(OffsetSpec.latest()).offset == 4
    newest = query(OffsetSpec.max_timestamp())
    assert (newest.offset, newest.timestamp) == (3, 4_000_000)
    at = query(OffsetSpec.for_timestamp(2_500_000))
    assert (at.offset, at.timestamp) == (1, 3_000_000)
    assert query(OffsetSpec.for_timestamp(5_000_000)).offset == -1


def test_offset_for_leader_epoch(module_broker: BrokerProcess) -> None:
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest as Req

    from tests.integration.wire import WireClient

    topic = unique_topic("epoch")
    _produce(module_broker.bootstrap, topic, 6)  # auto-created; leader epoch 0
    Topic = Req.OffsetForLeaderTopic
    query = Req(replica_id=-1, topics=[Topic(topic=topic, partitions=[
        Topic.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0),
        Topic.OffsetForLeaderPartition(partition=1, current_leader_epoch=0, leader_epoch=0),
    ])])
    with WireClient(module_broker.port) as client:
        answer = client.call(query, 4)
        fenced = client.call(Req(replica_id=-1, topics=[Topic(topic=topic, partitions=[
            Topic.OffsetForLeaderPartition(partition=0, current_leader_epoch=5, leader_epoch=0)
        ])]), 4)
    first, missing = answer.topics[0].partitions
    assert (first.error_code, first.leader_epoch, first.end_offset) == (0, 0, 6)
    assert missing.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert fenced.topics[0].partitions[0].error_code == 75  # UNKNOWN_LEADER_EPOCH


def test_elect_leaders_on_one_broker_needs_no_election(admin: AdminClient) -> None:
    from confluent_kafka import ElectionType

    topic = unique_topic("elect")
    _create(admin, topic, partitions=2)
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(f"{topic}-none", 0)]
    result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(TIMEOUT)
    codes = {(tp.topic, tp.partition): e.code() for tp, e in result.items()}
    assert codes == {
        (topic, 0): ConfluentError.ELECTION_NOT_NEEDED, (topic, 1): ConfluentError.ELECTION_NOT_NEEDED,
        (f"{topic}-none", 0): ConfluentError.UNKNOWN_TOPIC_OR_PART,
    }
