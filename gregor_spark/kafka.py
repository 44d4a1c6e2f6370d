"""confluent-kafka plumbing shared by the source and the sink: options, clients, offsets.

Offsets travel as Spark's Kafka connector writes them: {"topic": {"0": 42, "1": 7}}
(JSON object keys are strings), -2 meaning earliest and -1 latest in user options.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

TIMEOUT_S = 30.0
EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]


class OptionError(ValueError):
    """An option is missing or has a value the source or sink cannot use."""


def kafka_config(options: Mapping[str, str]) -> dict[str, Any]:
    """The `kafka.*` options without their prefix, as librdkafka properties."""
    config = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if "bootstrap.servers" not in config:
        raise OptionError("option kafka.bootstrap.servers is required")
    return config


def consumer_config(options: Mapping[str, str]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "group.id": "gregor-spark",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    }
    config.update(kafka_config(options))
    return config


def open_consumer(options: Mapping[str, str]) -> Consumer:
    return Consumer(consumer_config(options))


def subscribed_topics(options: Mapping[str, str]) -> list[str]:
    if "subscribepattern" in {k.lower() for k in options} or "assign" in {k.lower() for k in options}:
        raise OptionError("only the option `subscribe` (a comma-separated topic list) is supported")
    topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
    if not topics:
        raise OptionError("option subscribe (comma-separated topics) is required")
    return topics


def partitions_of(consumer: Consumer, topics: list[str]) -> list[tuple[str, int]]:
    """Every (topic, partition) of `topics` that the cluster knows now, sorted."""
    found: list[tuple[str, int]] = []
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            continue
        found.extend((topic, p) for p in meta.partitions)
    return sorted(found)


def watermarks(consumer: Consumer, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, end) per partition; the end is the LSO for a read_committed consumer."""
    return {
        tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=TIMEOUT_S, cached=False)
        for tp in tps
    }


def offsets_for_times(
    consumer: Consumer, times: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The first offset whose timestamp is >= the given time; the end when there is none."""
    if not times:
        return {}
    query = [TopicPartition(t, p, ts) for (t, p), ts in times.items()]
    answer = consumer.offsets_for_times(query, timeout=TIMEOUT_S)
    out: dict[tuple[str, int], int] = {}
    for tp in answer:
        if tp.error is not None:
            raise KafkaException(tp.error)
        key = (tp.topic, tp.partition)
        out[key] = tp.offset if tp.offset >= 0 else end[key]
    return out


def parse_offsets_json(text: str, what: str) -> dict[tuple[str, int], int]:
    try:
        raw = json.loads(text)
        return {(t, int(p)): int(o) for t, parts in raw.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError) as e:
        example = '{"topic":{"0":23}}'
        raise OptionError(f"option {what}: expected JSON like {example}, got {text!r}") from e


def to_json_offsets(offsets: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
