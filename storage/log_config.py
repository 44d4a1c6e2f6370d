"""Per-topic log configuration: Kafka's topic config names, the broker keys
they default from, types, defaults and validation."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# Kafka 4.4's max.decompressed.message.bytes default and maximum: the largest array a JVM
# allocates, so no limit.
MAX_DECOMPRESSED = INT_MAX - 8


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` values (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1  # Kafka's DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


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
        return f"must be a list of {', '.join(choices)}" if bad else None  # empty: none of them (Kafka too)

    return check


def _throttled_replicas(value: ConfigValue) -> str | None:
    """Kafka's ThrottledReplicaListValidator: empty, `*`, or `partition:broker` pairs."""
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if items == ["*"] or all(_pair_of_ints(v) for v in items):
        return None
    return "must be the literal '*' or a list of replicas in the format [PartitionId]:[BrokerId]"


def _between(low: int, high: int) -> Validator:
    def check(value: ConfigValue) -> str | None:
        fits = isinstance(value, int) and low <= value <= high
        return None if fits else f"Value must be in range [{low},...,{high}]"

    return check


def _pair_of_ints(item: str) -> bool:
    partition, sep, broker = item.partition(":")
    return sep == ":" and partition.strip().isdigit() and broker.strip().isdigit()


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
        "delete.retention.ms", "log.cleaner.delete.retention.ms", "long", 86400000, "delete_retention_ms",
        _at_least(0),
    ),
    # Share groups' dead-letter queue (Kafka 4.4): known as Kafka knows it; Gregor has no share
    # groups to use it.
    TopicConfigDef("errors.deadletterqueue.group.enable", None, "boolean", False),
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
    # Replication throttles (kafka-reassign-partitions sets and clears them): known and
    # validated as Kafka does; Gregor's replica fetchers are not throttled.
    TopicConfigDef("follower.replication.throttled.replicas", None, "list", "", None, _throttled_replicas),
    TopicConfigDef(
        "index.interval.bytes", "log.index.interval.bytes", "int", 4096, "index_interval_bytes", _at_least(0)
    ),
    TopicConfigDef("leader.replication.throttled.replicas", None, "list", "", None, _throttled_replicas),
    TopicConfigDef(
        "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "long", LONG_MAX,
        "max_compaction_lag_ms", _at_least(1),
    ),
    TopicConfigDef(
        "max.message.bytes", "message.max.bytes", "int", 1048588, "max_message_bytes", _at_least(0)
    ),
    TopicConfigDef(
        "max.decompressed.message.bytes", "max.decompressed.message.bytes", "int", MAX_DECOMPRESSED,
        "max_decompressed_message_bytes", _between(1, MAX_DECOMPRESSED),
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
        "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "double", 0.5,
        "min_cleanable_dirty_ratio", _ratio,
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "long", 0, "min_compaction_lag_ms",
        _at_least(0),
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
        return ResolvedConfig(name, value, broker_source(broker_props, d.broker_key))
    for key, factor in d.fallbacks:
        if broker_props.get(key) is not None:
            raw = parse_config_value(TopicConfigDef(key, None, "long", 0), broker_props[key])
            assert isinstance(raw, int)
            return ResolvedConfig(name, raw * factor, broker_source(broker_props, key))
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
    max_decompressed_message_bytes: int = MAX_DECOMPRESSED
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
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
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


# -- dynamic broker configs (KIP-226) ----------------------------------------------------------
#
# Kafka lets AlterConfigs / IncrementalAlterConfigs change some broker keys at run time, per broker
# (DYNAMIC_BROKER_CONFIG) or as the cluster-wide default (DYNAMIC_DEFAULT_BROKER_CONFIG). Its log
# keys are the first broker synonym of each topic config (DynamicLogConfig.ReconfigurableConfigs),
# plus producer.id.expiration.ms. Gregor accepts those it reads: the broker key of every topic
# config that sets a LogConfig field, except the ones no code reads.

_UNREAD_FIELDS = frozenset({"file_delete_delay_ms"})
DYNAMIC_BROKER_CONFIGS: dict[str, TopicConfigDef] = {
    d.broker_key: replace(d, name=d.broker_key)
    for d in _DEFS
    if d.broker_key is not None and d.field is not None and d.field not in _UNREAD_FIELDS
} | {PRODUCER_ID_EXPIRATION_MS: _PRODUCER_ID_EXPIRATION_DEF}


def _unused(name: str, kind: str, default: ConfigValue | None, minimum: int | None) -> TopicConfigDef:
    check = _at_least(minimum) if minimum is not None else None
    return TopicConfigDef(name, name, kind, default if default is not None else "", None, check)


# Broker keys Kafka updates at run time that Gregor takes, stores and describes but does not use
# (thread pools, connection quotas, replication throttles): Kafka's tools set them, e.g.
# kafka-configs with log.cleaner.threads, kafka-reassign-partitions with the throttled rates.
# Changing one changes nothing in Gregor. Kafka's defaults; a throttle has none (and is not
# described until set); the Kerberos key is per broker only.
UNUSED_DYNAMIC_BROKER_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    _unused("background.threads", "int", 10, 1),
    _unused("log.cleaner.io.buffer.size", "int", 524288, 0),
    _unused("log.cleaner.threads", "int", 1, 1),  # Kafka's LogCleaner: "should be at least 1"
    _unused("num.io.threads", "int", 8, 1),
    _unused("num.network.threads", "int", 3, 1),
    _unused("num.recovery.threads.per.data.dir", "int", 2, 1),
    _unused("num.replica.fetchers", "int", 1, None),
    _unused("sasl.kerberos.min.time.before.relogin", "long", 60000, None),
    _unused("follower.replication.throttled.rate", "long", None, 0),
    _unused("leader.replication.throttled.rate", "long", None, 0),
    _unused("replica.alter.log.dirs.io.max.bytes.per.second", "long", None, 0),
)}
# Broker keys Kafka updates at run time that the broker applies itself rather than through a
# LogConfig: the connection limits (broker/front/quotas.py; the per-listener ones only in the
# config file).
CONNECTION_DYNAMIC_BROKER_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    _unused("max.connection.creation.rate", "int", INT_MAX, 0),
    _unused("max.connections", "int", INT_MAX, 0),
    _unused("max.connections.per.ip", "int", INT_MAX, 0),
    _unused("max.connections.per.ip.overrides", "string", "", None),
)}
UNDESCRIBED_UNTIL_SET = frozenset({"follower.replication.throttled.rate", "leader.replication.throttled.rate",
                                   "replica.alter.log.dirs.io.max.bytes.per.second"})
