"""Kafka's ACL vocabulary: operations, resource types, and which operations each resource
type supports (Kafka's AclEntry.supportedOperations)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

CLUSTER_NAME = "kafka-cluster"
# Authorized operations not requested: kafka-python writes None as INT32_MIN, Kafka's value for
# it; its stubs type the field set[int], so the sentinel is typed as one.
NOT_PROVIDED = cast("set[int]", None)


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


_O = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        _O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
        _O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a LITERAL resource name matching every name; a host matching every host
WILDCARD_PRINCIPAL = "User:*"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    def to_json(self) -> list[Any]:
        return [
            self.resource_type.name, self.name, self.pattern_type.name, self.principal, self.host,
            self.operation.name, self.permission.name,
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> AclBinding:
        rtype, name, pattern, principal, host, operation, permission = data
        return cls(
            ResourceType[rtype], str(name), PatternType[pattern], str(principal), str(host),
            AclOperation[operation], Permission[permission],
        )

    @property
    def key(self) -> str:
        """A stable text identity (the etcd key's last part)."""
        return "|".join(self.to_json())


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None fields match anything; ANY enums match anything;
    pattern type MATCH matches the LITERAL and PREFIXED patterns that would apply to `name`."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        return self._resource_matches(acl) and self._entry_matches(acl)

    def _resource_matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type != PatternType.MATCH:
            return self.name == acl.name
        if acl.pattern_type == PatternType.LITERAL:
            return acl.name in (self.name, WILDCARD)
        return self.name.startswith(acl.name)

    def _entry_matches(self, acl: AclBinding) -> bool:
        return (
            self.principal in (None, acl.principal) and self.host in (None, acl.host)
            and self.operation in (AclOperation.ANY, acl.operation)
            and self.permission in (Permission.ANY, acl.permission)
        )

    def problem(self) -> str | None:
        """Why a filter matches nothing Kafka would accept (UNKNOWN values), or None."""
        unknown = [
            label for label, value in (
                ("resource type", self.resource_type), ("pattern type", self.pattern_type),
                ("operation", self.operation), ("permission type", self.permission),
            ) if value == 0
        ]
        return f"unknown {', '.join(unknown)}" if unknown else None
