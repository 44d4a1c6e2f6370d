"""docker-compose.yml is accepted by Docker Compose (`compose config`, no engine needed), and
what it gives each broker is a valid Gregor config; the image's entrypoint turns
GREGOR_OVERRIDE_* variables into --override options with Kafka's image naming."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker.config import load_config
from broker.security.jaas import parse_jaas
from tests.integration.docker_engine import compose_command

ROOT = Path(__file__).resolve().parents[2]
BROKERS = ("broker-1", "broker-2", "broker-3")
PREFIX = "GREGOR_OVERRIDE_"


def compose_config(file: str = "docker-compose.yml", **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [*compose_command(), "-f", str(ROOT / file), "-p", "gregor-unit", "config", "--format", "json"],
        capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 0, f"compose config refused {file}: {done.stderr}"
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def healthcheck_module() -> Any:
    """docker/healthcheck.py, whose env_key() reads the variables as the entrypoint does."""
    spec = importlib.util.spec_from_file_location("gregor_healthcheck", ROOT / "docker" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


env_key = healthcheck_module().env_key


def broker_config(service: dict[str, Any]) -> Any:
    """The broker's config: the shared file the service mounts, plus its environment."""
    shared = next(v["source"] for v in service["volumes"] if v["target"] == "/etc/gregor/broker.yaml")
    overrides = [f"{env_key(k[len(PREFIX):])}={v}" for k, v in service["environment"].items()
                 if k.startswith(PREFIX)]
    return load_config(Path(shared), overrides)


def published(service: dict[str, Any]) -> set[tuple[str, int, int]]:
    return {(p["host_ip"], int(p["published"]), int(p["target"])) for p in service["ports"]}


def test_compose_accepts_the_file_and_each_broker_gets_a_valid_config() -> None:
    config = compose_config()
    services = config["services"]
    assert set(services) == {"etcd", *BROKERS, "topics"}
    node_ids = set()
    for name in BROKERS:
        service = services[name]
        assert service["init"] is True and service["restart"] == "unless-stopped"
        assert "gregor-healthcheck" in " ".join(service["healthcheck"]["test"])
        data = [v for v in service["volumes"] if v["target"] == "/var/lib/gregor/data"]
        assert [v["type"] for v in data] == ["volume"]
        broker = broker_config(service)
        node_ids.add(broker.node_id)
        # Two listeners: INTERNAL for the compose network (the brokers' own), HOST published
        # on the host's loopback and advertised with the host's address.
        advertised = broker.advertised_listeners
        assert broker.inter_broker_listener == "INTERNAL"
        assert (advertised["INTERNAL"].host, advertised["INTERNAL"].port) == (name, 19092)
        host = broker.listeners["HOST"]
        assert published(service) >= {("127.0.0.1", advertised["HOST"].port, host.port)}
        assert advertised["HOST"].host == "127.0.0.1" and advertised["HOST"].port == host.port
        assert all(p[0] == "127.0.0.1" for p in published(service)), "only the host's loopback is published"
        assert broker.values["metadata.store"].startswith("etcd://etcd:2379")
        assert broker.values["default.replication.factor"] == 3 and broker.values["min.insync.replicas"] == 2
    assert node_ids == {1, 2, 3}
    assert services["topics"]["environment"]["BOOTSTRAP"] == ",".join(f"{b}:19092" for b in BROKERS)


def test_ports_and_base_image_are_settable() -> None:
    config = compose_config(GREGOR_BROKER_2_PORT="19193", GREGOR_BASE_IMAGE="local-base:1",
                            GREGOR_ADVERTISED_HOST="laptop.example")
    service = config["services"]["broker-2"]
    assert ("127.0.0.1", 19193, 19193) in published(service)
    broker = broker_config(service)
    host = broker.advertised_listeners["HOST"]
    assert broker.listeners["HOST"].port == 19193 and (host.host, host.port) == ("laptop.example", 19193)
    assert service["build"]["args"]["BASE"] == "local-base:1"


