"""Who sent a request."""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as the authorizer sees it (Kafka's AuthorizableRequestContext):
    the client's address, the listener it came in on, and its principal."""

    host: str
    listener: str = "PLAINTEXT"
    principal: str = ANONYMOUS
