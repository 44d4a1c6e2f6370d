"""Dynamic broker configs (KIP-226) on a BROKER resource (issue 12).

AlterConfigs / IncrementalAlterConfigs on resource type 4 with the node id (DYNAMIC_BROKER_CONFIG)
or "" (the cluster-wide default, DYNAMIC_DEFAULT_BROKER_CONFIG) accept the broker keys Kafka
changes dynamically and Gregor reads (the log keys that topic configs default from, and
producer.id.expiration.ms), persist them in the metadata store, and apply them at once to existing
and new topics that do not override them. Everything else is refused as Kafka's
ConfigAdminManager does: INVALID_REQUEST naming the key ("Cannot update these configs
dynamically: [...]"), INVALID_CONFIG for APPEND to a non-list key. DescribeConfigs reports each
value's source and, when asked, its synonyms in Kafka's order (per-broker, default, static,
built-in default). Byte level, plus confluent-kafka's incremental_alter_configs and the Java
Admin (java/ConfigsAdmin.java).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    prefixed_json,
    require_java,
    run_java,
    segment_files,
    unique_topic,
)
from tests.integration.wire import WireClient, build_batch, create_topic, partition_errors

BROKER, TOPIC = 4, 2
SET, DELETE, APPEND = 0, 1, 2
INVALID_CONFIG, INVALID_REQUEST, MESSAGE_TOO_LARGE = 40, 42, 10
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, TOPIC_CONFIG = 2, 3, 4, 5, 1  # Kafka's wire values
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, CREATE_TOPICS = 32, 33, 44, 19


def incremental(
    c: WireClient, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False
) -> tuple[int, str | None]:
    cls = REQUESTS[INCREMENTAL_ALTER_CONFIGS]
    R = cls.AlterConfigsResource
    configs = [R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops]
    req = cls(version=1, resources=[R(resource_type=BROKER, resource_name=name, configs=configs)],
              validate_only=validate_only)
    answer = c.call(req, 1).responses[0]
    return answer.error_code, answer.error_message


def alter(c: WireClient, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """The legacy AlterConfigs: the given keys become the whole dynamic set."""
    cls = REQUESTS[ALTER_CONFIGS]
    R = cls.AlterConfigsResource
    entries = [R.AlterableConfig(name=k, value=v) for k, v in configs.items()]
    req = cls(version=1, resources=[R(resource_type=BROKER, resource_name=name, configs=entries)],
              validate_only=False)
    answer = c.call(req, 1).responses[0]
    return answer.error_code, answer.error_message


def describe(c: WireClient, kind: int, name: str, keys: list[str] | None = None) -> dict[str, Any]:
    """{config name: (value, source, read_only, [(synonym, value, source), ...])} (v4, synonyms on)."""
    cls = REQUESTS[DESCRIBE_CONFIGS]
    res = cls.DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=keys)
    result = c.call(cls(version=4, resources=[res], include_synonyms=True, include_documentation=False), 4)
    found = result.results[0]
    assert found.error_code == 0, found
    return {
        e.name: (e.value, e.config_source, e.read_only, [(s.name, s.value, s.source) for s in e.synonyms])
        for e in found.configs
    }


def value_source(c: WireClient, kind: int, name: str, key: str) -> tuple[str, int]:
    value, source, _, _ = describe(c, kind, name, [key])[key]
    return value, source


def create_with(c: WireClient, topic: str, configs: dict[str, str]) -> None:
    cls = REQUESTS[CREATE_TOPICS]
    T = cls.CreatableTopic
    entry = T(name=topic, num_partitions=1, replication_factor=1, assignments=[],
              configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
    answer = c.call(cls(version=4, topics=[entry], timeout_ms=5000, validate_only=False), 4)
    assert answer.topics[0].error_code == 0, answer


def produce_value(c: WireClient, topic: str, size: int) -> int:
    return partition_errors(c.produce(topic, [(0, build_batch([b"x" * size]))]))[0]


def produce_batches(c: WireClient, topic: str, count: int, size: int = 1000) -> None:
    for _ in range(count):
        assert produce_value(c, topic, size) == 0


def test_segment_bytes_per_broker_applies_live_and_survives_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    before, pinned = unique_topic("dyn-before"), unique_topic("dyn-pinned")
    with WireClient(broker.port) as c:
        create_topic(c, before)
        create_with(c, pinned, {"segment.bytes": "1048576"})
        assert incremental(c, "1", [("log.segment.bytes", SET, "2048")]) == (0, None)
        after = unique_topic("dyn-after")
        create_topic(c, after)
        for topic in (before, pinned, after):
            produce_batches(c, topic, 6)
        assert describe(c, BROKER, "1", ["log.segment.bytes"])["log.segment.bytes"] == (
            "2048", DYNAMIC_BROKER, False,
            [("log.segment.bytes", "2048", DYNAMIC_BROKER), ("log.segment.bytes", "1073741824", STATIC),
             ("log.segment.bytes", "1073741824", DEFAULT)],
        )
        seg = describe(c, TOPIC, before, ["segment.bytes"])["segment.bytes"]
        assert seg[:2] == ("2048", DYNAMIC_BROKER)
        assert value_source(c, TOPIC, pinned, "segment.bytes") == ("1048576", TOPIC_CONFIG)
    # Every ~1 KiB batch rolls a 2 KiB segment; the topic that overrides it keeps one segment.
    assert len(segment_files(broker.partition_dir(before))) >= 3
    assert len(segment_files(broker.partition_dir(after))) >= 3
    assert len(segment_files(broker.partition_dir(pinned))) == 1

    broker.restart()
    with WireClient(broker.port) as c:
        assert value_source(c, BROKER, "1", "log.segment.bytes") == ("2048", DYNAMIC_BROKER)
        rolled = len(segment_files(broker.partition_dir(pinned)))
        produce_batches(c, pinned, 3)
        assert len(segment_files(broker.partition_dir(pinned))) == rolled
        count = len(segment_files(broker.partition_dir(before)))
        produce_batches(c, before, 3)
        assert len(segment_files(broker.partition_dir(before))) >= count + 2
        assert incremental(c, "1", [("log.segment.bytes", DELETE, None)]) == (0, None)
        assert value_source(c, BROKER, "1", "log.segment.bytes") == ("1073741824", STATIC)
        count = len(segment_files(broker.partition_dir(before)))
        produce_batches(c, before, 3)
        assert len(segment_files(broker.partition_dir(before))) <= count + 1


def test_cluster_default_below_per_broker_below_topic(module_broker: BrokerProcess) -> None:
    plain, pinned = unique_topic("dyn-plain"), unique_topic("dyn-max")
    with WireClient(module_broker.port) as c:
        create_topic(c, plain)
        create_with(c, pinned, {"max.message.bytes": "100000"})
        try:
            assert incremental(c, "", [("message.max.bytes", SET, "2000")]) == (0, None)
            only_default = [("message.max.bytes", "2000", DYNAMIC_DEFAULT)]
            expected = {"message.max.bytes": ("2000", DYNAMIC_DEFAULT, False, only_default)}
            assert describe(c, BROKER, "") == expected
            assert produce_value(c, plain, 3000) == MESSAGE_TOO_LARGE
            assert produce_value(c, pinned, 3000) == 0
            assert value_source(c, TOPIC, plain, "max.message.bytes") == ("2000", DYNAMIC_DEFAULT)

            assert incremental(c, "1", [("message.max.bytes", SET, "5000")]) == (0, None)
            assert produce_value(c, plain, 3000) == 0
            assert produce_value(c, plain, 6000) == MESSAGE_TOO_LARGE
            assert describe(c, TOPIC, plain, ["max.message.bytes"])["max.message.bytes"] == (
                "5000", DYNAMIC_BROKER, False,
                [("message.max.bytes", "5000", DYNAMIC_BROKER),
                 ("message.max.bytes", "2000", DYNAMIC_DEFAULT),
                 ("message.max.bytes", "1048588", DEFAULT)],
            )
            # The cluster-wide default lists only its own entries; the broker has both layers.
            assert describe(c, BROKER, "")["message.max.bytes"][:2] == ("2000", DYNAMIC_DEFAULT)
            # The legacy AlterConfigs replaces the whole set at that level.
            assert alter(c, "", {"log.retention.ms": "3600000"}) == (0, None)
            assert set(describe(c, BROKER, "")) == {"log.retention.ms"}
            assert value_source(c, TOPIC, plain, "retention.ms") == ("3600000", DYNAMIC_DEFAULT)
        finally:
            assert alter(c, "", {}) == (0, None)
            assert alter(c, "1", {}) == (0, None)
        assert describe(c, BROKER, "") == {}
        assert produce_value(c, plain, 6000) == 0


@pytest.mark.parametrize(
    ("name", "ops", "error", "message"),
    [
        ("1", [("num.partitions", SET, "3")], INVALID_REQUEST,
         "Cannot update these configs dynamically: [num.partitions]"),
        ("1", [("log.segment.delete.delay.ms", SET, "5")], INVALID_REQUEST,
         "Cannot update these configs dynamically: [log.segment.delete.delay.ms]"),
        ("1", [("log.retention.hours", SET, "5")], INVALID_REQUEST,
         "Cannot update these configs dynamically: [log.retention.hours]"),
        ("1", [("log.retention.ms", SET, "soon")], INVALID_REQUEST,
         "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"),
        ("1", [("log.segment.bytes", SET, "10")], INVALID_REQUEST,
         "Invalid value 10 for configuration log.segment.bytes: must be >= 14"),
        ("1", [("log.cleanup.policy", SET, "shred")], INVALID_REQUEST,
         "Invalid value shred for configuration log.cleanup.policy: must be a list of delete, compact"),
        ("1", [("log.segment.bytes", APPEND, "5")], INVALID_CONFIG,
         "Config value append is not allowed for config key: log.segment.bytes"),
        ("1", [("log.retention.ms", SET, "1"), ("log.retention.ms", SET, "2")], INVALID_REQUEST,
         "Error due to duplicate config keys"),
        ("1", [("log.retention.ms", SET, None)], INVALID_REQUEST,
         "Null value not supported for : log.retention.ms"),
        ("2", [("log.retention.ms", SET, "1")], INVALID_REQUEST,
         "Unexpected broker id, expected 1, but received 2"),
        ("x", [("log.retention.ms", SET, "1")], INVALID_REQUEST, "Node id must be an integer, but it is: x"),
        ("1", [("log.retention.ms", 7, "1")], INVALID_REQUEST, "Unknown operations type 7"),
    ],
)
def test_refused(
    module_broker: BrokerProcess, name: str, ops: list[tuple[str, int, str | None]], error: int, message: str
) -> None:
    with WireClient(module_broker.port) as c:
        # A valid key in the same request is not applied either.
        assert incremental(c, name, [("log.flush.interval.messages", SET, "7"), *ops]) == (error, message)
        assert describe(c, BROKER, "") == {}
        flush = describe(c, BROKER, "1", ["log.flush.interval.messages"])["log.flush.interval.messages"]
        assert flush[1] == DEFAULT


def test_validate_only_and_legacy_refusal(module_broker: BrokerProcess) -> None:
    with WireClient(module_broker.port) as c:
        assert incremental(c, "1", [("log.retention.ms", SET, "1000")], validate_only=True) == (0, None)
        assert describe(c, BROKER, "1", ["log.retention.ms"])["log.retention.ms"][1] == DEFAULT
        assert alter(c, "1", {"log.retention.ms": "1000", "num.partitions": "2"}) == (
            INVALID_REQUEST, "Cannot update these configs dynamically: [num.partitions]"
        )
        entries = describe(c, BROKER, "1")
        assert entries["log.retention.ms"][1] == DEFAULT
        assert entries["num.partitions"][2] is True  # read-only
        assert entries["log.retention.ms"][2] is False


def test_confluent_incremental_alter_configs(module_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    topic = unique_topic("dyn-cf")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)

    def change(*entries: ConfigEntry) -> None:
        resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=list(entries))
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    def described(kind: ConfigResource.Type, name: str) -> Any:
        resource = ConfigResource(kind, name)
        return admin.describe_configs([resource])[resource].result(timeout=30)

    change(
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    try:
        entry = described(ConfigResource.Type.BROKER, "1")["log.retention.ms"]
        assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        topic_entries = described(ConfigResource.Type.TOPIC, topic)
        assert topic_entries["retention.ms"].value == "7200000"
        assert topic_entries["cleanup.policy"].value == "delete,compact"
        assert topic_entries["cleanup.policy"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        with pytest.raises(KafkaException) as refused:
            change(ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET))
        assert refused.value.args[0].name() == "INVALID_REQUEST"
        assert "num.partitions" in refused.value.args[0].str()
    finally:
        change(
            ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("log.cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
        )
    assert described(ConfigResource.Type.TOPIC, topic)["retention.ms"].value == "604800000"


def test_a_custom_key_is_accepted_as_kafka_accepts_it(module_broker: BrokerProcess) -> None:
    """Kafka refuses only its own keys that are not dynamic: a key it does not know is a custom
    config (for plugins) and is kept (the generated differential suite found Gregor refusing it)."""
    with WireClient(module_broker.port) as c:
        assert incremental(c, "", [("no.such.key", SET, "3")]) == (0, None)
        assert incremental(c, "", [("no.such.key", DELETE, None)]) == (0, None)
        assert describe(c, BROKER, "") == {}


def test_java_admin(module_broker: BrokerProcess) -> None:
    """The Java Admin: cluster default and per-broker changes, sources and synonyms as Kafka lists
    them (log.retention.ms has no built-in default of its own: log.retention.hours stands in)."""
    require_java()
    topic = unique_topic("dyn-java")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)
    proc = run_java("ConfigsAdmin.java", module_broker.bootstrap, "configs", "1", topic, timeout=120)
    assert proc.returncode == 0, proc.stderr
    described, refused, cleaned = prefixed_json(proc.stdout)
    retention = [
        ["log.retention.ms", "3600000", "DYNAMIC_BROKER_CONFIG"],
        ["log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        ["log.retention.hours", "168", "DEFAULT_CONFIG"],
    ]
    assert described["broker_retention"] == {
        "value": "3600000", "source": "DYNAMIC_BROKER_CONFIG", "read_only": False, "synonyms": retention
    }
    assert described["topic_retention"] == described["broker_retention"]
    assert described["broker_max"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert described["default_names"] == "log.retention.ms,message.max.bytes"
    assert refused == {
        "step": "refused", "error": "InvalidRequestException",
        "message": "Cannot update these configs dynamically: [num.partitions]",
    }
    assert cleaned["topic_retention"] == {
        "value": "604800000", "source": "DEFAULT_CONFIG", "read_only": False, "synonyms": []
    }
