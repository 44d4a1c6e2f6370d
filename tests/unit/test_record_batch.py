"""The magic-v2 batch header view: exact bytes, round trips, CRC, fuzz."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    CorruptBatchError,
    TimestampType,
    build_control_batch,
    crc_ok,
    iter_batches,
    iter_records,
    parse_control_batch,
    patch_offset_and_epoch,
    set_log_append_time,
)
from tests.unit.storage.batches import DefaultRecordBatch, make_batch

i8 = st.integers(-(2**7), 2**7 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)

headers = st.builds(BatchHeader, i64, i32, i32, i8, u32, i16, i32, i64, i64, i64, i16, i32, i32)


def test_header_exact_bytes() -> None:
    raw = bytes.fromhex(
        "0000000000000064"  # baseOffset 100
        "00000031"  # batchLength 49
        "00000007"  # partitionLeaderEpoch 7
        "02"  # magic
        "deadbeef"  # crc
        "0018"  # attributes: LogAppendTime | transactional
        "00000002"  # lastOffsetDelta
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000007d0"  # maxTimestamp 2000
        "0000000000000009"  # producerId
        "0001"  # producerEpoch
        "00000005"  # baseSequence
        "00000003"  # recordsCount
    )
    assert len(raw) == HEADER_SIZE == 61
    h = BatchHeader.parse(raw)
    assert h == BatchHeader(100, 49, 7, 2, 0xDEADBEEF, 0x18, 2, 1000, 2000, 9, 1, 5, 3)
    assert h.pack() == raw
    assert (h.last_offset, h.next_offset, h.size_in_bytes) == (102, 103, 61)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.is_transactional and not h.is_control and h.compression == 0
    assert h.last_sequence == 7


def test_header_matches_kafka_python() -> None:
    batch = make_batch([b"a", b"bb", b"ccc"], producer_id=42, producer_epoch=3, base_sequence=10)
    h = BatchHeader.parse(batch)
    ref = DefaultRecordBatch(bytearray(batch))
    assert h.size_in_bytes == len(batch) == ref.size_in_bytes
    assert (h.records_count, h.last_offset_delta, h.producer_id) == (3, 2, 42)
    assert (h.producer_epoch, h.base_sequence, h.crc) == (3, 10, ref.crc)
    assert crc_ok(batch, 0, h)


@given(headers)
def test_header_round_trip(h: BatchHeader) -> None:
    assert BatchHeader.parse(h.pack()) == h


@given(st.lists(st.binary(max_size=30), min_size=1, max_size=5), st.data())
def test_any_bit_flip_in_crc_range_is_detected(values: list[bytes], data: st.DataObject) -> None:
    batch = bytearray(make_batch(values))
    bit = data.draw(st.integers(21 * 8, len(batch) * 8 - 1))
    batch[bit // 8] ^= 1 << (bit % 8)
    assert not crc_ok(batch, 0, BatchHeader.parse(batch))


@given(st.binary(max_size=300))
def test_iter_batches_on_garbage_only_raises_corrupt(data: bytes) -> None:
    try:
        for pos, h in iter_batches(memoryview(data), check_crc=True):
            assert pos + h.size_in_bytes <= len(data)
    except CorruptBatchError as exc:
        assert 0 <= exc.position < len(data)


@given(st.binary(max_size=200), st.integers(0, 3))
def test_iter_batches_stops_at_first_bad_byte(garbage: bytes, n: int) -> None:
    batches = [make_batch([b"v" * i]) for i in range(n)]
    good = b"".join(batches)
    seen: list[int] = []
    try:
        for pos, _h in iter_batches(good + garbage, check_crc=True):
            seen.append(pos)
    except CorruptBatchError as exc:
        assert exc.position >= len(good)
    assert seen[:n] == [sum(len(b) for b in batches[:i]) for i in range(n)]


def test_iter_batches_walks_several_and_reports_truncation() -> None:
    a, b = make_batch([b"one"]), make_batch([b"two", b"three"])
    assert [p for p, _ in iter_batches(a + b)] == [0, len(a)]
    with pytest.raises(CorruptBatchError) as info:
        list(iter_batches(a + b[:-1]))
    assert info.value.position == len(a)


def test_patch_offset_and_epoch_keeps_crc() -> None:
    buf = bytearray(make_batch([b"x", b"y"]))
    patch_offset_and_epoch(buf, 0, 1234, 9)
    h = BatchHeader.parse(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (1234, 9)
    assert crc_ok(buf, 0, h)
    assert struct.unpack_from(">qii", buf) == (1234, h.batch_length, 9)


def test_set_log_append_time() -> None:
    buf = bytearray(make_batch([b"x", b"y"], timestamp=5))
    h = set_log_append_time(buf, 0, 99_999)
    assert h.max_timestamp == 99_999 and h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.crc == crc32c.crc32c(bytes(buf[21:]))
    records = list(DefaultRecordBatch(buf))
    assert [r.timestamp for r in records] == [99_999, 99_999]


@pytest.mark.parametrize("kind", [ControlType.ABORT, ControlType.COMMIT])
def test_control_batch(kind: ControlType) -> None:
    batch = build_control_batch(kind, producer_id=77, producer_epoch=4, coordinator_epoch=12, timestamp=500)
    h = BatchHeader.parse(batch)
    assert h.is_control and h.is_transactional and crc_ok(batch, 0, h)
    assert (h.producer_id, h.producer_epoch, h.records_count) == (77, 4, 1)
    marker = parse_control_batch(batch)
    assert (marker.control_type, marker.coordinator_epoch) == (kind, 12)
    ref = DefaultRecordBatch(bytearray(batch))
    assert ref.is_control_batch and ref.validate_crc()
    (record,) = list(ref)
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 12)


keys_values = st.lists(st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300)),
                       min_size=1, max_size=20)


@given(keys_values, st.integers(0, 2**40), st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=9))))
def test_iter_records_reads_what_kafka_python_reads(
    records: list[tuple[bytes | None, bytes | None]], base_offset: int, headers: list[tuple[str, bytes]],
) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=10**8)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=1000 + i, key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    patch_offset_and_epoch(batch, 0, base_offset, 3)
    data = bytes(batch)
    ours = list(iter_records(data, 0, BatchHeader.parse(data)))
    assert ours == [(r.offset, r.key, r.value) for r in DefaultRecordBatch(batch)]


def test_iter_records_refuses_a_record_that_overruns_its_batch() -> None:
    batch = bytearray(make_batch([b"abc", b"def"]))
    batch[HEADER_SIZE] = 0x7E  # the first record's length: far past the batch's end
    with pytest.raises(CorruptBatchError):
        list(iter_records(bytes(batch), 0, BatchHeader.parse(batch)))
    compressed = make_batch([b"abc" * 100] * 5, compression=1)
    with pytest.raises(CorruptBatchError):
        list(iter_records(compressed, 0, BatchHeader.parse(compressed)))
