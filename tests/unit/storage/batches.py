"""Test helpers: client-style record batches built with kafka-python."""

from __future__ import annotations

import warnings
from typing import Protocol

# kafka-python 3.0.12 calls the deprecated importlib.resources.read_text at import time;
# with filterwarnings=error that would break collection (a pyproject filter would be better).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

__all__ = ["DefaultRecordBatch", "DefaultRecordBatchBuilder", "make_batch", "replicated"]


def make_batch(
    values: list[bytes],
    *,
    timestamp: int = 1_000,
    timestamp_step: int = 1,
    compression: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamps: list[int] | None = None,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=10**8,
    )
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else timestamp + i * timestamp_step
        builder.append(i, timestamp=ts, key=None, value=value, headers=[])
    return bytes(builder.build())


class _Replicated(Protocol):
    @property
    def log_end_offset(self) -> int: ...

    def update_high_watermark(self, offset: int) -> int: ...


def replicated(log: _Replicated) -> None:
    """Everything appended counts as replicated: the high watermark moves to the log end.
    A log never moves its own HW; in the broker its partition does (the one HW owner)."""
    log.update_high_watermark(log.log_end_offset)
