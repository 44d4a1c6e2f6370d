"""Produce and fetch throughput of one broker with confluent-kafka (librdkafka).

Starts a broker on a free port with a temporary data dir, produces
RECORDS records of SIZE bytes (acks=all, lz4, idempotence on), then consumes
them back from the beginning, and prints records/s and MB/s for each phase; then the same
on one Apache Kafka node (bench/reference.py), with Gregor's figure, Kafka's and the ratio.
Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import reference
from bench.reference import Comparison

BENCHMARK = "produce_fetch"


def _produce(
    bootstrap: str, topic: str, count: int, size: int, compression: str = "lz4", keys: int = 1000,
    partitions: int = 4, conf: dict[str, Any] | None = None,
) -> float:
    """Idempotent acks=all sends of `count` records of `size` bytes, `keys` distinct keys, over
    `partitions` partitions; seconds taken. `conf`: more client settings (security)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "compression.type": compression, "linger.ms": 5, "batch.size": 1_000_000, **(conf or {}),
    })
    payload = os.urandom(size // 2).hex().encode()[:size]
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i % keys).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return time.perf_counter() - start


def _consume(bootstrap: str, topic: str, count: int, conf: dict[str, Any] | None = None) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, **(conf or {})})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    start = time.perf_counter()
    seen = 0
    while seen < count:
        batch = consumer.consume(10_000, timeout=5)
        assert batch, f"stalled after {seen} records"
        seen += len(batch)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    megabytes = args.records * args.size / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        for n, start in enumerate(reference.SINGLE):
            with start(Path(tmp) / str(n), None) as server:
                topic = server.create_topic("bench", 4, 1)
                for phase, seconds in (
                    ("produce", _produce(server.bootstrap, topic, args.records, args.size)),
                    ("fetch", _consume(server.bootstrap, topic, args.records)),
                ):
                    row = f"{phase} {args.records} x {args.size} B"
                    detail = f"{seconds:6.2f} s {megabytes / seconds:7.1f} MB/s"
                    comparison.record(server.side, row, args.records / seconds, "rec/s", detail)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
