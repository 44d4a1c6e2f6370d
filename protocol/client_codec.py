"""The client side of the wire (sans-I/O): request headers out, responses in.

The broker speaks it to other brokers (replica fetchers, the marker channel,
requests forwarded to the controller) with the same kafka-python schema codecs
it serves with.
"""

from __future__ import annotations

import struct

from protocol.headers import API_VERSIONS_KEY
from protocol.messages import REQUESTS, RESPONSES, Request, Response, whole

_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")


class ResponseDecodeError(ValueError):
    """A response frame that does not parse as the request's response schema."""


def encode_request(message: Request, version: int, correlation_id: int, client_id: str) -> bytes:
    """Header v1 (v2 when the request is flexible) and body: a frame's payload."""
    api_key = message.API_KEY
    raw_id = client_id.encode()
    head = _FIXED.pack(api_key, version, correlation_id, len(raw_id)) + raw_id
    if REQUESTS[api_key].flexible_version_q(version):
        head += b"\x00"
    return head + bytes(message.encode(version=version))


def peek_correlation_id(payload: bytes | memoryview) -> int:
    if len(payload) < _CORRELATION.size:
        raise ResponseDecodeError(f"response of {len(payload)} bytes has no correlation id")
    return int(_CORRELATION.unpack_from(payload, 0)[0])


def decode_response(api_key: int, version: int, payload: bytes | memoryview) -> Response:
    """The response body after its header (v1 for flexible responses, except ApiVersions)."""
    pos = _CORRELATION.size
    if api_key != API_VERSIONS_KEY and RESPONSES[api_key].flexible_version_q(version):
        if len(payload) <= pos or payload[pos] != 0:
            raise ResponseDecodeError("response header carries unexpected tagged fields")
        pos += 1
    try:
        return whole(RESPONSES[api_key].decode(bytes(payload[pos:]), version=version))
    except Exception as exc:  # the codec raises assorted errors on malformed input
        raise ResponseDecodeError(f"{type(exc).__name__}: {exc}") from None
