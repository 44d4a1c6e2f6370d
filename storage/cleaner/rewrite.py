"""One cleaning pass over a log's cleanable segments, run on the cleaner thread: the
offset map of the dirty part, then every group of segments rewritten into a
``.cleaned`` segment (Kafka's Cleaner.doClean / cleanSegments / cleanInto).

Files are read by path with their own descriptors (the segment handle cache belongs
to the event-loop thread); nothing here touches a ``Log``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    ControlRecord,
    CorruptBatchError,
    parse_control_batch,
)
from storage.cleaner.job import CleanedGroup, CleanJob, CleanResult, CleanStats, LastRecord, SegmentRef
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.records import BatchDecoder, empty_batch, rebuild_batch
from storage.cleaner.txn_metadata import TxnMetadata
from storage.index import OFFSET_ENTRY, TIME_ENTRY, AbortedTxn
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
)

CLEANED_SUFFIX = ".cleaned"
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)  # .log last
_READ_CHUNK = 1 << 20

Throttle = Callable[[int], None]  # called with bytes read or written; may sleep or raise


class CleaningAborted(Exception):
    """The cleaner is stopping, or the log changed under it."""


def _no_throttle(_n: int) -> None:
    return None


def cleaned_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / (segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)


def read_batches(
    path: Path, size: int, throttle: Throttle = _no_throttle
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of the first ``size`` bytes of a segment file, with its bytes."""
    with path.open("rb", buffering=0) as f:
        data, pos, left = b"", 0, size

        def fill(need: int) -> bool:
            nonlocal data, pos, left
            while len(data) - pos < need and left > 0:
                chunk = f.read(min(max(_READ_CHUNK, need), left))
                if not chunk:
                    break
                throttle(len(chunk))
                left -= len(chunk)
                data, pos = data[pos:] + chunk, 0
            return len(data) - pos >= need

        while fill(HEADER_SIZE):
            header = BatchHeader.parse(data, pos)
            header.check_shape(size - left - len(data) + pos)
            if not fill(header.size_in_bytes):
                raise CorruptBatchError(pos, "truncated batch")
            yield header, data[pos : pos + header.size_in_bytes]
            pos += header.size_in_bytes


# -- the offset map --------------------------------------------------------------------


def build_offset_map(job: CleanJob, offset_map: OffsetMap, decoder: BatchDecoder,
                     throttle: Throttle = _no_throttle) -> int:
    """Fill ``offset_map`` from the dirty segments (no aborted data, no control batches);
    returns the offset cleaning stops at: the job's end, or less when the map is full."""
    start = job.first_dirty_offset
    # Only transactions reaching into the dirty part: the markers of earlier ones are not read.
    txn = TxnMetadata.of(t for t in job.aborted if t.last_offset >= start)
    for ref in job.segments:
        if ref.next_offset <= start:
            continue
        if offset_map.full:
            return max(offset_map.latest_offset + 1, start)
        for header, batch in read_batches(ref.path, ref.size, throttle):
            if header.is_control:
                txn.on_control_batch(header, _marker(batch, header))
                continue
            if txn.on_batch(header) or header.last_offset < start or header.records_count == 0:
                continue
            records = decoder.records(batch, header)
            offset_map.put_records([r for r in records if r.offset >= start] if header.base_offset < start
                                   else records)
    return job.end_offset


def _marker(batch: bytes, header: BatchHeader) -> ControlRecord | None:
    if header.records_count < 1:
        return None
    try:
        return parse_control_batch(batch)
    except CorruptBatchError:
        return None


# -- grouping ---------------------------------------------------------------------------


def group_segments(segments: tuple[SegmentRef, ...], max_size: int) -> list[tuple[SegmentRef, ...]]:
    """Consecutive segments merged while their total size stays within ``max_size`` and
    their offsets within one segment's relative range (Kafka's groupSegmentsBySize)."""
    groups: list[tuple[SegmentRef, ...]] = []
    current: list[SegmentRef] = []
    size = 0
    for ref in segments:
        if current and (size + ref.size > max_size
                        or ref.next_offset - 1 - current[0].base_offset > MAX_RELATIVE_OFFSET):
            groups.append(tuple(current))
            current, size = [], 0
        current.append(ref)
        size += ref.size
    if current:
        groups.append(tuple(current))
    return groups


