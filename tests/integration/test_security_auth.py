"""Authentication as Kafka's (issue 21): TLS listeners with PEM keys, mTLS principals, SASL
PLAIN and SCRAM-SHA-256/512 with credentials stored salted, driven by real clients
(confluent-kafka, kafka-python, aiokafka, the Java 3.9 and 4.3 clients, kcat) and by the wire
for refusals and for SaslHandshake v0's bare tokens.

One broker for the module, four listeners: PLAINTEXT (ANONYMOUS, a super user: the tests'
administration), SASL_PLAINTEXT, SASL_SSL and SSL with client certificates required. With the
StandardAuthorizer on, the principal a connection authenticated as decides what it may do:
alice may use the topics and groups prefixed `alice-`, nothing else.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.sasl import SaslHandshakeRequest
from scramp import ScramClient

from broker.store.local_store import STORE_FILE
from protocol.messages import REQUESTS
from tests.integration.certs import Pki, make_pki
from tests.integration.console_process import ConsoleProcess, console_running, shown
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    free_port,
    gregor_command,
    prefixed_json,
    require_java,
    run_java,
    unique_topic,
)
from tests.integration.wire import WireClient

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM = 58, 33
FAILURE_DELAY_MS = 200  # connection.failed.authentication.delay.ms


@dataclass
class Secured:
    broker: BrokerProcess
    pki: Pki
    sasl_plain: int
    sasl_ssl: int
    ssl: int
    metrics: int

    def at(self, port: int) -> str:
        return f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("security")
    pki = make_pki(base / "pki")
    ports = {name: free_port() for name in ("SASL_PLAINTEXT", "SASL_SSL", "SSL", "metrics")}
    listeners = ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in ("SASL_PLAINTEXT", "SASL_SSL", "SSL"))
    plain_port = free_port()
    overrides: dict[str, Any] = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},{listeners}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,SSL:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.location": str(pki.keystore),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^.*CN=([a-z]+).*$/$1/L,DEFAULT",
        "authorizer.class.name": STANDARD,
        "super.users": "User:ANONYMOUS;User:admin",
        "metrics.listener": f"http://127.0.0.1:{ports['metrics']}",
        "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1,
        "connection.failed.authentication.delay.ms": FAILURE_DELAY_MS,
    }
    factory = BrokerFactory(base)
    try:
        broker = factory(overrides, port=plain_port)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        acls = [AclBinding(rtype, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                           AclPermissionType.ALLOW)
                for rtype, op in [(ResourceType.TOPIC, AclOperation.ALL),
                                  (ResourceType.GROUP, AclOperation.ALL),
                                  (ResourceType.TRANSACTIONAL_ID, AclOperation.ALL)]]
        for future in admin.create_acls(acls).values():
            future.result(timeout=30)
        yield Secured(broker, pki, ports["SASL_PLAINTEXT"], ports["SASL_SSL"], ports["SSL"], ports["metrics"])
    finally:
        factory.close()


def new_topic(s: Secured, prefix: str) -> str:
    topic = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": s.broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    return topic


def add_scram_user(s: Secured, user: str, password: str, mechanism: ScramMechanism) -> None:
    admin = AdminClient({"bootstrap.servers": s.broker.bootstrap})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


def sasl(mechanism: str, user: str, password: str, protocol: str, s: Secured) -> dict[str, Any]:
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(s.pki.ca)
    return conf


def round_trip(bootstrap: str, topic: str, conf: dict[str, Any], n: int = 5) -> list[bytes]:
    """Produce n records and read them back with confluent-kafka."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    errors: list[Any] = []
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"alice-{topic}",
                         "auto.offset.reset": "earliest", **conf})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(100):
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == n:
                break
    finally:
        consumer.close()
    return got


