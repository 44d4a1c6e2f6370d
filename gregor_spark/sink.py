"""Writing Spark rows to Kafka exactly once (batch and micro-batch).

Each task writes its rows in one Kafka transaction whose transactional id is stable for
(query, output partition): `<prefix>-<query id>-<partition>`. The task

1. initialises the producer, which fences every earlier attempt of the same task and
   completes or aborts its open transaction;
2. looks up (query id, batch id, partition) in the compacted commit topic, read
   read_committed once every transaction open at step 1 has ended, and stops there if
   that batch is already recorded;
3. otherwise writes its rows and the commit record in one transaction and commits.

A retried task, a speculative twin or a batch replayed after a driver restart therefore
writes each batch's rows of each partition once. This relies on the replayed batch having
the same rows in the same partitions (Spark replays the offsets of its checkpoint; the
query must be deterministic), and readers of the output must use read_committed.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from gregor_spark import kafka
from gregor_spark.kafka import OptionError
from gregor_spark.source import OffsetRange, read_range

DEFAULT_COMMIT_TOPIC = "gregor-spark-commits"
DEFAULT_PREFIX = "gregor-spark"
# Spark sets these local properties on every task of a micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
SCAN_WINDOW = 256


@dataclass(frozen=True, slots=True)
class PartitionCommit(WriterCommitMessage):
    partition: int
    batch_id: int
    rows: int
    skipped: bool


@dataclass(frozen=True, slots=True)
class SinkOptions:
    options: dict[str, str]
    topic: str | None
    commit_topic: str
    prefix: str
    # False: a plain idempotent write, at least once like Spark's own Kafka sink (benchmarks).
    exactly_once: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        lower = {k.lower(): v for k, v in options.items()}
        kafka.kafka_config(options)
        return cls(
            dict(options),
            lower.get("topic"),
            lower.get("committopic", DEFAULT_COMMIT_TOPIC),
            lower.get("transactionalidprefix", DEFAULT_PREFIX),
            lower.get("exactlyonce", "true").lower() != "false",
        )


# -- one task's write ---------------------------------------------------------------------


def write_partition(
    opts: SinkOptions, query_id: str, batch_id: int, partition: int, rows: Iterator[Row]
) -> PartitionCommit:
    if not opts.exactly_once:
        return write_plain(opts, batch_id, partition, rows)
    producer = Producer(_producer_config(opts, f"{opts.prefix}-{query_id}-{partition}"))
    producer.init_transactions(kafka.TIMEOUT_S)
    commit_key = f"{query_id}:{partition}"
    if last_committed_batch(opts, commit_key) >= batch_id:
        return PartitionCommit(partition, batch_id, 0, skipped=True)
    producer.begin_transaction()
    try:
        count = _send_rows(producer, opts, rows)
        record = {"query": query_id, "batch": batch_id, "partition": partition, "rows": count}
        _produce(producer, opts.commit_topic, json.dumps(record).encode(), commit_key.encode(),
                 partition=_commit_partition(opts, commit_key))
        producer.commit_transaction(kafka.TIMEOUT_S)
    except BaseException:
        _abort_quietly(producer)
        raise
    return PartitionCommit(partition, batch_id, count, skipped=False)


def write_plain(opts: SinkOptions, batch_id: int, partition: int, rows: Iterator[Row]) -> PartitionCommit:
    """At least once: a retried task or a replayed batch writes its rows again."""
    config = {"enable.idempotence": True, "linger.ms": 5, **kafka.kafka_config(opts.options)}
    producer = Producer(config)
    count = _send_rows(producer, opts, rows)
    if producer.flush(kafka.TIMEOUT_S) > 0:
        raise KafkaException(f"{producer.flush(0)} rows not delivered within {kafka.TIMEOUT_S}s")
    return PartitionCommit(partition, batch_id, count, skipped=False)


def _producer_config(opts: SinkOptions, transactional_id: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
    }
    config.update(kafka.kafka_config(opts.options))
    return config


def _send_rows(producer: Producer, opts: SinkOptions, rows: Iterator[Row]) -> int:
    count = 0
    for row in rows:
        fields = row.asDict()
        topic = fields.get("topic") or opts.topic
        if topic is None:
            raise OptionError("a row has no `topic` column value and the option `topic` is not set")
        headers: list[tuple[str, str | bytes | None]] = [
            (h["key"], _bytes(h["value"])) for h in fields.get("headers") or []]
        part = fields.get("partition")
        _produce(producer, topic, _bytes(fields.get("value")), _bytes(fields.get("key")), headers,
                 -1 if part is None else int(part))
        count += 1
    return count


def _produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    headers: list[tuple[str, str | bytes | None]] | None = None,
    partition: int = -1,
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers or None)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.1)


def _bytes(v: object) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, bytearray):
        return bytes(v)
    return str(v).encode()


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction(kafka.TIMEOUT_S)
    except KafkaException:
        pass  # fenced or broker gone: the coordinator aborts it (or a later attempt fences it)


# -- the commit topic --------------------------------------------------------------------


def _commit_partition(opts: SinkOptions, commit_key: str) -> int:
    return zlib.crc32(commit_key.encode()) % _commit_partition_count(opts)


_NOT_YET_KNOWN = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE)


def _commit_partition_count(opts: SinkOptions) -> int:
    """The commit topic's partition count. A topic just created may not be in every broker's
    metadata yet (Apache Kafka answers UNKNOWN_TOPIC_OR_PART until it is): retried until
    `kafka.TIMEOUT_S`."""
    admin = AdminClient(kafka.kafka_config(opts.options))
    deadline = time.monotonic() + kafka.TIMEOUT_S
    while True:
        meta = admin.list_topics(opts.commit_topic, timeout=kafka.TIMEOUT_S).topics[opts.commit_topic]
        if meta.error is None and meta.partitions:
            return len(meta.partitions)
        settling = meta.error is None or meta.error.code() in _NOT_YET_KNOWN
        if time.monotonic() > deadline or not settling:
            raise KafkaException(meta.error or f"commit topic {opts.commit_topic} has no partitions")
        time.sleep(0.1)


def ensure_commit_topic(opts: SinkOptions) -> None:
    """Create the commit topic (1 partition, compacted) unless it exists."""
    admin = AdminClient(kafka.kafka_config(opts.options))
    if opts.commit_topic in admin.list_topics(timeout=kafka.TIMEOUT_S).topics:
        return
    topic = NewTopic(opts.commit_topic, 1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([topic])[opts.commit_topic].result(kafka.TIMEOUT_S)
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def last_committed_batch(opts: SinkOptions, commit_key: str) -> int:
    """The highest batch id recorded for `commit_key`, -1 when none.

    Reads read_committed, after waiting for the last stable offset to pass the end of the
    log as it is now: a transaction still open then (a zombie attempt of another task)
    could otherwise hide records behind it. Scans backwards from the end in growing
    windows, as a key's records are appended in batch order.
    """
    partition = _commit_partition(opts, commit_key)
    committed = kafka.open_consumer({**opts.options, "kafka.isolation.level": "read_committed"})
    try:
        low, lso = _stable_end(opts, committed, partition)
        return _scan_back(opts, commit_key, partition, low, lso)
    finally:
        committed.close()


def _stable_end(opts: SinkOptions, committed: Consumer, partition: int) -> tuple[int, int]:
    tp = (opts.commit_topic, partition)
    raw = kafka.open_consumer({**opts.options, "kafka.isolation.level": "read_uncommitted"})
    try:
        _low, hwm = kafka.watermarks(raw, [tp])[tp]
    finally:
        raw.close()
    deadline = time.monotonic() + 2 * kafka.TIMEOUT_S + 60
    while True:
        low, lso = kafka.watermarks(committed, [tp])[tp]
        if lso >= hwm:
            return low, lso
        if time.monotonic() > deadline:
            raise TimeoutError(f"{opts.commit_topic}-{partition}: a transaction stays open below {hwm}")
        time.sleep(0.05)


def _scan_back(opts: SinkOptions, commit_key: str, partition: int, low: int, end: int) -> int:
    window = SCAN_WINDOW
    key = commit_key.encode()
    committed = {**opts.options, "kafka.isolation.level": "read_committed"}
    while end > low:
        start = max(low, end - window)
        batches = [
            json.loads(r[1])["batch"]
            for r in read_range(committed, OffsetRange(opts.commit_topic, partition, start, end))
            if r[0] == key
        ]
        if batches:
            return int(max(batches))
        end, window = start, window * 4
    return -1


# -- Spark's writer interfaces ---------------------------------------------------------------


class KafkaBatchWriter(DataSourceWriter):
    """A batch write: one job, so a write id made on the driver stands for the query."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options)
        if self.opts.exactly_once:
            ensure_commit_topic(self.opts)
        self.write_id = f"batch-{uuid.uuid4()}"

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        ctx = TaskContext.get()
        assert ctx is not None
        return write_partition(self.opts, self.write_id, 0, ctx.partitionId(), iterator)


class KafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options)
        if self.opts.exactly_once:
            ensure_commit_topic(self.opts)

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        ctx = TaskContext.get()
        assert ctx is not None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise RuntimeError(f"task has no {QUERY_ID_PROPERTY}/{BATCH_ID_PROPERTY} local property")
        return write_partition(self.opts, query_id, int(batch_id), ctx.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every task committed its own transaction

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # the failed tasks aborted theirs; the committed ones are recorded and skipped on replay
