"""The local ACL store (the metadata file, the authorizer's index kept equal to it), the
authorizer's denial count, and whom a forwarded request is authorized as."""

from __future__ import annotations

from pathlib import Path

from broker.base.caller import ANONYMOUS, Caller
from broker.security.acl import AclBinding, AclFilter, AclOperation, PatternType, Permission, ResourceType
from broker.security.acl_store import LocalAcls
from broker.security.authorizer import AclAuthorizer, super_users
from broker.security.forwarded import forwarding_client_id, original_caller
from broker.security.rules import Policy
from broker.store.local_store import LocalMetadataStore

R, Op = ResourceType, AclOperation
ALICE = Caller("10.0.0.1", principal="User:alice")


def acl(name: str, op: AclOperation, principal: str = "User:alice", rtype: ResourceType = R.TOPIC,
        permission: Permission = Permission.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, permission)


async def test_acls_are_stored_loaded_and_enforced(tmp_path: Path) -> None:
    authorizer = AclAuthorizer(Policy())
    acls = LocalAcls(LocalMetadataStore(tmp_path), authorizer)
    await acls.create([acl("orders", Op.READ), acl("orders", Op.READ), acl("pay", Op.WRITE)])
    assert acls.describe(AclFilter()) == [acl("orders", Op.READ), acl("pay", Op.WRITE)]
    assert authorizer.authorize(ALICE, Op.READ, R.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Op.WRITE, R.TOPIC, "orders")
    # a new broker process on the same data dir loads them
    reloaded = AclAuthorizer(Policy())
    again = LocalAcls(LocalMetadataStore(tmp_path), reloaded)
    assert len(again.describe(AclFilter())) == 2 and reloaded.authorize(ALICE, Op.WRITE, R.TOPIC, "pay")
    found = await again.delete([AclFilter(R.TOPIC, "orders"), AclFilter(R.GROUP)])
    assert found == [[acl("orders", Op.READ)], []]
    assert not reloaded.authorize(ALICE, Op.READ, R.TOPIC, "orders")
    assert LocalAcls(LocalMetadataStore(tmp_path), AclAuthorizer(Policy())).describe(AclFilter()) == [
        acl("pay", Op.WRITE)
    ]


def test_denials_are_reported_by_resource_type() -> None:
    denied: list[ResourceType] = []
    authorizer = AclAuthorizer(Policy(super_users("User:admin; User:root")), denied.append)
    assert authorizer.authorize(Caller("h", principal="User:root"), Op.DELETE, R.TOPIC, "x")
    assert not authorizer.authorize(ALICE, Op.READ, R.GROUP, "g")
    assert not authorizer.authorize(ALICE, Op.WRITE, R.TRANSACTIONAL_ID, "t")
    assert denied == [R.GROUP, R.TRANSACTIONAL_ID]


def test_a_forwarded_request_is_the_original_callers_only_from_a_cluster_action_connection() -> None:
    authorizer = AclAuthorizer(Policy())
    authorizer.load([acl("kafka-cluster", Op.CLUSTER_ACTION, principal="User:broker", rtype=R.CLUSTER)])
    broker = Caller("10.0.0.2", principal="User:broker")
    client_id = forwarding_client_id("gregor-forward-2", ALICE)
    assert client_id == "gregor-forward-2 for 10.0.0.1 User:alice"
    assert original_caller(authorizer, broker, client_id) == Caller("10.0.0.1", "PLAINTEXT", "User:alice")
    # anyone else claiming to forward stays who it is
    stranger = Caller("10.0.0.3", principal=ANONYMOUS)
    assert original_caller(authorizer, stranger, client_id) == stranger
    assert original_caller(authorizer, broker, "gregor-forward-2") == broker
    assert original_caller(authorizer, broker, "my-app for 1.2.3.4 User:admin") == broker
    assert original_caller(authorizer, broker, None) == broker
