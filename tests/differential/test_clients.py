"""Client-level scenarios: the same program run against Kafka and against Gregor, its results
compared after normalising the names a run makes up: the Java exactly-once processor
(kafka-clients 3.9 and 4.3), the Java client's abort race made to happen (both brokers serve
the aborted values it sends in the next transaction), librdkafka's admin client (offsets by timestamp,
DeleteRecords, configs with sources and synonyms) and a consumer group's life through
librdkafka's consumer and admin client (join, commit, describe, list and alter offsets, delete).
Replicated scenarios (describe producers and transactions, abort) are in test_replication.py."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import pytest

from tests.differential.conftest import Pair
from tests.differential.steps import TS
from tests.integration.harness import java_command, prefixed_json, require_java

Outcome = Any


def both(pair: Pair, scenario: Any, *args: Any) -> tuple[Outcome, Outcome]:
    """`scenario(bootstrap, port, name, *args)` on each broker with the same fresh name."""
    name = f"c-{uuid.uuid4().hex[:10]}"
    return (
        scenario(pair.kafka.bootstrap, pair.kafka.port, name, *args),
        scenario(pair.gregor.bootstrap, pair.gregor.port, name, *args),
    )


def assert_same(kafka: Outcome, gregor: Outcome) -> None:
    assert kafka == gregor, (
        f"Kafka and Gregor differ:\n  kafka:  {json.dumps(kafka, sort_keys=True)}\n"
        f"  gregor: {json.dumps(gregor, sort_keys=True)}"
    )


# Not compared: the Java admin's configs scenario (ConfigsAdmin.java). Kafka applies a dynamic
# broker config through its metadata log, a moment after AlterConfigs answers, so what
# DescribeConfigs shows right after depends on timing there (Gregor's answer is the new value).


def confluent_admin(bootstrap: str, _port: int, topic: str) -> Outcome:
    from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "3600000"})])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(6):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=TS + 10 * i)
    assert p.flush(30) == 0
    tp = TopicPartition(topic, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max": OffsetSpec.max_timestamp(),
        "at-25": OffsetSpec.for_timestamp(TS + 25),
        "future": OffsetSpec.for_timestamp(TS + 999),
    }
    offsets = {k: admin.list_offsets({tp: s})[tp].result(30) for k, s in specs.items()}
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])[TopicPartition(topic, 0, 2)].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    shown = {
        k: (v.value, str(v.source), [(s.name, s.value, str(s.source)) for s in v.synonyms.values()])
        for k, v in configs.items()
        if k in ("retention.ms", "cleanup.policy", "max.message.bytes")
    }
    return {
        "offsets": {k: [o.offset, o.timestamp] for k, o in offsets.items()},
        "low_watermark": deleted.low_watermark,
        "configs": shown,
        "beginning": OFFSET_BEGINNING,
    }


def test_confluent_admin(pair: Pair) -> None:
    assert_same(*both(pair, confluent_admin))


# Not log.retention.ms: its value differs as docs/differences.md's table of accepted differences says
# (Kafka shows null when only log.retention.hours sets it, Gregor the value in force).
BROKER_KEYS = ("message.max.bytes", "log.segment.bytes", "log.retention.bytes")


def synonyms(entry: Any) -> list[tuple[str, str, str]]:
    return [(s.name, s.value, str(s.source)) for s in entry.synonyms.values()]


def _broker_configs(admin: Any, name: str) -> Outcome:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.BROKER, name)
    found = admin.describe_configs([resource])[resource].result(30)
    return {
        k: (v.value, str(v.source), v.is_read_only, synonyms(v))
        for k, v in found.items()
        if k in BROKER_KEYS
    }


def _until(probe: Any, done: Any) -> Outcome:
    """Kafka applies a dynamic broker config from its metadata log a moment after the answer:
    describe again until the change shows (Gregor's first answer already shows it)."""
    deadline = time.monotonic() + 30
    while not done(found := probe()):
        assert time.monotonic() < deadline, f"the change never showed: {found}"
        time.sleep(0.1)
    return found


def broker_configs(bootstrap: str, _port: int, _name: str) -> Outcome:
    """Dynamic per-broker configs through librdkafka's admin client (it cannot name the
    cluster-wide default; test_admin.py sends those on the wire): their sources and synonyms,
    then deleted again."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    before = _broker_configs(admin, "1")

    def alter(name: str, key: str, value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry(key, value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(30)

    alter("1", "message.max.bytes", "2000000")
    alter("1", "log.segment.bytes", "536870912")
    changed = _until(
        lambda: _broker_configs(admin, "1"),
        lambda c: c["message.max.bytes"][0] == "2000000" and c["log.segment.bytes"][0] == "536870912",
    )
    alter("1", "message.max.bytes", None)
    alter("1", "log.segment.bytes", None)
    after = _until(lambda: _broker_configs(admin, "1"), lambda c: c == before)
    return {"before": before, "changed": changed, "after": after}


def test_broker_configs(pair: Pair) -> None:
    assert_same(*both(pair, broker_configs))


def _consume(c: Any, count: int) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of the next `count` records this consumer polls."""
    got: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 60
    while len(got) < count:
        assert time.monotonic() < deadline, f"consumed {got} of {count}"
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.value().decode()))
    return sorted(got)


