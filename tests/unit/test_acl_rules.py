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
from broker.security.acl_hosts import host_applies, host_problem
from broker.security.rules import AclIndex, Policy, decide, decide_any

Op, R, P = AclOperation, ResourceType, Permission
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
    acls = [acl("orders", Op.READ)]
    assert may(acls, Op.READ)
    assert not may(acls, Op.WRITE)
    assert not may(acls, Op.READ, name="orders2")
    assert not may(acls, Op.READ, principal=BOB)


def test_no_acl_on_resource_follows_allow_everyone() -> None:
    assert not may([], Op.READ)
    assert may([], Op.READ, policy=Policy(allow_if_no_acl=True))
    # an ACL on the resource for someone else denies even with allow.everyone.if.no.acl.found
    assert not may([acl("orders", Op.READ, principal=BOB)], Op.READ, policy=Policy(allow_if_no_acl=True))
    # an ACL on another resource does not count
    assert may([acl("other", Op.READ, principal=BOB)], Op.READ, policy=Policy(allow_if_no_acl=True))


def test_super_users_are_allowed_despite_deny() -> None:
    acls = [acl("orders", Op.ALL, P.DENY)]
    assert may(acls, Op.WRITE, policy=Policy(super_users=frozenset({ALICE})))
    assert not may(acls, Op.WRITE)


def test_deny_beats_allow() -> None:
    acls = [acl("orders", Op.READ), acl("orders", Op.READ, P.DENY, principal="User:*")]
    assert not may(acls, Op.READ)
    acls = [acl("*", Op.ALL), acl("ord", Op.WRITE, P.DENY, pattern=PatternType.PREFIXED)]
    assert may(acls, Op.READ)
    assert not may(acls, Op.WRITE)


def test_wildcard_principal_and_host() -> None:
    assert may([acl("orders", Op.READ, principal="User:*")], Op.READ, principal=BOB)
    assert may([acl("orders", Op.READ, host=HOST)], Op.READ)
    assert not may([acl("orders", Op.READ, host="10.0.0.2")], Op.READ)
    assert may([acl("orders", Op.READ, P.DENY, host="10.0.0.2"), acl("orders", Op.READ)], Op.READ)


def test_cidr_hosts_kafka_4_4() -> None:
    assert may([acl("orders", Op.READ, host="10.0.0.0/8")], Op.READ)
    assert may([acl("orders", Op.READ, host="10.0.0.3/30")], Op.READ)  # host bits set, as SubnetUtils
    assert not may([acl("orders", Op.READ, host="10.0.1.0/24")], Op.READ)
    assert may([acl("orders", Op.READ, P.DENY, host="10.0.1.0/24"), acl("orders", Op.READ)], Op.READ)
    assert not may([acl("orders", Op.READ, P.DENY, host="0.0.0.0/0"), acl("orders", Op.READ)], Op.READ)
    assert may([acl("orders", Op.READ, host="10.0.0.1/32")], Op.READ)
    assert may([acl("orders", Op.READ, host="10.0.0.0/31")], Op.READ, host="10.0.0.0")  # network address
    assert not host_applies("::/0", HOST)  # an IPv6 range holds no IPv4 address
    assert host_applies("fd00::/8", "fd00::1")
    assert not host_applies("10.0.0.0/8", "somehost")


def test_host_patterns_kafka_refuses() -> None:
    for good in ("*", "10.0.0.1", "somehost", "10.0.0.0/8", "fd00::/8", "10.0.0.0/0"):
        assert host_problem(good) is None, good
    for bad in ("", "10.0.0.0/33", "localhost/8", "10.0.0.0/", "/8", "10.0.0.256/8", "10.0.0.0/255.0.0.0"):
        assert host_problem(bad) is not None, bad


def test_wildcard_literal_name_and_prefixed() -> None:
    assert may([acl("*", Op.READ)], Op.READ, name="anything")
    prefixed = [acl("ord", Op.READ, pattern=PatternType.PREFIXED)]
    assert may(prefixed, Op.READ, name="orders")
    assert may(prefixed, Op.READ, name="ord")
    assert not may(prefixed, Op.READ, name="or")
    assert not may(prefixed, Op.READ, name="payments")
    # a LITERAL that only starts the name does not apply
    assert not may([acl("ord", Op.READ)], Op.READ, name="orders")


def test_allow_implies_describe_and_describe_configs() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert may([acl("orders", op)], Op.DESCRIBE), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS):
        assert not may([acl("orders", op)], Op.DESCRIBE), op
    assert may([acl("orders", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not may([acl("orders", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    assert not may([acl("orders", Op.READ)], Op.WRITE)


def test_deny_does_not_imply() -> None:
    acls = [acl("orders", Op.READ, P.DENY), acl("orders", Op.DESCRIBE)]
    assert may(acls, Op.DESCRIBE)
    assert not may(acls, Op.READ)
    assert not may([acl("orders", Op.ALL, P.DENY), acl("orders", Op.DESCRIBE)], Op.DESCRIBE)


def test_all_operation() -> None:
    acls = [acl("orders", Op.ALL)]
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS):
        assert may(acls, op)


def test_resource_types_are_separate() -> None:
    acls = [acl("orders", Op.READ, rtype=R.GROUP)]
    assert may(acls, Op.READ, rtype=R.GROUP)
    assert not may(acls, Op.READ)


def test_by_resource_type_kip_679() -> None:
    def any_write(acls: list[AclBinding], policy: Policy = STRICT) -> bool:
        return decide_any(AclIndex(acls), policy, ALICE, HOST, Op.WRITE, R.TOPIC)

    assert not any_write([])
    assert any_write([], Policy(allow_if_no_acl=True))
    assert any_write([acl("orders", Op.WRITE)])
    assert any_write([acl("*", Op.ALL)])
    assert not any_write([acl("orders", Op.READ)])
    assert not any_write([acl("orders", Op.WRITE), acl("*", Op.WRITE, P.DENY)])
    assert not any_write([acl("orders", Op.WRITE), acl("orders", Op.WRITE, P.DENY)])
    assert not any_write([acl("orders", Op.WRITE), acl("or", Op.WRITE, P.DENY, pattern=PatternType.PREFIXED)])
    assert any_write([acl("orders", Op.WRITE), acl("x", Op.WRITE, P.DENY, pattern=PatternType.PREFIXED)])
    assert not any_write([acl("orders", Op.WRITE, principal=BOB)])


def test_filters_match_as_kafka() -> None:
    lit = acl("orders", Op.READ)
    pre = acl("ord", Op.WRITE, pattern=PatternType.PREFIXED)
    star = acl("*", Op.READ)
    every = [lit, pre, star]

    def found(f: AclFilter) -> list[AclBinding]:
        return [a for a in every if f.matches(a)]

    assert found(AclFilter()) == every
    assert found(AclFilter(R.TOPIC, "orders")) == [lit]
    assert found(AclFilter(R.TOPIC, "orders", PatternType.MATCH)) == every
    assert found(AclFilter(R.TOPIC, "ord", PatternType.PREFIXED)) == [pre]
    assert found(AclFilter(R.TOPIC, "ord", PatternType.LITERAL)) == []
    assert found(AclFilter(operation=Op.WRITE)) == [pre]
    assert found(AclFilter(R.GROUP)) == []
    assert found(AclFilter(principal=BOB)) == []
    assert AclFilter(ResourceType.UNKNOWN).problem() is not None


def test_binding_round_trips() -> None:
    a = acl("ord", Op.WRITE, P.DENY, pattern=PatternType.PREFIXED, host="1.2.3.4")
    assert AclBinding.from_json(a.to_json()) == a
