"""KIP-368 re-authentication on a real broker: with `connections.max.reauth.ms` set on a
listener, SaslAuthenticate v1+ tells the client its session lifetime; the client re-authenticates
on the same connection (same mechanism, same principal) before it ends; a connection past its
session is served nothing else and is closed. A listener without the key keeps sessions open."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.protocol.sasl import SaslHandshakeRequest

from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    free_port,
    prefixed_json,
    require_java,
    run_java,
    unique_topic,
)
from tests.integration.wire import WireClient, create_topic, encode_body, metadata_request

LIFETIME_MS = 2000
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')
SASL_AUTHENTICATION_FAILED = 58


@dataclass
class Listeners:
    broker: BrokerProcess
    expiring: int  # SASL_PLAINTEXT with connections.max.reauth.ms
    lasting: int  # SASL_PLAINTEXT without


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    plain, expiring, lasting = free_port(), free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},EXPIRING://127.0.0.1:{expiring},"
                     f"LASTING://127.0.0.1:{lasting}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXPIRING:SASL_PLAINTEXT,"
                                          "LASTING:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.expiring.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.lasting.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.expiring.connections.max.reauth.ms": LIFETIME_MS,
    }
    factory = BrokerFactory(tmp_path_factory.mktemp("reauth"))
    try:
        yield Listeners(factory(overrides, port=plain), expiring, lasting)
    finally:
        factory.close()


def authenticate(c: WireClient, user: str, password: str) -> tuple[int, str | None, int]:
    """PLAIN over SaslHandshake v1 + SaslAuthenticate v1: (error, message, session lifetime)."""
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    token = f"\0{user}\0{password}".encode()
    answer = c.raw_call(36, 1, REQUESTS[36](auth_bytes=token).encode(version=1))
    return answer.error_code, answer.error_message, answer.session_lifetime_ms


def test_session_lifetime_reauthentication_and_expiry(listeners: Listeners) -> None:
    with WireClient(listeners.expiring) as c:
        assert authenticate(c, "alice", "alice-secret") == (0, None, LIFETIME_MS)
        started = time.monotonic()
        assert c.metadata([]).brokers
        time.sleep(LIFETIME_MS / 2000)
        assert authenticate(c, "alice", "alice-secret") == (0, None, LIFETIME_MS)  # the session renewed
        time.sleep(max(0.0, started + LIFETIME_MS / 1000 + 0.2 - time.monotonic()))
        assert c.metadata([]).brokers  # past the first session's end, within the second
        time.sleep(LIFETIME_MS / 1000 + 0.2)
        c.send_request(3, 1, encode_body(metadata_request([], 1), 1))  # past the session: closed
        assert c.closed_by_peer()
    assert "after the SASL session of User:alice expired" in listeners.broker.log_text()


def test_reauthentication_keeps_the_principal_and_the_mechanism(listeners: Listeners) -> None:
    with WireClient(listeners.expiring) as c:
        assert authenticate(c, "alice", "alice-secret")[0] == 0
        error, message, _ = authenticate(c, "bob", "bob-secret")
        assert (error, message) == (SASL_AUTHENTICATION_FAILED, "Cannot change principals during "
                                    "re-authentication from User.alice: User.bob")
        assert c.closed_by_peer()
    with WireClient(listeners.expiring) as c:
        assert authenticate(c, "alice", "alice-secret")[0] == 0
        assert c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1).error_code == 0
        answer = c.raw_call(36, 1, REQUESTS[36](auth_bytes=b"n,,n=alice,r=abc").encode(version=1))
        assert (answer.error_code, answer.error_message) == (
            SASL_AUTHENTICATION_FAILED, "SASL mechanism 'SCRAM-SHA-512' requested by client is not "
            "supported for re-authentication of mechanism 'PLAIN'")
        assert c.closed_by_peer()


def test_without_the_key_a_session_has_no_end(listeners: Listeners) -> None:
    with WireClient(listeners.lasting) as c:
        assert authenticate(c, "alice", "alice-secret") == (0, None, 0)
        time.sleep(LIFETIME_MS / 1000 + 0.2)
        assert c.metadata([]).brokers
    with WireClient(listeners.expiring) as c:  # and the broker kept serving throughout
        assert authenticate(c, "alice", "alice-secret")[0] == 0
        assert c.metadata([]).brokers
    assert "Traceback" not in listeners.broker.log_text()


def test_java_client_reauthenticates_transparently(listeners: Listeners, tmp_path: Path) -> None:
    """The Java 4.3 producer outlives three sessions on one connection: it re-authenticates
    before each ends, so the broker never closes it for an expired session."""
    require_java("4.3")
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     'required username="alice" password="alice-secret";\n')
    topic = unique_topic("reauth-java")
    with WireClient(listeners.broker.port) as c:
        create_topic(c, topic)
    log_start = len(listeners.broker.log_text())
    seconds = 4 * LIFETIME_MS // 1000 + 1  # three lifetimes after a first send that may be slow
    done = run_java("ReauthProduce.java", f"127.0.0.1:{listeners.expiring}", str(props), topic,
                    str(seconds), client="4.3")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = prefixed_json(done.stdout)[0]
    first = result["acked_ms"][0]  # the connection's first session began just before it
    lifetimes = {(ms - first) // LIFETIME_MS for ms in result["acked_ms"]}
    assert {0, 1, 2} <= lifetimes, f"a session lifetime without an acknowledgement: {result['acked_ms']}"
    with WireClient(listeners.broker.port) as c:
        assert c.log_end_offset(topic) == result["sent"]
    log = listeners.broker.log_text()[log_start:]
    assert "expired (connections.max.reauth.ms)" not in log and "Traceback" not in log, log[-3000:]
