"""Request/response headers and framing, from hand-built bytes.

Request header v1: api_key i16 · api_version i16 · correlation_id i32 ·
client_id nullable string (i16 length, NOT compact even in v2). Header v2
(flexible requests) appends a tagged-field section: uvarint count, then per
field uvarint tag · uvarint size · bytes. Every malformed header must raise
HeaderDecodeError and nothing else; the connection loop only catches that.
"""

from __future__ import annotations

import struct
import warnings

import pytest

# kafka-python 3.0.12 loads its JSON schemas with the deprecated
# importlib.resources.read_text while its classes are created (import time
# only); the suite runs with warnings as errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import protocol.messages  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader as KpRequestHeader

from protocol.framing import SIZE_PREFIX, FrameSizeError, frame, frame_parts, frame_size
from protocol.headers import (
    API_VERSIONS_KEY,
    HeaderDecodeError,
    decode_request_header,
    encode_response_header,
    header_is_flexible,
    peek_header,
    read_uvarint,
    skip_tagged_fields,
)

# Produce v7 (not flexible) → request header v1.
V1_HEADER = bytes.fromhex(
    "0000"  # api_key 0 (Produce)
    "0007"  # api_version 7
    "0000002a"  # correlation_id 42
    "0005"  # client_id length 5
) + b"gregr"

# Metadata v12 (flexible) → request header v2, with two tagged fields:
# tag 0 size 3 b"abc", tag 5 size 0.
V2_HEADER = (
    bytes.fromhex("0003" "000c" "7fffffff" "0003")
    + b"cli"
    + bytes.fromhex("02" "00" "03")
    + b"abc"
    + bytes.fromhex("05" "00")
)


def test_v1_header_fields_and_size() -> None:
    body = b"\x01\x02\x03"
    h = decode_request_header(V1_HEADER + body, flexible=False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (0, 7, 42, "gregr")
    assert h.size == len(V1_HEADER)


def test_v2_header_skips_tagged_fields() -> None:
    body = b"\x00\x00"
    h = decode_request_header(V2_HEADER + body, flexible=True)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 2**31 - 1, "cli")
    assert h.size == len(V2_HEADER)


def test_v2_header_without_tagged_fields() -> None:
    raw = bytes.fromhex("0012" "0003" "00000001" "0000" "00")
    h = decode_request_header(raw, flexible=True)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.size) == (18, 3, 1, "", 11)


def test_null_client_id() -> None:
    raw = bytes.fromhex("0012" "0000" "fffffffe" "ffff")
    h = decode_request_header(raw, flexible=False)
    assert h.client_id is None
    assert h.correlation_id == -2
    assert h.size == 10


def test_multibyte_varint_tag_size() -> None:
    payload = bytes(200)  # size 200 = uvarint c8 01
    raw = bytes.fromhex("0003" "000c" "00000001" "ffff" "01" "00" "c801") + payload + b"BODY"
    h = decode_request_header(raw, flexible=True)
    assert raw[h.size :] == b"BODY"


def test_memoryview_input() -> None:
    h = decode_request_header(memoryview(V2_HEADER), flexible=True)
    assert h.client_id == "cli" and h.size == len(V2_HEADER)


def test_invalid_utf8_client_id_does_not_raise() -> None:
    raw = bytes.fromhex("0012" "0000" "00000001" "0002" "ff fe")
    assert decode_request_header(raw, flexible=False).client_id is not None


@pytest.mark.parametrize(("raw", "flexible"), [(V1_HEADER, False), (V2_HEADER, True)])
def test_every_truncation_is_a_header_decode_error(raw: bytes, flexible: bool) -> None:
    for cut in range(len(raw)):
        with pytest.raises(HeaderDecodeError):
            decode_request_header(raw[:cut], flexible=flexible)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(bytes.fromhex("0000" "0007" "00000001" "fffe"), id="client_id_len_-2"),
        pytest.param(bytes.fromhex("0000" "0007" "00000001" "8000"), id="client_id_len_min_i16"),
        pytest.param(bytes.fromhex("0000" "0007" "00000001" "7fff") + b"x" * 10, id="client_id_too_long"),
    ],
)
def test_bad_client_id_length(raw: bytes) -> None:
    with pytest.raises(HeaderDecodeError):
        decode_request_header(raw, flexible=False)


