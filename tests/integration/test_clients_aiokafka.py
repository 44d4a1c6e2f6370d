"""aiokafka against a real Gregor broker (asyncio_mode = auto).

Consumers have group_id=None and use assign(); producers leave idempotence off.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.clients import (
    aio_send_all,
    append_in_order,
    assign_consumer_kwargs,
    plain_producer_kwargs,
)
from tests.integration.harness import (
    CODECS,
    Rec,
    assert_same_records,
    make_records,
    unique_topic,
)

pytestmark = pytest.mark.integration

N = 200
ACKS: list[int | str] = [0, 1, "all"]


def _error_codes(obj: Any) -> list[int]:
    """Every error_code field anywhere in a decoded response object."""
    if isinstance(obj, dict):
        codes = [v for k, v in obj.items() if k == "error_code"]
        for v in obj.values():
            codes += _error_codes(v)
        return codes
    if isinstance(obj, list | tuple):
        return [c for v in obj for c in _error_codes(v)]
    return []


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=10000)
        assert set(_error_codes(resp.to_object())) <= {0}, resp
        described = await admin.describe_topics([topic])
        assert described[0]["error_code"] == 0
        assert len(described[0]["partitions"]) == partitions
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    recs: list[Rec],
    codec: str = "none",
    acks: int | str = "all",
    partition: int | None = 0,
) -> list[int]:
    p = AIOKafkaProducer(**plain_producer_kwargs(bootstrap, codec, acks))
    await p.start()
    try:
        metas = await aio_send_all(p, topic, recs, partition, timeout=30)
        return [-1 if m is None else m.offset for m in metas]  # acks=0: no metadata
    finally:
        await p.stop()


def consumer(bootstrap: str, reset: str = "earliest") -> AIOKafkaConsumer:
    return AIOKafkaConsumer(**assign_consumer_kwargs(bootstrap, reset))


async def consume(c: AIOKafkaConsumer, n: int, first_offset: int = 0, timeout: float = 30.0) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for batch in (await c.getmany(timeout_ms=200)).values():
            for m in batch:
                append_in_order(got, m, first_offset)
    return got


async def consume_from(bootstrap: str, topic: str, n: int, start: int = 0) -> list[Rec]:
    c = consumer(bootstrap)
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        if start == 0:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, start)
        return await consume(c, n, first_offset=start)
    finally:
        await c.stop()


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
async def test_round_trip(bootstrap: str, codec: str, acks: int | str) -> None:
    topic = unique_topic(f"aio-{codec}-{acks}")
    await create_topic(bootstrap, topic)
    recs = make_records(N, tag=f"aio-{codec}")
    offsets = await produce(bootstrap, topic, recs, codec, acks)
    if acks != 0:
        assert offsets == list(range(N))
    assert_same_records(recs, await consume_from(bootstrap, topic, N))


async def test_offsets_list_and_times(bootstrap: str) -> None:
    topic = unique_topic("aio-offsets")
    await create_topic(bootstrap, topic)
    recs = make_records(N)
    await produce(bootstrap, topic, recs, "zstd")
    tp = TopicPartition(topic, 0)

    c = consumer(bootstrap)
    await c.start()
    try:
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: N}
        for i in (0, 1, N // 2, N - 1):
            for delta in (0, -5):
                res = (await c.offsets_for_times({tp: recs[i].timestamp + delta}))[tp]
                assert res is not None and res.offset == i, (
                    f"offsets_for_times({recs[i].timestamp + delta}) = {res}, want offset {i}"
                )
                assert res.timestamp == recs[i].timestamp
        after = (await c.offsets_for_times({tp: recs[-1].timestamp + 1000}))[tp]
        assert after is None
    finally:
        await c.stop()


async def test_latest_sees_only_new_records(bootstrap: str) -> None:
    topic = unique_topic("aio-latest")
    await create_topic(bootstrap, topic)
    await produce(bootstrap, topic, make_records(50), "gzip")
    tp = TopicPartition(topic, 0)

    c = consumer(bootstrap, reset="latest")
    await c.start()
    try:
        c.assign([tp])
        assert await c.position(tp) == 50  # resolved via auto_offset_reset=latest
        extra = make_records(9, tag="late")
        await produce(bootstrap, topic, extra, "gzip")
        got = await consume(c, len(extra), first_offset=50)
        assert not await c.getmany(timeout_ms=300)
    finally:
        await c.stop()
    assert_same_records(extra, got)


async def test_auto_create_on_produce(bootstrap: str) -> None:
    topic = unique_topic("aio-auto")
    recs = make_records(30)
    offsets = await produce(bootstrap, topic, recs, "lz4", partition=None)
    assert offsets == list(range(30))
    assert_same_records(recs, await consume_from(bootstrap, topic, len(recs)))


async def test_consume_from_middle_offset(bootstrap: str) -> None:
    topic = unique_topic("aio-mid")
    await create_topic(bootstrap, topic)
    recs = make_records(N)
    await produce(bootstrap, topic, recs, "snappy")
    assert_same_records(recs[123:], await consume_from(bootstrap, topic, N - 123, start=123))
