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
    """Entries strictly increasing in both epoch and start offset."""

    def __init__(self, directory: Path) -> None:
        self._file = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        self._entries: list[EpochEntry] = self._file.read()
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

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op when already known)."""
        if epoch < 0:
            return
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and last.start_offset <= start_offset:
                return
        # Remove entries that would break monotonicity (Kafka does the same).
        self._entries = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))
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

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset``; the one covering it moves up."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before:
            return
        after = self._entries[len(before) :]
        kept = [EpochEntry(before[-1].epoch, start_offset), *after]
        if kept != self._entries:
            self._entries = kept
            self._flush()

    def clear(self) -> None:
        self._entries = []
        self._flush()

    def _flush(self) -> None:
        self._file.write(self._entries)
