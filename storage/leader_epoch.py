"""Leader epoch cache: which epoch started at which offset (Kafka's
LeaderEpochFileCache), persisted in ``leader-epoch-checkpoint``."""

from __future__ import annotations

import logging
from pathlib import Path

from storage.checkpoints import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    """Entries strictly increasing in both epoch and start offset.

    The file is written (with an fsync) only when the entries differ from what it holds. A
    truncation made while a log is opened (`persist=False`) is written by the next `assign`,
    which every append makes, so the file never holds an entry past an offset appended since;
    until then a crash leaves it as it was, and the next open truncates it the same way. A
    restart then writes nothing: an empty partition's (epoch, 0) entry, cut at its log end 0
    and assigned again as it is led, leaves the file as it was (Kafka flushes that truncation
    in the background)."""

    def __init__(self, directory: Path) -> None:
        self._file = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        self._entries: list[EpochEntry] = self._file.read()
        # What the file holds; every change makes a new list, so `is` says "unchanged"
        self._written: list[EpochEntry] = self._entries
        self._check()

    def _check(self) -> None:
        for a, b in zip(self._entries, self._entries[1:], strict=False):
            if b.epoch <= a.epoch or b.start_offset < a.start_offset:
                raise ValueError(f"leader epoch entries not increasing: {a} then {b}")

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, persist: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op when already known); written
        now, or (`persist=False`: a sole replica's epoch at its log end, which it assigns again
        at every start) by the next `assign`, the first append's."""
        if epoch < 0:
            self._flush()
            return
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and last.start_offset <= start_offset:
                self._flush()  # what was kept in memory is on disk before the append it precedes
                return
        # Remove entries that would break monotonicity (Kafka does the same).
        self._entries = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))
        if persist:
            self._flush()

    def end_offset_for_epoch(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's endOffsetFor: the start offset of the first
        epoch above ``requested_epoch``, with the largest epoch <= requested."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        if not floor:
            return requested_epoch, higher.start_offset
        return floor[-1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int:
        epoch = UNDEFINED_EPOCH
        for e in self._entries:
            if e.start_offset > offset:
                break
            epoch = e.epoch
        return epoch

    def truncate_from_end(self, end_offset: int, persist: bool = True) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated there); written now,
        or (`persist=False`, at open) by the next `assign`."""
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        if persist:
            self._flush()

    def truncate_from_start(self, start_offset: int, persist: bool = True) -> None:
        """Drop entries wholly before ``start_offset``; the one covering it moves up."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before:
            return
        after = self._entries[len(before) :]
        self._entries = [EpochEntry(before[-1].epoch, start_offset), *after]
        if persist:
            self._flush()

    def clear(self) -> None:
        self._entries = []
        self._flush()

    def _flush(self) -> None:
        if self._entries is self._written:  # every append asks: one comparison of identity
            return
        if self._entries != self._written:
            self._file.write(self._entries)
        self._written = self._entries
