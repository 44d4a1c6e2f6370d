"""Reading and rebuilding record batches for the cleaner (off the hot path).

Keys are read in bulk by aiokafka's C reader of v2 batches; compressed batches are
first decompressed with cramjam (storage.validator's scratch buffer, one per cleaner
thread). A batch that loses records is rebuilt as Kafka's
MemoryRecords.buildRetainedRecordsInto does: same base offset, last offset delta,
producer fields and codec; the delete horizon (KIP-534) goes into the base timestamp
with attribute bit 6."""

from __future__ import annotations

import struct
from operator import attrgetter
from typing import Protocol

import cramjam
from aiokafka.record._crecords import DefaultRecordBatch

from protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    build_batch,
    encode_record,
)
from storage.validator import XERIAL_HEADER, _Scratch


class Record(Protocol):
    """What the cleaner reads of a decoded record (aiokafka's C DefaultRecord, untyped)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...


KEY = attrgetter("key")
OFFSET = attrgetter("offset")
_I32 = struct.Struct(">i")
_XERIAL_BLOCK = 32 * 1024


class UndecodableBatchError(ValueError):
    """A stored batch the cleaner cannot read (corrupt or an unknown codec)."""


class BatchDecoder:
    """Decodes whole batches; one per thread (it owns a decompression buffer)."""

    def __init__(self) -> None:
        self._scratch = _Scratch()

    def records(self, batch: bytes, header: BatchHeader) -> list[Record]:
        """The records of one batch, read in C; they copy their bytes out of the buffer."""
        try:
            if header.compression == Compression.NONE:
                return list(DefaultRecordBatch(batch))
            plain = self._scratch.decompress(batch, header.compression)
            try:
                return list(DefaultRecordBatch(plain))
            finally:
                self._scratch.shrink()
        except Exception as exc:  # corrupt data or a codec problem: the caller skips cleaning
            raise UndecodableBatchError(f"batch at offset {header.base_offset}: {exc}") from exc


def _reencode(rec: Record, base_offset: int, base_timestamp: int) -> bytes:
    """A decoded record written again, relative to its new batch's base."""
    return encode_record(rec.offset - base_offset, rec.timestamp - base_timestamp, rec.key, rec.value,
                         rec.headers)


def compress(data: bytes, codec: int) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == Compression.SNAPPY:  # xerial framing, as the Java client writes it
        blocks = [XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            blocks.append(_I32.pack(len(block)) + block)
        return b"".join(blocks)
    raise UndecodableBatchError(f"unknown codec {codec}")


def rebuild_batch(header: BatchHeader, retained: list[Record], delete_horizon_ms: int | None) -> bytes:
    """The batch holding only ``retained`` (non-empty) of ``header``'s records."""
    base = header.base_offset
    base_ts = retained[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_ts = header.max_timestamp
    else:
        max_ts = max(r.timestamp for r in retained)
    plain = b"".join(_reencode(r, base, base_ts) for r in retained)
    kept_bits = COMPRESSION_MASK | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK
    attributes = header.attributes & kept_bits
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return build_batch(
        compress(plain, header.compression),
        records_count=len(retained),
        last_offset_delta=header.last_offset_delta,
        base_offset=base,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's writeEmptyHeader: the batch's offsets and producer fields, no records
    (kept so that a live producer's last sequence and epoch survive cleaning)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return build_batch(
        b"",
        records_count=0,
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
