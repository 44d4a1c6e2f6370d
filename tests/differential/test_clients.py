"""Client-level scenarios: the same program run against Kafka and against Gregor, its results
compared after normalising the names a run makes up: the Java exactly-once processor
(kafka-clients 3.9 and 4.3) and librdkafka's admin client (offsets by timestamp,
DeleteRecords, configs with sources and synonyms)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.differential.conftest import Pair
from tests.differential.steps import TS
from tests.integration.harness import require_java

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
