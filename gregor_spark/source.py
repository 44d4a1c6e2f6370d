"""Reading Kafka topics into Spark (batch and micro-batch), read_committed by default.

A range [start, end) of one partition is read until the consumer's position reaches
`end`: records the read_committed consumer never returns (control records, aborted
batches) still move the position, so a range ending inside them completes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from gregor_spark import kafka
from gregor_spark.kafka import EARLIEST, LATEST, OptionError

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
STALL_TIMEOUT_S = 60.0
TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetRange(InputPartition):
    """One Spark task's share: offsets [start, end) of one partition (start -2: earliest)."""

    topic: str
    partition: int
    start: int
    end: int


# -- option resolution -----------------------------------------------------------


def _option(options: Mapping[str, str], name: str) -> str | None:
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return None


def resolve_position(
    options: Mapping[str, str],
    which: str,
    default: str,
    consumer: Consumer,
    marks: Mapping[TP, tuple[int, int]],
) -> dict[TP, int]:
    """Offsets per partition for `<which>Offsets`, `<which>Timestamp`, `<which>OffsetsByTimestamp`.

    As in Spark's connector the single timestamp wins over the per-partition ones, which
    win over the offsets; partitions an option leaves out start at the earliest offset.
    """
    ends = {tp: end for tp, (_start, end) in marks.items()}
    one_ts = _option(options, f"{which}Timestamp")
    by_ts = _option(options, f"{which}OffsetsByTimestamp")
    if one_ts is not None:
        return kafka.offsets_for_times(consumer, {tp: int(one_ts) for tp in marks}, ends)
    if by_ts is not None:
        times = kafka.parse_offsets_json(by_ts, f"{which}OffsetsByTimestamp")
        found = kafka.offsets_for_times(consumer, {tp: t for tp, t in times.items() if tp in marks}, ends)
        return {tp: found.get(tp, marks[tp][0]) for tp in marks}
    spec = (_option(options, f"{which}Offsets") or default).strip()
    if spec.lower() in ("earliest", "latest"):
        chosen = EARLIEST if spec.lower() == "earliest" else LATEST
        return {tp: _concrete(chosen, marks[tp]) for tp in marks}
    given = kafka.parse_offsets_json(spec, f"{which}Offsets")
    return {tp: _concrete(given.get(tp, EARLIEST), marks[tp]) for tp in marks}


def _concrete(offset: int, mark: tuple[int, int]) -> int:
    if offset == EARLIEST:
        return mark[0]
    if offset == LATEST:
        return mark[1]
    if offset < 0:
        raise OptionError(f"offset {offset}: only -2 (earliest) and -1 (latest) may be negative")
    return offset


def capped(start: Mapping[TP, int], end: Mapping[TP, int], max_rows: int) -> dict[TP, int]:
    """End offsets advancing at most `max_rows` in total, shared in proportion to the backlog."""
    backlog = {tp: max(0, end[tp] - start.get(tp, 0)) for tp in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    out = {tp: start.get(tp, 0) + backlog[tp] * max_rows // total for tp in end}
    if out == {tp: start.get(tp, 0) for tp in end}:
        first = next(tp for tp in sorted(end) if backlog[tp] > 0)
        out[first] += 1
    return out


def plan(start: Mapping[TP, int], end: Mapping[TP, int]) -> list[OffsetRange]:
    """One range per partition with something to read, in a stable order (the task ids)."""
    ranges = []
    for topic, partition in sorted(end):
        first = start.get((topic, partition), EARLIEST)
        if first == EARLIEST or first < end[(topic, partition)]:
            ranges.append(OffsetRange(topic, partition, first, end[(topic, partition)]))
    return ranges


# -- reading one range (on an executor) ----------------------------------------------


def read_range(options: Mapping[str, str], r: OffsetRange) -> Iterator[tuple[Any, ...]]:
    consumer = kafka.open_consumer(options)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start if r.start >= 0 else OFFSET_BEGINNING)])
        yield from _records_until(consumer, r)
    finally:
        consumer.close()


def _records_until(consumer: Consumer, r: OffsetRange) -> Iterator[tuple[Any, ...]]:
    last_progress = time.monotonic()
    while True:
        for m in consumer.consume(1000, timeout=0.5):
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(err)
            offset = m.offset() or 0
            if offset >= r.end:
                return
            if err is None:
                yield row_of(m)
                last_progress = time.monotonic()
                if offset == r.end - 1:
                    return
        position = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
        if position >= r.end:
            return
        if time.monotonic() - last_progress > STALL_TIMEOUT_S:
            raise TimeoutError(f"{r.topic}-{r.partition}: stuck at offset {position}, range ends at {r.end}")


def row_of(m: Message) -> tuple[Any, ...]:
    ts_type, ts = m.timestamp()
    headers = list(m.headers() or [])
    stamp = datetime.fromtimestamp(ts / 1000, tz=UTC) if ts >= 0 else None
    return (m.key(), m.value(), m.topic(), m.partition(), m.offset(), stamp, max(ts_type - 1, 0), headers)


# -- Spark's reader interfaces ----------------------------------------------------------


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        topics = kafka.subscribed_topics(self.options)
        consumer = kafka.open_consumer(self.options)
        try:
            marks = kafka.watermarks(consumer, kafka.partitions_of(consumer, topics))
            start = resolve_position(self.options, "starting", "earliest", consumer, marks)
            end = resolve_position(self.options, "ending", "latest", consumer, marks)
        finally:
            consumer.close()
        self.ranges = plan(start, end)

    def partitions(self) -> list[OffsetRange]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's stand-in task when partitions() planned none
        return read_range(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.topics = kafka.subscribed_topics(self.options)
        limit = _option(self.options, "maxOffsetsPerTrigger")
        self.max_offsets = int(limit) if limit else None
        self.target: dict[TP, int] | None = None
        self._consumer: Consumer | None = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = kafka.open_consumer(self.options)
        return self._consumer

    def _marks(self) -> dict[TP, tuple[int, int]]:
        return kafka.watermarks(self.consumer, kafka.partitions_of(self.consumer, self.topics))

    def initialOffset(self) -> dict[str, Any]:
        start = resolve_position(self.options, "starting", "latest", self.consumer, self._marks())
        return kafka.to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {tp: end for tp, (_s, end) in self._marks().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = kafka.from_json_offsets(start)
        marks = self._marks()
        # A partition new since `start` is read from its log start, as Spark's connector does.
        first = {tp: begin.get(tp, log_start) for tp, (log_start, _end) in marks.items()}
        end = {tp: max(lso, first[tp]) for tp, (_s, lso) in marks.items()}
        if self.target is not None:
            end = {tp: max(first[tp], min(o, self.target.get(tp, first[tp]))) for tp, o in end.items()}
        if isinstance(limit, ReadMaxRows):
            end = capped(first, end, limit.max_rows)
        return kafka.to_json_offsets({**begin, **end})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        return plan(kafka.from_json_offsets(start), kafka.from_json_offsets(end))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's stand-in task when partitions() planned none
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
