"""Reading and appending records of the internal topics (coordinator state).

Off the hot path: coordinator records are few, so they are built and decoded
with kafka-python's record codecs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.replication.replica_manager import Partition
from protocol.record_batch import ControlType

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
        if not info.records:
            return
        records = MemoryRecords(info.records)
        while (batch := records.next_batch()) is not None:
            offset = batch.next_offset
            try:
                decoded = _decode_batch(batch)
            except Exception as exc:  # start-up never fails on what the log holds
                log.warning("%s-%d: skipping unreadable batch at offset %d: %s",
                            part.topic, part.index, batch.base_offset, exc)
                continue
            yield from decoded


def _decode_batch(batch: Any) -> list[InternalRecord]:
    pid, txn = batch.producer_id, batch.is_transactional
    out = []
    for record in batch:
        if batch.is_control_batch:
            control = ControlType(int.from_bytes((record.key or b"\0\0\0\0")[2:4], "big"))
            out.append(InternalRecord(record.offset, None, None, pid, txn, control))
        else:
            out.append(InternalRecord(record.offset, record.key, record.value, pid, txn))
    return out