PER_BROKER_ONLY = frozenset({"sasl.kerberos.min.time.before.relogin"})
DYNAMIC_BROKER_CONFIGS |= UNUSED_DYNAMIC_BROKER_CONFIGS | CONNECTION_DYNAMIC_BROKER_CONFIGS


def unused_broker_defaults() -> dict[str, ConfigValue]:
    """Kafka's default of each unused dynamic key that has one."""
    return {k: d.default for k, d in UNUSED_DYNAMIC_BROKER_CONFIGS.items() if k not in UNDESCRIBED_UNTIL_SET}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: broker keys that set the same thing, in order.
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(key: str) -> tuple[str, ...]:
    return next((group for group in _BROKER_SYNONYM_GROUPS if key in group), (key,))


def topic_config_synonym(name: str) -> str | None:
    """The broker key a topic config defaults from (Kafka's TOPIC_CONFIG_SYNONYMS)."""
    d = TOPIC_CONFIGS.get(name)
    return None if d is None else d.broker_key


def topic_broker_defaults() -> dict[str, ConfigValue]:
    """Kafka's default of every broker key a topic config defaults from."""
    return {d.broker_key: d.default for d in _DEFS if d.broker_key is not None}


def validate_broker_config(key: str, value: str) -> str | None:
    """Kafka's message for a value that does not fit a dynamic broker key, else None."""
    d = DYNAMIC_BROKER_CONFIGS[key]
    try:
        parsed = parse_config_value(d, value)
    except ValueError as exc:
        reason = f"Not a number of type {d.type.upper()}" if d.type in ("int", "long") else str(exc)
        return f"Invalid value {value} for configuration {key}: {reason}"
    problem = d.validator(parsed) if d.validator is not None else None
    return None if problem is None else f"Invalid value {value} for configuration {key}: {problem}"


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str
    source: ConfigSource


class BrokerProperties(Mapping[str, object]):
    """The broker keys that are set, by precedence: dynamic per-broker, dynamic cluster-wide
    default, static (the config file), as Kafka overlays them key by key. Mapping access sees
    only what is set; ``defaults`` (Kafka's values for unset keys) serve DescribeConfigs."""

    def __init__(self, static: Mapping[str, object], defaults: Mapping[str, object]) -> None:
        self.static = dict(static)
        self.defaults = dict(defaults)
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}

    def set_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> None:
        self.dynamic_default, self.dynamic_broker = dict(default), dict(broker)

    def layers(self) -> tuple[tuple[ConfigSource, Mapping[str, object]], ...]:
        return (
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
            (ConfigSource.STATIC_BROKER_CONFIG, self.static),
            (ConfigSource.DEFAULT_CONFIG, self.defaults),
        )

    def __getitem__(self, key: str) -> object:
        for source, layer in self.layers():
            if source != ConfigSource.DEFAULT_CONFIG and key in layer:
                return layer[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter({**self.static, **self.dynamic_default, **self.dynamic_broker})

    def __len__(self) -> int:
        return len({**self.static, **self.dynamic_default, **self.dynamic_broker})

    def source_of(self, key: str) -> ConfigSource:
        return next((source for source, layer in self.layers() if key in layer), ConfigSource.DEFAULT_CONFIG)

    def synonyms(self, key: str) -> list[Synonym]:
        """Kafka's ConfigHelper.configSynonyms: every layer's value of every synonym of ``key``,
        most important first, starting at the first entry named ``key``."""
        names = broker_synonyms(key)
        found = [
            Synonym(name, _format_raw(layer[name]), source)
            for source, layer in self.layers()
            for name in names
            if layer.get(name) is not None
        ]
        first = next((i for i, s in enumerate(found) if s.name == key), len(found))
        return found[first:]


def broker_source(broker_props: Mapping[str, object], key: str) -> ConfigSource:
    if isinstance(broker_props, BrokerProperties):
        return broker_props.source_of(key)
    return ConfigSource.STATIC_BROKER_CONFIG


def _format_raw(value: object) -> str:
    if isinstance(value, bool | int | float | str):
        return format_config_value(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
