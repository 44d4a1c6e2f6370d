"""Per-topic log configuration: Kafka's topic config names, the broker keys
they default from, types, defaults and validation."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` values."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1  # Kafka's DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_LOGGER_CONFIG = 2
    DYNAMIC_BROKER_CONFIG = 3
    DYNAMIC_DEFAULT_BROKER_CONFIG = 4
    STATIC_BROKER_CONFIG = 5
    DEFAULT_CONFIG = 6


ConfigValue = int | str | float | bool
Validator = Callable[[ConfigValue], str | None]


def _at_least(minimum: int) -> Validator:
    def check(value: ConfigValue) -> str | None:
        return None if isinstance(value, int) and value >= minimum else f"must be >= {minimum}"

    return check


def _one_of(*choices: str) -> Validator:
    def check(value: ConfigValue) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def _list_of(*choices: str) -> Validator:
    def check(value: ConfigValue) -> str | None:
        items = [v.strip() for v in str(value).split(",") if v.strip()]
        bad = [v for v in items if v not in choices]
        return f"must be a list of {', '.join(choices)}" if bad or not items else None

    return check


def _ratio(value: ConfigValue) -> str | None:
    ok = isinstance(value, float) and 0.0 <= value <= 1.0
    return None if ok else "must be between 0 and 1"


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    broker_key: str | None  # the broker-level key the topic value defaults from
    type: str  # Kafka's ConfigType name: int, long, string, list, boolean, double
    default: ConfigValue
    field: str | None = None  # the LogConfig attribute it sets, if any
    validator: Validator | None = None
    # Older broker keys consulted after broker_key, with a multiplier (e.g. hours → ms).
    fallbacks: tuple[tuple[str, int], ...] = ()


_DEFS = [
    TopicConfigDef(
        "cleanup.policy",
        "log.cleanup.policy",
        "list",
        "delete",
        "cleanup_policy",
        _list_of("delete", "compact"),
    ),
    TopicConfigDef(
        "compression.type",
        "compression.type",
        "string",
        "producer",
        "compression_type",
        _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    TopicConfigDef(
        "delete.retention.ms", "log.cleaner.delete.retention.ms", "long", 86400000, None, _at_least(0)
    ),
    TopicConfigDef(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        "long",
        60000,
        "file_delete_delay_ms",
        _at_least(0),
    ),
    TopicConfigDef(
        "flush.messages", "log.flush.interval.messages", "long", LONG_MAX, "flush_messages", _at_least(1)
    ),
    TopicConfigDef(
        "flush.ms",
        "log.flush.interval.ms",
        "long",
        LONG_MAX,
        "flush_ms",
        _at_least(0),
        (("log.flush.scheduler.interval.ms", 1),),
    ),
    TopicConfigDef(
        "index.interval.bytes", "log.index.interval.bytes", "int", 4096, "index_interval_bytes", _at_least(0)
    ),
    TopicConfigDef(
        "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, None, _at_least(1)
    ),
    TopicConfigDef(
        "max.message.bytes", "message.max.bytes", "int", 1048588, "max_message_bytes", _at_least(0)
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        "long",
        LONG_MAX,
        "message_timestamp_after_max_ms",
        _at_least(0),
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        "long",
        LONG_MAX,
        "message_timestamp_before_max_ms",
        _at_least(0),
    ),
    TopicConfigDef(
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
        "long",
        LONG_MAX,
        "message_timestamp_difference_max_ms",
        _at_least(0),
    ),
    TopicConfigDef(
        "message.timestamp.type",
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "message_timestamp_type",
        _one_of("CreateTime", "LogAppendTime"),
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "double", 0.5, None, _ratio
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "long", 0, None, _at_least(0)
    ),
    TopicConfigDef(
        "min.insync.replicas", "min.insync.replicas", "int", 1, "min_insync_replicas", _at_least(1)
    ),
    TopicConfigDef("preallocate", "log.preallocate", "boolean", False),
    TopicConfigDef("retention.bytes", "log.retention.bytes", "long", -1, "retention_bytes"),
    TopicConfigDef(
        "retention.ms",
        "log.retention.ms",
        "long",
        604800000,
        "retention_ms",
        _at_least(-1),
        (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    ),
    TopicConfigDef("segment.bytes", "log.segment.bytes", "int", 1073741824, "segment_bytes", _at_least(14)),
    TopicConfigDef("segment.index.bytes", "log.index.size.max.bytes", "int", 10485760, None, _at_least(4)),
    TopicConfigDef(
        "segment.jitter.ms",
        "log.roll.jitter.ms",
        "long",
        0,
        None,
        _at_least(0),
        (("log.roll.jitter.hours", 3_600_000),),
    ),
    TopicConfigDef(
        "segment.ms",
        "log.roll.ms",
        "long",
        604800000,
        "segment_ms",
        _at_least(1),
        (("log.roll.hours", 3_600_000),),
    ),
    TopicConfigDef("unclean.leader.election.enable", "unclean.leader.election.enable", "boolean", False),
]

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _DEFS}

# Broker-only keys that LogConfig carries (not topic configs: absent from TOPIC_CONFIGS).
PRODUCER_ID_EXPIRATION_MS = "producer.id.expiration.ms"
_PRODUCER_ID_EXPIRATION_DEF = TopicConfigDef(
    PRODUCER_ID_EXPIRATION_MS, PRODUCER_ID_EXPIRATION_MS, "int", 86400000, None, _at_least(1)
)


def parse_config_value(definition: TopicConfigDef, raw: object) -> ConfigValue:
    """Convert a YAML/wire value to the config's type; ValueError when it does not fit."""
    kind = definition.type
    if kind in ("int", "long"):
        if isinstance(raw, bool):
            raise ValueError("expected a number")
        value = int(str(raw).strip()) if not isinstance(raw, int) else raw
        limit = INT_MAX if kind == "int" else LONG_MAX
        if not -limit - 1 <= value <= limit:
            raise ValueError(f"out of range for {kind}")
        return value
    if kind == "double":
        return float(str(raw).strip())
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ValueError("expected true or false")
        return text == "true"
    if isinstance(raw, list | tuple):
        return ",".join(str(x) for x in raw)
    return str(raw).strip()


