"""kafka-python (3.x) against a real Gregor broker.

kafka-python 3 enables idempotence by default; Gregor has no idempotence yet,
so producers set enable_idempotence=False. Consumers have group_id=None and
use assign().
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, OffsetSpec

from tests.integration.clients import (
    append_in_order,
    assign_consumer_kwargs,
    kp_send_all,
    plain_producer_kwargs,
)
from tests.integration.harness import (
    CODECS,
    BrokerProcess,
    Rec,
    assert_same_records,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.integration

N = 200
ACKS: list[int | str] = [0, 1, "all"]


@pytest.fixture(scope="module")
def admin(bootstrap: str):  # type: ignore[no-untyped-def]
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    yield a
    a.close()


def create_topic(admin: KafkaAdminClient, topic: str, partitions: int = 1) -> None:
    admin.create_topics(
        {topic: {"num_partitions": partitions, "replication_factor": 1}},
        timeout_ms=10000,
        wait_for_metadata=True,
    )


def produce(
    bootstrap: str,
    topic: str,
    recs: list[Rec],
    codec: str = "none",
    acks: int | str = "all",
    partition: int | None = 0,
) -> list[int]:
    p = KafkaProducer(**plain_producer_kwargs(bootstrap, codec, acks), max_block_ms=20000)
    try:
        return kp_send_all(p, topic, recs, partition, timeout=30)
    finally:
        p.close(timeout=10)


def consumer(bootstrap: str, reset: str = "earliest") -> KafkaConsumer:
    return KafkaConsumer(**assign_consumer_kwargs(bootstrap, reset))


def consume(c: KafkaConsumer, n: int, first_offset: int = 0, timeout: float = 30.0) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for batch in c.poll(timeout_ms=200).values():
            for m in batch:
                append_in_order(got, m, first_offset)
    return got


def consume_from(bootstrap: str, topic: str, n: int, start: int = 0) -> list[Rec]:
    c = consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        if start == 0:
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, start)
        return consume(c, n, first_offset=start)
    finally:
        c.close()


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(bootstrap: str, admin: KafkaAdminClient, codec: str, acks: int | str) -> None:
    topic = unique_topic(f"kp-{codec}-{acks}")
    create_topic(admin, topic)
    recs = make_records(N, tag=f"kp-{codec}")
    offsets = produce(bootstrap, topic, recs, codec, acks)
    if acks != 0:
        assert offsets == list(range(N))
    assert_same_records(recs, consume_from(bootstrap, topic, N))


def test_offsets_list_and_times(bootstrap: str, admin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-offsets")
    create_topic(admin, topic)
    recs = make_records(N)
    produce(bootstrap, topic, recs, "gzip")
    tp = TopicPartition(topic, 0)

    c = consumer(bootstrap)
    try:
        assert c.beginning_offsets([tp], timeout_ms=10000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10000) == {tp: N}
        for i in (0, 1, N // 2, N - 1):
            for delta in (0, -5):
                res = c.offsets_for_times({tp: recs[i].timestamp + delta}, timeout_ms=10000)[tp]
                assert res is not None and res.offset == i, (
                    f"offsets_for_times({recs[i].timestamp + delta}) = {res}, want offset {i}"
                )
                assert res.timestamp == recs[i].timestamp
        after = c.offsets_for_times({tp: recs[-1].timestamp + 1000}, timeout_ms=10000)[tp]
        assert after is None
    finally:
        c.close()

    res = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})
    assert res[tp].offset == 0
    res = admin.list_partition_offsets({tp: OffsetSpec.LATEST})
    assert res[tp].offset == N
    res = admin.list_partition_offsets({tp: recs[57].timestamp})
    assert res[tp].offset == 57


def test_latest_sees_only_new_records(bootstrap: str, admin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-latest")
    create_topic(admin, topic)
    produce(bootstrap, topic, make_records(50), "lz4")
    tp = TopicPartition(topic, 0)

    c = consumer(bootstrap, reset="latest")
    try:
        c.assign([tp])
        assert c.position(tp, timeout_ms=10000) == 50  # resolved via auto_offset_reset=latest
        extra = make_records(9, tag="late")
        produce(bootstrap, topic, extra, "lz4")
        got = consume(c, len(extra), first_offset=50)
        assert not c.poll(timeout_ms=300)
    finally:
        c.close()
    assert_same_records(extra, got)


def test_auto_create_on_produce(bootstrap: str, admin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-auto")
    recs = make_records(30)
    offsets = produce(bootstrap, topic, recs, "snappy", partition=None)
    assert offsets == list(range(30))
    described = admin.describe_topics([topic])
    assert len(described) == 1 and described[0]["error_code"] == 0
    assert len(described[0]["partitions"]) == 1  # num.partitions
    assert_same_records(recs, consume_from(bootstrap, topic, len(recs)))


def test_consume_from_middle_offset(bootstrap: str, admin: KafkaAdminClient) -> None:
    topic = unique_topic("kp-mid")
    create_topic(admin, topic)
    recs = make_records(N)
    produce(bootstrap, topic, recs, "zstd")
    assert_same_records(recs[123:], consume_from(bootstrap, topic, N - 123, start=123))


def test_describe_cluster(admin: KafkaAdminClient, module_broker: BrokerProcess) -> None:
    desc = admin.describe_cluster()  # raises on a non-zero error_code
    assert desc["cluster_id"]
    assert desc["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in desc["brokers"]] == [
        (1, "127.0.0.1", module_broker.port)
    ]
