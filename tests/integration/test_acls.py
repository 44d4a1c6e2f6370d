"""ACLs with Kafka's StandardAuthorizer (issue 21, authorization), driven by real clients.

Until SASL lands every connection is `User:ANONYMOUS`, so the broker here starts with
ANONYMOUS as its only super user, grants ANONYMOUS only what manages the cluster (Alter,
Describe, Create and IdempotentWrite on the cluster: it may manage ACLs and create topics),
and restarts with `super.users: User:admin`: from then on every data request of ANONYMOUS is
decided by the ACLs the tests add. A test that needs a second principal names it in an ACL
(`User:bob`); with SASL it can also connect as one.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import TopicAuthorizationFailedError
from prometheus_client.parser import text_string_to_metric_families

from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerProcess,
    free_port,
    gregor_command,
    prefixed_json,
    require_java,
    run_java,
    started_broker,
    unique_topic,
)
from tests.integration.wire import WireClient, build_batch, produce_request

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
CLUSTER_OPS = (AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CREATE, AclOperation.IDEMPOTENT_WRITE)
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def binding(rtype: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = LITERAL,
            principal: str = ANON, permission: AclPermissionType = AclPermissionType.ALLOW,
            host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def create_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


def allow(admin: AdminClient, rtype: ResourceType, name: str, *ops: AclOperation,
          pattern: ResourcePatternType = LITERAL) -> None:
    create_acls(admin, [binding(rtype, name, op, pattern) for op in ops])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "authorizer.class.name": STANDARD, "super.users": ANON,
        "metrics.listener": f"http://127.0.0.1:{free_port()}", "auto.create.topics.enable": False,
        "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1,
    }
    with started_broker(tmp_path_factory.mktemp("acls"), overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        allow(admin, ResourceType.BROKER, "kafka-cluster", *CLUSTER_OPS)
        broker.config["super.users"] = "User:admin"
        broker.restart()
        yield broker


@pytest.fixture
def admin(secured: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": secured.bootstrap})


def new_topic(admin: AdminClient, prefix: str) -> str:
    topic = unique_topic(prefix)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    return topic


def produce_error(bootstrap: str, topic: str, **extra: Any) -> KafkaError | None:
    """The delivery report's error of one record (None: delivered)."""
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **extra})
    producer.produce(topic, b"value", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(20)
    assert len(reports) == 1
    return reports[0]


def test_acls_survive_a_restart_and_super_users_are_read(secured: BrokerProcess, admin: AdminClient) -> None:
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )).result(timeout=30)
    cluster = {(a.restype, a.name, a.principal, a.operation) for a in found}
    assert cluster >= {(ResourceType.BROKER, "kafka-cluster", ANON, op) for op in CLUSTER_OPS}


