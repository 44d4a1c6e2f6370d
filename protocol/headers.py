"""Request and response headers (sans-I/O).

Request header v1: api_key i16, api_version i16, correlation_id i32,
client_id nullable string (i16 length). v2 (flexible requests) appends tagged
fields. Response header v0 is the correlation id; v1 appends an empty tagged
field section. ApiVersions responses always use header v0 (KIP-511).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.api_keys import ApiKey
from protocol.messages import RESPONSES, request_is_flexible

API_VERSIONS_KEY = ApiKey.API_VERSIONS
_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")


class HeaderDecodeError(ValueError):
    """The frame is too short or malformed to carry a request header."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the frame the header occupies


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: readable even for unknown APIs."""
    if len(frame) < _FIXED.size:
        raise HeaderDecodeError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _FIXED.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def decode_request_header(frame: bytes | memoryview, flexible: bool) -> RequestHeader:
    api_key, api_version, correlation_id = peek_header(frame)
    pos = _FIXED.size
    if len(frame) < pos + 2:
        raise HeaderDecodeError("request header ends before client_id")
    (length,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if length >= 0:
        if len(frame) < pos + length:
            raise HeaderDecodeError("client_id runs past the end of the frame")
        client_id = bytes(frame[pos : pos + length]).decode("utf-8", errors="replace")
        pos += length
    elif length != -1:
        raise HeaderDecodeError(f"client_id has invalid length {length}")
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderDecodeError("varint runs past the end of the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise HeaderDecodeError("varint is longer than 5 bytes")


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise HeaderDecodeError("tagged field runs past the end of the frame")
    return pos


def header_is_flexible(api_key: int, api_version: int) -> bool:
    return request_is_flexible(api_key, api_version)


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    head = _CORRELATION.pack(correlation_id)
    if api_key != API_VERSIONS_KEY and RESPONSES[api_key].flexible_version_q(api_version):
        return head + b"\x00"
    return head
