"""One log segment: a ``.log`` file of batches plus its offset, time and
transaction indexes (Kafka's LogSegment)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from protocol.record_batch import HEADER_SIZE, BatchHeader, CorruptBatchError, compute_crc
from protocol.types import Offset
from storage.handles import CachedFile
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
_READ_BLOCK = 64 * 1024
MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """Invariants: batches are contiguous from position 0, offsets strictly increase
    and are >= base_offset; ``size`` is the file length; indexes only point at
    batch starts below ``size``."""

    def __init__(self, directory: Path, base_offset: Offset, index_interval_bytes: int, now_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = now_ms
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self._file = CachedFile(self.log_path)
        self.size = self._file.size()
        missing = not self.path_for(INDEX_SUFFIX).exists() or not self.path_for(TIME_INDEX_SUFFIX).exists()
        self.needs_recovery = missing and self.size > 0
        empty = self.size == 0  # its index files are created with its first batch (`append`)
        try:
            self.offset_index = OffsetIndex(self.path_for(INDEX_SUFFIX), base_offset, lazy=empty)
            self.time_index = TimeIndex(self.path_for(TIME_INDEX_SUFFIX), base_offset, lazy=empty)
        except CorruptIndexError:
            # A torn index file: start empty; recover() rebuilds it from the log.
            self.path_for(INDEX_SUFFIX).unlink(missing_ok=True)
            self.path_for(TIME_INDEX_SUFFIX).unlink(missing_ok=True)
            self.offset_index = OffsetIndex(self.path_for(INDEX_SUFFIX), base_offset)
            self.time_index = TimeIndex(self.path_for(TIME_INDEX_SUFFIX), base_offset)
            self.needs_recovery = True
        try:
            self.txn_index = TransactionIndex(self.path_for(TXN_INDEX_SUFFIX), base_offset)
        except CorruptIndexError:
            # A torn entry (a write cut short on a full disk): recover() and the log's
            # transaction-index rebuild write it again from the segment's markers.
            self.path_for(TXN_INDEX_SUFFIX).unlink(missing_ok=True)
            self.txn_index = TransactionIndex(self.path_for(TXN_INDEX_SUFFIX), base_offset)
            self.needs_recovery = True
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self._bytes_since_last_index = 0

    def path_for(self, suffix: str) -> Path:
        return self.directory / segment_file_name(self.base_offset, suffix)

    @classmethod
    def open(cls, directory: Path, base_offset: Offset, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """Open an existing (or new) segment. Missing or insane indexes, or a torn
        unindexed tail, set ``needs_recovery`` (the caller then runs recover())."""
        segment = cls(directory, base_offset, index_interval_bytes, now_ms)
        if not segment.needs_recovery:
            try:
                segment.sanity_check()
                segment._load_tail()
            except (CorruptIndexError, CorruptBatchError):
                segment.needs_recovery = True
        return segment

    # -- invariants ---------------------------------------------------------

    def sanity_check(self) -> None:
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def _load_tail(self) -> None:
        """Restore next offset / max timestamp from the indexes plus a header scan of the
        batches after the last offset-index entry."""
        last = self.time_index.last_entry()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        _, start = self.offset_index.last_entry()
        self._bytes_since_last_index = self.size - start if len(self.offset_index) else 0
        prev_next = self.base_offset
        for pos, header in self.iter_headers(start, checked=True):
            if pos + header.size_in_bytes > self.size:
                raise CorruptBatchError(pos, "truncated batch")
            if header.base_offset < prev_next:
                raise CorruptBatchError(pos, "offsets not increasing")
            prev_next = header.next_offset
            self._note_timestamp(header)
            if not len(self.offset_index):
                self._bytes_since_last_index += header.size_in_bytes
        self.next_offset = prev_next
        self._load_first_batch_timestamp()

    def _load_first_batch_timestamp(self) -> None:
        if self.size >= HEADER_SIZE:
            self.first_batch_timestamp = BatchHeader.parse(self._file.pread(HEADER_SIZE, 0)).max_timestamp

    def _note_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    # -- writes -------------------------------------------------------------

    def append(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> int:
        """Append one batch (already offset-assigned); returns its file position."""
        if header.base_offset < self.next_offset or header.base_offset < self.base_offset:
            raise ValueError(
                f"append at offset {header.base_offset} below segment next offset {self.next_offset}"
            )
        if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            raise ValueError(f"offset {header.last_offset} overflows segment {self.base_offset}")
        position = self.size
        if position == 0:  # a segment with data has both index files, entries or not
            self.offset_index.create_file()
            self.time_index.create_file()
        try:
            self._file.pwrite_all(batch, position)
        except OSError:
            self._file.truncate(position)
            raise
        self.size += len(batch)
        self.next_offset = header.next_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self._note_timestamp(header)
        self._index_batch(header, position)
        return position

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_last_index > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_index = 0
        self._bytes_since_last_index += header.size_in_bytes

    def on_become_inactive(self) -> None:
        """Make the time index's last entry the segment's max (Kafka does this at roll)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def recover(self) -> int:
        """Re-validate every batch, rebuild the indexes and truncate at the first bad
        byte. Returns the number of bytes truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_last_index = 0
        position = 0
        while position < self.size:
            header = self._valid_batch_at(position)
            if header is None:
                break
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = header.max_timestamp
            self._note_timestamp(header)
            self._index_batch(header, position)
            self.next_offset = header.next_offset
            position += header.size_in_bytes
        truncated = self.size - position
        if truncated:
            self._file.truncate(position)
            self.size = position
        self.txn_index.truncate_to(self.next_offset)
        self.needs_recovery = False
        return truncated

    def _valid_batch_at(self, position: int) -> BatchHeader | None:
        raw = self._file.pread(HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        header = BatchHeader.parse(raw)
        try:
            header.check_shape(position)
        except CorruptBatchError:
            return None
        if position + header.size_in_bytes > self.size:
            return None
        if header.base_offset < self.next_offset:
            return None
        if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return None
        batch = self._file.pread(header.size_in_bytes, position)
        if compute_crc(batch, 0, header) != header.crc:
            return None
        return header

    def truncate_to(self, offset: int) -> int:
        """Remove every batch with base offset >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        if header.base_offset < offset:
            position += header.size_in_bytes
        removed = self.size - position
        self._file.truncate(position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.max_timestamp = self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        self._load_tail()
        return removed

    # -- reads --------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        return self._file.pread(length, position)

    def iter_headers(self, start: int = 0, checked: bool = False) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the batches from ``start`` (a batch boundary), reading in blocks."""
        pos = start
        buf = b""
        buf_start = start
        while pos + HEADER_SIZE <= self.size:
            off = pos - buf_start
            if off < 0 or off + HEADER_SIZE > len(buf):
                buf = self._file.pread(min(_READ_BLOCK, self.size - pos), pos)
                buf_start, off = pos, 0
            header = BatchHeader.parse(buf, off)
            if checked:
                header.check_shape(pos)
            yield pos, header
            pos += header.size_in_bytes
        if checked and pos != self.size:
            raise CorruptBatchError(pos, "truncated header")

    def translate_offset(self, offset: int, start: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(max(position, start)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def find_by_timestamp(self, timestamp: int, start_offset: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """The batches whose max timestamp >= ``timestamp``, in offset order, from the time index's
        entry (or ``start_offset``, if later) on (Kafka's FileRecords.searchForTimestamp)."""
        entry = self.time_index.lookup_before(timestamp)
        _, start = self.offset_index.lookup(max(entry[1] if entry is not None else 0, start_offset))
        for pos, header in self.iter_headers(start):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                yield pos, header

    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when there is none (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- lifecycle ----------------------------------------------------------

    def flush(self) -> None:
        self._file.fsync()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self._file.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        self._file.delete()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
