"""Broker configuration: Kafka key names, defaults, and clear errors at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, build_config, load_config


def test_defaults_and_kafka_precedence() -> None:
    config = build_config({"log.retention.hours": 2, "node.id": "3"})
    assert config.node_id == 3
    assert config["log.retention.ms"] == 7_200_000
    assert config.explicit == {"log.retention.hours": 2, "node.id": 3}
    assert build_config({"log.retention.ms": 5, "log.retention.hours": 2})["log.retention.ms"] == 5


def test_listener_and_advertised_listener() -> None:
    config = build_config({"listeners": "PLAINTEXT://0.0.0.0:9999",
                           "advertised.listeners": "PLAINTEXT://broker1:19999"})
    assert (config.listener.host, config.listener.port) == ("0.0.0.0", 9999)
    assert (config.advertised.host, config.advertised.port) == ("broker1", 19999)


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"log.segmnet.bytes": 1}, "'log.segmnet.bytes'"),
        ({"num.partitions": "many"}, "'num.partitions'"),
        ({"auto.create.topics.enable": "perhaps"}, "'auto.create.topics.enable'"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "listeners"),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "listeners"),
        ({"log.message.timestamp.type": "Tomorrow"}, "'log.message.timestamp.type'"),
    ],
)
def test_bad_keys_and_values_name_the_key(raw: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(raw)


def test_overrides_win_and_must_be_key_value(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text("node.id: 1\nnum.partitions: 2\n")
    assert load_config(path, ["num.partitions=5"])["num.partitions"] == 5
    with pytest.raises(ConfigError, match="key=value"):
        load_config(path, ["num.partitions"])
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path, [])
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", [])
