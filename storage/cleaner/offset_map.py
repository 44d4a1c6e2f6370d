"""The cleaner's map from key to the offset of its latest record (Kafka's SkimpyOffsetMap).

Kafka stores a 16-byte MD5 of each key in a fixed array; here the keys themselves go
into a dict (filled in C from the C reader's records), so an entry costs about
ENTRY_BYTES and the capacity is derived from ``log.cleaner.dedupe.buffer.size`` and
``log.cleaner.io.buffer.load.factor`` with that cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.cleaner.records import KEY, OFFSET

if TYPE_CHECKING:
    from storage.cleaner.records import Record

ENTRY_BYTES = 128  # a dict slot plus a small bytes key, measured on CPython 3.12


class OffsetMap:
    """Invariant: ``latest_offset`` is the largest offset put (-1 when empty)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"offset map capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._map: dict[bytes | None, int] = {}
        self.latest_offset = -1

    @classmethod
    def for_buffer(cls, buffer_bytes: int, load_factor: float) -> OffsetMap:
        return cls(max(1, int(buffer_bytes * load_factor) // ENTRY_BYTES))

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def put_records(self, records: list[Record]) -> None:
        """Every record of one batch (offset order): a later offset replaces an earlier one."""
        if not records:
            return
        self._map.update(zip(map(KEY, records), map(OFFSET, records), strict=True))
        last = records[-1].offset
        if last > self.latest_offset:
            self.latest_offset = last

    def get(self, key: bytes | None) -> int:
        """The latest offset of ``key``, -1 when it is not in the map."""
        return self._map.get(key, -1)

    def retains(self, record: Record) -> bool:
        """Kafka's first test: the record is the latest of its key (or past the map)."""
        return bool(record.offset > self.latest_offset or record.offset >= self._map.get(record.key, -1))
