"""Broker configuration: Kafka key names, defaults, valid ranges, and clear errors at
start-up; docs/configuration.md's key table is generated from the same table."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import (
    KEYS,
    RESERVED,
    ConfigError,
    Integer,
    build_config,
    config_docs,
    load_config,
    with_config_docs,
)

CONFIG_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_and_kafka_precedence() -> None:
    config = build_config({"log.retention.hours": 2, "node.id": "3"})
    assert config.node_id == 3
    assert config.values["log.retention.ms"] == 7_200_000
    assert config.explicit == {"log.retention.hours": 2, "node.id": 3}
    assert build_config({"log.retention.ms": 5, "log.retention.hours": 2}).values["log.retention.ms"] == 5
    assert build_config({"log.retention.hours": -1}).values["log.retention.ms"] == -1


def test_log_dirs_wins_over_log_dir() -> None:
    assert build_config({"log.dir": "/a"}).log_dirs == [Path("/a")]
    assert build_config({"log.dir": "/a", "log.dirs": "/b,/c"}).log_dirs == [Path("/b"), Path("/c")]
    assert build_config({"log.dirs": ["/b", "/c"]}).log_dirs == [Path("/b"), Path("/c")]


def test_listener_and_advertised_listener() -> None:
    config = build_config({"listeners": "PLAINTEXT://0.0.0.0:9999",
                           "advertised.listeners": "PLAINTEXT://broker1:19999"})
    assert (config.listener.host, config.listener.port) == ("0.0.0.0", 9999)
    assert (config.advertised.host, config.advertised.port) == ("broker1", 19999)
    one_item_list = build_config({"listeners": ["PLAINTEXT://127.0.0.1:9095"]})
    assert one_item_list.listener.port == 9095


def test_named_listeners_one_per_network() -> None:
    """As Kafka's images: one listener for the containers' network, one for the host; other
    brokers use the inter-broker one."""
    config = build_config({
        "listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
        "advertised.listeners": "INTERNAL://broker-1:19092,EXTERNAL://127.0.0.1:9192",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    })
    assert list(config.listeners) == ["INTERNAL", "EXTERNAL"]
    assert (config.advertised.host, config.advertised.port) == ("broker-1", 19092)
    assert config.advertised_listeners["EXTERNAL"].port == 9192
    # without inter.broker.listener.name: the first listener
    first = build_config({"listeners": "A://127.0.0.1:1,B://127.0.0.1:2",
                          "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"})
    assert first.inter_broker_listener == "A" and first.listener.port == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"log.segmnet.bytes": 1}, "unknown configuration key 'log.segmnet.bytes'"),
        ({"num.partitions": "abc"}, "num.partitions must be an integer \u2265 1, got 'abc'"),
        ({"num.partitions": -1}, "num.partitions must be an integer \u2265 1, got -1"),
        ({"num.partitions": 1.5}, "num.partitions must be an integer \u2265 1, got 1.5"),
        ({"num.partitions": True}, "num.partitions must be an integer \u2265 1, got True"),
        ({"num.partitions": 2**31}, "num.partitions must be an integer \u2265 1 and \u2264 2147483647"),
        ({"auto.create.topics.enable": "perhaps"}, "auto.create.topics.enable must be true or false"),
        ({"listeners": "SSL://127.0.0.1:9093"},
         "listeners: SSL is SSL: set ssl.keystore.location (or listener.name.ssl.ssl.keystore.location)"),
        ({"listener.security.protocol.map": "PLAINTEXT:KERBEROS"},
         "listener.security.protocol.map must be NAME:PROTOCOL pairs, comma-separated (PLAINTEXT, SSL, "
         "SASL_PLAINTEXT, SASL_SSL), got 'PLAINTEXT:KERBEROS' (KERBEROS is not a security protocol)"),
        ({"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT"},
         "sasl.enabled.mechanisms: GSSAPI on PLAINTEXT: Gregor serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ({"listeners": "PLAINTEXT://a:1,S://a:2",
          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,S:SASL_PLAINTEXT",
          "inter.broker.listener.name": "S", "sasl.enabled.mechanisms": "PLAIN"},
         "sasl.mechanism.inter.broker.protocol: GSSAPI is not enabled on the inter-broker listener S"),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "got 'PLAINTEXT://127.0.0.1' (no port)"),
        ({"listeners": "127.0.0.1:9092"},
         "got '127.0.0.1:9092' (no listener name: write PLAINTEXT://127.0.0.1:9092)"),
        ({"listeners": ["PLAINTEXT://a:1", "PLAINTEXT://b:2"]}, "(listener PLAINTEXT named twice)"),
        ({"listeners": "PLAINTEXT://a:1,HOST://b:2"},
         "listeners: HOST has no protocol in listener.security.protocol.map (add HOST:PLAINTEXT)"),
        ({"advertised.listeners": "OTHER://a:1", "listener.security.protocol.map": "OTHER:PLAINTEXT"},
         "advertised.listeners: OTHER is not one of listeners (PLAINTEXT)"),
        ({"inter.broker.listener.name": "REPLICATION"},
         "inter.broker.listener.name: REPLICATION is not an advertised listener (PLAINTEXT)"),
        ({"listeners": {"PLAINTEXT": 1}}, "listeners must be listeners of the form NAME://host:port, "
                                          "e.g. PLAINTEXT://127.0.0.1:9092, got a YAML mapping"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "clients cannot connect to 0.0.0.0"),
        ({"log.message.timestamp.type": "Tomorrow"},
         "log.message.timestamp.type must be one of CreateTime, LogAppendTime, got 'Tomorrow'"),
        ({"log.cleanup.policy": "delete,shred"}, "log.cleanup.policy must be a comma-separated list of"),
        ({"compression.type": "brotli"}, "compression.type must be one of"),
        ({"metadata.store": "etcd"},
         "metadata.store must be local or etcd://host:port[,host:port...][/root], got 'etcd' (expected etcd://"),
        ({"log.dirs": ""}, "log.dirs must be one or more directories"),
        ({"cluster.id": ["a"]}, "cluster.id must be a string"),
        ({"log.dirs": "/tmp/a,/tmp/b/../a"}, "log.dirs names the same directory twice"),
        ({"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
         "group.max.session.timeout.ms (5) must be \u2265 group.min.session.timeout.ms (10)"),
        ({"metrics.listener": "0.0.0.0:9100"},
         "metrics.listener must be empty (no endpoint) or http://host:port, got '0.0.0.0:9100' "
         "(no scheme: write http://0.0.0.0:9100)"),
        ({"metrics.listener": "https://0.0.0.0:9100"}, "(https: only http is served)"),
        ({"metrics.listener": "http://0.0.0.0"}, "(no port)"),
        ({"replica.lag.time.max.ms": 0}, "replica.lag.time.max.ms must be an integer \u2265 1, got 0"),
        ({"replica.lag.time.max.ms": 400},
         "replica.fetch.wait.max.ms (500) must be \u2264 replica.lag.time.max.ms (400)"),
    ],
)
def test_bad_keys_and_values_say_what_was_expected(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    assert message in str(info.value)


INTEGER_KEYS = [key for key, spec in KEYS.items() if isinstance(spec.parse, Integer)]


CONSUMER_LOWEST = {
    "group.consumer.min.heartbeat.interval.ms": "1", "group.consumer.heartbeat.interval.ms": "1",
    "group.consumer.max.heartbeat.interval.ms": "1", "group.consumer.min.session.timeout.ms": "1",
    "group.consumer.assignment.interval.ms": "0",
}
SESSION_ABOVE_INTERVAL = {"group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms"}


@pytest.mark.parametrize("key", INTEGER_KEYS)
def test_every_integer_key_has_kafkas_range(key: str) -> None:
    kind = KEYS[key].parse
    assert isinstance(kind, Integer)
    assert kind.minimum >= -1, f"{key} accepts any integer"
    # the cross-key rules hold: group max >= min, replica fetch wait <= lag, the consumer-protocol
    # heartbeat interval and session timeout within their bounds, the interval below the timeout
    lowest = {"group.min.session.timeout.ms": 0, "replica.fetch.wait.max.ms": 0, **CONSUMER_LOWEST,
              "max.connections.per.ip.overrides": "127.0.0.1:1", key: str(kind.minimum)}
    if key in SESSION_ABOVE_INTERVAL:  # a 1 ms session timeout leaves no room for the 1 ms interval
        with pytest.raises(ConfigError, match="session.timeout.ms"):
            build_config(lowest)
        lowest.update({"group.consumer.session.timeout.ms": "2", key: "2"})
        assert build_config(lowest).values[key] == 2
    else:
        assert build_config(lowest).values[key] == kind.minimum
    with pytest.raises(ConfigError, match=f"^{key} must be an integer"):
        build_config({key: kind.minimum - 1})
    with pytest.raises(ConfigError, match=f"^{key} must be an integer"):
        build_config({key: kind.maximum + 1})


@pytest.mark.parametrize("key", list(KEYS))
def test_every_key_is_documented_and_its_default_is_valid(key: str) -> None:
    spec = KEYS[key]
    assert spec.doc, f"{key} has no meaning in the table"
    assert getattr(spec.parse, "expected", ""), f"{key}'s type does not say what it accepts"
    if spec.default != "":
        assert spec.parse(spec.default) == spec.default
    assert key not in RESERVED


def test_etcd_metadata_store_is_accepted() -> None:
    assert build_config({"metadata.store": "etcd://127.0.0.1:2379/g"}).values["metadata.store"] == "etcd://127.0.0.1:2379/g"


def test_docs_key_table_is_generated_from_keys() -> None:
    page = CONFIG_PAGE.read_text()
    assert with_config_docs(page) == page, (
        "docs/configuration.md's key table differs from broker/config.py KEYS: "
        "run `.venv/bin/gregor config-docs --doc docs/configuration.md`"
    )
    for key in KEYS:
        assert f"| `{key}` |" in config_docs()
    for key in RESERVED:
        assert f"`{key}` (" in config_docs()


def test_config_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text("node.id: 1\nnum.partitions: 2\n")
    assert load_config(path, ["num.partitions=5"]).values["num.partitions"] == 5
    with pytest.raises(ConfigError, match="key=value"):
        load_config(path, ["num.partitions"])
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path, [])
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", [])
    path.write_text("node.id=1\nlog.dirs=/tmp/x\n")
    with pytest.raises(ConfigError, match=r"looks like a Java \.properties file; Gregor reads YAML"):
        load_config(path, [])
    props = tmp_path / "server.properties"
    props.write_text("node.id: 1\n")
    with pytest.raises(ConfigError, match="Gregor reads YAML"):
        load_config(props, [])
    path.write_bytes(b"node.id: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not text"):
        load_config(path, [])


def test_every_typed_getter_names_a_key_and_reads_it_as_its_parser_gives() -> None:
    """BrokerConfig's getters (one per key the code reads, as Kafka's KafkaConfig): the key
    exists and the getter's type is what the key's parser returns, for the defaults too."""
    from broker.config import KEYS, BrokerConfig, Setting

    getters = {name: g for name, g in vars(BrokerConfig).items() if isinstance(g, Setting)}
    assert len(getters) > 50
    config = build_config({})
    for name, getter in getters.items():
        assert name == getter.key.replace(".", "_") and getter.key in KEYS, name
        value = getattr(config, name)
        assert type(value) is getter.kind, (name, value)