# -- rewriting ------------------------------------------------------------------------


class Retention(Enum):
    DELETE = 0  # drop the whole batch
    DELETE_EMPTY = 1  # keep the retained records; drop the batch if none is left
    RETAIN_EMPTY = 2  # keep at least an empty batch (the last of a live producer)


@dataclass(slots=True)
class _Counters:
    read: int = 0
    written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_removed: int = 0


class _SegmentWriter:
    """A ``.cleaned`` segment: the log file and its three indexes (Kafka's index rules)."""

    def __init__(self, directory: Path, base_offset: int, index_interval: int) -> None:
        self.directory = directory
        self.base = base_offset
        self.interval = index_interval
        self._log = cleaned_path(directory, base_offset, LOG_SUFFIX).open("wb")
        self.size = 0
        self._since_index = 0
        self._max_ts = -1
        self._max_ts_offset = -1
        self._offsets = bytearray()
        self._times = bytearray()
        self._last_time: tuple[int, int] | None = None
        self.aborted: list[AbortedTxn] = []

    def append(self, header: BatchHeader, batch: bytes) -> None:
        if header.max_timestamp > self._max_ts:
            self._max_ts, self._max_ts_offset = header.max_timestamp, header.last_offset
        if self._since_index > self.interval:
            self._offsets += OFFSET_ENTRY.pack(header.last_offset - self.base, self.size)
            self._time_entry()
            self._since_index = 0
        self._since_index += len(batch)
        self._log.write(batch)
        self.size += len(batch)

    def _time_entry(self) -> None:
        ts, off = self._max_ts, self._max_ts_offset
        last = self._last_time
        if ts < 0 or (last is not None and (ts <= last[0] or off <= last[1])):
            return
        self._times += TIME_ENTRY.pack(ts, off - self.base)
        self._last_time = (ts, off)

    def finish(self) -> None:
        """Write the indexes and fsync every file (the swap renames them next)."""
        self._time_entry()
        self._log.flush()
        os.fsync(self._log.fileno())
        self._log.close()
        self._write(INDEX_SUFFIX, bytes(self._offsets))
        self._write(TIME_INDEX_SUFFIX, bytes(self._times))
        if self.aborted:
            self._write(TXN_INDEX_SUFFIX, b"".join(t.pack() for t in self.aborted))

    def _write(self, suffix: str, data: bytes) -> None:
        with cleaned_path(self.directory, self.base, suffix).open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def discard(self) -> None:
        """Remove the files written so far, even when closing fails (its buffered bytes
        could not be written: a full disk)."""
        with contextlib.suppress(OSError):
            self._log.close()
        for suffix in SEGMENT_SUFFIXES:
            cleaned_path(self.directory, self.base, suffix).unlink(missing_ok=True)


