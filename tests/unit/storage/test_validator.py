"""storage.validator: Kafka's LogValidator rules on hand-made magic-v2 batches.

Every batch here has a valid CRC, so each case reaches the record walk; the
records are encoded by hand (``record``) so that lengths, varints, offset deltas
and header counts can be wrong on purpose.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import cramjam
import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import (
    COMPRESSION_MASK,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    build_batch,
    iter_batches,
)
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import AppendOrigin
from storage.validator import (
    RecordError,
    Rejected,
    Validated,
    ValidationPolicy,
    check_header,
    validate_records,
)
from tests.unit.storage.batches import DefaultRecordBatch

NOW = 1_700_000_000_000
TP = "t-0"
PLAIN = ValidationPolicy(TP)


def varint(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if z > 0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        else:
            out.append(z)
            return bytes(out)


def record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    *,
    ts_delta: int = 0,
    headers: list[tuple[bytes, bytes]] | None = None,
    header_count: int | None = None,
    length_delta: int = 0,
    extra: bytes = b"",
) -> bytes:
    """One v2 record; ``length_delta``/``header_count``/``extra`` make it wrong on purpose."""
    body = bytearray(b"\x00") + varint(ts_delta) + varint(offset_delta)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    hs = headers or []
    body += varint(len(hs) if header_count is None else header_count)
    for hk, hv in hs:
        body += varint(len(hk)) + hk + varint(len(hv)) + hv
    body += extra
    return varint(len(body) + length_delta) + bytes(body)


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.GZIP:
        return gzip.compress(data)
    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    return data


def batch(
    records: list[bytes] | bytes,
    count: int | None = None,
    last_delta: int | None = None,
    codec: Compression = Compression.NONE,
    attributes: int = 0,
    base_timestamp: int = NOW,
    max_timestamp: int | None = None,
) -> bytes:
    raw = records if isinstance(records, bytes) else b"".join(records)
    n = len(records) if count is None and isinstance(records, list) else count
    assert n is not None
    return build_batch(
        compress(codec, raw),
        records_count=n,
        last_offset_delta=n - 1 if last_delta is None else last_delta,
        attributes=attributes | int(codec),
        base_timestamp=base_timestamp,
        max_timestamp=base_timestamp if max_timestamp is None else max_timestamp,
    )


def validate(data: bytes, policy: ValidationPolicy = PLAIN, now: int = NOW) -> Validated | Rejected:
    header = check_header(data, 1 << 30)
    if isinstance(header, Rejected):
        return header
    return validate_records(data, header, policy, now)


def rejected(data: bytes, policy: ValidationPolicy = PLAIN, now: int = NOW) -> Rejected:
    result = validate(data, policy, now)
    assert isinstance(result, Rejected), result
    return result


def three(**kw: object) -> list[bytes]:
    return [record(i, **kw) for i in range(3)]  # type: ignore[arg-type]


CODECS = list(Compression)


# -- well-formed batches ------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batch_is_accepted_as_received(codec: Compression) -> None:
    data = batch(three(headers=[(b"h", b"1")]), codec=codec)
    result = validate(data)
    assert isinstance(result, Validated)
    assert result.records is data  # nothing copied or rebuilt
    assert result.header == BatchHeader.parse(data)


def test_xerial_framed_snappy_is_read() -> None:
    raw = b"".join(three())
    block = bytes(cramjam.snappy.compress_raw(raw))
    xerial = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") * 2 + len(block).to_bytes(4, "big") + block
    data = build_batch(xerial, records_count=3, last_offset_delta=2, attributes=int(Compression.SNAPPY))
    assert isinstance(validate(data), Validated)


def test_client_batches_from_a_real_builder_pass() -> None:
    from tests.unit.storage.batches import make_batch

    for codec in CODECS:
        assert isinstance(validate(make_batch([b"a", b"bb", b"ccc"], compression=int(codec))), Validated)


# -- record count, lengths, varints, offsets, headers ------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_count_larger_than_records_present(codec: Compression) -> None:
    r = rejected(batch([record(i) for i in range(4)], count=5, codec=codec))
    assert r.error is ErrorCode.INVALID_RECORD and not r.record_errors


@pytest.mark.parametrize("codec", CODECS)
def test_count_smaller_than_records_present(codec: Compression) -> None:
    r = rejected(batch([record(i) for i in range(4)], count=3, codec=codec))
    assert r.error is ErrorCode.INVALID_RECORD


def test_last_offset_delta_disagreeing_with_count() -> None:
    assert rejected(batch(three(), last_delta=5)).error is ErrorCode.INVALID_RECORD
    assert rejected(batch(three(), count=0, last_delta=-1)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_record_length_overrunning_the_batch(codec: Compression) -> None:
    recs = three()
    recs[2] = record(2, length_delta=+5)
    assert rejected(batch(recs, codec=codec)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("length_delta", [-1, +1])
def test_record_length_disagreeing_with_its_fields(length_delta: int) -> None:
    recs = three()
    recs[1] = record(1, length_delta=length_delta)
    assert rejected(batch(recs)).error is ErrorCode.INVALID_RECORD


def test_record_with_bytes_left_over_inside() -> None:
    recs = three()
    recs[0] = record(0, extra=b"\x00\x00")  # its length counts the two extra bytes
    assert rejected(batch(recs)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_trailing_bytes_after_the_last_record(codec: Compression) -> None:
    data = batch(b"".join(three()) + b"\x00\x01\x02", count=3, codec=codec)
    assert rejected(data).error is ErrorCode.INVALID_RECORD


def test_key_length_overrunning_the_batch() -> None:
    bad = varint(20) + b"\x00" + varint(0) + varint(0) + varint(1000) + b"k" * 10
    assert rejected(batch([record(0), bad], count=2)).error is ErrorCode.INVALID_RECORD


def test_unterminated_varint() -> None:
    bad = varint(14) + b"\x00" + b"\xff" * 13
    assert rejected(batch([bad], count=1)).error is ErrorCode.INVALID_RECORD


def test_unterminated_varint_at_the_end_of_the_batch() -> None:
    assert rejected(batch([record(0), b"\x80\x80"], count=2)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("deltas", [[0, 0, 1], [1, 2, 3], [0, 2, 1], [0, 1, 5]])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_offset_deltas_not_zero_to_n_minus_one(deltas: list[int], codec: Compression) -> None:
    r = rejected(batch([record(d) for d in deltas], codec=codec))
    assert r.error is ErrorCode.INVALID_RECORD and "offset delta" in r.message


def test_negative_header_count() -> None:
    recs = three()
    recs[1] = record(1, header_count=-1)
    assert rejected(batch(recs)).error is ErrorCode.INVALID_RECORD


def test_header_count_larger_than_headers_present() -> None:
    recs = three()
    recs[2] = record(2, headers=[(b"a", b"1")], header_count=3)
    assert rejected(batch(recs)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_undecodable_compressed_data_is_corrupt(codec: Compression) -> None:
    data = build_batch(b"\x00not compressed at all\xff" * 4, records_count=1, last_offset_delta=0,
                       attributes=int(codec))
    assert rejected(data).error is ErrorCode.CORRUPT_MESSAGE


def test_truncated_compressed_data_is_corrupt() -> None:
    full = compress(Compression.ZSTD, b"".join(three()))
    data = build_batch(full[:-4], records_count=3, last_offset_delta=2, attributes=int(Compression.ZSTD))
    assert rejected(data).error is ErrorCode.CORRUPT_MESSAGE


def test_large_decompressed_batch_grows_the_scratch_buffer() -> None:
    recs = [record(i, value=b"x" * 100_000) for i in range(40)]  # 4 MB, compresses to little
    assert isinstance(validate(batch(recs, codec=Compression.ZSTD)), Validated)
    assert isinstance(validate(batch(three(), codec=Compression.LZ4)), Validated)


def test_header_checks_come_first() -> None:
    data = batch(three())
    assert check_header(data[:-1], 1 << 30).error is ErrorCode.CORRUPT_MESSAGE  # type: ignore[union-attr]
    assert check_header(data, 10).error is ErrorCode.MESSAGE_TOO_LARGE  # type: ignore[union-attr]
    control = batch(three(), attributes=0x20)
    assert check_header(control, 1 << 30).error is ErrorCode.INVALID_RECORD  # type: ignore[union-attr]
    assert isinstance(check_header(control, 1 << 30, AppendOrigin.COORDINATOR), BatchHeader)


# -- compacted topics require keys ----------------------------------------------------------


COMPACTED = ValidationPolicy(TP, compacted=True)


def test_compacted_topic_rejects_keyless_records_with_record_errors() -> None:
    recs = [record(0, key=b"a"), record(1, key=None), record(2, key=b""), record(3, key=None)]
    r = rejected(batch(recs, codec=Compression.LZ4), COMPACTED)
    message = f"Compacted topic cannot accept message without key in topic partition {TP}"
    assert r.error is ErrorCode.INVALID_RECORD
    assert r.record_errors == (RecordError(1, message), RecordError(3, message))
    assert r.message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the "
        f"first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]"
    )


def test_compacted_topic_accepts_keyed_records() -> None:
    assert isinstance(validate(batch(three(), codec=Compression.GZIP), COMPACTED), Validated)
    assert isinstance(validate(batch(three())), Validated)  # keys are not needed elsewhere


def test_policy_from_config() -> None:
    policy = ValidationPolicy.of(LogConfig(cleanup_policy="compact,delete"), TP)
    assert policy.compacted and not policy.log_append_time
    config = LogConfig(message_timestamp_difference_max_ms=5, message_timestamp_after_max_ms=7)
    policy = ValidationPolicy.of(config, TP)
    assert (policy.timestamp_before_max_ms, policy.timestamp_after_max_ms) == (5, 7)


# -- timestamps ------------------------------------------------------------------------------


def test_timestamps_outside_before_and_after_max() -> None:
    policy = ValidationPolicy(TP, timestamp_before_max_ms=1000, timestamp_after_max_ms=500)
    base = NOW - 2000
    recs = [record(i, ts_delta=d) for i, d in enumerate([0, 1500, 2501, 2500])]
    r = rejected(batch(recs, base_timestamp=base, max_timestamp=base + 2501), policy)
    assert r.error is ErrorCode.INVALID_TIMESTAMP
    assert r.message == "One or more records have been rejected due to invalid timestamp"
    bounds = f"[{NOW - 1000}, {NOW + 500}]"
    assert r.record_errors == (
        RecordError(0, f"Timestamp {base} of message with offset 0 is out of range. "
                       f"The timestamp should be within {bounds}"),
        RecordError(2, f"Timestamp {base + 2501} of message with offset 2 is out of range. "
                       f"The timestamp should be within {bounds}"),
    )


def test_timestamps_inside_the_window_and_no_timestamp_pass() -> None:
    policy = ValidationPolicy(TP, timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    assert isinstance(validate(batch(three()), policy), Validated)
    recs = [record(0), record(1)]
    data = batch(recs, base_timestamp=-1, max_timestamp=-1)  # NO_TIMESTAMP is never out of range
    assert isinstance(validate(data, policy), Validated)


def test_only_one_bound_set_prints_the_other_as_java_does() -> None:
    policy = ValidationPolicy(TP, timestamp_before_max_ms=10)
    r = rejected(batch([record(0)], base_timestamp=NOW - 11), policy)
    assert r.record_errors[0].message is not None
    assert r.record_errors[0].message.endswith(f"[{NOW - 10}, {NOW + 2**63 - 1 - 2**64}]")


def test_key_errors_win_over_timestamp_errors_and_make_it_invalid_timestamp() -> None:
    policy = ValidationPolicy(TP, compacted=True, timestamp_before_max_ms=10)
    recs = [record(0, key=None, ts_delta=0), record(1, ts_delta=0)]
    r = rejected(batch(recs, base_timestamp=NOW - 100), policy)
    assert r.error is ErrorCode.INVALID_TIMESTAMP  # any timestamp error makes it so
    assert [e.batch_index for e in r.record_errors] == [0, 1]
    assert r.record_errors[0].message is not None and "Compacted topic" in r.record_errors[0].message


def test_producer_may_not_set_log_append_time_on_a_log_append_time_topic() -> None:
    policy = ValidationPolicy(TP, log_append_time=True)
    r = rejected(batch(three(), attributes=TIMESTAMP_TYPE_MASK), policy)
    assert r.error is ErrorCode.INVALID_TIMESTAMP and len(r.record_errors) == 3
    assert r.record_errors[0].message == (
        f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={NOW}, key=1 bytes, "
        "value=1 bytes). Producer should not set timestamp type to LogAppendTime."
    )


def test_log_append_time_bit_on_create_time_topic_is_checked_against_max_timestamp() -> None:
    data = batch(three(), attributes=TIMESTAMP_TYPE_MASK, max_timestamp=NOW)
    assert isinstance(validate(data), Validated)
    data = batch(three(), attributes=TIMESTAMP_TYPE_MASK, max_timestamp=-1)
    assert rejected(data).error is ErrorCode.INVALID_TIMESTAMP


# -- compression.type -------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", [Compression.NONE, Compression.ZSTD])
def test_topic_compression_rebuilds_the_batch(target: str, source: Compression) -> None:
    recs = [record(i, key=b"k%d" % i, value=b"v" * 200, ts_delta=i, headers=[(b"h", b"%d" % i)])
            for i in range(5)]
    data = batch(recs, codec=source, max_timestamp=NOW + 4)
    result = validate(data, ValidationPolicy(TP, compression=target))
    assert isinstance(result, Validated)
    want = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
            "lz4": Compression.LZ4, "zstd": Compression.ZSTD}[target]
    assert result.header.attributes & COMPRESSION_MASK == want
    if want == source:
        assert result.records is data
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(result.records)]
    assert got == [(i, NOW + i, b"k%d" % i, b"v" * 200, [("h", b"%d" % i)]) for i in range(5)]
    assert (result.header.records_count, result.header.max_timestamp) == (5, NOW + 4)
    assert isinstance(validate(result.records), Validated)


def test_recompressed_batch_over_max_message_bytes() -> None:
    recs = [record(i, value=bytes(range(256)) * 4) for i in range(3)]
    data = batch(recs, codec=Compression.ZSTD)
    policy = ValidationPolicy(TP, compression="uncompressed", max_message_bytes=len(data) + 10)
    assert rejected(data, policy).error is ErrorCode.MESSAGE_TOO_LARGE


def test_decompressed_size_beyond_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from storage import validator

    recs = [record(i, value=b"\x00" * 1_000_000) for i in range(4)]  # 4 MB of zeros: a tiny zstd frame
    data = batch(recs, codec=Compression.ZSTD)
    monkeypatch.setattr(validator._Scratch, "LIMIT", 2 << 20)
    r = rejected(data)
    assert r.error is ErrorCode.CORRUPT_MESSAGE and "zstd" in r.message
    monkeypatch.undo()
    assert isinstance(validate(data), Validated)


# -- through the log's append path -----------------------------------------------------------


def open_log(tmp_path: Path, **cfg: object) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**cfg), 0, None, True, NOW)  # type: ignore[arg-type]


def stored(log: Log) -> list[tuple[BatchHeader, bytes]]:
    info = log.read(0, 1 << 20, log.log_end_offset, True)
    return [(h, info.records[p : p + h.size_in_bytes]) for p, h in iter_batches(info.records, check_crc=True)]


def test_log_writes_nothing_for_a_rejected_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact")
    result = log.append_as_leader(batch([record(0, key=None)]), 0, NOW)
    assert result.error is ErrorCode.INVALID_RECORD and result.base_offset == -1
    assert [e.batch_index for e in result.record_errors] == [0]
    bad = log.append_as_leader(batch([record(0), record(0)]), 0, NOW)
    assert bad.error is ErrorCode.INVALID_RECORD and not bad.record_errors
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    assert log.append_as_leader(batch(three()), 0, NOW).base_offset == 0
    log.close()


def test_log_clears_a_producer_log_append_time_bit_on_a_create_time_topic(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = batch(three(), attributes=TIMESTAMP_TYPE_MASK, max_timestamp=NOW + 9)
    result = log.append_as_leader(data, 0, NOW)
    assert result.error is ErrorCode.NONE and result.log_append_time == -1
    [(header, _data)] = stored(log)  # CRC checked
    assert header.timestamp_type is TimestampType.CREATE_TIME and header.max_timestamp == NOW + 9
    log.close()


def test_log_append_time_topic_stamps_the_header_only(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    result = log.append_as_leader(batch(three(), base_timestamp=5, max_timestamp=5), 0, NOW + 1)
    assert result.log_append_time == NOW + 1
    [(header, data)] = stored(log)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == NOW + 1
    assert header.base_timestamp == 5  # records keep their own timestamps
    log.close()


def test_log_recompresses_for_the_topic_codec(tmp_path: Path) -> None:
    log = open_log(tmp_path, compression_type="gzip")
    assert log.append_as_leader(batch(three(), codec=Compression.LZ4), 0, NOW).error is ErrorCode.NONE
    [(header, data)] = stored(log)
    assert header.compression == Compression.GZIP
    assert [r.value for r in DefaultRecordBatch(bytes(data))] == [b"v"] * 3
    log.close()
