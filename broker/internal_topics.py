"""Reading and appending records of the internal topics (coordinator state).

Off the hot path: coordinator records are few, so they are built and decoded
with kafka-python's record codecs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.replica_manager import Partition
from protocol.record_batch import ControlType

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
    log = part.log
    offset = max(start, log.log_start_offset)
    while offset < log.high_watermark:
        info = log.read(offset, READ_CHUNK, log.high_watermark, True)
        if not info.records:
            return
        records = MemoryRecords(info.records)
        while (batch := records.next_batch()) is not None:
            offset = batch.next_offset
            pid, txn = batch.producer_id, batch.is_transactional
            for record in batch:
                if batch.is_control_batch:
                    control = ControlType(int.from_bytes((record.key or b"\0\0\0\0")[2:4], "big"))
                    yield InternalRecord(record.offset, None, None, pid, txn, control)
                else:
                    yield InternalRecord(record.offset, record.key, record.value, pid, txn)