def test_the_secured_file_gives_each_broker_sasl_ssl_with_scram_and_the_authorizer() -> None:
    config = compose_config("docker-compose.secure.yml", GREGOR_ADMIN_PASSWORD="a-pw",
                            GREGOR_BROKER_PASSWORD="b-pw")
    own_name = yaml.safe_load((ROOT / "docker-compose.secure.yml").read_text())["name"]
    assert own_name == "gregor-secure"  # beside the plain cluster, with volumes of its own
    services = config["services"]
    assert set(services) == {"etcd", "init", *BROKERS, "topics"}
    init = services["init"]
    assert init["environment"]["BROKERS"].split() == list(BROKERS)
    assert init["environment"]["ADMIN_PASSWORD"] == "a-pw"
    assert services["topics"]["environment"]["ADMIN_PASSWORD"] == "a-pw"
    assert init["environment"]["BROKER_PASSWORD"] == "b-pw"
    assert "gregor-secure-init" in " ".join(init["entrypoint"])
    for name in BROKERS:
        service = services[name]
        assert service["depends_on"]["init"]["condition"] == "service_healthy"
        secrets = [v for v in service["volumes"] if v["target"] == "/etc/gregor/secrets"]
        assert [(v["source"], v.get("read_only")) for v in secrets] == [("secrets", True)]
        broker = broker_config(service)
        assert {broker.security_protocol(listener) for listener in broker.listeners} == {"SASL_SSL"}
        assert broker.inter_broker_listener == "INTERNAL"
        assert broker.values["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
        assert broker.values["ssl.keystore.location"] == f"/etc/gregor/secrets/{name}.pem"
        assert broker.values["ssl.truststore.location"] == "/etc/gregor/secrets/ca.pem"
        login = parse_jaas(broker.values["listener.name.internal.scram-sha-512.sasl.jaas.config"]).options
        assert (login["username"], login["password"]) == ("broker", "b-pw")
        assert broker.authorizer_class_name == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert set(broker.values["super.users"].split(";")) == {"User:broker", "User:admin"}
        assert all(p[0] == "127.0.0.1" for p in published(service)), "only the host's loopback is published"
    defaults = compose_config("docker-compose.secure.yml")["services"]
    assert defaults["init"]["environment"]["ADMIN_PASSWORD"] == "admin-secret"
    ports = {p[1] for name in BROKERS for p in published(defaults[name])}
    assert not ports & {p[1] for name in BROKERS for p in published(compose_config()["services"][name])}


@pytest.fixture
def fake_gregor(tmp_path: Path) -> Path:
    """A `gregor` on PATH that prints its arguments, one a line."""
    script = tmp_path / "gregor"
    script.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def test_entrypoint_turns_variables_into_overrides(fake_gregor: Path) -> None:
    env = {
        "PATH": f"{fake_gregor}:/usr/bin:/bin",
        "GREGOR_CONFIG_FILE": "/etc/x.yaml",
        "GREGOR_OVERRIDE_NODE_ID": "7",
        "GREGOR_OVERRIDE_ADVERTISED_LISTENERS": "PLAINTEXT://host name:9092",
        "GREGOR_OVERRIDE_SOME__UNDERSCORE___DASH": "a b",
    }
    done = subprocess.run(["sh", str(ROOT / "docker" / "entrypoint.sh"), "--log-level", "DEBUG"],
                          capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    args = done.stdout.splitlines()
    assert args[:3] == ["broker", "--config", "/etc/x.yaml"]
    assert args[-2:] == ["--log-level", "DEBUG"]
    pairs = {args[i + 1] for i, a in enumerate(args) if a == "--override"}
    assert pairs == {
        "node.id=7", "advertised.listeners=PLAINTEXT://host name:9092", "some_underscore-dash=a b",
    }
    assert env_key("SOME__UNDERSCORE___DASH") == "some_underscore-dash"  # the healthcheck agrees


@pytest.mark.parametrize(("file", "port"), [("docker-compose.yml", 9080),
                                           ("docker-compose.secure.yml", 9081)])
def test_the_console_is_a_service_of_its_own_profile(file: str, port: int) -> None:
    """`--profile console` adds `gregor console` pointed at the three brokers, published on the
    host's loopback only; without the profile (`up --wait` of the tests) it is not there."""
    assert "console" not in compose_config(file)["services"]
    console = compose_config(file, COMPOSE_PROFILES="console")["services"]["console"]
    command = " ".join(console["entrypoint"])
    assert "gregor console" in command and "--no-login" in command and "--port 9080" in command
    bootstrap = ",".join(f"{b}:19092" for b in BROKERS)
    assert bootstrap in command or console["environment"]["BOOTSTRAP"] == bootstrap
    assert published(console) == {("127.0.0.1", port, 9080)}
    metrics = {"docker-compose.yml": 9193, "docker-compose.secure.yml": 9195}[file]
    assert f"--metrics-url http://broker-1:{metrics}/metrics" in command.replace('"', "")
    moved = compose_config(file, COMPOSE_PROFILES="console", GREGOR_CONSOLE_PORT="19080")
    assert published(moved["services"]["console"]) == {("127.0.0.1", 19080, 9080)}
