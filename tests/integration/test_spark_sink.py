"""The gregor_kafka exactly-once sink against a real broker.

Each task writes its rows and a commit record in one transaction with a transactional id
stable for (query, output partition); a repeated task skips, an earlier attempt is fenced,
and a Spark task failing on its first attempt is retried without duplicating rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from pyspark.sql import Row

from gregor_spark.sink import SinkOptions, ensure_commit_topic, write_partition
from tests.integration.harness import BrokerProcess, started_broker, unique_topic
from tests.integration.spark_support import (
    SPARK_BROKER_OVERRIDES,
    create_topic,
    read_values,
    send_txn,
    source,
    txn_producer,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("spark-sink"), SPARK_BROKER_OVERRIDES) as b:
        yield b


def sink_options(bootstrap: str, topic: str) -> SinkOptions:
    opts = SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    ensure_commit_topic(opts)
    return opts


def rows_of(values: list[str]) -> Iterator[Row]:
    return iter([Row(key=v, value=v) for v in values])


def test_batch_write_is_read_back_committed(spark: Any, kafka: BrokerProcess) -> None:
    topic = unique_topic("sink-batch")
    create_topic(kafka.bootstrap, topic, partitions=2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
    (df.repartition(3).write.format("gregor_kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).mode("append").save())
    assert sorted(read_values(kafka.bootstrap, topic)) == sorted(f"v{i}" for i in range(20))


def test_repeated_task_is_skipped(kafka: BrokerProcess) -> None:
    topic = unique_topic("sink-again")
    create_topic(kafka.bootstrap, topic)
    opts = sink_options(kafka.bootstrap, topic)
    first = write_partition(opts, "query-a", 4, 1, rows_of(["a", "b"]))
    again = write_partition(opts, "query-a", 4, 1, rows_of(["a", "b"]))
    older = write_partition(opts, "query-a", 3, 1, rows_of(["old"]))
    other = write_partition(opts, "query-a", 4, 0, rows_of(["c"]))
    assert (first.skipped, again.skipped, older.skipped, other.skipped) == (False, True, True, False)
    assert first.rows == 2
    assert read_values(kafka.bootstrap, topic) == ["a", "b", "c"]


def test_earlier_attempt_is_fenced(kafka: BrokerProcess) -> None:
    """A stalled earlier attempt of the same task (same transactional id) has written rows
    in an open transaction; the new attempt fences it, and its commit then fails."""
    topic = unique_topic("sink-fence")
    create_topic(kafka.bootstrap, topic)
    opts = sink_options(kafka.bootstrap, topic)
    zombie = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0,
                       "transactional.id": f"{opts.prefix}-query-z-0"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", b"zombie")
    zombie.flush(30)
    done = write_partition(opts, "query-z", 0, 0, rows_of(["x", "y"]))
    assert not done.skipped
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert read_values(kafka.bootstrap, topic) == ["x", "y"]
    assert sorted(read_values(kafka.bootstrap, topic, "read_uncommitted")) == ["x", "y", "zombie"]


def test_task_failing_on_first_attempt_is_retried_without_duplicates(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    """local[2,3]: a failed task gets more attempts. The UDF raises in the first attempt of
    every task, near the end of its rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    source_topic, out = unique_topic("sink-fail-in"), unique_topic("sink-fail-out")
    create_topic(kafka.bootstrap, source_topic, partitions=2)
    create_topic(kafka.bootstrap, out)
    p = txn_producer(kafka.bootstrap)
    sent = [f"r{i}" for i in range(300)]
    send_txn(p, source_topic, sent[:150], commit=True, partition=0)
    send_txn(p, source_topic, sent[150:], commit=True, partition=1)

    def shout(value):  # type: ignore[no-untyped-def]  # (type hints would make it a pandas UDF)
        from pyspark import TaskContext

        text = bytes(value).decode()
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and text in ("r140", "r290"):
            raise RuntimeError(f"first attempt fails at {text}")
        return text.upper()

    upper = F.udf(shout, StringType())
    df = source(spark, kafka.bootstrap, source_topic, stream=True, startingOffsets="earliest")
    q = (df.select(F.col("key"), upper("value").alias("value"))
         .writeStream.format("gregor_kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", out).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert sorted(read_values(kafka.bootstrap, out)) == sorted(v.upper() for v in sent)


def test_failed_batch_rerun_from_checkpoint_skips_the_committed_task(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    """Task 0 of batch 0 commits; task 1 fails all its attempts, failing the batch and the
    query. The query restarted from its checkpoint reruns batch 0: task 0 finds its commit
    record and skips, task 1 writes."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    source_topic, out = unique_topic("sink-rerun-in"), unique_topic("sink-rerun-out")
    create_topic(kafka.bootstrap, source_topic, partitions=2)
    create_topic(kafka.bootstrap, out)
    p = txn_producer(kafka.bootstrap)
    send_txn(p, source_topic, ["a0", "a1", "a2"], commit=True, partition=0)
    send_txn(p, source_topic, ["b0", "b1"], commit=True, partition=1)
    bootstrap, healed = kafka.bootstrap, tmp_path / "healed"

    def shout(value):  # type: ignore[no-untyped-def]  # (type hints would make it a pandas UDF)
        from tests.integration.harness import wait_until
        from tests.integration.spark_support import read_values

        text = bytes(value).decode()
        if text.startswith("b") and not healed.exists():
            wait_until(lambda: len(read_values(bootstrap, out)) == 3, timeout=60, msg="task 0's commit")
            raise RuntimeError("task 1 fails until healed")
        return text.upper()

    upper = F.udf(shout, StringType())

    def run() -> None:
        df = source(spark, bootstrap, source_topic, stream=True, startingOffsets="earliest")
        (df.select(F.col("key"), upper("value").alias("value")).writeStream.format("gregor_kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
         .awaitTermination())

    with pytest.raises(StreamingQueryException, match="task 1 fails until healed"):
        run()
    assert read_values(bootstrap, out) == ["A0", "A1", "A2"]
    healed.touch()
    run()
    assert sorted(read_values(bootstrap, out)) == ["A0", "A1", "A2", "B0", "B1"]
