"""Kafka's segment indexes: ``.index`` (offset → position), ``.timeindex``
(max timestamp → offset) and ``.txnindex`` (aborted transactions).

Each index keeps its entries in memory and appends them to a file holding
exactly those entries (no preallocation); a ``.txnindex`` file is created by its
first entry, as in Kafka, and a new segment's ``.index`` and ``.timeindex`` by its
first batch (Kafka's LazyIndex: a partition that never gets a record has none).
Files are opened through the bounded handle cache (storage/handles.py). A failed
sanity check raises CorruptIndexError; the log then rebuilds the index from its
segment.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.types import ProducerId
from storage.handles import CachedFile, FileClosedError

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, file position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, first, last, lastStableOffset
TXN_VERSION = 0


class CorruptIndexError(Exception):
    pass


class _IndexFile:
    """An append-only file of fixed-size entries, written with pwrite through the
    handle cache. A ``lazy`` file (Kafka's ``.txnindex``) is created by its first
    write, so segments without aborted transactions have none."""

    def __init__(self, path: Path, entry_size: int, lazy: bool = False) -> None:
        self.path = path
        self._entry_size = entry_size
        self._closed = False
        self._file: CachedFile | None = None
        if not lazy or path.exists():
            self._file = CachedFile(path)

    def create(self) -> None:
        """The file exists from now on (a lazy one is created now)."""
        self._opened()

    def _opened(self) -> CachedFile:
        if self._file is None:
            if self._closed:
                raise FileClosedError(self.path)
            self._file = CachedFile(self.path)
        return self._file

    def read_all(self) -> bytes:
        if self._file is None:
            return b""
        size = self._file.size()
        if size % self._entry_size:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of {self._entry_size}")
        return self._file.pread(size, 0)

    def write_at(self, entry_no: int, data: bytes) -> None:
        self._opened().pwrite_all(data, entry_no * self._entry_size)

    def truncate_entries(self, count: int) -> None:
        if self._file is not None:
            self._file.truncate(count * self._entry_size)

    def flush(self) -> None:
        if self._file is not None:
            self._file.fsync()

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex:
    """Sparse map from batch last offset to the batch's file position."""

    def __init__(self, path: Path, base_offset: int, lazy: bool = False) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(path, OFFSET_ENTRY.size, lazy)
        self._offsets: list[int] = []
        self._positions: list[int] = []
        data = self._file.read_all()
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            self._offsets.append(base_offset + rel)
            self._positions.append(pos)

    @property
    def path(self) -> Path:
        return self._file.path

    def create_file(self) -> None:
        """Its file exists from now on (a lazy index is created now)."""
        self._file.create()

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def sanity_check(self, log_size: int) -> None:
        prev_off, prev_pos = self.base_offset - 1, -1
        for off, pos in zip(self._offsets, self._positions, strict=True):
            if off <= prev_off or pos <= prev_pos or off - self.base_offset > 0x7FFFFFFF:
                raise CorruptIndexError(f"{self.path}: entries not increasing at {off}")
            if pos >= log_size:
                raise CorruptIndexError(f"{self.path}: position {pos} beyond log end {log_size}")
            prev_off, prev_pos = off, pos

    def append(self, offset: int, position: int) -> None:
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(
                f"offset index append ({offset}, {position}) not after "
                f"({self._offsets[-1]}, {self._positions[-1]})"
            )
        if offset < self.base_offset:
            raise ValueError(f"offset {offset} below index base {self.base_offset}")
        self._file.write_at(len(self._offsets), OFFSET_ENTRY.pack(offset - self.base_offset, position))
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, or (base_offset, 0)."""
        i = bisect.bisect_right(self._offsets, target_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        self._truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or after ``position``."""
        self._truncate_entries(bisect.bisect_left(self._positions, position))

    def _truncate_entries(self, keep: int) -> None:
        del self._offsets[keep:]
        del self._positions[keep:]
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self._truncate_entries(0)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()


class TimeIndex:
    """Sparse map from (monotonic) max timestamp to the offset holding it."""

    def __init__(self, path: Path, base_offset: int, lazy: bool = False) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(path, TIME_ENTRY.size, lazy)
        self._timestamps: list[int] = []
        self._offsets: list[int] = []
        for ts, rel in TIME_ENTRY.iter_unpack(self._file.read_all()):
            self._timestamps.append(ts)
            self._offsets.append(base_offset + rel)

    @property
    def path(self) -> Path:
        return self._file.path

    def create_file(self) -> None:
        """Its file exists from now on (a lazy index is created now)."""
        self._file.create()

    def __len__(self) -> int:
        return len(self._timestamps)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets, strict=True))

    def last_entry(self) -> tuple[int, int] | None:
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def sanity_check(self) -> None:
        prev_ts, prev_off = None, self.base_offset - 1
        for ts, off in zip(self._timestamps, self._offsets, strict=True):
            if (prev_ts is not None and ts <= prev_ts) or off <= prev_off:
                raise CorruptIndexError(f"{self.path}: entries not increasing at {ts}/{off}")
            prev_ts, prev_off = ts, off

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append when ``timestamp`` is larger than the last entry's (Kafka's rule)."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return False
        if self._offsets and offset <= self._offsets[-1]:
            return False
        if offset < self.base_offset:
            raise ValueError(f"offset {offset} below index base {self.base_offset}")
        self._file.write_at(len(self._timestamps), TIME_ENTRY.pack(timestamp, offset - self.base_offset))
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        return True

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """Last entry whose timestamp is strictly below ``timestamp``."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return None
        return self._timestamps[i], self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self.truncate_to(self.base_offset)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: ProducerId
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = TXN_VERSION

    def pack(self) -> bytes:
        return TXN_ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> AbortedTxn:
        version, pid, first, last, lso = TXN_ENTRY.unpack(data)
        if version != TXN_VERSION:
            raise CorruptIndexError(f"unknown aborted-transaction entry version {version}")
        return cls(pid, first, last, lso, version)


class TransactionIndex:
    """Aborted transactions of one segment, ordered by their last (marker) offset."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(path, TXN_ENTRY.size, lazy=True)
        data = self._file.read_all()
        self._entries = [
            AbortedTxn.unpack(data[i : i + TXN_ENTRY.size]) for i in range(0, len(data), TXN_ENTRY.size)
        ]

    @property
    def path(self) -> Path:
        return self._file.path

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self._entries)

    def sanity_check(self) -> None:
        prev = -1
        for e in self._entries:
            if e.last_offset <= prev or e.first_offset > e.last_offset:
                raise CorruptIndexError(f"{self.path}: entry {e} out of order")
            prev = e.last_offset

    def append(self, txn: AbortedTxn) -> None:
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise ValueError(
                f"aborted txn last offset {txn.last_offset} not after {self._entries[-1].last_offset}"
            )
        if txn.first_offset > txn.last_offset:
            raise ValueError(f"aborted txn first offset after last: {txn}")
        self._file.write_at(len(self._entries), txn.pack())
        self._entries.append(txn)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Entries overlapping [fetch_offset, upper_bound_offset)."""
        return [
            e for e in self._entries if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset
        ]

    def truncate_to(self, offset: int) -> None:
        keep = 0
        while keep < len(self._entries) and self._entries[keep].last_offset < offset:
            keep += 1
        del self._entries[keep:]
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self.truncate_to(-1)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()
