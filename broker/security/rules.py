"""Kafka's ACL decision rules (StandardAuthorizerData), pure: an index of ACLs and the
question "may this principal, from this host, do this operation on this resource?".

- a super user may do everything;
- the ACLs that apply to a resource are the LITERAL ones on its name, the LITERAL ones on
  `*`, and the PREFIXED ones whose prefix starts its name;
- an ACL applies to a request when its principal is the caller's or `User:*`, its host the
  caller's, `*` or a CIDR range holding the caller's address (Kafka 4.4, acl_hosts), and its
  operation the one asked or ALL; an ALLOW on Read, Write, Delete or Alter also allows
  Describe, an ALLOW on AlterConfigs also DescribeConfigs (never DENY);
- any applying DENY denies, else any applying ALLOW allows;
- with no ACL at all on the resource, `allow.everyone.if.no.acl.found` decides;
  ACLs on the resource that do not apply to the caller deny.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from broker.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.acl_hosts import host_applies

_O = AclOperation
IMPLIES_DESCRIBE = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class Policy:
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False


class AclIndex:
    """The ACLs by resource: LITERAL ones by (type, name), PREFIXED ones by (type, prefix)."""

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefix_lengths: dict[ResourceType, list[int]] = {}  # of the PREFIXED names, per type
        self._all: list[AclBinding] = []
        for acl in acls:
            table = self._literal if acl.pattern_type == PatternType.LITERAL else self._prefixed
            table[(acl.resource_type, acl.name)].append(acl)
            self._all.append(acl)
        for rtype, prefix in self._prefixed:
            self._prefix_lengths.setdefault(rtype, []).append(len(prefix))
        for lengths in self._prefix_lengths.values():
            lengths[:] = sorted(set(lengths))

    def __len__(self) -> int:
        return len(self._all)

    def all(self) -> list[AclBinding]:
        return list(self._all)

    def of_type(self, resource: ResourceType) -> list[AclBinding]:
        return [acl for acl in self._all if acl.resource_type == resource]

    def applying_to(self, resource: ResourceType, name: str) -> Iterator[AclBinding]:
        """Every ACL whose pattern covers the resource named `name`."""
        yield from self._literal.get((resource, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource, WILDCARD), ())
        for end in self._prefix_lengths.get(resource, ()):
            if end > len(name):
                break
            yield from self._prefixed.get((resource, name[:end]), ())


def entry_result(
    acl: AclBinding, principal: str, host: str, operation: AclOperation
) -> Permission | None:
    """What one ACL says about the request, None when it does not apply (findResult)."""
    if acl.principal not in (principal, WILDCARD_PRINCIPAL) or not host_applies(acl.host, host):
        return None
    if acl.operation != _O.ALL and not _operation_applies(acl, operation):
        return None
    return acl.permission


def _operation_applies(acl: AclBinding, operation: AclOperation) -> bool:
    if acl.permission != Permission.ALLOW:
        return acl.operation == operation
    if operation == _O.DESCRIBE:
        return acl.operation in IMPLIES_DESCRIBE
    if operation == _O.DESCRIBE_CONFIGS:
        return acl.operation in IMPLIES_DESCRIBE_CONFIGS
    return acl.operation == operation


def decide(
    index: AclIndex, policy: Policy, principal: str, host: str, operation: AclOperation,
    resource: ResourceType, name: str,
) -> bool:
    if principal in policy.super_users:
        return True
    found = allowed = False
    for acl in index.applying_to(resource, name):
        found = True
        result = entry_result(acl, principal, host, operation)
        if result == Permission.DENY:
            return False
        allowed = allowed or result == Permission.ALLOW
    return allowed or (not found and policy.allow_if_no_acl)


def decide_any(
    index: AclIndex, policy: Policy, principal: str, host: str, operation: AclOperation,
    resource: ResourceType,
) -> bool:
    """Whether some resource of the type may be acted on (Kafka's authorizeByResourceType,
    KIP-679's "Write on any topic"): an applying ALLOW on `*`, or on a name or prefix that
    no applying DENY covers; a DENY on `*` denies outright."""
    if decide(index, policy, principal, host, operation, resource, "hardcode"):
        return True
    deny_literal: set[str] = set()
    deny_prefixed: set[str] = set()
    allows: list[AclBinding] = []
    for acl in index.of_type(resource):
        if acl.principal not in (principal, WILDCARD_PRINCIPAL) or not host_applies(acl.host, host):
            continue
        if acl.operation not in (operation, _O.ALL):
            continue
        if acl.permission == Permission.DENY:
            if acl.pattern_type == PatternType.LITERAL and acl.name == WILDCARD:
                return False
            (deny_literal if acl.pattern_type == PatternType.LITERAL else deny_prefixed).add(acl.name)
        elif acl.permission == Permission.ALLOW:
            allows.append(acl)
    if any(a.pattern_type == PatternType.LITERAL and a.name == WILDCARD for a in allows):
        return True
    return any(_undenied(a, deny_literal, deny_prefixed) for a in allows)


def _undenied(allow: AclBinding, deny_literal: set[str], deny_prefixed: set[str]) -> bool:
    if allow.pattern_type == PatternType.LITERAL and allow.name in deny_literal:
        return False
    return not any(allow.name[:end] in deny_prefixed for end in range(1, len(allow.name) + 1))
