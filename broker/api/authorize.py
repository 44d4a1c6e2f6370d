"""What handlers ask the authorizer: a request's caller put to the authorizer its services
hold (KIP-430's authorized operations among them)."""

from __future__ import annotations

from broker.api.context import RequestContext
from broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType


def authorize(ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str) -> bool:
    return ctx.services.authorizer.authorize(ctx.caller, operation, resource, name)


def authorize_any(ctx: RequestContext, operation: AclOperation, resource: ResourceType) -> bool:
    return ctx.services.authorizer.authorize_any(ctx.caller, operation, resource)


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_operations(ctx: RequestContext, resource: ResourceType, name: str) -> set[int]:
    """The operations on `name` the caller may perform, as the codec's bit-set of operation codes
    (what Kafka's AuthHelper.authorizedOperations packs into the 32-bit field)."""
    return {int(op) for op in SUPPORTED_OPERATIONS[resource] if authorize(ctx, op, resource, name)}


def cluster_operations(ctx: RequestContext) -> set[int]:
    """Kafka's cluster answer: nothing (0) without DESCRIBE on the cluster, else the allowed set."""
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return set()
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)

