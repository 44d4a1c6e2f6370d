"""Helpers of the Spark tests: topics and transactions made with confluent-kafka, reading back.

The SparkSession itself is the session-wide `spark` fixture of conftest.py.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

# Broker settings for the Spark tests: few __transaction_state partitions (fast creation)
# and a coordinator that aborts timed-out transactions soon.
SPARK_BROKER_OVERRIDES = {
    "transaction.state.log.num.partitions": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)


def txn_producer(bootstrap: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 0, **extra})
    p.init_transactions(30)
    return p


def send_txn(p: Producer, topic: str, values: list[str], commit: bool | None, partition: int = 0) -> None:
    """One transaction of `values`, flushed (so aborted records are really in the log), then
    committed (True), aborted (False) or left open (None)."""
    p.begin_transaction()
    for v in values:
        p.produce(topic, v.encode(), v.encode(), partition=partition)
    p.flush(30)
    if commit is True:
        p.commit_transaction(30)
    elif commit is False:
        p.abort_transaction(30)


def send_plain(bootstrap: str, topic: str, values: list[str], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v.encode(), v.encode(), partition=partition)
    p.flush(30)


def read_values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[str]:
    """Every value of every partition of `topic` up to its end for `isolation`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in parts}
        pending = {p for p, end in ends.items() if end > 0}
        out: list[str] = []
        while pending:
            for m in c.consume(500, timeout=1.0):
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                if err is None:
                    out.append(m.value().decode())
                if (m.offset() or 0) >= ends[m.partition()] - (0 if err else 1):
                    pending.discard(m.partition())
        return out
    finally:
        c.close()


def source(spark: Any, bootstrap: str, topic: str, stream: bool = False, **options: str) -> Any:
    reader = spark.readStream if stream else spark.read
    reader = reader.format("gregor_kafka").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
