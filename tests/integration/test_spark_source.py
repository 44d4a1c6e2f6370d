"""The gregor_kafka PySpark source against a real broker, driven by confluent-kafka producers.

Input topics hold committed, aborted (flushed, so really in the log) and open
transactions; the source must return exactly the committed records, once, stop at the
last stable offset while a transaction is open, and complete ranges that end inside
invisible data (control records, aborted batches).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import BrokerProcess, started_broker, unique_topic
from tests.integration.spark_support import (
    SPARK_BROKER_OVERRIDES,
    add_partitions,
    create_topic,
    send_plain,
    send_txn,
    source,
    txn_producer,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("spark-source"), SPARK_BROKER_OVERRIDES) as b:
        yield b


def values(rows: list[Any]) -> list[str]:
    return [bytes(r.value).decode() for r in rows]


def end_offsets(progress: dict[str, Any]) -> Any:
    return json.loads(progress["sources"][0]["endOffset"])


def run_available_now(spark: Any, df: Any, checkpoint: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """One availableNow run of `df` from `checkpoint`: the values it read and its progress."""
    rows: list[Any] = []
    q = (df.writeStream.foreachBatch(lambda batch, _id: rows.extend(batch.collect()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    rows.sort(key=lambda r: (r.partition, r.offset))
    return values(rows), [p for p in q.recentProgress if p["numInputRows"] is not None]


def test_batch_read_returns_committed_records_only(spark: Any, kafka: BrokerProcess) -> None:
    topic = unique_topic("src-batch")
    create_topic(kafka.bootstrap, topic)
    before = int(time.time() * 1000)
    send_plain(kafka.bootstrap, topic, ["plain-0"])
    p = txn_producer(kafka.bootstrap)
    send_txn(p, topic, ["c1-0", "c1-1"], commit=True)
    send_txn(p, topic, ["a-0", "a-1", "a-2"], commit=False)
    send_txn(p, topic, ["c2-0"], commit=True)

    df = source(spark, kafka.bootstrap, topic)
    assert df.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    assert values(rows) == ["plain-0", "c1-0", "c1-1", "c2-0"]
    assert [r.offset for r in rows] == [0, 1, 2, 8]  # 3 commit marker, 4-6 aborted, 7 abort marker
    assert all(r.topic == topic and r.partition == 0 and r.timestampType == 0 for r in rows)
    uncommitted = source(spark, kafka.bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert values(uncommitted.collect()) == ["plain-0", "c1-0", "c1-1", "a-0", "a-1", "a-2", "c2-0"]
    # endingOffsets inside the aborted data: the range completes with what is visible in it.
    ending = json.dumps({topic: {"0": 6}})
    assert values(source(spark, kafka.bootstrap, topic, endingOffsets=ending).collect()) == [
        "plain-0", "c1-0", "c1-1"]
    starting = json.dumps({topic: {"0": 2}})
    from_two = source(spark, kafka.bootstrap, topic, startingOffsets=starting)
    assert values(from_two.collect()) == ["c1-1", "c2-0"]
    since = source(spark, kafka.bootstrap, topic, startingTimestamp=str(before))
    assert values(since.collect())[0] == "plain-0"
    future = str(int(time.time() * 1000) + 3_600_000)
    assert values(source(spark, kafka.bootstrap, topic, startingTimestamp=future).collect()) == []


def test_stream_stops_at_lso_then_continues_after_commit(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("src-lso")
    create_topic(kafka.bootstrap, topic)
    committer, holder = txn_producer(kafka.bootstrap), txn_producer(kafka.bootstrap)
    send_txn(committer, topic, ["c1"], commit=True)
    send_txn(holder, topic, ["open-0", "open-1"], commit=None)  # open: the LSO stays at its first offset
    send_txn(committer, topic, ["c2"], commit=True)  # committed, but above the LSO
    send_txn(committer, topic, ["a1"], commit=False)
    df = source(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest")
    checkpoint = tmp_path / "ckpt"

    got, progress = run_available_now(spark, df, checkpoint)
    assert got == ["c1"]
    assert end_offsets(progress[-1]) == {topic: {"0": 2}}

    holder.commit_transaction(30)
    send_txn(committer, topic, ["c3"], commit=True)
    got, _ = run_available_now(spark, df, checkpoint)
    assert got == ["open-0", "open-1", "c2", "c3"]

    # Restart from the checkpoint: only what came since, including a new partition.
    add_partitions(kafka.bootstrap, topic, 2)
    late = txn_producer(kafka.bootstrap)  # a fresh producer: its metadata shows partition 1
    send_txn(late, topic, ["c4"], commit=True)
    send_txn(late, topic, ["p1-0"], commit=True, partition=1)
    got, _ = run_available_now(spark, df, checkpoint)
    assert sorted(got) == ["c4", "p1-0"]
    got, progress = run_available_now(spark, df, checkpoint)
    assert got == []


def test_max_offsets_per_trigger_ranges_end_inside_aborted_data(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("src-limit")
    create_topic(kafka.bootstrap, topic)
    p = txn_producer(kafka.bootstrap)
    send_txn(p, topic, ["c1-0", "c1-1"], commit=True)                     # 0-1, marker 2
    send_txn(p, topic, [f"a-{i}" for i in range(7)], commit=False)         # 3-9, marker 10
    send_txn(p, topic, ["c2-0"], commit=True)                             # 11, marker 12
    df = source(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest",
                maxOffsetsPerTrigger="3")

    got, progress = run_available_now(spark, df, tmp_path / "ckpt")
    assert got == ["c1-0", "c1-1", "c2-0"]
    ends = [end_offsets(p)[topic]["0"] for p in progress]
    assert ends == [3, 6, 9, 12, 13]
    assert [p["numInputRows"] for p in progress] == [2, 0, 0, 1, 0]
