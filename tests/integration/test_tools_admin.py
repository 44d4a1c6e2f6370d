"""`gregor topics` (kafka-topics.sh) and `gregor groups` (kafka-consumer-groups.sh)
against a live broker, checked through real clients; errors are one line on stderr
and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.cluster import running_cluster, wait_until_served
from tests.integration.harness import BrokerProcess, gregor_command, unique_topic, wait_until


def gregor(broker: BrokerProcess | None, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    server = ["--bootstrap-server", broker.bootstrap] if broker is not None else []
    return subprocess.run([*gregor_command(), tool, *server, *args], capture_output=True, text=True,
                          timeout=120)


def ok(broker: BrokerProcess, tool: str, *args: str) -> list[str]:
    result = gregor(broker, tool, *args)
    assert result.returncode == 0, f"gregor {tool} {args}: rc {result.returncode}\n{result.stderr}"
    assert result.stderr == "", result.stderr
    return result.stdout.splitlines()


def fails(broker: BrokerProcess | None, tool: str, *args: str) -> str:
    """The one stderr line of a command that must fail."""
    result = gregor(broker, tool, *args)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def topic_configs(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: e.value for k, e in entries.items()}


# -- gregor topics -------------------------------------------------------------------------


def test_topics_create_describe_alter_delete(module_broker: BrokerProcess) -> None:
    topic = unique_topic("tools-topic")
    assert ok(module_broker, "topics", "--create", "--topic", topic, "--partitions", "3",
              "--replication-factor", "1", "--config", "retention.ms=123456",
              "--config", "cleanup.policy=delete") == [f"Created topic {topic}."]
    assert topic_configs(module_broker, topic)["retention.ms"] == "123456"
    assert topic in ok(module_broker, "topics", "--list")
    assert ok(module_broker, "topics", "--list", "--topic", topic) == [topic]
    assert "__consumer_offsets" not in ok(module_broker, "topics", "--list", "--exclude-internal")

    head, *parts = ok(module_broker, "topics", "--describe", "--topic", topic)
    fields = dict(f.split(": ", 1) for f in head.split("\t"))
    assert fields["Topic"] == topic and fields["PartitionCount"] == "3"
    assert fields["ReplicationFactor"] == "1"
    assert fields["Configs"] == "cleanup.policy=delete,retention.ms=123456"
    assert len(fields["TopicId"]) == 36
    assert parts == [f"\tTopic: {topic}\tPartition: {i}\tLeader: 1\tReplicas: 1\tIsr: 1" for i in range(3)]
    assert ok(module_broker, "topics", "--describe", "--topic", topic, "--under-replicated-partitions") == []

    assert ok(module_broker, "topics", "--alter", "--topic", topic, "--partitions", "5",
              "--config", "segment.ms=3600000", "--delete-config", "retention.ms",
              ) == [f"Altered topic {topic}."]
    configs = topic_configs(module_broker, topic)
    assert configs["segment.ms"] == "3600000" and configs["retention.ms"] == "604800000"
    head, *parts = ok(module_broker, "topics", "--describe", "--topic", topic)
    assert "PartitionCount: 5" in head and len(parts) == 5

    assert ok(module_broker, "topics", "--delete", "--topic", topic) == [f"Deleted topic {topic}."]
    assert topic not in ok(module_broker, "topics", "--list")


def test_topics_regex_and_if_exists(module_broker: BrokerProcess) -> None:
    prefix = unique_topic("tools-re")
    for i in range(2):
        ok(module_broker, "topics", "--create", "--topic", f"{prefix}-{i}")
    assert ok(module_broker, "topics", "--list", "--topic", f"{prefix}-.*") == [f"{prefix}-0", f"{prefix}-1"]
    described = ok(module_broker, "topics", "--describe", "--topic", f"{prefix}-.*")
    assert [line.split("\t")[0] for line in described if not line.startswith("\t")] == [
        f"Topic: {prefix}-0", f"Topic: {prefix}-1"]
    assert ok(module_broker, "topics", "--create", "--topic", f"{prefix}-0", "--if-not-exists") == []
    ok(module_broker, "topics", "--delete", "--topic", f"{prefix}-.*")
    assert ok(module_broker, "topics", "--list", "--topic", f"{prefix}-.*") == []
    assert ok(module_broker, "topics", "--delete", "--topic", f"{prefix}-0", "--if-exists") == []


def test_topics_errors_are_one_line(module_broker: BrokerProcess) -> None:
    topic = unique_topic("tools-err")
    ok(module_broker, "topics", "--create", "--topic", topic, "--partitions", "2")
    assert "already exists" in fails(module_broker, "topics", "--create", "--topic", topic)
    assert f"Topic '{topic}x' does not exist as expected" in fails(
        module_broker, "topics", "--describe", "--topic", f"{topic}x")
    assert "Unknown topic config name: no.such.key" in fails(
        module_broker, "topics", "--alter", "--topic", topic, "--config", "no.such.key=1")
    assert "retention.ms" in fails(module_broker, "topics", "--alter", "--topic", topic,
                                   "--config", "retention.ms=soon")
    assert "InvalidPartitionsError" in fails(module_broker, "topics", "--alter", "--topic", topic,
                                             "--partitions", "1")
    assert "takes key=value" in fails(module_broker, "topics", "--create", "--topic", f"{topic}-2",
                                      "--config", "retention.ms")
    assert "InvalidReplicationFactor" in fails(module_broker, "topics", "--create", "--topic",
                                               f"{topic}-3", "--replication-factor", "3")
    producer = Producer({"bootstrap.servers": module_broker.bootstrap})
    producer.produce(topic, b"still there", partition=1)
    assert producer.flush(30) == 0, "failed alters leave the topic as it was"


# -- gregor groups -------------------------------------------------------------------------


def _produce(broker: BrokerProcess, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def _consumer(broker: BrokerProcess, group: str, **extra: Any) -> Any:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                     **extra})


def _commit(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = _consumer(broker, group)
    try:
        wanted = [CTopicPartition(t, p, o) for (t, p), o in offsets.items()]
        consumer.commit(offsets=wanted, asynchronous=False)
    finally:
        consumer.close()


def _committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    consumer = _consumer(broker, group)
    try:
        found = consumer.committed([CTopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def _table(lines: list[str]) -> list[list[str]]:
    return [line.split() for line in lines if line and not line.startswith("Consumer group")]


def _active_member(broker: BrokerProcess, group: str, topic: str) -> Any:
    """A subscribed consumer holding its assignment (the group is Stable while it polls)."""
    consumer = _consumer(broker, group, **{"client.id": "tools-member", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    wait_until(lambda: consumer.poll(0.2) is not None and bool(consumer.assignment()), timeout=30,
               msg="the member gets its assignment")
    return consumer


def test_groups_describe_with_lag_and_members(module_broker: BrokerProcess) -> None:
    topic, group = unique_topic("tools-grp"), unique_topic("tools-group")
    ok(module_broker, "topics", "--create", "--topic", topic, "--partitions", "2")
    _produce(module_broker, topic, 5, 2)
    _commit(module_broker, group, {(topic, 0): 2, (topic, 1): 5})

    assert group in ok(module_broker, "groups", "--list")
    lines = ok(module_broker, "groups", "--describe", "--group", group)
    assert lines[0] == f"Consumer group '{group}' has no active members."
    assert _table(lines) == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
         "CLIENT-ID"],
        [group, topic, "0", "2", "5", "3", "-", "-", "-"],
        [group, topic, "1", "5", "5", "0", "-", "-", "-"],
    ]
    assert _table(ok(module_broker, "groups", "--describe", "--group", group, "--state"))[1] == [
        group, "-", "Empty", "0"]

    consumer = _active_member(module_broker, group, topic)
    try:
        rows = _table(ok(module_broker, "groups", "--describe", "--group", group))[1:]
        assert [(r[2], r[3], r[5], r[8]) for r in rows] == [("0", "2", "3", "tools-member"),
                                                            ("1", "5", "0", "tools-member")]
        members = _table(ok(module_broker, "groups", "--describe", "--group", group, "--members"))
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert [(m[0], m[3], m[4]) for m in members[1:]] == [(group, "tools-member", "2")]
        state = _table(ok(module_broker, "groups", "--describe", "--group", group, "--state"))[1]
        assert state == [group, "range", "Stable", "1"]
        listed = _table(ok(module_broker, "groups", "--list", "--state"))
        assert [group, "Stable"] in listed
        # An active group's offsets cannot be reset, nor the group deleted.
        line = fails(module_broker, "groups", "--reset-offsets", "--group", group, "--all-topics",
                     "--to-earliest", "--execute")
        assert line == (f"gregor groups: Assignments can only be reset if the group '{group}' is inactive, "
                        "but the current state is Stable.")
        assert "GroupNotEmptyException" in fails(module_broker, "groups", "--delete", "--group", group)
    finally:
        consumer.close()
    assert _committed(module_broker, group, topic, 2) == [2, 5]


def test_groups_describe_a_consumer_protocol_group(module_broker: BrokerProcess) -> None:
    """KIP-848: the tool describes it through ConsumerGroupDescribe, as Kafka's admin client."""
    topic, group = unique_topic("tools-848"), unique_topic("tools-848-group")
    ok(module_broker, "topics", "--create", "--topic", topic, "--partitions", "2")
    _produce(module_broker, topic, 3, 2)
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "client.id": "tools-848-member",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.2) is not None and len(consumer.assignment()) == 2, timeout=30,
                   msg="the member gets both partitions")
        offsets = [CTopicPartition(topic, 0, 1), CTopicPartition(topic, 1, 3)]
        consumer.commit(offsets=offsets, asynchronous=False)
        rows = _table(ok(module_broker, "groups", "--describe", "--group", group))[1:]
        assert [(r[2], r[3], r[4], r[5], r[8]) for r in rows] == [("0", "1", "3", "2", "tools-848-member"),
                                                                  ("1", "3", "3", "0", "tools-848-member")]
        state = _table(ok(module_broker, "groups", "--describe", "--group", group, "--state"))[1]
        assert state == [group, "uniform", "Stable", "1"]
        members = _table(ok(module_broker, "groups", "--describe", "--group", group, "--members"))[1:]
        assert [(m[0], m[3], m[4]) for m in members] == [(group, "tools-848-member", "2")]
    finally:
        consumer.close()


