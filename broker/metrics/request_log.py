"""DEBUG lines for connections and requests: one when a connection opens or closes, one
per request (client id, API, version, latency, error codes).

The produce and fetch paths must not pay for this when DEBUG is off: a Connection asks
`enabled()` once when it is created and calls the functions below only if it was.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from kafka.protocol.data_container import DataContainer

from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.messages import Request, Response

log = logging.getLogger("broker.requests")


def enabled() -> bool:
    return log.isEnabledFor(logging.DEBUG)


def opened(peer: str) -> None:
    log.debug("connection from %s opened", peer)


def closed(peer: str, requests: int) -> None:
    log.debug("connection from %s closed after %d requests", peer, requests)


def answered(peer: str, header: RequestHeader, api: str, started: float, response: Response) -> None:
    """One line for a request; `started` is its time.monotonic() at dispatch, `response`
    None when none is sent (acks=0 produce)."""
    errors = "no response" if response is None else error_summary(response)
    log.debug(
        "request from %s client %r: %s v%d correlation %d, %.2f ms, %s",
        peer, header.client_id, api, header.api_version, header.correlation_id,
        (time.monotonic() - started) * 1000, errors,
    )


def api_name(request_class: type[Request]) -> str:
    return request_class.__name__.removesuffix("Request")


def error_summary(response: Response) -> str:
    """The error codes anywhere in a response: `NONE`, or e.g. `UNKNOWN_TOPIC_OR_PARTITION x2`."""
    counts = error_codes(response)
    del counts[0]
    if not counts:
        return "NONE"
    return ", ".join(f"{_code_name(code)} x{n}" if n > 1 else _code_name(code) for code, n in counts.items())


def error_codes(response: Response) -> Counter[int]:
    """How often each error code (NONE too) appears in a response, at any depth: every field
    named `error_code` or `*_error_code` (`partition_error_code`, `topic_config_error_code`)."""
    counts: Counter[int] = Counter()
    if isinstance(response, DataContainer):
        _collect(response, counts)
    return counts


def _collect(message: DataContainer, counts: Counter[int]) -> None:
    for name in message.fields:
        value = getattr(message, name, None)
        if name.endswith("error_code") and isinstance(value, int):
            counts[value] += 1
        elif isinstance(value, list):
            if value and isinstance(value[0], DataContainer) and not _holds_errors(type(value[0])):
                continue  # e.g. ListTransactions' 100,000 ids: nothing to count in any of them
            for item in value:
                if isinstance(item, DataContainer):
                    _collect(item, counts)
        elif isinstance(value, DataContainer):
            _collect(value, counts)


_HOLDS_ERRORS: dict[type[DataContainer], bool] = {}


def _holds_errors(struct: type[DataContainer]) -> bool:
    """Whether the schema of `struct` has an error code field at any depth (asked once a class)."""
    found = _HOLDS_ERRORS.get(struct)
    if found is None:
        found = _HOLDS_ERRORS[struct] = any(
            name.endswith("error_code")
            or ((field.is_struct() or field.is_struct_array()) and field.has_data_class()
                and _holds_errors(field.data_class))
            for name, field in struct.fields.items())
    return found


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
