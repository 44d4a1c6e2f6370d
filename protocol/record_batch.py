"""Sans-I/O view of magic-v2 record batches: the 61-byte header, CRC checks,
in-place offset assignment, and control batches.

Nothing here iterates records on the produce/fetch path: a batch is bytes plus
the header parsed with one ``struct.unpack_from``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from protocol.types import Offset, ProducerEpoch, ProducerId

# baseOffset i64 · batchLength i32 · partitionLeaderEpoch i32 · magic i8 · crc u32 ·
# attributes i16 · lastOffsetDelta i32 · baseTimestamp i64 · maxTimestamp i64 ·
# producerId i64 · producerEpoch i16 · baseSequence i32 · recordsCount i32
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER_STRUCT.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
# Offsets of the fields inside a batch.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
CRC_COVERED_POS = ATTRIBUTES_POS
# Smallest legal batchLength: the header without its first 12 bytes.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

CURRENT_MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class CorruptBatchError(ValueError):
    """The bytes at ``position`` are not a valid magic-v2 batch."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"corrupt record batch at position {position}: {reason}")
        self.position = position
        self.reason = reason


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: Offset
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
        """Parse the header at ``pos``; the caller guarantees 61 bytes are there."""
        return cls(*HEADER_STRUCT.unpack_from(buf, pos))

    def pack(self) -> bytes:
        return HEADER_STRUCT.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    # Offset arithmetic is an Offset; no NewType call on this per-batch path.
    @property
    def last_offset(self) -> Offset:
        return self.base_offset + self.last_offset_delta  # type: ignore[return-value]

    @property
    def next_offset(self) -> Offset:
        return self.last_offset + 1  # type: ignore[return-value]

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        """Kafka's rule: any id below 0 (not only -1) means "no producer id"."""
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    def check_shape(self, position: int = 0) -> None:
        """Header-only structural checks; raises CorruptBatchError."""
        if self.batch_length < MIN_BATCH_LENGTH:
            raise CorruptBatchError(position, f"batch length {self.batch_length} too small")
        if self.magic != CURRENT_MAGIC:
            raise CorruptBatchError(position, f"unsupported magic {self.magic}")
        if self.last_offset_delta < 0:
            raise CorruptBatchError(position, f"negative lastOffsetDelta {self.last_offset_delta}")


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    end = pos + header.size_in_bytes
    return crc32c.crc32c(memoryview(buf)[pos + CRC_COVERED_POS : end])


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC matches the bytes (the whole batch must be in ``buf``)."""
    if pos + header.size_in_bytes > len(buf):
        return False
    return compute_crc(buf, pos, header) == header.crc


def read_header(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    """Parse and shape-check the batch at ``pos``; the full batch must be present."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(pos, "truncated header")
    header = BatchHeader.parse(buf, pos)
    header.check_shape(pos)
    if pos + header.size_in_bytes > len(buf):
        raise CorruptBatchError(pos, "truncated batch")
    return header


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0, *, check_crc: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch of ``buf``.

    Stops cleanly at the exact end of the buffer; raises CorruptBatchError
    (whose ``position`` is the first bad byte) on anything else.
    """
    pos = start
    end = len(buf)
    while pos < end:
        header = read_header(buf, pos)
        if check_crc and not crc_ok(buf, pos, header):
            raise CorruptBatchError(pos, "CRC mismatch")
        yield pos, header
        pos += header.size_in_bytes


def patch_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int
) -> None:
    """Assign the base offset and leader epoch in place (both outside the CRC)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, pos: int, timestamp_type: TimestampType, timestamp: int
) -> BatchHeader:
    """Kafka's DefaultRecordBatch.setMaxTimestamp: maxTimestamp := timestamp and the
    timestamp-type bit, recomputing the CRC (both are covered by it). Returns the new header."""
    header = BatchHeader.parse(buf, pos)
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_POS, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp)
    header = BatchHeader.parse(buf, pos)
    _U32.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, header))
    return BatchHeader.parse(buf, pos)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> BatchHeader:
    """Stamp LogAppendTime: maxTimestamp := timestamp, set the timestamp-type bit,
    recompute the CRC. Returns the new header."""
    return set_max_timestamp(buf, pos, TimestampType.LOG_APPEND_TIME, timestamp)


