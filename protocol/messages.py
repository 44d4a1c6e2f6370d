"""The request/response message classes, keyed by API key.

The classes are kafka-python's schema-driven codecs (one class per API, every
version described by the JSON schema). This module only indexes them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import kafka.protocol as _kp
from kafka.protocol.api_message import ApiMessage

_SKIP = {"kafka.protocol.old", "kafka.protocol.generate_stubs"}


def _all_message_classes() -> list[Any]:
    found: list[Any] = []
    for info in pkgutil.walk_packages(_kp.__path__, "kafka.protocol."):
        if any(info.name.startswith(skip) for skip in _SKIP):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, ApiMessage) and value is not ApiMessage:
                if getattr(value, "_json", None) is not None and vars(value).get("_class_version") is None:
                    found.append(value)
    return found


def _index() -> tuple[dict[int, Any], dict[int, Any]]:
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    for cls in _all_message_classes():
        table = requests if cls.is_request() else responses
        table[cls.API_KEY] = cls
    return requests, responses


REQUESTS, RESPONSES = _index()


def schema_versions(api_key: int) -> tuple[int, int]:
    """The (min, max) versions the request schema declares as valid."""
    low, high = REQUESTS[api_key].valid_versions
    return int(low), int(high)


def request_is_flexible(api_key: int, version: int) -> bool:
    return bool(REQUESTS[api_key].flexible_version_q(version))


def response_is_flexible(api_key: int, version: int) -> bool:
    return bool(RESPONSES[api_key].flexible_version_q(version))


class RequestDecodeError(ValueError):
    """The request body does not parse as its schema says, or leaves bytes over."""


def decode_request(api_key: int, version: int, body: memoryview) -> Any:
    """Decode a request body; a field that runs past the end is an error.

    kafka-python's codec raises assorted exceptions on malformed input and
    quietly cuts short a bytes field whose length points past the end of the
    body; both become RequestDecodeError here. Trailing bytes after the last
    field are ignored, as Kafka does (librdkafka sends some with Metadata v13).
    """
    cls = REQUESTS[api_key]
    flexible = bool(cls.flexible_version_q(version))
    decode = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls
    )
    try:
        message, end = decode(body, 0)
    except Exception as exc:  # struct.error, IndexError, ValueError, OverflowError, ...
        raise RequestDecodeError(f"{type(exc).__name__}: {exc}") from None
    if end > len(body):
        raise RequestDecodeError(f"body has {len(body)} bytes but its fields need {end}")
    return message
