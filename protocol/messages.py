"""The request/response message classes, keyed by API key.

The classes are kafka-python's schema-driven codecs (one class per API, every
version described by the JSON schema), and for the APIs kafka-python lacks the same
codecs over our own schemas (``protocol.added_messages``). This module only indexes them.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

import kafka.protocol as _kp
from kafka.protocol.api_message import ApiMessage

from protocol.added_messages import ADDED
from protocol.strict_schema import Checker, SchemaError, check_body, compile_checker, plan_for

_SKIP = {"kafka.protocol.old", "kafka.protocol.generate_stubs"}

# A request, or a response, of whichever API a frame names: each is its API's class (typed by
# kafka-python's stubs where the API is known statically, in a handler say), but a codec or a
# client that serves every API holds any of them. These two are the one place that says so.
Request = Any
Response = Any


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
    for cls in ADDED:  # only where kafka-python has none
        table = requests if cls.is_request() else responses
        table.setdefault(cls.API_KEY, cls)
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


@cache
def _request_checker(api_key: int, version: int) -> Checker:
    cls = REQUESTS[api_key]
    flexible = bool(cls.flexible_version_q(version))
    return compile_checker(plan_for(cls._struct, version, flexible), flexible)


def decode_request(api_key: int, version: int, body: memoryview) -> Request:
    """Decode a request body as strictly as Kafka parses it, or RequestDecodeError.

    The body is first walked by its schema (``protocol.strict_schema``): nulls in
    non-nullable fields, negative lengths other than -1, and lengths or counts
    larger than the bytes left are refused before anything is allocated. Only a
    body that passes is decoded by kafka-python's codec, so a handler never sees
    None where the schema forbids it. Trailing bytes after the last field are
    ignored, as Kafka does (librdkafka sends some with Metadata v13).
    """
    cls = REQUESTS[api_key]
    flexible = bool(cls.flexible_version_q(version))
    try:
        end = check_body(_request_checker(api_key, version), body)
    except SchemaError as exc:
        raise RequestDecodeError(str(exc)) from None
    decode = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls
    )
    try:
        message, decoded_end = decode(body, 0)
    except Exception as exc:  # e.g. UnicodeDecodeError: kafka-python reads strings strictly
        raise RequestDecodeError(f"{type(exc).__name__}: {exc}") from None
    if decoded_end != end:
        raise RequestDecodeError(f"fields end at {decoded_end}, schema walk says {end}")
    return whole(message)


def whole(message: Request | Response) -> Request | Response:
    """A decoded message with the slots kafka-python's decoder leaves unset (it skips
    __init__), so that it can be encoded again: forwarded requests and their answers."""
    message._header = message._min_version = message._max_version = None
    return message
