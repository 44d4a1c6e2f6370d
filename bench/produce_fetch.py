"""Produce and fetch throughput of one broker with confluent-kafka (librdkafka).

Starts a broker on a free port with a temporary data dir, produces
RECORDS records of SIZE bytes (acks=all, lz4, idempotence on), then consumes
them back from the beginning, and prints records/s, MB/s and the broker's CPU per MiB (utime +
stime from /proc) for each phase; then the same on one Apache Kafka node and on one Tansu node
(its data in memory; bench/reference.py), with every broker's figure and Gregor's ratio to each.
A phase that fails on Tansu says so in its row. Run with `make bench`.
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
from bench.reference import Comparison, Server

BENCHMARK = "produce_fetch"
MIB = 1 << 20


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


def _phase(comparison: Comparison, server: Server, topic: str, phase: str, args: argparse.Namespace) -> None:
    """One phase on one broker, its rate and the broker's CPU per MiB recorded in its row."""
    row = f"{phase} {args.records} x {args.size} B"
    with comparison.attempt(server.side, row):
        cpu_before = reference.broker_cpu_s(server)
        if phase == "produce":
            seconds = _produce(server.bootstrap, topic, args.records, args.size)
        else:
            seconds = _consume(server.bootstrap, topic, args.records)
        cpu_ms = 1000 * (reference.broker_cpu_s(server) - cpu_before) / (args.records * args.size / MIB)
        detail = f"{seconds:6.2f} s {args.records * args.size / 1e6 / seconds:7.1f} MB/s"
        comparison.record(server.side, row, args.records / seconds, "rec/s", detail, cpu_ms=cpu_ms, per="MiB")


def main() -> None:
    parser = reference.arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    comparison = Comparison(BENCHMARK)
    with tempfile.TemporaryDirectory() as tmp:
        for n, start in enumerate(reference.WITH_TANSU):
            with start(Path(tmp) / str(n), None) as server:
                topic = server.create_topic("bench", 4, 1)
                for phase in ("produce", "fetch"):
                    _phase(comparison, server, topic, phase, args)
    comparison.finish(args.update_baseline)


if __name__ == "__main__":
    main()