class _Rewriter:
    """Kafka's cleanInto with its RecordFilter for one pass (all groups share the
    transaction walk, so a marker stays while data of its transaction remains anywhere
    before it in the cleaned range)."""

    def __init__(
        self, job: CleanJob, offset_map: OffsetMap, decoder: BatchDecoder, throttle: Throttle
    ) -> None:
        self.job = job
        self.map = offset_map
        self.decoder = decoder
        self.throttle = throttle
        self.txn = TxnMetadata.of(job.aborted)
        self.now = job.now_ms
        self.horizon = job.now_ms + job.delete_retention_ms
        self.counters = _Counters()

    def clean_group(self, group: tuple[SegmentRef, ...], end_offset: int) -> CleanedGroup:
        writer = _SegmentWriter(self.job.directory, group[0].base_offset, self.job.index_interval_bytes)
        self.txn.cleaned_index = writer.aborted
        try:
            for ref in group:
                for header, batch in read_batches(ref.path, ref.size, self.throttle):
                    self.counters.read += len(batch)
                    kept = self._filter(header, batch)
                    if kept is None:
                        self.counters.batches_removed += 1
                        continue
                    writer.append(header, kept)
                    self.counters.written += len(kept)
                    self.throttle(len(kept))
            writer.finish()
        except BaseException:
            writer.discard()
            raise
        return CleanedGroup(group[0].base_offset, group, end_offset, writer.size)

    def _filter(self, header: BatchHeader, batch: bytes) -> bytes | None:
        """The batch to write for ``batch`` (itself, rebuilt or emptied), None to drop it."""
        control = header.is_control
        can_discard = (self.txn.on_control_batch(header, _marker(batch, header)) if control
                       else self.txn.on_batch(header))
        horizon = header.base_timestamp if header.has_delete_horizon else None
        if control:
            discard_records = can_discard and horizon is not None and horizon <= self.now
        else:
            discard_records = can_discard
        if header.has_producer_id and self._is_last_of_producer(header):
            retention = Retention.RETAIN_EMPTY
        elif discard_records:
            retention = Retention.DELETE
        else:
            retention = Retention.DELETE_EMPTY
        if retention is Retention.DELETE:
            return None
        if discard_records:
            return empty_batch(header)
        if control:
            if can_discard and horizon is None and header.records_count > 0:  # a marker of an empty txn
                return rebuild_batch(header, self.decoder.records(batch, header), self.horizon)
            return batch
        return self._filter_records(header, batch, retention)

    def _filter_records(self, header: BatchHeader, batch: bytes, retention: Retention) -> bytes | None:
        if header.records_count == 0:
            return batch if retention is Retention.RETAIN_EMPTY else None
        records = self.decoder.records(batch, header)
        self.counters.records_read += len(records)
        horizon = header.base_timestamp if header.has_delete_horizon else None
        keep_deletes = horizon is None or self.now < horizon
        retains = self.map.retains
        kept = [
            r for r in records if r.key is not None and retains(r) and (r.value is not None or keep_deletes)
        ]
        self.counters.records_kept += len(kept)
        if not kept:
            return empty_batch(header) if retention is Retention.RETAIN_EMPTY else None
        set_horizon = horizon is None and any(r.value is None for r in kept)
        if len(kept) == len(records) and not set_horizon:
            return batch
        return rebuild_batch(header, kept, self.horizon if set_horizon else horizon)

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        last: LastRecord | None = self.job.producers.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch


def clean(job: CleanJob, offset_map: OffsetMap, decoder: BatchDecoder | None = None,
          throttle: Throttle = _no_throttle) -> CleanResult:
    """Build the map, then write one ``.cleaned`` segment per group of the segments below
    the pass's end. On any error the ``.cleaned`` files written so far are removed."""
    decoder = decoder or BatchDecoder()
    end = build_offset_map(job, offset_map, decoder, throttle)
    cleanable = tuple(ref for ref in job.segments if ref.base_offset < end)
    groups = group_segments(cleanable, job.segment_bytes)
    rewriter = _Rewriter(job, offset_map, decoder, throttle)
    written: list[CleanedGroup] = []
    try:
        for i, group in enumerate(groups):
            nxt = groups[i + 1][0].base_offset if i + 1 < len(groups) else _after(job, group)
            written.append(rewriter.clean_group(group, nxt))
    except BaseException:
        for g in written:
            discard_cleaned(job.directory, g.base_offset)
        raise
    c = rewriter.counters
    stats = CleanStats(c.read, c.written, c.records_read, c.records_kept, c.batches_removed)
    return CleanResult(job, tuple(written), end, stats)


def _after(job: CleanJob, group: tuple[SegmentRef, ...]) -> int:
    """The base offset of the segment after ``group`` (the job's segments end before
    the active segment, whose base is the job's end or later)."""
    refs = job.segments
    i = refs.index(group[-1])
    return refs[i + 1].base_offset if i + 1 < len(refs) else job.end_offset


def discard_cleaned(directory: Path, base_offset: int) -> None:
    for suffix in SEGMENT_SUFFIXES:
        cleaned_path(directory, base_offset, suffix).unlink(missing_ok=True)


__all__ = ["CleaningAborted", "build_offset_map", "clean", "group_segments", "read_batches"]