def test_topic_write_and_read_need_their_acls(secured: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(admin, "acl-topic")
    error = produce_error(secured.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    allow(admin, ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce_error(secured.bootstrap, topic) is None
    # kafka-python: Write implies Describe (it finds the partition), but reading needs Read
    consumer = KafkaConsumer(bootstrap_servers=secured.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
        allow(admin, ResourceType.TOPIC, topic, AclOperation.READ)
        got = next(iter(consumer))
        assert got.value == b"value"
    finally:
        consumer.close()


def test_metadata_hides_topics_the_caller_may_not_describe(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    hidden, shown = new_topic(admin, "acl-hidden"), new_topic(admin, "acl-shown")
    allow(admin, ResourceType.TOPIC, shown, AclOperation.READ)
    with WireClient(secured.port) as c:
        everything = {t.name: t.error_code for t in c.metadata(None, version=9).topics}
        named = {t.name: t.error_code for t in c.metadata([hidden, shown], version=9).topics}
    assert shown in everything and hidden not in everything
    assert named == {hidden: TOPIC_AUTHORIZATION_FAILED, shown: 0}


def test_consumer_group_needs_read_on_the_group(secured: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(admin, "acl-group")
    allow(admin, ResourceType.TOPIC, topic, AclOperation.READ, AclOperation.WRITE)
    assert produce_error(secured.bootstrap, topic) is None
    group = unique_topic("acl-g")
    errors: list[KafkaError] = []
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "error_cb": errors.append})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                errors.append(msg.error())
        assert any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors), errors
    finally:
        consumer.close()
    allow(admin, ResourceType.GROUP, group, AclOperation.READ)
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        msg = poll_one(consumer)
        assert msg.value() == b"value"
        consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()


def poll_one(consumer: Consumer, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError("no record")


def txn_producer(bootstrap: str, tid: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "message.timeout.ms": 20000})


def test_transactional_id_without_write_is_fatal_and_writes_nothing(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    topic = new_topic(admin, "acl-txn-denied")
    allow(admin, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    # No ACL on the id at all: FindCoordinator already fails; Describe only: InitProducerId does.
    cases = ((unique_topic("tid-none"), ()), (unique_topic("tid-describe"), (AclOperation.DESCRIBE,)))
    for tid, ops in cases:
        if ops:
            allow(admin, ResourceType.TRANSACTIONAL_ID, tid, *ops)
        producer = txn_producer(secured.bootstrap, tid)
        with pytest.raises(KafkaException) as raised:
            producer.init_transactions(20)
        error = raised.value.args[0]
        assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
        assert error.fatal()
    # A transactional batch from a producer without Write on its id is refused, nothing appended.
    with WireClient(secured.port) as c:
        batch = build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        for tid in ("tid-none", None):  # Kafka: no transactional id is no Write on it
            answer = c.call(produce_request(topic, [(0, batch)], transactional_id=tid), 7)
            error = answer.responses[0].partition_responses[0].error_code
            assert error == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, tid
        assert c.log_end_offset(topic) == 0


@pytest.mark.parametrize("client", ["3.9", "4.3"])
def test_transactional_id_without_write_is_fatal_in_the_java_client(
    secured: BrokerProcess, admin: AdminClient, client: str
) -> None:
    require_java(client)
    topic = new_topic(admin, "acl-java-txn")
    allow(admin, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    nothing, describe, granted = (unique_topic(p) for p in ("java-nothing", "java-describe", "java-granted"))
    allow(admin, ResourceType.TRANSACTIONAL_ID, describe, AclOperation.DESCRIBE)
    allow(admin, ResourceType.TRANSACTIONAL_ID, granted, AclOperation.WRITE)
    # No ACL on the id: FindCoordinator fails and the producer is in its fatal error state.
    run = run_java("AclClient.java", "txn", secured.bootstrap, topic, nothing, client=client, timeout=120)
    fatal = {"init": "TransactionalIdAuthorizationException", "after": "KafkaException"}
    assert prefixed_json(run.stdout) == [fatal], run.stderr[-3000:]
    assert "Cannot execute transactional method because we are in an error state" in run.stderr
    # Describe but no Write: InitProducerId fails; the client takes it as an error it keeps
    # (KafkaException "in an error state"; IllegalStateException while the coordinator was
    # still being created), either way the producer cannot go on.
    run = run_java("AclClient.java", "txn", secured.bootstrap, topic, describe, client=client, timeout=120)
    [result] = prefixed_json(run.stdout)
    assert result["init"] == "TransactionalIdAuthorizationException", run.stderr[-3000:]
    assert result["after"] in ("KafkaException", "IllegalStateException"), run.stderr[-3000:]
    with WireClient(secured.port) as c:
        assert c.log_end_offset(topic) == 0  # nothing of either was written
    run = run_java("AclClient.java", "txn", secured.bootstrap, topic, granted, client=client, timeout=120)
    assert prefixed_json(run.stdout) == [{"init": "ok", "after": "ok"}], run.stderr[-3000:]
    with WireClient(secured.port) as c:
        assert c.log_end_offset(topic) == 2  # the granted producer's record and its COMMIT marker


def test_consume_transform_produce_commits_with_the_right_acls(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    source, sink = new_topic(admin, "acl-ctp-in"), new_topic(admin, "acl-ctp-out")
    group, tid = unique_topic("acl-ctp-g"), unique_topic("acl-ctp-tid")
    allow(admin, ResourceType.TOPIC, source, AclOperation.WRITE, AclOperation.READ)
    allow(admin, ResourceType.TOPIC, sink, AclOperation.WRITE, AclOperation.READ)
    allow(admin, ResourceType.GROUP, group, AclOperation.READ)
    allow(admin, ResourceType.TRANSACTIONAL_ID, tid, AclOperation.WRITE)
    for i in range(3):
        assert produce_error(secured.bootstrap, source) is None, i
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    producer = txn_producer(secured.bootstrap, tid)
    try:
        producer.init_transactions(30)
        consumer.subscribe([source])
        records = [poll_one(consumer) for _ in range(3)]
        producer.begin_transaction()
        for r in records:
            producer.produce(sink, r.value().upper())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert committed[0].offset == 3
    finally:
        consumer.close()
    reader = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group + "-reader",
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    allow(admin, ResourceType.GROUP, group + "-reader", AclOperation.READ)
    try:
        reader.subscribe([sink])
        assert [poll_one(reader).value() for _ in range(3)] == [b"VALUE"] * 3
    finally:
        reader.close()


def test_java_admin_creates_describes_and_deletes_acls(secured: BrokerProcess) -> None:
    require_java("4.3")
    topic = unique_topic("javaacl")
    run = run_java("AclClient.java", "admin", secured.bootstrap, topic, client="4.3", timeout=120)
    steps = {r["step"]: r.get("acls", r.get("error")) for r in prefixed_json(run.stdout)}
    read = f"TOPIC {topic} LITERAL User:java * READ ALLOW"
    deny = f"TOPIC {topic[:5]} PREFIXED User:java 10.0.0.1 WRITE DENY"
    assert steps == {
        "all": sorted([read, deny]), "match": sorted([read, deny]), "literal": [read],
        "bad cluster": "InvalidRequestException", "deleted": sorted([read, deny]), "after": [],
    }, run.stderr[-3000:]


def test_gregor_acls_tool_adds_lists_and_removes(secured: BrokerProcess, admin: AdminClient) -> None:
    topic, group = new_topic(admin, "acl-tool"), unique_topic("acl-tool-g")

    def gregor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*gregor_command(), "acls", "--bootstrap-server", secured.bootstrap, *args],
                              capture_output=True, text=True, timeout=60)

    added = gregor("--add", "--allow-principal", ANON, "--consumer", "--topic", topic, "--group", group)
    assert added.returncode == 0, added.stderr
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Current ACLs for resource `{pattern}`: " in added.stdout
    assert f" \t(principal={ANON}, host=*, operation=READ, permissionType=ALLOW) " in added.stdout
    listed = gregor("--list", "--group", group)
    assert listed.stdout.splitlines()[:2] == [
        f"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={group}, "
        "patternType=LITERAL)`: ",
        f" \t(principal={ANON}, host=*, operation=READ, permissionType=ALLOW) ",
    ]
    denied = gregor("--add", "--deny-principal", "User:*", "--operation", "Write", "--topic", topic[:6],
                    "--resource-pattern-type", "PREFIXED")
    assert denied.returncode == 0, denied.stderr
    error = produce_error(secured.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    removed = gregor("--remove", "--topic", topic[:6], "--resource-pattern-type", "PREFIXED", "--force")
    assert removed.returncode == 0 and "Current ACLs" not in removed.stdout, removed
    gone = gregor("--remove", "--topic", topic, "--group", group, "--force")
    assert gone.returncode == 0, gone.stderr
    assert gregor("--list", "--topic", topic).stdout == ""
    bad = gregor("--add", "--allow-principal", "bob", "--topic", topic)
    assert bad.returncode == 1 and "Type:name" in bad.stderr and "Traceback" not in bad.stderr


def test_authorization_denials_are_counted_by_resource_type(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    def denials() -> dict[str, float]:
        with urllib.request.urlopen(str(secured.config["metrics.listener"]) + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return {
            s.labels["resource_type"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "gregor_authorization_denials_total"
        }

    before = denials()
    topic = new_topic(admin, "acl-metric")
    with WireClient(secured.port) as c:
        assert c.metadata([topic], version=9).topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
    after = denials()
    assert after.get("TOPIC", 0) > before.get("TOPIC", 0)


def test_super_users_pass_whatever_the_acls(broker_factory: Any) -> None:
    broker = broker_factory({"authorizer.class.name": STANDARD, "super.users": f"User:admin;{ANON}"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = new_topic(admin, "acl-super")
    create_acls(admin, [binding(ResourceType.TOPIC, topic, AclOperation.ALL,
                                permission=AclPermissionType.DENY, principal="User:*")])
    assert produce_error(broker.bootstrap, topic) is None


def test_authorized_operations_come_from_the_acls(secured: BrokerProcess, admin: AdminClient) -> None:
    """KIP-430: Read allows Read and (implied) Describe, nothing else; the cluster's are the
    ANONYMOUS grants of the fixture."""
    topic = new_topic(admin, "acl-ops")
    allow(admin, ResourceType.TOPIC, topic, AclOperation.READ)
    with WireClient(secured.port) as c:
        req = REQUESTS[3](version=10, topics=[REQUESTS[3].MetadataRequestTopic(name=topic)],
                          allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                          include_topic_authorized_operations=True)
        answer = c.call(req, 10)
    assert set(answer.topics[0].authorized_operations) == {3, 8}  # READ, DESCRIBE
    assert set(answer.authorized_operations) == {5, 7, 8, 12}  # CREATE, ALTER, DESCRIBE, IDEMPOTENT_WRITE
