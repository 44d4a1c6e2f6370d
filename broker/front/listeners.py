"""The sockets the broker listens on, bound at start-up before any log recovery."""

from __future__ import annotations

import socket

from broker.config import parse_http_listener


class ListenerError(Exception):
    """The listener's address cannot be bound (in use, not local, unresolvable)."""


def bind_listener(name: str, host: str, port: int, key: str = "listeners") -> socket.socket:
    """Bind and listen now (connections wait in the backlog until serving starts), so
    that a busy port stops start-up before any log recovery."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).split(" (while attempting")[0].lower()
        raise ListenerError(f"cannot listen on {name} ({key}): {reason}") from None


def bind_metrics(text: str) -> socket.socket | None:
    """`metrics.listener`, bound before log recovery like `listeners`; None when unset."""
    at = parse_http_listener(text)
    return bind_listener(text, at.host, at.port, "metrics.listener") if at is not None else None