def test_groups_reset_offsets(module_broker: BrokerProcess) -> None:
    topic, group = unique_topic("tools-reset"), unique_topic("tools-reset-group")
    ok(module_broker, "topics", "--create", "--topic", topic, "--partitions", "3")
    _produce(module_broker, topic, 4, 3)
    _commit(module_broker, group, {(topic, 0): 1, (topic, 1): 2, (topic, 2): 3})

    def plan(*args: str) -> list[list[str]]:
        return _table(ok(module_broker, "groups", "--reset-offsets", "--group", group, *args))[1:]

    assert plan("--all-topics", "--to-earliest", "--dry-run") == [
        [group, topic, str(p), "0"] for p in range(3)]
    assert _committed(module_broker, group, topic, 3) == [1, 2, 3], "a dry run commits nothing"
    no_flag = gregor(module_broker, "groups", "--reset-offsets", "--group", group, "--all-topics",
                     "--to-latest")
    assert no_flag.stdout.startswith("WARN: No action will be performed as the --execute option is missing.")
    assert _committed(module_broker, group, topic, 3) == [1, 2, 3]

    assert [r[3] for r in plan("--topic", topic, "--shift-by", "2", "--dry-run")] == ["3", "4", "4"]
    assert [r[3] for r in plan("--topic", topic, "--shift-by", "-5", "--dry-run")] == ["0", "0", "0"]
    assert [r[3] for r in plan("--topic", f"{topic}:1", "--to-offset", "99", "--dry-run")] == ["4"]
    assert [r[3] for r in plan("--topic", topic, "--to-current", "--dry-run")] == ["1", "2", "3"]
    assert [r[3] for r in plan("--topic", topic, "--to-datetime", "2000-01-01T00:00:00.000",
                               "--dry-run")] == ["0", "0", "0"]
    assert [r[3] for r in plan("--topic", topic, "--to-datetime", "2999-01-01T00:00:00.000Z",
                               "--dry-run")] == ["4", "4", "4"]

    assert plan("--topic", f"{topic}:0,2", "--to-latest", "--execute") == [
        [group, topic, "0", "4"], [group, topic, "2", "4"]]
    assert _committed(module_broker, group, topic, 3) == [4, 2, 4]
    plan("--topic", topic, "--shift-by", "-1", "--execute")
    assert _committed(module_broker, group, topic, 3) == [3, 1, 3]
    consumer = _consumer(module_broker, group)
    try:
        consumer.assign([CTopicPartition(topic, 1)])
        message = consumer.poll(30)
        assert message is not None and message.value() == b"1-1", "a consumer resumes at the reset offset"
    finally:
        consumer.close()


