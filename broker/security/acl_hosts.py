"""An ACL's host pattern (Kafka 4.4's AclControlManager.validateHostPattern and
StandardAuthorizerData's host check): `*` is every host, a pattern with a `/` a CIDR range of
addresses (network and broadcast addresses included), anything else one address, compared as
text with the caller's.

Kafka 4.4 refuses an empty host (4.3 stored it, and it matched no caller) and a `/` pattern that
is no CIDR range; any other text is stored as it came.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from broker.security.acl import WILDCARD

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def host_problem(host: str) -> str | None:
    """Why Kafka refuses this host pattern in CreateAcls (INVALID_REQUEST), or None."""
    if not host:
        return "Host pattern cannot be null or empty"
    if host == WILDCARD or "/" not in host or _network(host) is not None:
        return None
    return f"Invalid CIDR notation '{host}'"


def host_applies(pattern: str, host: str) -> bool:
    """Whether an ACL with this host pattern applies to a caller from `host` (its address)."""
    if pattern in (host, WILDCARD):
        return True
    if "/" not in pattern or (network := _network(pattern)) is None:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.version == network.version and address in network


@lru_cache(maxsize=1024)  # the authorizer asks for the same few patterns on every request
def _network(pattern: str) -> Network | None:
    """The range `address/prefix` names (host bits may be set, as Kafka's SubnetUtils allows),
    or None when it names none (a netmask instead of a prefix length is none for Kafka)."""
    if not pattern.rpartition("/")[2].isdigit():
        return None
    try:
        return ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return None