def test_plain_over_sasl_plaintext_names_the_principal(secured: Secured) -> None:
    """PLAIN with the JAAS config's users: alice reads and writes her topics, and her principal
    (not ANONYMOUS, a super user) is what the authorizer decides on."""
    conf = sasl("PLAIN", "alice", "alice-secret", "SASL_PLAINTEXT", secured)
    topic = new_topic(secured, "alice-plain")
    assert round_trip(secured.at(secured.sasl_plain), topic, conf) == [f"v{i}".encode() for i in range(5)]
    other = new_topic(secured, "bob-plain")
    producer = Producer({"bootstrap.servers": secured.at(secured.sasl_plain), "message.timeout.ms": 10000,
                         **conf})
    reports: list[Any] = []
    producer.produce(other, b"x", on_delivery=lambda err, _m: reports.append(err))
    producer.flush(20)
    assert reports and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_scram_sha_512_over_sasl_ssl_with_stored_credentials(secured: Secured) -> None:
    """A SCRAM user created with AlterUserScramCredentials (the Admin API) authenticates over TLS;
    DescribeUserScramCredentials shows its mechanism and iterations, never the password."""
    add_scram_user(secured, "alice", "pw-512-secret", ScramMechanism.SCRAM_SHA_512)
    admin = AdminClient({"bootstrap.servers": secured.broker.bootstrap})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    conf = sasl("SCRAM-SHA-512", "alice", "pw-512-secret", "SASL_SSL", secured)
    topic = new_topic(secured, "alice-sha512")
    assert len(round_trip(secured.at(secured.sasl_ssl), topic, conf)) == 5
    stored = secured.broker.data_dir / STORE_FILE
    assert "scram" in stored.read_text() and "pw-512-secret" not in stored.read_text()


