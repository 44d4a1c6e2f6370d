"""kafka-python's schema-driven codecs as Gregor uses them: round trips and fuzz.

Round trips: for a representative set of APIs, at every version the schema
declares valid (flexible ones included), a Hypothesis strategy derived from the
JSON schema itself builds a message; we check ``decode(encode(x)) == x``, that
decoding consumes exactly the encoded bytes (no trailing or missing bytes), that
a framed encode reports its own size, and that the header path the broker uses
(``decode_request_header`` / ``encode_response_header``) agrees byte for byte
with kafka-python's own header encoding.

Fuzz: arbitrary bytes through ``decode_request_header`` and the codec. Our
header code raises only ``HeaderDecodeError``. kafka-python's codec has no
single decode error; on bad bytes it raises (observed and read from its
generated decoders, kafka-python 3.0.12):

- ``struct.error``: a fixed-size field or i16/i32 length runs past the end;
- ``IndexError``: a varint / compact length / tagged-field byte past the end;
- ``ValueError``: a UUID shorter than 16 bytes, and ``UnicodeDecodeError``
  (a ValueError) for non-UTF-8 strings;
- ``OverflowError``: an unbounded compact varint (the generated decoder does
  not stop at 5 bytes) used as a slice / count;
- ``AssertionError``: a tagged struct field whose nested tagged section is not
  empty (``TaggedFields.decode_empty`` asserts; under ``python -O`` it would
  be silently accepted).

``CODEC_DECODE_ERRORS`` below is that list; the broker's connection loop
must treat every one of them as "unreadable frame → close". Things the codec
does *not* reject (so the broker must): trailing bytes after the body,
negative non-null lengths (an i32 array length of -5 decodes as an empty list,
an i16 string length of -5 as None), and a bytes/records field shorter than
its length prefix when it is the last field (``data[pos:pos+n]`` is clipped).
"""

from __future__ import annotations

import struct
import uuid
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():  # kafka-python schema loading warns at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.schemas.fields.codecs import (
        UUID,
        BitField,
        Boolean,
        Bytes,
        Float64,
        Int8,
        Int16,
        Int32,
        Int64,
        String,
        UnsignedInt16,
    )

    from protocol.headers import (
        HeaderDecodeError,
        decode_request_header,
        encode_response_header,
        header_is_flexible,
    )
    from protocol.messages import REQUESTS, RESPONSES, schema_versions

CODEC_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    struct.error,
    IndexError,
    ValueError,
    OverflowError,
    AssertionError,
)

# Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics.
ROUND_TRIP_KEYS = (0, 1, 2, 3, 18, 19)

I16 = (-(2**15), 2**15 - 1)
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)


def _simple(codec: Any, nullable: bool) -> st.SearchStrategy[Any]:
    if codec is Int8:
        s: st.SearchStrategy[Any] = st.integers(-128, 127)
    elif codec is Int16:
        s = st.integers(*I16)
    elif codec is UnsignedInt16:
        s = st.integers(0, 2**16 - 1)
    elif codec is Int32:
        s = st.integers(*I32)
    elif codec is Int64:
        s = st.integers(*I64)
    elif codec is Float64:
        s = st.floats(allow_nan=False)
    elif codec is Boolean:
        s = st.booleans()
    elif codec is UUID:
        # The all-zero UUID is the wire's "null" and decodes as None.
        return st.one_of(st.none(), st.uuids().filter(lambda u: u.int != 0))
    elif isinstance(codec, String):
        s = st.text(max_size=12)
    elif codec is Bytes:
        s = st.binary(max_size=24)
    elif codec is BitField:
        return st.sets(st.integers(0, 30), max_size=4)
    else:  # pragma: no cover - a new codec type in kafka-python
        raise AssertionError(f"no strategy for {codec!r}")
    return st.one_of(st.none(), s) if nullable else s


def field_strategy(field: Any, version: int) -> st.SearchStrategy[Any]:
    nullable = field.nullable_for_version_q(version)
    if field.is_struct_array():
        items = st.lists(struct_strategy(field.array_of, version), max_size=2)
        return st.one_of(st.none(), items) if nullable else items
    if field.is_array():
        items = st.lists(_simple(field.array_of._type, False), max_size=3)
        return st.one_of(st.none(), items) if nullable else items
    if field.is_struct():
        s = struct_strategy(field, version)
        return st.one_of(st.none(), s) if nullable or field.tag is not None else s
    return _simple(field._type, nullable)


def struct_strategy(struct_field: Any, version: int, cls: Any = None) -> st.SearchStrategy[Any]:
    make = cls if cls is not None else struct_field.data_class
    fields = {
        f.name: field_strategy(f, version) for f in struct_field._fields if f.for_version_q(version)
    }
    return st.fixed_dictionaries(fields).map(lambda kw: make(version=version, **kw))


