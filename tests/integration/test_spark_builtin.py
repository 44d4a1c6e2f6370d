"""Spark's built-in Kafka connector (spark-sql-kafka-0-10 4.2.0 from .deps/spark-kafka, on
pyspark 4.3) against Gregor, next to gregor_spark: a streaming query reads a topic with
committed, aborted and open transactions (`kafka.isolation.level=read_committed`) and writes
what it reads to another topic with `writeStream.format("kafka")`; restarted from its
checkpoint it goes on where it stopped, so the output holds each committed record once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import REPO_ROOT, BrokerProcess, started_broker, unique_topic
from tests.integration.spark_support import (
    SPARK_BROKER_OVERRIDES,
    create_topic,
    read_values,
    send_txn,
    txn_producer,
)

SPARK_KAFKA_DEPS = REPO_ROOT / ".deps" / "spark-kafka"


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("spark-builtin"), SPARK_BROKER_OVERRIDES) as b:
        yield b


def copy_stream(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path) -> None:
    """One availableNow run of the built-in source into the built-in sink, from `checkpoint`."""
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    q = (
        df.selectExpr("key", "value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()


def test_builtin_source_and_sink_restart_from_checkpoint(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    if not (SPARK_KAFKA_DEPS / ".installed").exists():
        pytest.fail(f"Spark's Kafka connector is not in {SPARK_KAFKA_DEPS} (run `make spark-kafka-deps`)")
    source, sink = unique_topic("builtin-in"), unique_topic("builtin-out")
    create_topic(kafka.bootstrap, source, partitions=2)
    create_topic(kafka.bootstrap, sink)
    p = txn_producer(kafka.bootstrap)
    send_txn(p, source, ["a1", "a2"], commit=True)
    send_txn(p, source, ["x1", "x2"], commit=False)
    send_txn(p, source, ["b1"], commit=True, partition=1)
    checkpoint = tmp_path / "checkpoint"
    copy_stream(spark, kafka.bootstrap, source, sink, checkpoint)
    assert sorted(read_values(kafka.bootstrap, sink)) == ["a1", "a2", "b1"]

    send_txn(p, source, ["c1", "c2"], commit=True)
    send_txn(p, source, ["open"], commit=None, partition=1)  # left open: read_committed stops before it
    copy_stream(spark, kafka.bootstrap, source, sink, checkpoint)
    assert sorted(read_values(kafka.bootstrap, sink)) == ["a1", "a2", "b1", "c1", "c2"]
    p.abort_transaction(30)
