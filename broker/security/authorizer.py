"""Who may do what to which resource: the one place handlers ask (KIP-430 authorized operations).

Without `authorizer.class.name` Gregor behaves as Kafka without an authorizer: every operation
is allowed, and a request that asks for its authorized operations gets every operation the
resource type supports (Kafka's AclEntry.supportedOperations: topic 0xDF8, group 0xD48, cluster
0x1FA0). With Kafka's StandardAuthorizer named, `AclAuthorizer` decides by the ACLs in the
metadata store (broker/security/rules.py). Handlers only call `authorize`, `authorize_any`,
`authorized_operations` and `cluster_operations`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclBinding, AclOperation, ResourceType
from broker.security.rules import AclIndex, Policy, decide, decide_any

if TYPE_CHECKING:
    from broker.api.caller import Caller
    from broker.api.context import RequestContext


class AllowAllAuthorizer:
    """No authorizer configured: everything is allowed."""

    def authorize(
        self, caller: Caller, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool:
        return True

    def authorize_any(self, caller: Caller, operation: AclOperation, resource: ResourceType) -> bool:
        return True


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

Denied = Callable[[ResourceType], None]


class AclAuthorizer:
    """Kafka's StandardAuthorizer: decides by the current ACL index, which the ACL store
    replaces whenever the ACLs change (`load`). `on_denied` counts each denial."""

    def __init__(self, policy: Policy, on_denied: Denied | None = None) -> None:
        self.policy = policy
        self.index = AclIndex()
        self._on_denied = on_denied

    def load(self, acls: Iterable[AclBinding]) -> None:
        self.index = AclIndex(acls)

    def authorize(
        self, caller: Caller, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool:
        allowed = decide(self.index, self.policy, caller.principal, caller.host, operation, resource, name)
        if not allowed and self._on_denied is not None:
            self._on_denied(resource)
        return allowed

    def authorize_any(self, caller: Caller, operation: AclOperation, resource: ResourceType) -> bool:
        return decide_any(self.index, self.policy, caller.principal, caller.host, operation, resource)


def super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def authorize(ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str) -> bool:
    return ctx.services.authorizer.authorize(ctx.caller, operation, resource, name)


def authorize_any(ctx: RequestContext, operation: AclOperation, resource: ResourceType) -> bool:
    return ctx.services.authorizer.authorize_any(ctx.caller, operation, resource)


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


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

