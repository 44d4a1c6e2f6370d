"""`gregor acls`: what the options of kafka-acls.sh turn into (resources and entries)."""

from __future__ import annotations

import argparse

import pytest

from broker.security.acl import AclOperation, Permission, ResourceType
from broker.tools import acls
from broker.tools.common import ToolError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    acls.add_parser(parser.add_subparsers())
    return parser.parse_args(["acls", "--bootstrap-server", "b:9092", *argv])


def ops(args: argparse.Namespace, kind: ResourceType) -> set[AclOperation]:
    resource = next(r for r in acls.resources(args) if r.kind == kind)
    return {e.operation for e in acls.entries(args, resource)}


def test_producer_and_consumer_shortcuts_grant_what_kafka_acls_grants() -> None:
    producer = parse("--add", "--allow-principal", "User:a", "--producer", "--topic", "t",
                     "--transactional-id", "x", "--idempotent")
    topic_ops = {AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE}
    assert ops(producer, ResourceType.TOPIC) == topic_ops
    assert ops(producer, ResourceType.TRANSACTIONAL_ID) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    assert ops(producer, ResourceType.CLUSTER) == {AclOperation.IDEMPOTENT_WRITE}
    consumer = parse("--add", "--allow-principal", "User:a", "--consumer", "--topic", "t", "--group", "g")
    assert ops(consumer, ResourceType.TOPIC) == {AclOperation.READ, AclOperation.DESCRIBE}
    assert ops(consumer, ResourceType.GROUP) == {AclOperation.READ}


def test_principals_hosts_and_operations_multiply() -> None:
    args = parse("--add", "--allow-principal", "User:a", "--allow-principal", "User:b", "--allow-host", "h1",
                 "--deny-principal", "User:*", "--operation", "Read", "--operation", "describe-configs",
                 "--cluster")
    [cluster] = acls.resources(args)
    found = {(e.principal, e.host, e.operation, e.permission) for e in acls.entries(args, cluster)}
    assert len(found) == 6
    assert ("User:*", "*", AclOperation.DESCRIBE_CONFIGS, Permission.DENY) in found
    assert ("User:b", "h1", AclOperation.READ, Permission.ALLOW) in found
    assert {e.operation for e in acls.entries(parse("--add", "--allow-principal", "User:a", "--topic", "t"),
                                              acls.resources(parse("--topic", "t"))[0])} == {AclOperation.ALL}


@pytest.mark.parametrize("argv", [
    ("--add", "--list", "--topic", "t"),
    ("--add", "--topic", "t"),
    ("--add", "--allow-principal", "User:a"),
    ("--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"),
    ("--list", "--producer", "--topic", "t"),
])
def test_bad_option_sets_are_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(ToolError):
        acls._check(parse(*argv))


def test_bad_principal_and_operation_are_refused() -> None:
    with pytest.raises(ToolError, match="Type:name"):
        args = parse("--add", "--allow-principal", "alice", "--topic", "t")
        acls.entries(args, acls.resources(args)[0])
    with pytest.raises(ToolError, match="invalid operation"):
        args = parse("--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t")
        acls.entries(args, acls.resources(args)[0])
