"""Segment roll (by size and by time), retention (by time and by size) and
fetching across segment boundaries, with small segments and a real client."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.harness import (
    BrokerFactory,
    Rec,
    assert_same_records,
    iter_batches,
    make_records,
    read_offset_index,
    segment_files,
    unique_topic,
    wait_until,
)

TIMEOUT = 15
SMALL_SEGMENTS = {"log.segment.bytes": 4096, "log.retention.check.interval.ms": 300,
                  "log.flush.scheduler.interval.ms": 100}


def _create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(TIMEOUT)


def _produce(bootstrap: str, topic: str, records: list[Rec]) -> None:
    # One record per batch (flush after each) so segments fill batch by batch.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "compression.type": "lz4"})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp)
        assert producer.flush(TIMEOUT) == 0


def _consume(bootstrap: str, topic: str, start: int, n: int) -> list[Rec]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.max.bytes": 1048588,
                         "max.partition.fetch.bytes": 2000})
    consumer.assign([TopicPartition(topic, 0, start)])
    got: list[Rec] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(Rec(msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1]))
    consumer.close()
    return got


def _earliest(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
    consumer.close()
    return int(low)


def test_roll_by_size_and_fetch_across_segments(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SMALL_SEGMENTS)
    topic = unique_topic("roll")
    _create(broker.bootstrap, topic)
    records = make_records(150, tag="roll")
    _produce(broker.bootstrap, topic, records)
    logs = segment_files(broker.partition_dir(topic))
    assert len(logs) >= 5, logs
    next_base = 0
    for log_file in logs:  # segments are contiguous and named by their first offset
        assert int(log_file.stem) == next_base
        batches = list(iter_batches(log_file))
        assert log_file.stat().st_size <= 4096 or len(batches) == 1
        next_base = batches[-1][1] + batches[-1][2] + 1
        entries = read_offset_index(log_file.with_suffix(".index"))
        positions = {pos: base - int(log_file.stem) for pos, base, _ in batches}
        assert all(positions.get(pos) == rel for rel, pos in entries if (rel, pos) != (0, 0))
    assert next_base == 150
    assert_same_records(records, _consume(broker.bootstrap, topic, 0, 150))
    middle = int(logs[2].stem) + 1  # starts inside the third segment
    assert_same_records(records[middle:], _consume(broker.bootstrap, topic, middle, 150 - middle))


def test_roll_by_time(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = unique_topic("rollms")
    _create(broker.bootstrap, topic, **{"segment.ms": "200"})
    records = []
    for i in range(6):  # segment.ms compares record timestamps, as Kafka does
        (r,) = make_records(1, base_ts=int(time.time() * 1000), tag=f"ms{i}")
        _produce(broker.bootstrap, topic, [r])
        records.append(r)
        time.sleep(0.25)
    assert len(segment_files(broker.partition_dir(topic))) >= 3
    assert_same_records(records, _consume(broker.bootstrap, topic, 0, 6))


def test_retention_by_time_moves_log_start(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SMALL_SEGMENTS)
    topic = unique_topic("rettime")
    _create(broker.bootstrap, topic, **{"retention.ms": "1000"})
    old = make_records(120, base_ts=int(time.time() * 1000) - 60_000, tag="old")
    _produce(broker.bootstrap, topic, old)
    fresh = make_records(3, base_ts=int(time.time() * 1000) + 60_000, tag="new")
    _produce(broker.bootstrap, topic, fresh)
    # Every segment whose newest record is older than retention.ms goes, the active one stays.
    wait_until(lambda: _earliest(broker.bootstrap, topic) > 0, timeout=10, msg="retention")
    start = _earliest(broker.bootstrap, topic)
    assert int(segment_files(broker.partition_dir(topic))[0].stem) == start
    got = _consume(broker.bootstrap, topic, start, 123 - start)
    assert_same_records((old + fresh)[start:], got)


def test_retention_by_size(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SMALL_SEGMENTS)
    topic = unique_topic("retsize")
    _create(broker.bootstrap, topic, **{"retention.bytes": "8192"})
    records = make_records(150, tag="size")
    _produce(broker.bootstrap, topic, records)
    part = broker.partition_dir(topic)

    def small_enough() -> bool:
        return sum(f.stat().st_size for f in segment_files(part)) <= 8192 + 4096

    wait_until(small_enough, timeout=10, msg="size retention")
    start = _earliest(broker.bootstrap, topic)
    assert start > 0
    assert_same_records(records[start:], _consume(broker.bootstrap, topic, start, 150 - start))