def test_groups_delete_and_errors(module_broker: BrokerProcess) -> None:
    topic, group = unique_topic("tools-del"), unique_topic("tools-del-group")
    ok(module_broker, "topics", "--create", "--topic", topic)
    _produce(module_broker, topic, 1, 1)
    _commit(module_broker, group, {(topic, 0): 1})
    missing = unique_topic("no-such-group")
    assert fails(module_broker, "groups", "--describe", "--group", missing) == (
        f"gregor groups: Consumer group '{missing}' does not exist.")
    assert "GroupIdNotFoundException" in fails(module_broker, "groups", "--delete", "--group", missing)
    assert "no current committed offset" in fails(module_broker, "groups", "--reset-offsets", "--group",
                                                  missing, "--topic", topic, "--shift-by", "1")
    assert "--to-datetime must be" in fails(module_broker, "groups", "--reset-offsets", "--group", group,
                                            "--topic", topic, "--to-datetime", "yesterday")
    assert "--group or --all-groups" in fails(module_broker, "groups", "--describe")
    line = fails(None, "groups", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "2000", "--list")
    assert line.startswith("gregor groups: cannot connect to 127.0.0.1:1"), line

    assert ok(module_broker, "groups", "--delete", "--group", group) == [
        f"Deletion of requested consumer groups ('{group}') was successful."]
    assert group not in ok(module_broker, "groups", "--list")
    assert _committed(module_broker, group, topic, 1) == [-1001], "the group's offsets are gone"