@pytest.mark.parametrize(
    "tags",
    [
        pytest.param("01" "00" "05" "ab", id="tag_size_past_end"),
        pytest.param("ffffffffff7f", id="count_varint_6_bytes"),
        pytest.param("01" "ffffffffff01" "00", id="tag_varint_6_bytes"),
        pytest.param("01" "00", id="tag_without_size"),
        pytest.param("02" "00" "00", id="second_tag_missing"),
        pytest.param("80", id="count_varint_truncated"),
    ],
)
def test_bad_tagged_fields(tags: str) -> None:
    raw = bytes.fromhex("0003" "000c" "00000001" "ffff" + tags)
    with pytest.raises(HeaderDecodeError):
        decode_request_header(raw, flexible=True)


def test_read_uvarint() -> None:
    assert read_uvarint(b"\x00", 0) == (0, 1)
    assert read_uvarint(b"\x7f", 0) == (127, 1)
    assert read_uvarint(b"\x80\x01", 0) == (128, 2)
    assert read_uvarint(b"xx\xff\xff\xff\xff\x0f", 2) == (2**32 - 1, 7)
    with pytest.raises(HeaderDecodeError):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)


def test_skip_tagged_fields_returns_position_after_section() -> None:
    buf = b"\x00\x00" + bytes.fromhex("01" "07" "02" "aabb") + b"rest"
    assert skip_tagged_fields(buf, 2) == len(buf) - 4


def test_peek_header_reads_unknown_api_keys() -> None:
    raw = struct.pack(">hhi", 9999, -3, 77)
    assert peek_header(raw) == (9999, -3, 77)
    with pytest.raises(HeaderDecodeError):
        peek_header(raw[:7])


@given(
    api_key=st.sampled_from([0, 1, 2, 3, 18, 19]),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=40)),
    flexible=st.booleans(),
    body=st.binary(max_size=20),
)
def test_matches_kafka_python_header_encoder(
    api_key: int, correlation_id: int, client_id: str | None, flexible: bool, body: bytes
) -> None:
    kp = KpRequestHeader(
        request_api_key=api_key, request_api_version=5, correlation_id=correlation_id, client_id=client_id
    )
    raw = kp.encode(flexible=flexible)
    h = decode_request_header(raw + body, flexible=flexible)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (
        api_key,
        5,
        correlation_id,
        client_id,
    )
    assert h.size == len(raw)


@settings(max_examples=500)
@given(data=st.binary(max_size=64), flexible=st.booleans())
def test_arbitrary_bytes_only_raise_header_decode_error(data: bytes, flexible: bool) -> None:
    try:
        h = decode_request_header(data, flexible=flexible)
    except HeaderDecodeError:
        return
    assert 10 <= h.size <= len(data)


@pytest.mark.parametrize(
    ("api_key", "version", "flexible"),
    [(0, 8, False), (0, 9, True), (1, 11, False), (1, 12, True), (3, 8, False), (3, 9, True),
     (18, 2, False), (18, 3, True), (2, 5, False), (2, 6, True), (19, 4, False), (19, 5, True)],
)
def test_header_is_flexible(api_key: int, version: int, flexible: bool) -> None:
    assert header_is_flexible(api_key, version) is flexible


def test_response_header_versions() -> None:
    assert encode_response_header(3, 8, 5) == b"\x00\x00\x00\x05"
    assert encode_response_header(3, 9, 5) == b"\x00\x00\x00\x05\x00"
    # KIP-511: ApiVersions responses are always header v0, even when flexible.
    assert encode_response_header(API_VERSIONS_KEY, 3, 5) == b"\x00\x00\x00\x05"
    assert encode_response_header(API_VERSIONS_KEY, 4, -1) == b"\xff\xff\xff\xff"


# -- framing ---------------------------------------------------------------


def test_frame_size_accepts_zero_and_max() -> None:
    assert frame_size(b"\x00\x00\x00\x00", 100) == 0
    assert frame_size(struct.pack(">i", 100), 100) == 100


@pytest.mark.parametrize("size", [-1, -(2**31), 101, 2**31 - 1])
def test_frame_size_rejects_negative_and_oversize(size: int) -> None:
    with pytest.raises(FrameSizeError):
        frame_size(struct.pack(">i", size), 100)


def test_frame_size_error_is_value_error() -> None:
    assert issubclass(FrameSizeError, ValueError)
    assert issubclass(HeaderDecodeError, ValueError)


def test_frame_and_frame_parts() -> None:
    assert SIZE_PREFIX == 4
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(memoryview(b"")) == b"\x00\x00\x00\x00"
    parts = frame_parts(b"ab", memoryview(b"cde"), bytearray(b"f"))
    assert b"".join(bytes(p) for p in parts) == b"\x00\x00\x00\x06abcdef"