def test_kafka_python_and_aiokafka_authenticate_with_scram_plain_and_certificates(secured: Secured) -> None:
    add_scram_user(secured, "alice", "alice-256", ScramMechanism.SCRAM_SHA_256)
    topic = new_topic(secured, "alice-py")
    round_trip(secured.at(secured.sasl_plain), topic, sasl("PLAIN", "alice", "alice-secret",
                                                            "SASL_PLAINTEXT", secured), n=3)
    context = ssl.create_default_context(cafile=str(secured.pki.ca))
    consumer = KafkaConsumer(bootstrap_servers=secured.at(secured.sasl_ssl), security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                             sasl_plain_password="alice-256", ssl_context=context,
                             consumer_timeout_ms=10000)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert [r.value for r in consumer][:3] == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()

    async def aio() -> list[bytes]:
        conf = {"bootstrap_servers": secured.at(secured.sasl_plain), "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        reader = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await reader.start()
        try:
            batch = await reader.getmany(timeout_ms=10000, max_records=10)
            return [r.value for records in batch.values() for r in records]
        finally:
            await reader.stop()

    assert b"aio" in asyncio.run(aio())

    # SCRAM-SHA-512 over SASL_SSL (aiokafka) and mTLS (both): alice's certificate is her name
    add_scram_user(secured, "alice", "alice-512", ScramMechanism.SCRAM_SHA_512)
    mtls = ssl.create_default_context(cafile=str(secured.pki.ca))
    mtls.load_cert_chain(str(secured.pki.client_cert), str(secured.pki.client_key))
    scram = {"bootstrap_servers": secured.at(secured.sasl_ssl), "security_protocol": "SASL_SSL",
             "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
             "sasl_plain_password": "alice-512", "ssl_context": context}
    certified = {"bootstrap_servers": secured.at(secured.ssl), "security_protocol": "SSL",
                 "ssl_context": mtls}

    async def aio_send(conf: dict[str, Any], value: bytes) -> None:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()

    asyncio.run(aio_send(scram, b"aio-scram-512"))
    asyncio.run(aio_send(certified, b"aio-mtls"))
    reader = KafkaConsumer(consumer_timeout_ms=10000, **certified)
    try:
        tp = KTopicPartition(topic, 0)
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        values = [r.value for r in reader]
    finally:
        reader.close()
    assert {b"aio-scram-512", b"aio-mtls"} <= set(values), values


JAAS = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
        "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


@pytest.mark.parametrize(("client", "protocol", "mechanism"), [
    ("4.3", "SASL_SSL", "SCRAM-SHA-512"),
    ("3.9", "SASL_SSL", "SCRAM-SHA-512"),
    ("3.9", "SASL_PLAINTEXT", "PLAIN"),
    ("4.3", "SSL", None),
])
def test_java_transaction_over_sasl_and_mtls(
    secured: Secured, tmp_path: Path, client: str, protocol: str, mechanism: str | None
) -> None:
    """A transaction of the Java client (3.9: transaction version 1; 4.3: version 2) as alice,
    committed and read back read_committed, over SCRAM with TLS, PLAIN without, or mTLS (a PEM
    keystore: alice's key and certificate in one file)."""
    require_java(client)
    props = tmp_path / "client.properties"
    text = (f"security.protocol={protocol}\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={secured.pki.ca}\n")
    if mechanism is None:
        keystore = tmp_path / "alice.pem"
        keystore.write_text(secured.pki.client_key.read_text() + secured.pki.client_cert.read_text())
        text += f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n"
    else:
        password = "alice-secret"
        if mechanism != "PLAIN":
            password = "alice-java"
            add_scram_user(secured, "alice", password, ScramMechanism.SCRAM_SHA_512)
        text += (f"sasl.mechanism={mechanism}\n"
                 f'sasl.jaas.config={JAAS[mechanism]} required username="alice" password="{password}";\n')
    props.write_text(text)
    port = {"SASL_SSL": secured.sasl_ssl, "SASL_PLAINTEXT": secured.sasl_plain, "SSL": secured.ssl}[protocol]
    topic = new_topic(secured, f"alice-java{client.replace('.', '')}")
    done = run_java("SecureTxn.java", secured.at(port), str(props), topic, "20", client=client)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert prefixed_json(done.stdout) == [{"read": 20}]


def test_mtls_principal_comes_from_the_certificate(secured: Secured) -> None:
    """Under mTLS the client certificate's DN, mapped by ssl.principal.mapping.rules
    (CN=alice -> alice), is the principal."""
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(secured.pki.ca),
            "ssl.certificate.location": str(secured.pki.client_cert),
            "ssl.key.location": str(secured.pki.client_key)}
    topic = new_topic(secured, "alice-mtls")
    assert len(round_trip(secured.at(secured.ssl), topic, conf)) == 5
    other = new_topic(secured, "bob-mtls")
    producer = Producer({"bootstrap.servers": secured.at(secured.ssl), "message.timeout.ms": 10000, **conf})
    reports: list[Any] = []
    producer.produce(other, b"x", on_delivery=lambda err, _m: reports.append(err))
    producer.flush(20)
    assert reports[0] is not None and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run kcat (Debian's, librdkafka's CLI); a missing one fails the test, never skips it."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("no `kcat` on PATH: `make test` installs Debian's kcat (scripts/chaos-deps.sh)")
    return subprocess.run([path, *args], input=stdin, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT", "SSL"])
def test_kcat_produces_and_consumes(secured: Secured, protocol: str) -> None:
    """kcat with librdkafka's -X properties: SCRAM-SHA-512 over SASL_SSL, PLAIN over
    SASL_PLAINTEXT, and a client certificate over SSL (mTLS); alice's records written and
    read back on her own topic. Debian's kcat carries librdkafka 2.0.2, whose SCRAM client-final
    repeats its own nonce in front (taken, as Kafka takes it)."""
    options = {"security.protocol": protocol.lower()}
    if protocol == "SASL_SSL":
        add_scram_user(secured, "alice", "alice-kcat", ScramMechanism.SCRAM_SHA_512)
        options |= {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": "alice-kcat"}
    elif protocol == "SASL_PLAINTEXT":
        options |= {"sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    else:
        options |= {"ssl.certificate.location": str(secured.pki.client_cert),
                    "ssl.key.location": str(secured.pki.client_key)}
    if protocol != "SASL_PLAINTEXT":
        options["ssl.ca.location"] = str(secured.pki.ca)
    port = {"SASL_SSL": secured.sasl_ssl, "SASL_PLAINTEXT": secured.sasl_plain, "SSL": secured.ssl}[protocol]
    common = ["-b", secured.at(port), "-t", new_topic(secured, f"alice-kcat-{protocol.lower()}"), "-p", "0",
              *(x for key, value in options.items() for x in ("-X", f"{key}={value}"))]
    records = [f"k{i}:v{i}" for i in range(5)]
    produced = kcat(*common, "-P", "-K:", stdin="".join(f"{r}\n" for r in records))
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(*common, "-C", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == records, consumed.stdout + consumed.stderr


def refused(bootstrap: str, conf: dict[str, Any]) -> list[KafkaError]:
    """The errors librdkafka reports to the application when it cannot authenticate."""
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **conf})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)
    return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


def test_bad_credentials_are_refused_and_the_broker_keeps_serving(secured: Secured) -> None:
    before = failures(secured)
    wrong = refused(secured.at(secured.sasl_plain), sasl("PLAIN", "alice", "nope", "SASL_PLAINTEXT", secured))
    unknown = refused(secured.at(secured.sasl_ssl), sasl("SCRAM-SHA-512", "nobody", "x", "SASL_SSL", secured))
    assert wrong and "Invalid username or password" in wrong[0].str(), wrong
    assert unknown and "invalid credentials with SASL mechanism SCRAM-SHA-512" in unknown[0].str(), unknown
    assert failures(secured) >= before + 2
    with WireClient(secured.sasl_plain) as c:  # SaslAuthenticate answers the reason itself
        handshake = c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert handshake.error_code == 0
        body = REQUESTS[36](auth_bytes=b"\0alice\0wrong").encode(version=1)
        sent = time.monotonic()
        answer = c.raw_call(36, 1, body)
        # connection.failed.authentication.delay.ms, less a few ms: uvloop's timers count whole
        # milliseconds of a coarse clock read when its loop last woke (one CI run saw 199.75 ms)
        assert time.monotonic() - sent >= (FAILURE_DELAY_MS - 5) / 1000
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert c.closed_by_peer()
    conf = sasl("PLAIN", "alice", "alice-secret", "SASL_PLAINTEXT", secured)
    assert round_trip(secured.at(secured.sasl_plain), new_topic(secured, "alice-after"), conf, n=1)
    assert "Traceback" not in secured.broker.log_path.read_text()


def test_unknown_mechanism_gets_the_enabled_list(secured: Secured) -> None:
    with WireClient(secured.sasl_plain) as c:
        answer = c.call(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.closed_by_peer()


def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    with WireClient(secured.sasl_plain) as c:
        assert c.api_versions().error_code == 0  # allowed before authentication
        c.send_request(3, 1, REQUESTS[3](topics=None).encode(version=1))
        assert c.closed_by_peer()
    with WireClient(secured.sasl_plain) as c:  # a frame over sasl.server.max.receive.size
        c.send_raw(struct.pack(">i", 600_000) + b"\0" * 64)
        assert c.closed_by_peer()


def test_tls_refuses_plaintext_and_certificates_of_another_ca(secured: Secured) -> None:
    with WireClient(secured.ssl) as c:  # plaintext Kafka to the TLS port
        c.send_raw(b"\0\0\0\x10" + b"\0" * 16)
        assert c.closed_by_peer()
    context = ssl.create_default_context(cafile=str(secured.pki.ca))
    context.load_cert_chain(str(secured.pki.stranger_cert), str(secured.pki.stranger_key))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", secured.ssl), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\0\0\0\x10" + b"\0" * 16)
                if not tls.recv(4):
                    raise ConnectionError("closed")
    with WireClient(secured.broker.port) as c:  # still serving
        assert c.api_versions().error_code == 0
    assert "Traceback" not in secured.broker.log_path.read_text()


def bare_exchange(c: WireClient, mechanism: str, user: str, password: str) -> None:
    """A SASL exchange after SaslHandshake v0: the tokens as bare size-prefixed frames, answered
    so (PLAIN by an empty frame; SCRAM's server-final is checked against the password)."""
    if mechanism == "PLAIN":
        c.send_frame(f"\0{user}\0{password}".encode())
        assert c.recv_frame() == b""
        return
    scram = ScramClient([mechanism], user, password)
    c.send_frame(scram.get_client_first().encode())
    scram.set_server_first(c.recv_frame().decode())
    c.send_frame(scram.get_client_final().encode())
    scram.set_server_final(c.recv_frame().decode())


def closed_unanswered(c: WireClient) -> bool:
    """The broker closes the connection without sending a byte."""
    c.sock.settimeout(5)
    try:
        return c.sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_handshake_v0_takes_bare_tokens(secured: Secured, mechanism: str) -> None:
    """SaslHandshake v0 (older clients): the SASL tokens follow as bare frames without a request
    header, answered as bare frames; then requests are served as the principal. A refused bare
    token closes the connection unanswered (v0 has no error answer) and counts as a failed
    authentication, as Kafka's SaslServerAuthenticator does."""
    password = "alice-secret"
    if mechanism != "PLAIN":
        password = "alice-v0"
        add_scram_user(secured, "alice", password, ScramMechanism.SCRAM_SHA_256)
    with WireClient(secured.sasl_plain) as c:
        assert c.api_versions().error_code == 0
        answer = c.call(SaslHandshakeRequest(mechanism=mechanism), 0)
        assert answer.error_code == 0
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        bare_exchange(c, mechanism, "alice", password)
        assert c.metadata(None).brokers
        assert c.metadata(None).brokers  # requests again, not tokens
    before = failures(secured)
    with WireClient(secured.sasl_plain) as c:
        assert c.call(SaslHandshakeRequest(mechanism=mechanism), 0).error_code == 0
        if mechanism == "PLAIN":
            c.send_frame(b"\0alice\0wrong")
        else:
            scram = ScramClient([mechanism], "alice", "wrong")
            c.send_frame(scram.get_client_first().encode())
            scram.set_server_first(c.recv_frame().decode())
            c.send_frame(scram.get_client_final().encode())
        assert closed_unanswered(c)
    assert failures(secured) == before + 1
    with WireClient(secured.sasl_plain) as c:  # a Kafka request where a token belongs is a token
        assert c.call(SaslHandshakeRequest(mechanism=mechanism), 0).error_code == 0
        c.send_request(3, 1, REQUESTS[3](topics=None).encode(version=1))
        assert closed_unanswered(c)
    log = secured.broker.log_path.read_text()
    assert "SASL authentication on SASL_PLAINTEXT failed" in log and "Traceback" not in log


def failures(s: Secured) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gregor_authentication_failures_total{"))


def by_listener(s: Secured, name: str) -> dict[tuple[str, str], float]:
    """A metric's samples by (listener, security_protocol)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(kv.split("=", 1) for kv in line[len(name) + 1:line.index("}")].split(","))
            key = (labels["listener"].strip('"'), labels["security_protocol"].strip('"'))
            found[key] = float(line.rsplit(" ", 1)[1])
    return found


def test_connections_are_counted_by_listener_and_security_protocol(secured: Secured) -> None:
    before = by_listener(secured, "gregor_connections_created_total")
    with WireClient(secured.sasl_plain) as c, WireClient(secured.sasl_plain):
        assert c.api_versions().error_code == 0
        open_now = by_listener(secured, "gregor_connections")
        assert open_now.get(("SASL_PLAINTEXT", "SASL_PLAINTEXT"), 0) >= 2, open_now
    created = by_listener(secured, "gregor_connections_created_total")
    key = ("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    assert created[key] >= before.get(key, 0) + 2, created
    conf = sasl("SCRAM-SHA-512", "admin", "admin-secret", "SASL_SSL", secured)
    add_scram_user(secured, "admin", "admin-secret", ScramMechanism.SCRAM_SHA_512)
    assert round_trip(secured.at(secured.sasl_ssl), new_topic(secured, "alice-count"), conf, n=1)
    assert by_listener(secured, "gregor_connections_created_total")[("SASL_SSL", "SASL_SSL")] >= 1
    assert ("PLAINTEXT", "PLAINTEXT") in created  # the tests' admin connections


def test_tools_take_kafkas_command_config(secured: Secured, tmp_path: Path) -> None:
    """`gregor topics --command-config` with Kafka's client properties: SCRAM over TLS as alice,
    who sees her topics and not the others (Metadata hides what she may not Describe)."""
    add_scram_user(secured, "alice", "alice-tools", ScramMechanism.SCRAM_SHA_256)
    mine, other = new_topic(secured, "alice-tools"), new_topic(secured, "bob-tools")
    props = tmp_path / "alice.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="alice-tools";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secured.pki.ca}\n"
    )
    command = [*gregor_command(), "topics", "--bootstrap-server", secured.at(secured.sasl_ssl),
               "--command-config", str(props), "--list"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert mine in done.stdout.split() and other not in done.stdout.split()
    props.write_text(props.read_text().replace("alice-tools", "wrong"))
    done = subprocess.run([*command, "--timeout-ms", "5000"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr


def _console_topics(console: ConsoleProcess, wanted: str) -> set[str]:
    """The topics the console's partitions page lists once `wanted` is among them."""
    answer = console.get("/api/partitions?per_page=1000")
    found = {p["topic"] for p in answer.json()["partitions"]} if answer.status == 200 else set()
    return found if wanted in found else set()


def test_console_takes_kafkas_command_config(secured: Secured, tmp_path: Path) -> None:
    """`gregor console --command-config`: SCRAM over TLS as alice, whose console reads only
    what she may (her topics, not bob's) and names on its pages what she may not (the
    brokers' configs, DescribeConfigs on the cluster)."""
    add_scram_user(secured, "alice", "alice-console", ScramMechanism.SCRAM_SHA_512)
    mine, other = new_topic(secured, "alice-console"), new_topic(secured, "bob-console")
    props = tmp_path / "alice.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-console";\n'
        f"ssl.truststore.location={secured.pki.ca}\n"
    )
    bootstrap = secured.at(secured.sasl_ssl)
    with console_running(tmp_path / "console", bootstrap, "--command-config", str(props)) as console:
        topics = shown(console, partial(_console_topics, console, mine), f"{mine} on the console")
        assert other not in topics
        page = console.get("/partitions").body
        assert "could not read DescribeConfigs: no transaction.max.timeout.ms" in page, page


def test_storage_format_bootstraps_scram_users_before_the_first_start(tmp_path: Path) -> None:
    """`gregor storage format --add-scram` (Kafka's kafka-storage format) stores the first SCRAM
    user, salted, so that a broker whose only client listener is SASL can be administered."""
    factory = BrokerFactory(tmp_path)
    plain, sasl_port = free_port(), free_port()
    broker = factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }, start=False, port=plain)
    broker.config_path.write_text(yaml.safe_dump(broker.config))  # start() writes the same
    done = subprocess.run([*gregor_command(), "storage", "format", "--config", str(broker.config_path),
                           "--add-scram", "SCRAM-SHA-512=[name=admin,password=\"adm1n\",iterations=8192]"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Stored SCRAM-SHA-512 credential for admin" in done.stdout
    bad = subprocess.run([*gregor_command(), "storage", "format", "--config", str(broker.config_path),
                          "--add-scram", "SCRAM-SHA-512=[name=x,password=y,iterations=10]"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "Too few iterations" in bad.stderr and "Traceback" not in bad.stderr
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_port}",
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "admin", "sasl.password": "adm1n"})
        assert admin.list_topics(timeout=20).brokers
        assert "adm1n" not in (broker.data_dir / STORE_FILE).read_text()
    finally:
        factory.close()


def test_configs_manages_scram_users_as_kafka_configs(secured: Secured, tmp_path: Path) -> None:
    """`gregor configs --entity-type users` (kafka-configs.sh) as admin over SASL_SSL: the
    credential it adds authenticates a client, --describe lists it, --delete-config removes it."""
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secured.pki.ca}\n"
    )
    base = [*gregor_command(), "configs", "--bootstrap-server", secured.at(secured.sasl_ssl),
            "--command-config", str(props), "--entity-type", "users"]

    def configs(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *options], capture_output=True, text=True, timeout=60)

    added = configs("--entity-name", "alice", "--alter", "--add-config",
                    "SCRAM-SHA-512=[iterations=8192,password=alice-configs],SCRAM-SHA-256=[password=x256]")
    assert added.returncode == 0 and added.stdout == "Completed updating config for user alice.\n", added
    described = configs("--entity-name", "alice", "--describe")
    assert described.stdout == ("SCRAM credential configs for user-principal 'alice' are "
                                "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"), described
    conf = sasl("SCRAM-SHA-512", "alice", "alice-configs", "SASL_SSL", secured)
    assert round_trip(secured.at(secured.sasl_ssl), new_topic(secured, "alice-configs"), conf, n=2)
    deleted = configs("--entity-name", "alice", "--alter", "--delete-config", "SCRAM-SHA-256")
    assert deleted.returncode == 0, deleted
    assert configs("--entity-name", "alice", "--describe").stdout.endswith(
        "are SCRAM-SHA-512=iterations=8192\n")
    low = configs("--entity-name", "alice", "--alter", "--add-config",
                  "SCRAM-SHA-256=[iterations=100,password=p]")
    assert low.returncode == 1 and "Traceback" not in low.stderr
    assert "gregor configs: Error while executing config command for user alice:" in low.stderr, low.stderr
    assert "iterations" in low.stderr.lower(), low.stderr
