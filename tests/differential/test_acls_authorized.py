"""Kafka's StandardAuthorizer against Gregor's, answer by answer: a Kafka node and a Gregor broker
both with `authorizer.class.name` StandardAuthorizer and `allow.everyone.if.no.acl.found` (so the
nodes' own ANONYMOUS requests keep working while the cluster has no ACL). Every case puts an ACL
for `User:bob` on its resources, which denies this `User:ANONYMOUS` connection, and compares the
errors each API answers; then DescribeAcls with each kind of filter, CreateAcls' validation, and
DeleteAcls."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential.cases import Cases
from tests.differential.conftest import SHARED, _warm_coordinators, _warm_producer_ids
from tests.differential.runner import Action, Side, Step, Tree, run_case
from tests.differential.steps import WAIT_S, batch, init_producer, new_topic, produce, topic
from tests.differential.test_admin import describe_configs, incremental
from tests.differential.test_consumer_groups import describe as consumer_describe
from tests.differential.test_consumer_groups import join as consumer_join
from tests.differential.test_groups import (
    commit,
    delete_groups,
    describe,
    fetch_offsets,
    find_coordinator,
    join,
    offset_delete,
)
from tests.differential.test_records import delete_records, fetch, list_offsets
from tests.differential.test_topics import create_partitions, delete_topics
from tests.differential.test_transactions import (
    add_offsets,
    add_partitions,
    describe_producers,
    describe_txn,
    init_txn,
    list_txns,
    txn_commit_offsets,
)
from tests.integration.harness import started_broker
from tests.integration.kafka import started_kafka
from tests.integration.wire import WireClient

SECURED = {
    **SHARED,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": True,
}
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8
DENY, ALLOW = 2, 3
BOB = "User:bob"


@pytest.fixture(scope="module")
def secured_sides(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[WireClient, WireClient, str, str]]:
    with (
        started_kafka(tmp_path_factory.mktemp("kafka-acl"), SECURED) as kafka,
        started_broker(tmp_path_factory.mktemp("gregor-acl"), SECURED) as gregor,
        WireClient(kafka.port) as k,
        WireClient(gregor.port) as g,
    ):
        for port in (kafka.port, gregor.port):
            _warm_coordinators(port)
            _warm_producer_ids(port)
        yield k, g, kafka.bootstrap, gregor.bootstrap


@pytest.fixture
def sides(secured_sides: tuple[WireClient, WireClient, str, str]) -> tuple[Side, Side]:
    k, g, kb, gb = secured_sides
    t = f"d-{uuid.uuid4().hex[:10]}"
    return Side("kafka", k, kb, vars={"t": t}), Side("gregor", g, gb, vars={"t": t})


def name_of(side: Side, rtype: int, suffix: str) -> str:
    return "kafka-cluster" if rtype == CLUSTER else topic(side, suffix)


def create_acls(
    *acls: tuple[int, str, int, str, int, int], version: int | None = None, host: str = "*"
) -> Step:
    """(resource type, name suffix, pattern, principal, operation, permission) each, all from
    `host`."""
    def request(side: Side) -> dict[str, Any]:
        return {"creations": [{
            "resource_type": rtype, "resource_name": name_of(side, rtype, suffix),
            "resource_pattern_type": pattern, "principal": principal, "host": host, "operation": op,
            "permission_type": permission,
        } for rtype, suffix, pattern, principal, op, permission in acls]}

    return Step(30, request, version=version)


def describe_acls(
    rtype: int = TOPIC, suffix: str | None = "", pattern: int = MATCH, principal: str | None = None,
    version: int | None = None,
) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "resource_type_filter": rtype,
            "resource_name_filter": None if suffix is None else topic(side, suffix),
            "pattern_type_filter": pattern, "principal_filter": principal, "host_filter": None,
            "operation": ANY, "permission_type": ANY,
        }

    return Step(29, request, version=version, select=sorted_resources)


def sorted_resources(side: Side, tree: Tree) -> Tree:
    """Kafka groups DescribeAcls' answer in a hash map: the order of resources is no contract."""
    resources = [{**r, "acls": sorted(r["acls"], key=repr)} for r in tree["resources"]]
    return {**tree, "resources": sorted(resources, key=repr)}


def sorted_matches(side: Side, tree: Tree) -> Tree:
    results = [{**r, "matching_acls": sorted(r["matching_acls"], key=repr)} for r in tree["filter_results"]]
    return {**tree, "filter_results": results}


