"""Kafka's StandardAuthorizer decision rules (broker/security/rules.py) and AclBindingFilter."""

from __future__ import annotations

from broker.security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.rules import AclIndex, Policy, decide, decide_any

O, R, P = AclOperation, ResourceType, Permission
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
STRICT = Policy()


def acl(
    name: str, op: AclOperation, permission: Permission = P.ALLOW, principal: str = ALICE,
    host: str = "*", rtype: ResourceType = R.TOPIC, pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def may(acls: list[AclBinding], op: AclOperation, name: str = "orders", principal: str = ALICE,
        host: str = HOST, rtype: ResourceType = R.TOPIC, policy: Policy = STRICT) -> bool:
    return decide(AclIndex(acls), policy, principal, host, op, rtype, name)


def test_literal_allow_is_exact() -> None:
    acls = [acl("orders", O.READ)]
    assert may(acls, O.READ)
    assert not may(acls, O.WRITE)
    assert not may(acls, O.READ, name="orders2")
    assert not may(acls, O.READ, principal=BOB)


def test_no_acl_on_resource_follows_allow_everyone() -> None:
    assert not may([], O.READ)
    assert may([], O.READ, policy=Policy(allow_if_no_acl=True))
    # an ACL on the resource for someone else denies even with allow.everyone.if.no.acl.found
    assert not may([acl("orders", O.READ, principal=BOB)], O.READ, policy=Policy(allow_if_no_acl=True))
    # an ACL on another resource does not count
    assert may([acl("other", O.READ, principal=BOB)], O.READ, policy=Policy(allow_if_no_acl=True))


def test_super_users_are_allowed_despite_deny() -> None:
    acls = [acl("orders", O.ALL, P.DENY)]
    assert may(acls, O.WRITE, policy=Policy(super_users=frozenset({ALICE})))
    assert not may(acls, O.WRITE)


def test_deny_beats_allow() -> None:
    acls = [acl("orders", O.READ), acl("orders", O.READ, P.DENY, principal="User:*")]
    assert not may(acls, O.READ)
    acls = [acl("*", O.ALL), acl("ord", O.WRITE, P.DENY, pattern=PatternType.PREFIXED)]
    assert may(acls, O.READ)
    assert not may(acls, O.WRITE)


def test_wildcard_principal_and_host() -> None:
    assert may([acl("orders", O.READ, principal="User:*")], O.READ, principal=BOB)
    assert may([acl("orders", O.READ, host=HOST)], O.READ)
    assert not may([acl("orders", O.READ, host="10.0.0.2")], O.READ)
    assert may([acl("orders", O.READ, P.DENY, host="10.0.0.2"), acl("orders", O.READ)], O.READ)


def test_wildcard_literal_name_and_prefixed() -> None:
    assert may([acl("*", O.READ)], O.READ, name="anything")
    prefixed = [acl("ord", O.READ, pattern=PatternType.PREFIXED)]
    assert may(prefixed, O.READ, name="orders")
    assert may(prefixed, O.READ, name="ord")
    assert not may(prefixed, O.READ, name="or")
    assert not may(prefixed, O.READ, name="payments")
    # a LITERAL that only starts the name does not apply
    assert not may([acl("ord", O.READ)], O.READ, name="orders")


def test_allow_implies_describe_and_describe_configs() -> None:
    for op in (O.READ, O.WRITE, O.DELETE, O.ALTER, O.DESCRIBE):
        assert may([acl("orders", op)], O.DESCRIBE), op
    for op in (O.CREATE, O.ALTER_CONFIGS, O.DESCRIBE_CONFIGS):
        assert not may([acl("orders", op)], O.DESCRIBE), op
    assert may([acl("orders", O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS)
    assert not may([acl("orders", O.DESCRIBE_CONFIGS)], O.ALTER_CONFIGS)
    assert not may([acl("orders", O.READ)], O.WRITE)


def test_deny_does_not_imply() -> None:
    acls = [acl("orders", O.READ, P.DENY), acl("orders", O.DESCRIBE)]
    assert may(acls, O.DESCRIBE)
    assert not may(acls, O.READ)
    assert not may([acl("orders", O.ALL, P.DENY), acl("orders", O.DESCRIBE)], O.DESCRIBE)


def test_all_operation() -> None:
    acls = [acl("orders", O.ALL)]
    for op in (O.READ, O.WRITE, O.CREATE, O.DELETE, O.ALTER, O.DESCRIBE, O.ALTER_CONFIGS):
        assert may(acls, op)


def test_resource_types_are_separate() -> None:
    acls = [acl("orders", O.READ, rtype=R.GROUP)]
    assert may(acls, O.READ, rtype=R.GROUP)
    assert not may(acls, O.READ)


def test_by_resource_type_kip_679() -> None:
    def any_write(acls: list[AclBinding], policy: Policy = STRICT) -> bool:
        return decide_any(AclIndex(acls), policy, ALICE, HOST, O.WRITE, R.TOPIC)

    assert not any_write([])
    assert any_write([], Policy(allow_if_no_acl=True))
    assert any_write([acl("orders", O.WRITE)])
    assert any_write([acl("*", O.ALL)])
    assert not any_write([acl("orders", O.READ)])
    assert not any_write([acl("orders", O.WRITE), acl("*", O.WRITE, P.DENY)])
    assert not any_write([acl("orders", O.WRITE), acl("orders", O.WRITE, P.DENY)])
    assert not any_write([acl("orders", O.WRITE), acl("or", O.WRITE, P.DENY, pattern=PatternType.PREFIXED)])
    assert any_write([acl("orders", O.WRITE), acl("x", O.WRITE, P.DENY, pattern=PatternType.PREFIXED)])
    assert not any_write([acl("orders", O.WRITE, principal=BOB)])


def test_filters_match_as_kafka() -> None:
    lit = acl("orders", O.READ)
    pre = acl("ord", O.WRITE, pattern=PatternType.PREFIXED)
    star = acl("*", O.READ)
    every = [lit, pre, star]

    def found(f: AclFilter) -> list[AclBinding]:
        return [a for a in every if f.matches(a)]

    assert found(AclFilter()) == every
    assert found(AclFilter(R.TOPIC, "orders")) == [lit]
    assert found(AclFilter(R.TOPIC, "orders", PatternType.MATCH)) == every
    assert found(AclFilter(R.TOPIC, "ord", PatternType.PREFIXED)) == [pre]
    assert found(AclFilter(R.TOPIC, "ord", PatternType.LITERAL)) == []
    assert found(AclFilter(operation=O.WRITE)) == [pre]
    assert found(AclFilter(R.GROUP)) == []
    assert found(AclFilter(principal=BOB)) == []
    assert AclFilter(ResourceType.UNKNOWN).problem() is not None


def test_binding_round_trips() -> None:
    a = acl("ord", O.WRITE, P.DENY, pattern=PatternType.PREFIXED, host="1.2.3.4")
    assert AclBinding.from_json(a.to_json()) == a
