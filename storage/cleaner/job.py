"""What the event-loop thread hands the cleaner thread: a consistent, immutable view of
one log's cleanable part, and what the cleaner hands back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from protocol.types import ProducerId
from storage.index import AbortedTxn
from storage.segment import LogSegment


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A closed segment as it was when the job was made. ``segment`` is only touched on
    the event-loop thread (at the swap); the cleaner thread reads ``path`` itself."""

    segment: LogSegment
    base_offset: int
    path: Path
    size: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class LastRecord:
    """The last batch of a live producer (Kafka's LastRecord): its last data offset,
    None when its last entry is a marker, and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CleanJob:
    """Clean ``segments`` (log start up to ``end_offset``, all closed); the dirty part
    starts at ``first_dirty_offset``. ``aborted`` are the aborted transactions
    overlapping the segments, lowest first offset first."""

    name: str
    directory: Path
    segments: tuple[SegmentRef, ...]
    first_dirty_offset: int
    end_offset: int
    aborted: tuple[AbortedTxn, ...]
    producers: dict[ProducerId, LastRecord]
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One ``.cleaned`` segment written at ``base_offset`` to replace ``replaced``."""

    base_offset: int
    replaced: tuple[SegmentRef, ...]
    end_offset: int  # the first offset after the replaced segments
    size: int


@dataclass(frozen=True, slots=True)
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_removed: int = 0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """A finished cleaning pass, ready to be swapped in: the next first dirty offset."""

    job: CleanJob
    groups: tuple[CleanedGroup, ...]
    first_dirty_offset: int
    stats: CleanStats