def delete_acls(suffix: str = "", pattern: int = ANY, version: int | None = None) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {"filters": [{
            "resource_type_filter": ANY, "resource_name_filter": topic(side, suffix),
            "pattern_type_filter": pattern, "principal_filter": None, "host_filter": None, "operation": ANY,
            "permission_type": ANY,
        }]}

    return Step(31, request, version=version, select=sorted_matches)


def acls_in_force(rtype: int, suffix: str, count: int) -> Action:
    """Until the broker's authorizer holds `count` ACLs on the resource (Kafka applies a created
    ACL through its metadata log, a moment after CreateAcls answers)."""
    def action(side: Side) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            resp = describe_acls(rtype, suffix, LITERAL).send(side)
            if sum(len(r.acls) for r in resp.resources) == count:
                return
            assert time.monotonic() < deadline, f"{side.name}: ACLs not in force: {resp}"
            time.sleep(0.05)

    return action


def bob_only(rtype: int, suffix: str = "", op: int = READ) -> list[Any]:
    return [create_acls((rtype, suffix, LITERAL, BOB, op, ALLOW)), acls_in_force(rtype, suffix, 1)]


def metadata(names: list[str] | None = None) -> Step:
    def request(side: Side) -> dict[str, Any]:
        wanted = [topic(side)] if names is None else [topic(side, n) for n in names]
        return {"topics": [{"name": n, "topic_id": None} for n in wanted], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": True}

    return Step(3, request, version=12)


def metadata_all() -> Step:
    """Metadata for every topic: one the caller may not Describe is left out."""
    def ours(side: Side, tree: Tree) -> Tree:
        return {**tree, "topics": [t for t in tree["topics"] if t["name"].startswith(topic(side))]}

    return Step(3, {"topics": None, "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}, version=12, select=ours)


def txn_steps(v: int) -> list[Any]:
    """FindCoordinator, InitProducerId, AddPartitionsToTxn v3, AddOffsetsToTxn, EndTxn and a
    transactional Produce for a transactional id the caller may not Write."""
    def txn(side: Side) -> str:
        return topic(side, "-tx")

    def add_partitions(side: Side) -> dict[str, Any]:
        return {"v3_and_below_transactional_id": txn(side), "v3_and_below_producer_id": 5,
                "v3_and_below_producer_epoch": 0,
                "v3_and_below_topics": [{"name": topic(side), "partitions": [0]}]}

    return [
        Step(10, lambda s: {"key": txn(s), "key_type": 1, "coordinator_keys": [txn(s)]}, version=v),
        Step(22, lambda s: {"transactional_id": txn(s), "transaction_timeout_ms": 60000, "producer_id": -1,
                            "producer_epoch": -1}),
        Step(24, add_partitions, version=3),
        Step(25, lambda s: {"transactional_id": txn(s), "producer_id": 5, "producer_epoch": 0,
                            "group_id": topic(s, "-g")}),
        Step(26, lambda s: {"transactional_id": txn(s), "producer_id": 5, "producer_epoch": 0,
                            "committed": True}, version=4),
        produce_txn(),
    ]


def refused(
    rtype: int, name: str | None, pattern: int, op: int, principal: str = BOB, host: str = "*"
) -> Step:
    """A CreateAcls of one ACL Kafka refuses, with a good one after it (`name` None: the
    case's topic)."""
    def request(side: Side) -> dict[str, Any]:
        acl = {
            "resource_type": rtype, "resource_name": topic(side) if name is None else name,
            "resource_pattern_type": pattern, "principal": principal, "host": host, "operation": op,
            "permission_type": ALLOW,
        }
        good = {**acl, "resource_type": TOPIC, "resource_name": topic(side, "-ok"),
                "resource_pattern_type": LITERAL, "principal": BOB, "operation": READ}
        return {"creations": [acl, good]}

    return Step(30, request)


def produce_txn() -> Step:
    records = batch([b"t"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)

    def request(side: Side) -> dict[str, Any]:
        return {"transactional_id": topic(side, "-tx"), "acks": -1, "timeout_ms": 10000, "topic_data": [{
            "name": topic(side), "topic_id": None, "partition_data": [{"index": 0, "records": records}],
        }]}

    return Step(0, request, version=9)


CASES: Cases = {
    "topic-acl-for-someone-else": [
        *new_topic(),
        *bob_only(TOPIC),
        metadata([""]),
        produce(version=9),
        fetch(12),
        list_offsets(7, [-1]),
        describe_acls(),
        describe_acls(pattern=LITERAL),
        describe_acls(pattern=PREFIXED),
        describe_acls(pattern=ANY, principal=BOB),
        describe_acls(pattern=ANY, principal="User:alice"),
    ],
    "topic-acls-allow-deny-prefixed": [
        *new_topic(),
        create_acls((TOPIC, "", LITERAL, "User:ANONYMOUS", WRITE, ALLOW),
                    (TOPIC, "", PREFIXED, "User:*", READ, DENY)),
        acls_in_force(TOPIC, "", 1),
        metadata([""]),
        produce(version=9),
        fetch(12),
        describe_acls(),
        delete_acls(pattern=MATCH),
        acls_in_force(TOPIC, "", 0),
        describe_acls(),
    ],
    # Kafka 4.4 (AclControlManager.validateHostPattern, StandardAuthorizerData.findResult):
    # a host with a `/` is a CIDR range; this connection comes from 127.0.0.1
    "topic-acls-by-cidr-host": [
        *new_topic(),
        create_acls((TOPIC, "", LITERAL, "User:ANONYMOUS", WRITE, ALLOW), host="127.0.0.0/8"),
        create_acls((TOPIC, "", LITERAL, "User:ANONYMOUS", READ, ALLOW), host="10.1.2.3/8"),
        create_acls((TOPIC, "", LITERAL, "User:ANONYMOUS", DESCRIBE, ALLOW), host="127.0.0.1/32"),
        acls_in_force(TOPIC, "", 3),
        metadata([""]),
        produce(version=9),
        fetch(12),
        describe_acls(),
    ],
    "group-acl-for-someone-else": [
        *new_topic(),
        *bob_only(GROUP, "-g"),
        find_coordinator(4),
        find_coordinator(3),
        join(9),
        commit(9, 1, generation=False),
        fetch_offsets(7),
        fetch_offsets(9),
        describe(5),
        delete_groups(2),
    ],
    "consumer-group-acl-for-someone-else": [
        *new_topic(),
        *bob_only(GROUP, "-cg"),
        consumer_join(1),
        consumer_describe(1),
    ],
    "consumer-group-topic-denied": [
        *new_topic(),
        *bob_only(TOPIC),
        consumer_join(1),
        consumer_describe(1),
    ],
    "transactional-id-acl-for-someone-else": [
        *new_topic(),
        *bob_only(TXN, "-tx", WRITE),
        *txn_steps(4),
        init_producer(None),
    ],
    "topic-denied-to-a-granted-transaction-and-group": [
        *new_topic(),
        *bob_only(TOPIC),
        init_txn(),
        add_partitions(3),
        add_offsets(4),
        txn_commit_offsets(4),
        commit(9, 1, generation=False),
        fetch_offsets(7),
        fetch_offsets(9),
        offset_delete(),
        describe_producers(),
        delete_records(2, 0),
        create_partitions(3, 2),
        describe_configs(4),
        incremental(1, [("retention.ms", 0, "1000")]),
        metadata_all(),
        delete_topics(6, ""),
    ],
    "transactional-id-hidden": [
        *new_topic(),
        init_txn(),
        *bob_only(TXN, "-tx", WRITE),
        describe_txn(),
        list_txns(1),
    ],
    "create-acls-refused": [
        *(refused(rtype, name, pattern, op) for rtype, name, pattern, op in (
            (CLUSTER, "other", LITERAL, READ), (TOPIC, "", LITERAL, READ), (TOPIC, None, MATCH, READ),
            (TOPIC, None, LITERAL, ANY), (TOPIC, None, ANY, READ), (ANY, None, LITERAL, READ),
        )),
        refused(TOPIC, None, LITERAL, READ, principal="bob"),
        refused(TOPIC, None, LITERAL, READ, principal="User:bob", host=""),  # stored by Kafka 4.3
        refused(TOPIC, None, LITERAL, READ, host="10.0.0.0/33"),
        refused(TOPIC, None, LITERAL, READ, host="localhost/8"),
        refused(TOPIC, None, LITERAL, READ, host="10.0.0.0/"),
        refused(TOPIC, None, LITERAL, READ, host="10.0.0.0/255.0.0.0"),  # a prefix length only
        # nothing was created: bob's ACLs on this case's topic, and the cluster's (the fixture's
        # only; a broker-wide listing of bob's would race with Kafka's metadata propagation of
        # other cases' ACLs)
        describe_acls(TOPIC, "", ANY, principal=BOB),
        describe_acls(CLUSTER, None, ANY),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
