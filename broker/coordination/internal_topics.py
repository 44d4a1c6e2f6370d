"""Reading and appending records of the internal topics (coordinator state).

Off the hot path: coordinator records are built with kafka-python's codec. They are
read record by record only when a coordinator loads its partition, which can hold tens
of thousands of them (one per transaction state change): an uncompressed batch is read
directly, without a record object each.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.replication.replica_manager import Partition
from protocol.record_batch import HEADER_SIZE, BatchHeader, ControlType, iter_records

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20
NO_PRODUCER_ID = -1


@dataclass(frozen=True, slots=True)
class InternalRecord:
    """One record of an internal topic, with what its batch says about it."""

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = NO_PRODUCER_ID
    transactional: bool = False
    control: ControlType | None = None  # a COMMIT/ABORT marker of producer_id


def record_batch(
    records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, transactional: bool = False,
) -> bytes:
    """One uncompressed batch of key/value records (transactional for TxnOffsetCommit)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=-1, batch_size=1 << 30,
    )
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp_ms, key, value, [])
    return bytes(builder.build())


def read_records(part: Partition, start: int = 0) -> Iterator[InternalRecord]:
    """Every record (and marker) from `start` to the high watermark."""
    plog = part.log
    offset = max(start, plog.log_start_offset)
    while offset < plog.high_watermark:
        info = plog.read(offset, READ_CHUNK, plog.high_watermark, True)
        chunk = bytes(info.records or b"")
        pos = 0
        while len(chunk) - pos >= HEADER_SIZE:
            header = BatchHeader.parse(chunk, pos)
            if header.size_in_bytes < HEADER_SIZE or pos + header.size_in_bytes > len(chunk):
                break  # the chunk ends inside this batch: the next read starts at it
            offset = header.next_offset
            try:
                decoded = _decode_batch(chunk, pos, header)
            except Exception as exc:  # start-up never fails on what the log holds
                log.warning("%s-%d: skipping unreadable batch at offset %d: %s",
                            part.topic, part.index, header.base_offset, exc)
                decoded = []
            yield from decoded
            pos += header.size_in_bytes
        if pos == 0:
            return


def _decode_batch(chunk: bytes, pos: int, header: BatchHeader) -> list[InternalRecord]:
    """The batch's records; an uncompressed one (what coordinators write) read directly,
    a compressed one through kafka-python's decoder."""
    pid, txn = header.producer_id, header.is_transactional
    if header.is_control:
        return [InternalRecord(offset, None, None, pid, txn, _control_type(key))
                for offset, key, _value in _records(chunk, pos, header)]
    return [InternalRecord(offset, key, value, pid, txn)
            for offset, key, value in _records(chunk, pos, header)]


def _records(chunk: bytes, pos: int, header: BatchHeader) -> Iterable[tuple[int, bytes | None, bytes | None]]:
    if not header.compression:
        return iter_records(chunk, pos, header)
    batch = MemoryRecords(chunk[pos : pos + header.size_in_bytes]).next_batch()
    return [] if batch is None else [(r.offset, r.key, r.value) for r in batch]


def _control_type(key: bytes | None) -> ControlType:
    return ControlType(int.from_bytes((key or b"\0\0\0\0")[2:4], "big"))