def message_strategy(cls: Any, version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(cls._struct, version, cls=cls)


def _consumed(cls: Any, data: bytes, version: int) -> int:
    flexible = cls.flexible_version_q(version)
    decode = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls[None]
    )
    _obj, pos = decode(memoryview(data), 0)
    return int(pos)


def _kip511(msg: Any, api_key: int, version: int, kind: str) -> None:
    """kafka-python decodes an ApiVersions response with an error as v0 (KIP-511),
    whatever version was asked, so only error-free ones round-trip above v0."""
    if api_key == 18 and kind == "response" and version > 0:
        msg.error_code = 0


def _cases() -> list[Any]:
    cases = []
    for key in ROUND_TRIP_KEYS:
        low, high = schema_versions(key)
        for version in range(low, high + 1):
            for kind in ("request", "response"):
                cases.append(pytest.param(key, version, kind, id=f"{REQUESTS[key].name}-{kind}-v{version}"))
    return cases


ROUND_TRIP = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize(("api_key", "version", "kind"), _cases())
@ROUND_TRIP
@given(data=st.data())
def test_round_trip(api_key: int, version: int, kind: str, data: st.DataObject) -> None:
    cls = (REQUESTS if kind == "request" else RESPONSES)[api_key]
    msg = data.draw(message_strategy(cls, version))
    _kip511(msg, api_key, version, kind)
    encoded = msg.encode(version=version)
    decoded = cls.decode(encoded, version=version)
    assert decoded == msg
    # A decoded message has no `_header` slot, so `decoded.encode(version=v)`
    # raises AttributeError in kafka-python 3.0.12; it re-encodes at its own version.
    assert decoded.encode() == encoded
    assert _consumed(cls, encoded, version) == len(encoded)
    framed = msg.encode(version=version, framed=True)
    assert struct.unpack(">i", framed[:4])[0] == len(framed) - 4 == len(encoded)


@pytest.mark.parametrize(("api_key", "version", "kind"), _cases())
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), correlation_id=st.integers(*I32), client_id=st.one_of(st.none(), st.text(max_size=8)))
def test_header_path_matches_kafka_python(
    api_key: int, version: int, kind: str, data: st.DataObject, correlation_id: int, client_id: str | None
) -> None:
    """Our header decode/encode agrees with kafka-python's `encode(header=True)`."""
    cls = (REQUESTS if kind == "request" else RESPONSES)[api_key]
    msg = data.draw(message_strategy(cls, version))
    _kip511(msg, api_key, version, kind)
    # A fresh decoded copy: with a response header set, `encode(version=)` fails
    # (it writes `request_api_version` into a ResponseHeader), so the version
    # must already be on the object; and the drawn value is not mutated.
    msg = cls.decode(msg.encode(version=version), version=version)
    if kind == "request":
        msg.with_header(correlation_id=correlation_id, client_id=client_id)
    else:
        msg.with_header(correlation_id=correlation_id)
    wire = msg.encode(header=True)
    if kind == "request":
        h = decode_request_header(wire, header_is_flexible(api_key, version))
        assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (
            api_key,
            version,
            correlation_id,
            client_id,
        )
        assert cls.decode(memoryview(wire)[h.size :], version=version) == msg
    else:
        head = encode_response_header(api_key, version, correlation_id)
        assert wire == head + msg.encode()


# -- fuzz -------------------------------------------------------------------


@pytest.mark.parametrize("api_key", ROUND_TRIP_KEYS)
@settings(max_examples=300, deadline=None)
@given(data=st.data(), body=st.binary(max_size=80))
def test_arbitrary_body_bytes_raise_only_known_errors(api_key: int, data: st.DataObject, body: bytes) -> None:
    low, high = schema_versions(api_key)
    version = data.draw(st.integers(low, high))
    try:
        REQUESTS[api_key].decode(body, version=version)
    except CODEC_DECODE_ERRORS:
        pass