def validate_topic_config(name: str, value: str) -> str | None:
    """Error message for an invalid topic config (CreateTopics/AlterConfigs), else None."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        return f"Unknown topic config name: {name}"
    try:
        parsed = parse_config_value(definition, value)
    except ValueError as exc:
        return f"Invalid value {value} for configuration {name}: {exc}"
    if definition.validator is not None:
        problem = definition.validator(parsed)
        if problem:
            return f"Invalid value {value} for configuration {name}: {problem}"
    return None


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    name: str
    value: ConfigValue
    source: ConfigSource

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


def resolve_topic_config(
    name: str, broker_props: Mapping[str, object], topic_overrides: Mapping[str, str]
) -> ResolvedConfig:
    """A topic config's effective value and where it came from (for DescribeConfigs)."""
    d = TOPIC_CONFIGS[name]
    if name in topic_overrides:
        return ResolvedConfig(name, _checked(d, topic_overrides[name]), ConfigSource.TOPIC_CONFIG)
    if d.broker_key is not None and broker_props.get(d.broker_key) is not None:
        value = _checked(d, broker_props[d.broker_key])
        return ResolvedConfig(name, value, ConfigSource.STATIC_BROKER_CONFIG)
    for key, factor in d.fallbacks:
        if broker_props.get(key) is not None:
            raw = parse_config_value(TopicConfigDef(key, None, "long", 0), broker_props[key])
            assert isinstance(raw, int)
            return ResolvedConfig(name, raw * factor, ConfigSource.STATIC_BROKER_CONFIG)
    return ResolvedConfig(name, d.default, ConfigSource.DEFAULT_CONFIG)


def _checked(d: TopicConfigDef, raw: object) -> ConfigValue:
    value = parse_config_value(d, raw)
    if d.validator is not None:
        problem = d.validator(value)
        if problem:
            raise ValueError(f"Invalid value {raw} for configuration {d.name}: {problem}")
    return value


def format_config_value(value: ConfigValue) -> str:
    """Kafka's string form (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated: the fallback of both above
    compression_type: str = "producer"
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    file_delete_delay_ms: int = 60000
    # A broker-level key with no topic override (Kafka's producer.id.expiration.ms).
    producer_id_expiration_ms: int = 86400000

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ValueError(f"segment_bytes {self.segment_bytes} too small")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"bad message_timestamp_type {self.message_timestamp_type!r}")
        if self.index_interval_bytes < 0 or self.max_message_bytes < 0:
            raise ValueError("index_interval_bytes and max_message_bytes must be >= 0")
        if self.producer_id_expiration_ms < 1:
            raise ValueError("producer_id_expiration_ms must be >= 1")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """Kafka 3.x: message.timestamp.difference.max.ms applies while before.max.ms is unset."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @classmethod
    def from_properties(
        cls, broker_props: Mapping[str, object], topic_overrides: Mapping[str, str]
    ) -> LogConfig:
        """Topic overrides over broker keys over Kafka's defaults; ValueError on bad values."""
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, ConfigValue] = {}
        for d in _DEFS:
            if d.field is not None and d.field in known:
                kwargs[d.field] = resolve_topic_config(d.name, broker_props, topic_overrides).value
        expiration = broker_props.get(PRODUCER_ID_EXPIRATION_MS)
        if expiration is not None:
            kwargs["producer_id_expiration_ms"] = _checked(_PRODUCER_ID_EXPIRATION_DEF, expiration)
        return cls(**kwargs)  # type: ignore[arg-type]
