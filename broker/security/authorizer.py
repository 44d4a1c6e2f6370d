"""Who may do what to which resource: the one place handlers ask (KIP-430 authorized operations).

Without `authorizer.class.name` Gregor behaves as Kafka without an authorizer: every operation
is allowed, and a request that asks for its authorized operations gets every operation the
resource type supports (Kafka's AclEntry.supportedOperations: topic 0xDF8, group 0xD48, cluster
0x1FA0). With Kafka's StandardAuthorizer named, `AclAuthorizer` decides by the ACLs in the
metadata store (broker/security/rules.py). Handlers ask through `broker/api/authorize.py`
(`authorize`, `authorize_any`, `authorized_operations`, `cluster_operations`), which puts a
request's caller to the authorizer its services hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from broker.security.acl import AclBinding, AclOperation, ResourceType
from broker.security.rules import AclIndex, Policy, decide, decide_any

if TYPE_CHECKING:
    from broker.base.caller import Caller


class Authorizer(Protocol):
    """Whether `caller` may perform `operation` on the named resource (Kafka's Authorizer)."""

    def authorize(
        self, caller: Caller, operation: AclOperation, resource: ResourceType, name: str
    ) -> bool: ...

    def authorize_any(self, caller: Caller, operation: AclOperation, resource: ResourceType) -> bool: ...


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