@st.composite
def mutated_request(draw: st.DrawFn) -> tuple[int, int, bytes]:
    """A valid encoded request (with header) with a few bytes flipped, cut or inserted."""
    api_key = draw(st.sampled_from(ROUND_TRIP_KEYS))
    low, high = schema_versions(api_key)
    version = draw(st.integers(low, high))
    msg = draw(message_strategy(REQUESTS[api_key], version))
    msg.with_header(correlation_id=draw(st.integers(0, 100)), client_id=draw(st.text(max_size=4)))
    wire = bytearray(msg.encode(version=version, header=True))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        pos = draw(st.integers(0, max(0, len(wire) - 1)))
        if op == "flip" and wire:
            wire[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and wire:
            wire[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "cut":
            del wire[pos:]
        else:
            wire[pos:pos] = draw(st.binary(min_size=1, max_size=4))
    return api_key, version, bytes(wire)


def _decode_like_the_broker(api_key: int, version: int, frame: bytes) -> Any:
    header = decode_request_header(frame, header_is_flexible(api_key, version))
    return REQUESTS[api_key].decode(memoryview(frame)[header.size :], version=version)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_request())
def test_mutated_requests_raise_only_known_errors(case: tuple[int, int, bytes]) -> None:
    api_key, version, frame = case
    try:
        _decode_like_the_broker(api_key, version, frame)
    except HeaderDecodeError:
        pass
    except CODEC_DECODE_ERRORS:
        pass


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=120), api_key=st.sampled_from(ROUND_TRIP_KEYS), data=st.data())
def test_arbitrary_frames_raise_only_known_errors(frame: bytes, api_key: int, data: st.DataObject) -> None:
    low, high = schema_versions(api_key)
    version = data.draw(st.integers(low, high))
    try:
        _decode_like_the_broker(api_key, version, frame)
    except HeaderDecodeError:
        pass
    except CODEC_DECODE_ERRORS:
        pass


# -- documented leniencies of the codec (the broker must check these itself) --


def test_codec_ignores_trailing_bytes() -> None:
    cls = REQUESTS[18]
    body = cls(version=0).encode(version=0)
    assert cls.decode(body + b"junk", version=0) == cls.decode(body, version=0)


def test_codec_reads_negative_array_length_as_empty() -> None:
    cls = REQUESTS[3]  # Metadata v1: topics is a nullable i32-counted array
    assert cls.decode(struct.pack(">i", -5), version=1).topics == []
    assert cls.decode(struct.pack(">i", -1), version=1).topics is None


def test_codec_clips_short_trailing_bytes_field() -> None:
    """A records field shorter than its length prefix decodes (clipped) when it is last."""
    cls = REQUESTS[0]
    msg = cls(
        version=3,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[cls.TopicProduceData(name="t", partition_data=[(0, b"0123456789")])],
    )
    wire = msg.encode(version=3)
    decoded = cls.decode(wire[:-4], version=3)
    assert decoded.topic_data[0].partition_data[0].records == b"012345"


def test_zero_uuid_is_none() -> None:
    assert UUID.encode(None) == bytes(16)
    assert uuid.UUID(int=0) != uuid.uuid4()


def _fetch_v15_with_bad_nested_tags() -> bytes:
    cls = REQUESTS[1]
    msg = cls(
        version=15,
        replica_state=cls.ReplicaState(replica_id=1, replica_epoch=2),
        max_wait_ms=1,
        min_bytes=1,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    wire = msg.encode(version=15)
    assert wire[-1] == 0  # the tagged ReplicaState's own (empty) tagged section
    return wire[:-1] + b"\x01"


@pytest.mark.parametrize(
    ("api_key", "version", "body", "error"),
    [
        pytest.param(3, 1, b"\x00", struct.error, id="struct.error-short-i32"),
        pytest.param(3, 9, b"", IndexError, id="IndexError-missing-varint"),
        pytest.param(3, 9, b"\x02" + b"\xff" * 9 + b"\x01abc", IndexError, id="IndexError-huge-length"),
        pytest.param(3, 1, bytes.fromhex("00000001 0001 ff"), UnicodeDecodeError, id="UnicodeDecodeError"),
        pytest.param(3, 10, b"\x02" + b"\x01" * 5, ValueError, id="ValueError-short-uuid"),
        pytest.param(
            48, 1, bytes.fromhex("9b0e8db2c295d2cbb1cffae348"), OverflowError, id="OverflowError-varint"
        ),
        pytest.param(1, 15, _fetch_v15_with_bad_nested_tags(), AssertionError, id="AssertionError-tags"),
    ],
)
def test_each_documented_codec_error(api_key: int, version: int, body: bytes, error: type) -> None:
    with pytest.raises(error):
        REQUESTS[api_key].decode(body, version=version)
    assert issubclass(error, CODEC_DECODE_ERRORS)


def test_api_versions_error_response_decodes_as_v0() -> None:
    """KIP-511: clients read an ApiVersions error response as v0 whatever they asked."""
    cls = RESPONSES[18]
    v0 = cls(version=0, error_code=35, api_keys=[(18, 0, 4)]).encode(version=0)
    got = cls.decode(v0, version=4)
    assert (got.version, got.error_code, [tuple(k)[:3] for k in got.api_keys]) == (0, 35, [(18, 0, 4)])
