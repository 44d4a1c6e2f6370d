"""decode_request is as strict as Kafka's parser (protocol.strict_schema).

- every valid message of every API and version decodes to what was encoded
  (the strict walk and kafka-python's codec agree on where each field ends);
- nulls where the schema forbids them, negative lengths other than -1, and
  counts or lengths larger than the bytes left are RequestDecodeError, found
  before anything is allocated;
- arbitrary and mutated bytes only ever raise RequestDecodeError.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():  # kafka-python schema loading warns at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from protocol.headers import decode_request_header, header_is_flexible, peek_header
    from protocol.messages import REQUESTS, RequestDecodeError, decode_request, schema_versions
    from tests.unit.test_protocol_codecs import message_strategy

ALL = [(k, v) for k in sorted(REQUESTS) for v in range(schema_versions(k)[0], schema_versions(k)[1] + 1)]


def _decode(api_key: int, version: int, body: bytes) -> Any:
    return decode_request(api_key, version, memoryview(body))


@pytest.mark.parametrize(("api_key", "version"), ALL, ids=[f"{REQUESTS[k].name}-v{v}" for k, v in ALL])
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_valid_messages_decode(api_key: int, version: int, data: st.DataObject) -> None:
    msg = data.draw(message_strategy(REQUESTS[api_key], version))
    wire = bytes(msg.encode(version=version))
    assert _decode(api_key, version, wire) == REQUESTS[api_key].decode(wire, version=version)


GOLDEN = sorted((Path(__file__).resolve().parents[1] / "integration" / "golden").glob("*/*.bin"))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_real_client_frames_pass(path: Path) -> None:
    """Frames captured from librdkafka, the Java client and aiokafka are well-formed."""
    payload = path.read_bytes()
    api_key, version, _ = peek_header(payload)
    header = decode_request_header(payload, header_is_flexible(api_key, version))
    body = payload[header.size :]
    assert _decode(api_key, version, body) == REQUESTS[api_key].decode(body, version=version)


def _create_topics_v4(configs_count: bytes) -> bytes:
    """CreateTopics v4, one topic "t": 1 partition, rf 1, no assignments, then configs."""
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">ihi", 1, 1, 0) + configs_count
    return struct.pack(">i", 1) + topic + struct.pack(">i?", 1000, False)


PRODUCE_V7_HEAD = struct.pack(">hhi", -1, 1, 1000)  # transactional_id null, acks, timeout


@pytest.mark.parametrize(
    ("api_key", "version", "body", "why"),
    [
        pytest.param(19, 4, _create_topics_v4(struct.pack(">i", -1)), "non-nullable field configs",
                     id="create-topics-null-configs"),
        pytest.param(19, 4, _create_topics_v4(struct.pack(">i", -2)), "invalid length -2",
                     id="create-topics-configs-minus-2"),
        pytest.param(19, 4, _create_topics_v4(struct.pack(">i", 2**31 - 1)), "collection of size",
                     id="create-topics-huge-count"),
        pytest.param(3, 1, struct.pack(">ih", 1, -1), "non-nullable field name", id="metadata-null-name"),
        pytest.param(3, 1, struct.pack(">ih", 1, -2), "invalid length -2", id="metadata-name-minus-2"),
        pytest.param(3, 1, struct.pack(">i", -5), "invalid length -5", id="metadata-topics-minus-5"),
        pytest.param(3, 1, struct.pack(">ih", 1, 9) + b"abc", "needs 9 bytes", id="metadata-name-past-end"),
        pytest.param(0, 7, struct.pack(">hhi", -2, 1, 1000) + struct.pack(">i", 0), "invalid length -2",
                     id="produce-txn-id-minus-2"),
        pytest.param(0, 7, PRODUCE_V7_HEAD + struct.pack(">i", -1), "non-nullable field topic_data",
                     id="produce-null-topics"),
        pytest.param(0, 7, PRODUCE_V7_HEAD + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -7),
                     "invalid length -7", id="produce-records-minus-7"),
        pytest.param(3, 9, b"\x02" + b"\xff" * 9 + b"\x01abc", "longer than 5 bytes", id="varint-too-long"),
        pytest.param(3, 9, b"\x02" + b"\x80\x80\x04" + b"x" * 64, "invalid length 65535",
                     id="compact-string-too-long"),
        pytest.param(3, 9, b"\x02\x00\x00\x00\x00", "non-nullable field name", id="compact-null-name"),
        pytest.param(3, 9, b"\x00\x00\x00\x00\x01\x07\x09ab", "tag 7 needs 9 bytes", id="tag-past-end"),
    ],
)
def test_malformed_bodies_are_refused(api_key: int, version: int, body: bytes, why: str) -> None:
    with pytest.raises(RequestDecodeError, match=why):
        _decode(api_key, version, body)


def test_nullable_fields_still_take_null() -> None:
    assert _decode(3, 1, struct.pack(">i", -1)).topics is None
    produce = _decode(0, 7, PRODUCE_V7_HEAD + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -1))
    assert produce.transactional_id is None
    assert produce.topic_data[0].partition_data[0].records is None


FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(case=st.sampled_from(ALL), body=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_the_decode_error(case: tuple[int, int], body: bytes) -> None:
    try:
        _decode(*case, body)
    except RequestDecodeError:
        pass


@st.composite
def mutated(draw: st.DrawFn) -> tuple[int, int, bytes]:
    """A valid body of any API with bytes flipped, set to a length-like value, cut or inserted."""
    api_key, version = draw(st.sampled_from(ALL))
    wire = bytearray(draw(message_strategy(REQUESTS[api_key], version)).encode(version=version))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, max(0, len(wire) - 1)))
        op = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        if op == "flip" and wire:
            wire[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and wire:
            wire[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFE, 0xFF]))
        elif op == "cut":
            del wire[pos:]
        else:
            lengths = [b"\xff\xff", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00"]
            wire[pos:pos] = draw(st.sampled_from(lengths))
    return api_key, version, bytes(wire)


@FUZZ
@given(case=mutated())
def test_mutated_bodies_raise_only_the_decode_error(case: tuple[int, int, bytes]) -> None:
    try:
        _decode(*case)
    except RequestDecodeError:
        pass
