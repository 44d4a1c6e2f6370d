"""Who may do what to which resource: the one place handlers ask (KIP-430 authorized operations).

Gregor has no ACLs yet, so it behaves as Kafka without `authorizer.class.name`: every operation
is allowed, and a request that asks for its authorized operations gets every operation the
resource type supports (Kafka's AclEntry.supportedOperations: topic 0xDF8, group 0xD48, cluster
0x1FA0). An ACL authorizer plugs in by implementing `Authorizer.authorize`; handlers only call
`authorized_operations` and `authorize`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from broker.api.caller import Caller
    from broker.api.context import RequestContext


class AllowAllAuthorizer:
    """No authorizer configured: everything is allowed."""

    def authorize(
        self, caller: Caller, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool:
        return True


def authorize(ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str) -> bool:
    return ctx.services.authorizer.authorize(ctx.caller, operation, resource, name)


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