# -- against a cluster ---------------------------------------------------------------------


def test_topics_and_groups_against_a_cluster(tmp_path: Path) -> None:
    """Placement, leaders and ISR come from Metadata; admin requests sent to any broker are
    forwarded; a killed broker shows as offline and its partitions as under-replicated."""
    with running_cluster(tmp_path) as cluster:
        b2, b3 = cluster.broker(2), cluster.broker(3)
        topic = unique_topic("tools-cluster")
        ok(b2, "topics", "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3",
           "--config", "retention.ms=1000000")
        wait_until_served(cluster.bootstrap, topic, 3)
        head, *parts = ok(b3, "topics", "--describe", "--topic", topic)
        assert "ReplicationFactor: 3" in head and "Configs: retention.ms=1000000" in head
        image = cluster.image()
        for line in parts:
            f = dict(x.split(": ", 1) for x in line.strip("\t").split("\t"))
            state = image.partitions[(topic, int(f["Partition"]))]
            assert f["Leader"] == str(state.leader)
            assert f["Replicas"] == ",".join(map(str, state.replicas))
            assert sorted(f["Isr"].split(",")) == ["1", "2", "3"]

        group = unique_topic("tools-cluster-group")
        _commit(b2, group, {(topic, 0): 0})
        assert group in ok(cluster.broker(1), "groups", "--list")
        rows = _table(ok(b3, "groups", "--describe", "--group", group))[1:]
        assert [r[:6] for r in rows] == [[group, topic, "0", "0", "0", "0"]]

        b3.kill9()

        def under_replicated() -> list[str]:
            return ok(b2, "topics", "--describe", "--topic", topic, "--under-replicated-partitions")

        lines = wait_until(lambda: len(under_replicated()) == 3 and under_replicated(), timeout=30,
                           msg="the killed broker leaves every ISR")
        assert all("\tOffline: 3" in line and "Leader: 3" not in line for line in lines), lines
