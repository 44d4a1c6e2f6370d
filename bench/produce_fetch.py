"""Produce and fetch throughput of one broker with confluent-kafka (librdkafka).

Starts a broker on a free port with a temporary data dir, produces
RECORDS records of SIZE bytes (acks=all, lz4, idempotence on), then consumes
them back from the beginning, and prints records/s and MB/s for each phase.
Run with `make bench`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.harness import BrokerProcess


def _produce(
    bootstrap: str, topic: str, count: int, size: int, compression: str = "lz4", keys: int = 1000,
    partitions: int = 4,
) -> float:
    """Idempotent acks=all sends of `count` records of `size` bytes, `keys` distinct keys, over
    `partitions` partitions; seconds taken."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "compression.type": compression, "linger.ms": 5, "batch.size": 1_000_000,
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


def _consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False})
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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp)).start()
        try:
            topic = "bench"
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(15)
            megabytes = args.records * args.size / 1e6
            for phase, seconds in (
                ("produce", _produce(broker.bootstrap, topic, args.records, args.size)),
                ("fetch", _consume(broker.bootstrap, topic, args.records)),
            ):
                print(f"{phase:8s} {args.records} x {args.size} B: {seconds:6.2f} s  "
                      f"{args.records / seconds:10.0f} records/s  {megabytes / seconds:7.1f} MB/s")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
