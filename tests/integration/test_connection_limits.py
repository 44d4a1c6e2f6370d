"""Kafka's connection limits, each scenario on Gregor and on Apache Kafka 4.4.0 with the same
settings, driven by raw sockets (`wire.WireClient`, which may connect from another loopback
address, so Kafka's own connections from 127.0.0.1 stay out of the counts) and real clients:

- `max.connections.per.ip` and its overrides: the connection past an address's limit is closed as
  soon as it is accepted, while the address's other connections and other addresses are served;
- `max.connections`: the connection past the limit is accepted by neither broker until one of
  the others closes, then it is served;
- `max.connection.creation.rate`: after Kafka's burst (ten windows' worth) new connections are
  answered only after the broker's throttle (a lower bound: a slow machine only adds time).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.integration import wire
from tests.integration.harness import BrokerProcess, free_port, started_broker, unique_topic
from tests.integration.kafka import KafkaNode, started_kafka

Server = BrokerProcess | KafkaNode
Start = Callable[[dict[str, object]], Server]


@pytest.fixture(params=["gregor", "kafka"])
def start(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Start]:
    """Starts Gregor, or Apache Kafka, with the given settings (one server per test)."""
    with ExitStack() as stack:
        def started(overrides: dict[str, object]) -> Server:
            if request.param == "gregor":
                overrides = {**overrides, "metrics.listener": f"http://127.0.0.1:{free_port()}"}
                return stack.enter_context(started_broker(tmp_path / "gregor", overrides))
            return stack.enter_context(started_kafka(tmp_path / "kafka", overrides))
        yield started


def port_of(server: Server) -> int:
    return int(server.bootstrap.rsplit(":", 1)[1])


@contextmanager
def clients(server: Server, n: int, source: str) -> Iterator[list[wire.WireClient]]:
    """`n` connections from `source`, each answered an ApiVersions request."""
    held = []
    try:
        for _ in range(n):
            held.append(c := wire.WireClient(port_of(server), source=source))
            assert c.api_versions().error_code == 0
        yield held
    finally:
        for c in held:
            c.close()


def answered_within(client: wire.WireClient, seconds: float) -> bool:
    """Send ApiVersions; True if its answer arrives within `seconds`."""
    client.sock.settimeout(seconds)
    cid = client.send_request(18, 0, b"")
    try:
        client.recv_response(18, 0, cid)
    except TimeoutError:
        return False
    finally:
        client.sock.settimeout(10.0)
    return True


def gregor_metric(server: Server, name: str) -> float:
    assert isinstance(server, BrokerProcess)
    with urllib.request.urlopen(str(server.config["metrics.listener"]) + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def round_trip(bootstrap: str) -> None:
    """A real client (confluent-kafka) produces a record and reads it back."""
    topic = unique_topic("limits")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"v")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg: Any = consumer.poll(0.5)
            if msg is not None and not msg.error():
                assert msg.value() == b"v"
                return
        raise AssertionError("the record was not read back")
    finally:
        consumer.close()


def test_per_ip_limit_closes_the_next_connection(start: Start) -> None:
    server = start({"max.connections.per.ip": 2,
                    "max.connections.per.ip.overrides": "127.0.0.1:1000,127.0.0.2:3"})
    with clients(server, 3, "127.0.0.2") as held, clients(server, 2, "127.0.0.3") as others:
        with wire.WireClient(port_of(server), source="127.0.0.2") as over:
            assert over.closed_by_peer(), "the 4th connection from 127.0.0.2 (override 3) was served"
        with wire.WireClient(port_of(server), source="127.0.0.3") as third:
            assert third.closed_by_peer(), "the 3rd connection from 127.0.0.3 (default 2) was served"
        for c in held + others:  # the address's other connections are still served
            assert c.metadata(None).brokers
        round_trip(server.bootstrap)  # other addresses too, by a real client
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the broker sees the close when it reads the EOF
            again = wire.WireClient(port_of(server), source="127.0.0.2")
            if not again.closed_by_peer(0.3) or time.monotonic() > deadline:
                break
            again.close()
        try:
            assert again.api_versions().error_code == 0, "a slot freed was not given to the address"
        finally:
            again.close()
    if isinstance(server, BrokerProcess):
        assert gregor_metric(server, "gregor_connections_refused_total") >= 2


def test_max_connections_waits_until_one_closes(start: Start) -> None:
    server = start({"max.connections": 3})
    with clients(server, 3, "127.0.0.2") as held:
        waiting = wire.WireClient(port_of(server), source="127.0.0.2")  # the kernel's backlog takes it
        try:
            assert not answered_within(waiting, 0.5), "a 4th connection was served at max.connections 3"
            for c in held:
                assert c.metadata(None).brokers
            held.pop().close()
            waiting.sock.settimeout(10.0)
            assert waiting.recv_frame(), "the waiting connection was not served once one closed"
            assert waiting.metadata(None).brokers
        finally:
            waiting.close()
    if isinstance(server, BrokerProcess):
        assert gregor_metric(server, "kafka_network_acceptor_acceptorblocked_seconds_total") > 0


def test_creation_rate_throttles_after_the_burst(start: Start) -> None:
    """At 2 connections/s Kafka's rate lets about 20 through at once (11 windows of 1 s, all but
    one assumed full), then each waits about 500 ms: 26 connections take at least 2 s."""
    server = start({"max.connection.creation.rate": 2})
    started = time.monotonic()
    for _ in range(26):
        with wire.WireClient(port_of(server), source="127.0.0.2") as c:
            assert c.api_versions().error_code == 0
    assert time.monotonic() - started >= 2.0, "26 connections at 2/s were not throttled"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    assert admin.list_topics(timeout=30).brokers  # a real client still gets in, throttled
    if isinstance(server, BrokerProcess):
        throttled = "kafka_server_socket_server_metrics_connection_accept_throttle_time_total"
        assert gregor_metric(server, throttled) > 0


def test_max_connections_raised_at_run_time_frees_the_waiting_one(start: Start) -> None:
    """IncrementalAlterConfigs of the cluster-wide default (KIP-226) applies to the acceptor at
    once, as Kafka's DynamicBrokerConfig does: the connection waiting for a slot is served."""
    from tests.differential.messages import build

    server = start({"max.connections": 3})
    with clients(server, 3, "127.0.0.2") as held:
        waiting = wire.WireClient(port_of(server), source="127.0.0.2")
        try:
            assert not answered_within(waiting, 0.5)
            alter = build(44, 0, {"resources": [{
                "resource_type": 4, "resource_name": "",
                "configs": [{"name": "max.connections", "config_operation": 0, "value": "4"}],
            }], "validate_only": False})
            answer = held[0].call(alter, 0)
            assert [r.error_code for r in answer.responses] == [0], answer
            waiting.sock.settimeout(10.0)
            assert waiting.recv_frame(), "raising max.connections did not serve the waiting connection"
        finally:
            waiting.close()
