"""__transaction_state key/value codecs: hand-built bytes, round trips, fuzz."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.transaction_log import (
    TransactionLogDecodeError,
    TxnLogValue,
    UnknownRecordVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

i8 = st.integers(-(2**7), 2**7 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


def test_key_bytes() -> None:
    key = encode_key("kafka-txn-0")
    assert key == b"\x00\x00" + b"\x00\x0b" + b"kafka-txn-0"
    assert decode_key(key) == "kafka-txn-0"


def test_unknown_key_version() -> None:
    with pytest.raises(UnknownRecordVersion) as info:
        decode_key(b"\x00\x01\x00\x01a")
    assert info.value.version == 1


def _v0_fixture() -> bytes:
    return (
        b"\x00\x00"  # version 0
        + struct.pack(">q", 7)  # ProducerId
        + struct.pack(">h", 3)  # ProducerEpoch
        + struct.pack(">i", 60000)  # TransactionTimeoutMs
        + b"\x01"  # TransactionStatus Ongoing
        + struct.pack(">i", 1)  # one topic
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">i", 2)
        + struct.pack(">ii", 0, 5)
        + struct.pack(">q", 1000)  # last update
        + struct.pack(">q", 900)  # start
    )


def test_value_v0_bytes() -> None:
    value = TxnLogValue(7, 3, 60000, 1, (("t", (0, 5)),), 1000, 900)
    assert encode_value(value, 0) == _v0_fixture()
    assert decode_value(_v0_fixture()) == value


def test_value_v0_drops_tagged_fields() -> None:
    value = TxnLogValue(7, 3, 60000, 1, (("t", (0, 5)),), 1000, 900, 6, 8, 2)
    assert encode_value(value, 0) == _v0_fixture()


def test_value_v1_bytes_with_tagged_fields() -> None:
    fixture = (
        b"\x00\x01"  # version 1
        + struct.pack(">q", 7)
        + struct.pack(">h", 3)
        + struct.pack(">i", 60000)
        + b"\x02"  # PrepareCommit
        + b"\x02"  # compact array: 1 entry
        + b"\x02t"  # compact string "t"
        + b"\x03"  # compact array: 2 ids
        + struct.pack(">ii", 0, 5)
        + b"\x00"  # entry tagged fields
        + struct.pack(">q", 1000)
        + struct.pack(">q", 900)
        + b"\x03"  # three tagged fields
        + b"\x00\x08"
        + struct.pack(">q", 6)  # tag 0 PreviousProducerId
        + b"\x01\x08"
        + struct.pack(">q", 8)  # tag 1 NextProducerId
        + b"\x02\x02"
        + struct.pack(">h", 2)  # tag 2 ClientTransactionVersion
    )
    value = TxnLogValue(7, 3, 60000, 2, (("t", (0, 5)),), 1000, 900, 6, 8, 2)
    assert encode_value(value, 1) == fixture
    assert decode_value(fixture) == value


def test_value_v1_defaults_are_not_written_and_null_partitions() -> None:
    value = TxnLogValue(7, 0, 60000, 0, None, 1000, -1)
    data = encode_value(value, 1)
    assert data == (
        b"\x00\x01"
        + struct.pack(">qhib", 7, 0, 60000, 0)
        + b"\x00"  # null compact array
        + struct.pack(">qq", 1000, -1)
        + b"\x00"  # no tagged fields
    )
    assert decode_value(data) == value


def test_value_v1_skips_unknown_tags() -> None:
    value = TxnLogValue(7, 0, 60000, 4, (), 1000, 5, client_transaction_version=2)
    data = encode_value(value, 1)
    assert data.endswith(b"\x01\x02\x02\x00\x02")
    patched = data[:-5] + b"\x02\x02\x02\x00\x02\x09\x01\xff"
    assert decode_value(patched) == value


def test_seed_001_value_sizes() -> None:
    """Seed 001's dump of __transaction_state: Empty 37 bytes, Ongoing with one and two partitions."""
    empty = TxnLogValue(0, 0, 60000, 0, None, 1680383478418, -1)
    one = TxnLogValue(0, 0, 60000, 1, (("output-topic", (0,)),), 1680383687952, 1680383687952)
    two = TxnLogValue(
        0, 0, 60000, 1, (("output-topic", (0,)), ("__consumer_offsets", (12,))), 1680383687960, 1680383687952
    )
    assert [len(encode_value(v, 0)) for v in (empty, one, two)] == [37, 59, 87]


def test_unknown_value_version() -> None:
    with pytest.raises(UnknownRecordVersion):
        decode_value(b"\x00\x02" + bytes(40))


values = st.builds(
    TxnLogValue,
    producer_id=i64,
    producer_epoch=i16,
    timeout_ms=i32,
    status=i8,
    partitions=st.none()
    | st.lists(st.tuples(st.text(max_size=20), st.lists(i32, max_size=5).map(tuple)), max_size=4).map(tuple),
    last_update_ms=i64,
    start_ms=i64,
    previous_producer_id=i64,
    next_producer_id=i64,
    client_transaction_version=i16,
)


@given(values)
def test_round_trip_v1(value: TxnLogValue) -> None:
    assert decode_value(encode_value(value, 1)) == value


@given(values)
def test_round_trip_v0_keeps_untagged_fields(value: TxnLogValue) -> None:
    decoded = decode_value(encode_value(value, 0))
    assert decoded.producer_id == value.producer_id
    assert decoded.partitions == value.partitions
    assert (decoded.previous_producer_id, decoded.next_producer_id, decoded.client_transaction_version) == (
        -1,
        -1,
        0,
    )


@given(st.text(max_size=100))
def test_key_round_trip(tid: str) -> None:
    assert decode_key(encode_key(tid)) == tid


@given(st.binary(max_size=200))
def test_fuzz_only_decode_errors(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except TransactionLogDecodeError:
            pass


@given(values, st.integers(0, 1), st.data())
def test_fuzz_truncated_values(value: TxnLogValue, version: int, data: st.DataObject) -> None:
    encoded = encode_value(value, version)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(TransactionLogDecodeError):
        decode_value(encoded[:cut])
