"""confluent-kafka (librdkafka) against a real Gregor broker.

No consumer groups yet: consumers use assign() with explicit start offsets and
never commit (librdkafka wants a group.id string but never contacts a
coordinator when assign() is used and auto-commit is off).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.integration.clients import assign_consumer
from tests.integration.harness import (
    CODECS,
    BrokerProcess,
    Rec,
    assert_same_records,
    make_records,
    norm_headers,
    unique_topic,
)

pytestmark = pytest.mark.integration

N = 200
ACKS = ["0", "1", "all"]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    a = admin(bootstrap)  # keep a reference: the futures fail if the client is collected
    futures = a.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=20)


def producer(bootstrap: str, codec: str = "none", acks: str = "all", **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": codec,
        "linger.ms": 5,
        "enable.idempotence": False,
        "message.timeout.ms": 20000,
    }
    conf.update(extra)
    return Producer(conf)


def produce(
    bootstrap: str,
    topic: str,
    recs: list[Rec],
    codec: str = "none",
    acks: str = "all",
    partition: int | None = 0,
) -> list[int]:
    """Produce `recs` in order; returns the acknowledged offsets (-1 for acks=0)."""
    p = producer(bootstrap, codec, acks)
    reports: list[tuple[KafkaError | None, int]] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        reports.append((err, msg.offset()))  # type: ignore[attr-defined]

    for r in recs:
        kw: dict[str, object] = {"partition": partition} if partition is not None else {}
        p.produce(
            topic,
            value=r.value,
            key=r.key,
            headers=list(r.headers) or None,
            timestamp=r.timestamp,
            on_delivery=on_delivery,
            **kw,
        )
        p.poll(0)
    assert p.flush(30) == 0, "producer could not deliver everything within 30 s"
    errors = [e for e, _ in reports if e is not None]
    assert not errors, f"delivery errors: {errors[:5]}"
    return [o for _, o in reports]


def consumer(bootstrap: str, reset: str = "earliest", **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "enable.auto.offset.store": False,
        "auto.offset.reset": reset,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return assign_consumer(bootstrap, **conf)


def consume(c: Consumer, n: int, timeout: float = 30.0, first_offset: int = 0) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            continue
        assert m.error() is None, f"consumer error: {m.error()}"
        assert m.offset() == first_offset + len(got), (
            f"record {len(got)} at offset {m.offset()}, want {first_offset + len(got)}"
        )
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME
        got.append(Rec(m.key(), m.value(), norm_headers(m.headers()), ts))
    return got


def consume_from(bootstrap: str, topic: str, n: int, start: int = OFFSET_BEGINNING) -> list[Rec]:
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, start)])
        return consume(c, n, first_offset=max(start, 0))
    finally:
        c.close()


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(bootstrap: str, codec: str, acks: str) -> None:
    topic = unique_topic(f"ck-{codec}-{acks}")
    create_topic(bootstrap, topic)
    recs = make_records(N, tag=f"ck-{codec}")
    offsets = produce(bootstrap, topic, recs, codec, acks)
    if acks != "0":
        assert offsets == list(range(N))
    assert_same_records(recs, consume_from(bootstrap, topic, N))


def test_offsets_list_and_times(bootstrap: str) -> None:
    topic = unique_topic("ck-offsets")
    create_topic(bootstrap, topic)
    recs = make_records(N)
    produce(bootstrap, topic, recs, "lz4")
    tp = TopicPartition(topic, 0)

    c = consumer(bootstrap)
    try:
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, N)
        for i in (0, 1, N // 2, N - 1):
            for delta in (0, -5):
                q = TopicPartition(topic, 0, recs[i].timestamp + delta)
                (res,) = c.offsets_for_times([q], timeout=10)
                assert res.error is None
                assert res.offset == i, f"offsets_for_times({q.offset}) = {res.offset}, want {i}"
        (after,) = c.offsets_for_times([TopicPartition(topic, 0, recs[-1].timestamp + 1000)], timeout=10)
        assert after.offset == OFFSET_END
    finally:
        c.close()

    a = admin(bootstrap)
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), N),
        "time": (OffsetSpec.for_timestamp(recs[57].timestamp), 57),
    }
    for name, (spec, want) in specs.items():
        res = a.list_offsets({tp: spec}, request_timeout=10)[tp].result(timeout=20)
        assert res.offset == want, f"admin list_offsets {name} = {res.offset}, want {want}"


def test_latest_sees_only_new_records(bootstrap: str) -> None:
    topic = unique_topic("ck-latest")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, make_records(50), "snappy")

    c = consumer(bootstrap, reset="latest", **{"enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        # Partition EOF means "end" has been resolved to an offset and fetched from.
        deadline = time.monotonic() + 10
        while True:
            assert time.monotonic() < deadline, "no partition EOF within 10 s"
            m = c.poll(0.1)
            if m is None:
                continue
            assert m.error() is not None, f"latest consumer got old record at {m.offset()}"
            if m.error().code() == KafkaError._PARTITION_EOF:
                assert m.offset() == 50
                break
        extra = make_records(9, tag="late")
        produce(bootstrap, topic, extra, "snappy")
        got = consume(c, len(extra), first_offset=50)
        m = c.poll(0.5)
        assert m is None or m.error().code() == KafkaError._PARTITION_EOF, "unexpected extra record"
    finally:
        c.close()
    assert_same_records(extra, got)


def test_auto_create_on_produce(bootstrap: str) -> None:
    topic = unique_topic("ck-auto")
    recs = make_records(30)
    offsets = produce(bootstrap, topic, recs, "zstd", partition=None)
    assert offsets == list(range(30))
    a = admin(bootstrap)
    md = a.list_topics(topic, timeout=10)
    assert topic in md.topics and md.topics[topic].error is None
    assert len(md.topics[topic].partitions) == 1  # num.partitions
    assert_same_records(recs, consume_from(bootstrap, topic, len(recs)))


def test_consume_from_middle_offset(bootstrap: str) -> None:
    topic = unique_topic("ck-mid")
    create_topic(bootstrap, topic)
    recs = make_records(N)
    produce(bootstrap, topic, recs, "gzip")
    assert_same_records(recs[123:], consume_from(bootstrap, topic, N - 123, start=123))


def test_describe_cluster(bootstrap: str, module_broker: BrokerProcess) -> None:
    a = admin(bootstrap)
    desc = a.describe_cluster(request_timeout=10).result(timeout=20)
    assert desc.cluster_id
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, "127.0.0.1", module_broker.port)]
    assert desc.controller is not None and desc.controller.id == 1
