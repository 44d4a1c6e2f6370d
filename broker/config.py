"""Broker configuration: YAML with Kafka's property names, validated at start-up."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration key or value that stops start-up."""


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(str(value).strip())


def _str(value: Any) -> str:
    return str(value)


def _dirs(value: Any) -> str:
    text = ",".join(value) if isinstance(value, list) else str(value)
    if not text.strip():
        raise ValueError("expected one or more directories")
    return text


@dataclass(frozen=True)
class Key:
    parse: Callable[[Any], Any]
    default: Any
    doc: str = ""


KEYS: dict[str, Key] = {
    "node.id": Key(_int, 1, "this broker's id"),
    "listeners": Key(_str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": Key(_str, ""),
    "log.dirs": Key(_dirs, "./data"),
    "log.dir": Key(_dirs, ""),
    "cluster.id": Key(_str, ""),
    "num.partitions": Key(_int, 1),
    "default.replication.factor": Key(_int, 1),
    "min.insync.replicas": Key(_int, 1),
    "auto.create.topics.enable": Key(_bool, True),
    "delete.topic.enable": Key(_bool, True),
    "message.max.bytes": Key(_int, 1048588),
    "socket.request.max.bytes": Key(_int, 104857600),
    "log.segment.bytes": Key(_int, 1073741824),
    "log.roll.ms": Key(_int, 604800000),
    "log.roll.hours": Key(_int, 168),
    "log.retention.ms": Key(_int, 604800000),
    "log.retention.minutes": Key(_int, 10080),
    "log.retention.hours": Key(_int, 168),
    "log.retention.bytes": Key(_int, -1),
    "log.retention.check.interval.ms": Key(_int, 300000),
    "log.index.interval.bytes": Key(_int, 4096),
    "log.segment.delete.delay.ms": Key(_int, 60000),
    "log.flush.interval.messages": Key(_int, LONG_MAX),
    "log.flush.interval.ms": Key(_int, LONG_MAX),
    "log.flush.scheduler.interval.ms": Key(_int, 1000),
    "log.flush.offset.checkpoint.interval.ms": Key(_int, 60000),
    "log.message.timestamp.type": Key(_str, "CreateTime"),
    "log.message.timestamp.before.max.ms": Key(_int, LONG_MAX),
    "log.message.timestamp.after.max.ms": Key(_int, LONG_MAX),
    "log.message.timestamp.difference.max.ms": Key(_int, LONG_MAX),
    "log.cleanup.policy": Key(_str, "delete"),
    "compression.type": Key(_str, "producer"),
    "offsets.topic.num.partitions": Key(_int, 50),
    "offsets.topic.replication.factor": Key(_int, 1),
    "offsets.retention.minutes": Key(_int, 10080),
    "offsets.retention.check.interval.ms": Key(_int, 600000),
    "offset.metadata.max.bytes": Key(_int, 4096),
    "group.min.session.timeout.ms": Key(_int, 6000),
    "group.max.session.timeout.ms": Key(_int, 1800000),
    "group.initial.rebalance.delay.ms": Key(_int, 3000),
    "group.max.size": Key(_int, 2147483647),
    "transaction.state.log.num.partitions": Key(_int, 50),
    "transaction.state.log.replication.factor": Key(_int, 1),
    "transaction.state.log.min.isr": Key(_int, 1),
    "transaction.max.timeout.ms": Key(_int, 900000),
    "transactional.id.expiration.ms": Key(_int, 604800000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": Key(_int, 10000),
    "producer.id.expiration.ms": Key(_int, 86400000),
    "replica.lag.time.max.ms": Key(_int, 30000),
    "metadata.store": Key(_str, "local"),
    "metrics.listener": Key(_str, ""),
}


@dataclass(frozen=True)
class Listener:
    host: str
    port: int


@dataclass(frozen=True)
class BrokerConfig:
    values: Mapping[str, Any]
    explicit: Mapping[str, Any]  # only the keys the file or overrides set

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def log_dirs(self) -> list[Path]:
        raw = self.values["log.dir"] or self.values["log.dirs"]
        return [Path(p.strip()) for p in str(raw).split(",") if p.strip()]

    @property
    def listener(self) -> Listener:
        return parse_listener("listeners", self.values["listeners"])

    @property
    def advertised(self) -> Listener:
        raw = self.values["advertised.listeners"]
        return parse_listener("advertised.listeners", raw) if raw else self.listener


def parse_listener(key: str, text: str) -> Listener:
    first = text.split(",")[0].strip()
    url = urlparse(first if "://" in first else "PLAINTEXT://" + first)
    if url.scheme.upper() != "PLAINTEXT":
        raise ConfigError(f"{key}: only PLAINTEXT listeners are supported, got {first!r}")
    if url.port is None:
        raise ConfigError(f"{key}: listener {first!r} has no port")
    return Listener(url.hostname or "0.0.0.0", url.port)


def _coerce(key: str, value: Any) -> Any:
    spec = KEYS.get(key)
    if spec is None:
        raise ConfigError(f"unknown configuration key {key!r}")
    try:
        return spec.parse(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {key!r}: {exc}") from None


def _derive(values: dict[str, Any], given: set[str]) -> None:
    """Kafka's precedence: *.ms over *.minutes over *.hours."""
    if "log.retention.ms" not in given:
        if "log.retention.minutes" in given:
            values["log.retention.ms"] = values["log.retention.minutes"] * 60_000
        elif "log.retention.hours" in given:
            values["log.retention.ms"] = values["log.retention.hours"] * 3_600_000
    if "log.roll.ms" not in given and "log.roll.hours" in given:
        values["log.roll.ms"] = values["log.roll.hours"] * 3_600_000


def build_config(raw: Mapping[str, Any], overrides: Mapping[str, str] = {}) -> BrokerConfig:
    values = {key: spec.default for key, spec in KEYS.items()}
    merged = {**raw, **overrides}
    for key, value in merged.items():
        values[key] = _coerce(str(key), value)
    _derive(values, set(merged))
    config = BrokerConfig(values, {key: values[key] for key in merged})
    _check(config)
    return config


def _check(config: BrokerConfig) -> None:
    config.listener  # noqa: B018 - parse errors surface here
    if config["message.max.bytes"] <= 0:
        raise ConfigError("invalid value for 'message.max.bytes': must be positive")
    if config["log.segment.bytes"] < 14:
        raise ConfigError("invalid value for 'log.segment.bytes': must be at least 14")
    if config["log.message.timestamp.type"] not in ("CreateTime", "LogAppendTime"):
        raise ConfigError("invalid value for 'log.message.timestamp.type'")
    if config["metadata.store"] not in ("local",):
        raise ConfigError("invalid value for 'metadata.store': only 'local' is available")


def parse_overrides(items: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value")
        result[key.strip()] = value
    return result


def load_config(path: Path, overrides: list[str]) -> BrokerConfig:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must be a mapping of key: value")
    return build_config(raw, parse_overrides(overrides))
