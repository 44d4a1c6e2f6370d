"""Helpers for the Python Kafka clients (confluent-kafka, kafka-python, aiokafka) shared by the tests.

kafka-python and aiokafka have the same keyword arguments and message objects,
so their send loops and record conversion are written once here; the client
libraries are imported lazily (only the confluent consumer needs one at all).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.integration.harness import Rec, norm_headers

# -- confluent-kafka ----------------------------------------------------------------------


def assign_consumer(bootstrap: str, **extra: object) -> Any:
    """A confluent Consumer for assign(): librdkafka wants a group.id, never used without subscribe()."""
    from confluent_kafka import Consumer

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "gregor-it-unused",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    conf.update(extra)
    return Consumer(conf)


def poll_records(c: Any, n: int, timeout: float = 30) -> list[tuple[int, Rec]]:
    """(offset, record) of up to `n` records polled from a confluent consumer within `timeout` s."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    got: list[tuple[int, Rec]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME
        got.append((m.offset() or 0, Rec(m.key(), m.value(), norm_headers(m.headers()), ts)))
    return got


def read_to_eof(
    bootstrap: str, tps: list[tuple[str, int]], isolation: str, group_prefix: str, timeout: float, what: str
) -> list[tuple[tuple[str, int], Any]]:
    """(topic-partition, message) of every record of `tps` from the beginning up to partition EOF
    (the LSO for read_committed), read by a confluent consumer with `isolation`."""
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "fetch.wait.max.ms": 50,
    })
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        got: list[tuple[tuple[str, int], Any]] = []
        at_eof: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout
        while at_eof != set(tps):
            assert time.monotonic() < deadline, f"{what}: no EOF for {set(tps) - at_eof}"
            msg = c.poll(0.2)
            if msg is None:
                continue
            tp = (str(msg.topic()), int(msg.partition() or 0))
            if (err := msg.error()) is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_eof.add(tp)
                continue
            at_eof.discard(tp)
            got.append((tp, msg))
        return got
    finally:
        c.close()


# -- kafka-python and aiokafka -------------------------------------------------------------


def assign_consumer_kwargs(bootstrap: str, reset: str = "earliest") -> dict[str, Any]:
    """KafkaConsumer / AIOKafkaConsumer arguments for assign() without a group."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": reset,
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": 20000,
    }


def plain_producer_kwargs(bootstrap: str, codec: str, acks: int | str) -> dict[str, Any]:
    """KafkaProducer / AIOKafkaProducer arguments without idempotence."""
    return {
        "bootstrap_servers": bootstrap,
        "acks": acks,
        "compression_type": None if codec == "none" else codec,
        "enable_idempotence": False,
        "linger_ms": 5,
        "request_timeout_ms": 15000,
    }


def send_kwargs(r: Rec, partition: int | None) -> dict[str, Any]:
    """The send() arguments of one record (the same for KafkaProducer and AIOKafkaProducer)."""
    return {
        "value": r.value,
        "key": r.key,
        "headers": list(r.headers),
        "timestamp_ms": r.timestamp,
        "partition": partition,
    }


def kp_send_all(p: Any, topic: str, recs: list[Rec], partition: int | None, timeout: float) -> list[int]:
    """Send `recs` with a kafka-python producer; the acknowledged offsets."""
    futures = [p.send(topic, **send_kwargs(r, partition)) for r in recs]
    p.flush(timeout=timeout)
    return [f.get(timeout=timeout).offset for f in futures]


async def aio_send_all(
    p: Any, topic: str, recs: list[Rec], partition: int | None, timeout: float
) -> list[Any]:
    """Send `recs` with a started aiokafka producer; the RecordMetadata of each (None with acks=0)."""
    futures = [await p.send(topic, **send_kwargs(r, partition)) for r in recs]
    return list(await asyncio.wait_for(asyncio.gather(*futures), timeout))


def append_in_order(got: list[Rec], m: Any, first_offset: int) -> None:
    """Append a kafka-python / aiokafka message, checking its offset follows and it has CreateTime."""
    assert m.offset == first_offset + len(got), (
        f"record {len(got)} at offset {m.offset}, want {first_offset + len(got)}"
    )
    assert m.timestamp_type == 0  # CreateTime
    got.append(Rec(m.key, m.value, norm_headers(m.headers), m.timestamp))
