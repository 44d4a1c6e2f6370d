"""Reading and appending records of the internal topics (coordinator state).

Off the hot path: coordinator records are few, so they are built and decoded
with kafka-python's record codecs.
"""

from __future__ import annotations

from collections.abc import Iterator

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.replica_manager import Partition

READ_CHUNK = 1 << 20


def record_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One uncompressed, non-transactional batch of key/value records."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp_ms, key, value, [])
    return bytes(builder.build())


def read_records(part: Partition, start: int = 0) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record from `start` to the high watermark."""
    log = part.log
    offset = max(start, log.log_start_offset)
    while offset < log.high_watermark:
        info = log.read(offset, READ_CHUNK, log.high_watermark, True)
        if not info.records:
            return
        records = MemoryRecords(info.records)
        while (batch := records.next_batch()) is not None:
            offset = batch.next_offset
            if not batch.is_control_batch:
                for record in batch:
                    yield record.offset, record.key, record.value