# ----------------------------------------------------------------------------
# Building batches (control batches; off the hot path)


def zigzag_varint(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One v2 record."""
    body = bytearray(b"\x00")  # attributes
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    body += _nullable_bytes(key) + _nullable_bytes(value)
    body += zigzag_varint(len(headers))
    for name, header_value in headers:
        body += _nullable_bytes(name.encode()) + _nullable_bytes(header_value)
    return zigzag_varint(len(body)) + bytes(body)


def _nullable_bytes(data: bytes | None) -> bytes:
    return zigzag_varint(-1) if data is None else zigzag_varint(len(data)) + data


def build_batch(
    records: bytes,
    *,
    records_count: int,
    last_offset_delta: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    attributes: int = 0,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """Frame already-encoded (uncompressed) records into a batch with a valid CRC."""
    header = BatchHeader(
        base_offset=Offset(base_offset),
        batch_length=MIN_BATCH_LENGTH + len(records),
        partition_leader_epoch=partition_leader_epoch,
        magic=CURRENT_MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=ProducerId(producer_id),
        producer_epoch=ProducerEpoch(producer_epoch),
        base_sequence=base_sequence,
        records_count=records_count,
    )
    buf = bytearray(header.pack() + records)
    _U32.pack_into(buf, CRC_POS, compute_crc(buf, 0, header))
    return bytes(buf)


def control_record_key(control_type: ControlType) -> bytes:
    return struct.pack(">hh", 0, int(control_type))


def control_record_value(coordinator_epoch: int) -> bytes:
    return struct.pack(">hi", 0, coordinator_epoch)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    control_type: ControlType
    coordinator_epoch: int


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transactional control batch holding one COMMIT/ABORT end-transaction marker."""
    record = encode_record(0, 0, control_record_key(control_type), control_record_value(coordinator_epoch))
    return build_batch(
        record,
        records_count=1,
        last_offset_delta=0,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=TRANSACTIONAL_MASK | CONTROL_MASK,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        byte = buf[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), pos


def iter_records(
    batch: bytes, pos: int, header: BatchHeader,
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of each record of the uncompressed batch at ``pos`` (its
    headers skipped): what a coordinator's load reads, without a record object each.
    CorruptBatchError on a record that does not fit its batch."""
    if header.compression:
        raise CorruptBatchError(pos, "compressed: decompress before reading its records")
    p = pos + HEADER_SIZE
    end = pos + header.size_in_bytes
    try:
        for _ in range(header.records_count):
            length, p = _read_varint(batch, p)
            record_end = p + length
            _ts_delta, p = _read_varint(batch, p + 1)  # past the record's attributes
            offset_delta, p = _read_varint(batch, p)
            key, p = _read_bytes(batch, p)
            value, p = _read_bytes(batch, p)
            if record_end > end or p > record_end:
                raise ValueError("record overruns its batch")
            yield header.base_offset + offset_delta, key, value
            p = record_end
    except ValueError as exc:
        raise CorruptBatchError(pos, f"bad record: {exc}") from exc


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    return buf[pos : pos + length], pos + length


def parse_control_batch(batch: bytes, pos: int = 0) -> ControlRecord:
    """Decode the single marker of an uncompressed control batch."""
    header = read_header(batch, pos)
    if not header.is_control or header.records_count < 1:
        raise CorruptBatchError(pos, "not a control batch")
    _offset, key, value = next(iter_records(batch, pos, header))
    try:
        _kver, ctype = struct.unpack(">hh", (key or b"")[:4])
        _vver, coordinator_epoch = struct.unpack(">hi", (value or b"")[:6])
        return ControlRecord(ControlType(ctype), coordinator_epoch)
    except (ValueError, struct.error) as exc:
        raise CorruptBatchError(pos, f"bad control record: {exc}") from exc
