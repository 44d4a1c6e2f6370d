"""Who may do what to which resource: the one place handlers ask (KIP-430 authorized operations).

Gregor has no ACLs yet, so it behaves as Kafka without `authorizer.class.name`: every operation
is allowed, and a request that asks for its authorized operations gets every operation the
resource type supports (Kafka's AclEntry.supportedOperations: topic 0xDF8, group 0xD48, cluster
0x1FA0). An ACL authorizer plugs in by implementing `Authorizer.authorize`; handlers only call
`authorized_operations` and `authorize`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.api.context import RequestContext

CLUSTER_NAME = "kafka-cluster"
NOT_PROVIDED = None  # the codec writes INT32_MIN, Kafka's "authorized operations not requested"


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


class Authorizer(Protocol):
    def authorize(
        self, ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool: ...


class AllowAllAuthorizer:
    """No authorizer configured: everything is allowed."""

    def authorize(
        self, ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool:
        return True


def authorize(ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str) -> bool:
    return ctx.broker.security.authorizer.authorize(ctx, operation, resource, name)


def authorized_operations(ctx: RequestContext, resource: ResourceType, name: str) -> frozenset[int]:
    """The operations on `name` the caller may perform, as the codec's bit-set of operation codes
    (what Kafka's AuthHelper.authorizedOperations packs into the 32-bit field)."""
    return frozenset(
        int(op) for op in SUPPORTED_OPERATIONS[resource] if authorize(ctx, op, resource, name)
    )


def cluster_operations(ctx: RequestContext) -> frozenset[int]:
    """Kafka's cluster answer: nothing (0) without DESCRIBE on the cluster, else the allowed set."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return frozenset()
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)

