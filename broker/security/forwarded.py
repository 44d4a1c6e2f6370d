"""Who a forwarded request is from (what Kafka's Envelope carries).

A broker that forwards an admin request to the controller names the original caller in the
request's client id: `gregor-forward-<node> for <host> <principal>`. The controller believes
it only from a connection allowed ClusterAction on the cluster (as Kafka authorizes the
envelope); anyone else's claim is ignored and the request is theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.base.caller import Caller
from broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from broker.security.authorizer import Authorizer

_MARK = " for "


def forwarding_client_id(client_id: str, original: Caller) -> str:
    return f"{client_id}{_MARK}{original.host} {original.principal}"


def original_caller(authorizer: Authorizer, connection: Caller, client_id: str | None) -> Caller:
    """The caller a request is authorized as: the forwarded one when a broker forwarded it."""
    if not client_id or not client_id.startswith("gregor-forward-") or _MARK not in client_id:
        return connection
    host, _, principal = client_id.partition(_MARK)[2].partition(" ")
    if not principal or ":" not in principal:
        return connection
    if not authorizer.authorize(connection, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return connection
    return Caller(host, connection.listener, principal)
