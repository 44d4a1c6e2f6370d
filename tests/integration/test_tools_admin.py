"""`gregor topics` (kafka-topics.sh) and `gregor groups` (kafka-consumer-groups.sh)
against a live broker, checked through real clients; errors are one line on stderr
and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.harness import BrokerProcess, gregor_command, unique_topic


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
    line = fails(None, "topics", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "2000", "--list")
    assert line.startswith("gregor topics: cannot connect to 127.0.0.1:1"), line
    producer = Producer({"bootstrap.servers": module_broker.bootstrap})
    producer.produce(topic, b"still there", partition=1)
    assert producer.flush(30) == 0, "failed alters leave the topic as it was"
