"""Topic config table, resolution order and validation."""

from __future__ import annotations

import pytest

from storage.log_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    LogConfig,
    resolve_topic_config,
    validate_topic_config,
)


def test_defaults_match_kafka() -> None:
    cfg = LogConfig.from_properties({}, {})
    assert cfg == LogConfig()
    assert cfg.segment_bytes == 1073741824 and cfg.retention_ms == 604800000
    assert TOPIC_CONFIGS["compression.type"].default == "producer"
    assert TOPIC_CONFIGS["segment.ms"].broker_key == "log.roll.ms"
    assert TOPIC_CONFIGS["max.message.bytes"].broker_key == "message.max.bytes"


def test_precedence_topic_over_broker_over_default() -> None:
    broker = {"log.segment.bytes": 2048, "log.retention.hours": 1, "log.roll.ms": "500"}
    cfg = LogConfig.from_properties(broker, {"segment.bytes": "4096"})
    assert cfg.segment_bytes == 4096
    assert cfg.retention_ms == 3_600_000
    assert cfg.segment_ms == 500
    r = resolve_topic_config("segment.bytes", broker, {})
    assert (r.value, r.source) == (2048, ConfigSource.STATIC_BROKER_CONFIG)
    r = resolve_topic_config("cleanup.policy", broker, {})
    assert r.source is ConfigSource.DEFAULT_CONFIG and r.is_default


def test_log_append_time_and_bad_values() -> None:
    cfg = LogConfig.from_properties({}, {"message.timestamp.type": "LogAppendTime"})
    assert cfg.log_append_time
    with pytest.raises(ValueError):
        LogConfig.from_properties({}, {"segment.bytes": "lots"})


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("retention.ms", "-1", True),
        ("retention.ms", "-2", False),
        ("segment.bytes", "10", False),
        ("segment.bytes", "99999999999", False),
        ("cleanup.policy", "compact,delete", True),
        ("cleanup.policy", "shred", False),
        ("message.timestamp.type", "LogAppendTime", True),
        ("message.timestamp.type", "Now", False),
        ("unclean.leader.election.enable", "maybe", False),
        ("min.cleanable.dirty.ratio", "0.3", True),
        ("no.such.config", "1", False),
    ],
)
def test_validate_topic_config(name: str, value: str, ok: bool) -> None:
    assert (validate_topic_config(name, value) is None) is ok