def _group(admin: Any, group: str) -> Outcome:
    """What describe_consumer_groups shows of a group, member ids left out."""
    try:
        d = admin.describe_consumer_groups([group])[group].result(30)
    except Exception as e:  # a deleted group: the client's error, named
        return e.args[0].name() if e.args and hasattr(e.args[0], "name") else type(e).__name__
    members = [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members]
    return {"state": str(d.state), "type": str(d.type), "simple": d.is_simple_consumer_group,
            "assignor": d.partition_assignor, "members": members}


def _offsets(admin: Any, group: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


def consumer_group(bootstrap: str, _port: int, topic: str) -> Outcome:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    group = f"g-{topic}"
    config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"}
    c = Consumer(config)
    c.subscribe([topic])
    first = _consume(c, 10)
    c.commit(asynchronous=False)
    active = _group(admin, group)
    listed = {g.group_id: str(g.state) for g in admin.list_consumer_groups().result(30).valid}
    refused = admin.delete_consumer_groups([group])[group].exception(30)
    c.close()
    empty = _group(admin, group)
    committed = _offsets(admin, group)
    reset = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2)])
    altered = admin.alter_consumer_group_offsets([reset])[group].result(30)
    c = Consumer(config)
    c.subscribe([topic])
    again = _consume(c, 3)  # partition 0 from offset 2: its last three records
    c.close()
    deleted = admin.delete_consumer_groups([group])[group].exception(30)
    unknown = admin.delete_consumer_groups([group])[group].exception(30)
    return {
        "first": first,
        "active": active,
        "listed": listed.get(group),
        "delete_active": refused and refused.args[0].name(),
        "empty": empty,
        "committed": committed,
        "altered": [(tp.partition, tp.offset) for tp in altered.topic_partitions],
        "after_reset": again,
        "delete": deleted,
        "after_delete": _group(admin, group),
        "delete_again": unknown and unknown.args[0].name(),
    }


def test_consumer_group(pair: Pair) -> None:
    """A consumer group's life through librdkafka: join, commit, describe while active and
    empty, a refused delete, list and alter offsets, resume from the reset, delete twice."""
    assert_same(*both(pair, consumer_group))


def java_eos(bootstrap: str, _port: int, name: str, client: str) -> Outcome:
    """The shop's consume-transform-produce processor (EosProcessor.java) halted mid-transaction
    after its sends, then run to the end: what read_committed and read_uncommitted consumers see."""
    from tests.integration.shop import Shop

    shop = Shop(bootstrap, purchases=60)
    crashed = shop.processor(name, {"CRASH_AT": "after_sends:2"}, java=client, batch=10)
    assert crashed.wait(90) == 137, crashed.transcript()
    final = shop.processor(name, java=client, batch=20)
    assert final.wait(90) == 0 and final.of("done"), final.transcript()
    shop.assert_exactly_once()
    committed = sorted(shop.read(shop.invoices, "read_committed"))
    return {
        "committed": committed,
        "uncommitted": len(shop.read(shop.invoices, "read_uncommitted")),
        "offsets": shop.committed(),
        "transactions": len(crashed.of("committed")) + len(final.of("committed")),
    }


@pytest.mark.parametrize("client", ["3.9", "4.3"])
def test_java_exactly_once(pair: Pair, client: str) -> None:
    """kafka-clients 3.9 (transaction version 1) and 4.3 (version 2, both brokers finalize it)."""
    require_java(client)
    assert_same(*both(pair, java_eos, client))


def java_abort_race(bootstrap: str, _port: int, topic: str, client: str) -> Outcome:
    """AbortRace.java: what read_committed reads after the race (value@offset)."""
    done = subprocess.run(java_command("AbortRace.java", bootstrap, topic, client=client),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"AbortRace exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return prefixed_json(done.stdout)


@pytest.mark.parametrize("client", ["3.9", "4.3"])
def test_java_abort_race_commits_the_aborted_values_on_both(pair: Pair, client: str) -> None:
    """Chaos seed 110's aborted reads were the Java client's (kafka-clients 4.3.1): its sender
    read "no batch incomplete" just before an abort queued its EndTxn, sent that EndTxn, and
    the aborted transaction's batch, still open, went out in the next transaction. A debugger
    holds the sender at that point (AbortRace.java); Kafka then serves the three aborted values
    to read_committed, committed by the next transaction's markers, and so must Gregor: no
    broker can tell them from that transaction's own. kafka-clients 3.9 (transaction version 1,
    AddPartitionsToTxn) does the same."""
    require_java(client)
    kafka, gregor = both(pair, java_abort_race, client)
    assert_same(kafka, gregor)
    read = ["committed-0@0", "aborted-1@2", "aborted-2@3", "aborted-3@4", "committed-1@5"]  # marker at 1
    assert kafka == [{"read": read}]
