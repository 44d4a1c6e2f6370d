"""Which part of a log is cleanable and which log to clean next (Kafka's
LogCleanerManager: cleanableOffsets, grabFilthiestCompactedLog). Runs on the
event-loop thread: it reads the live ``Log``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from storage.cleaner.job import CleanJob, LastRecord, SegmentRef
from storage.log import Log
from storage.log_config import LONG_MAX
from storage.segment import LogSegment

log = logging.getLogger(__name__)


def is_compacted(log_: Log) -> bool:
    return "compact" in (p.strip() for p in log_.config.cleanup_policy.split(","))


@dataclass(frozen=True, slots=True)
class LogToClean:
    """The cleanable view of one log: [log start, first dirty) was cleaned before,
    [first dirty, end) may be cleaned now; ``end`` is the base of the segment holding
    the first uncleanable offset."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    end_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    held_by_transaction: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def _next_bases(segments: list[LogSegment], log_end: int) -> list[int]:
    return [s.base_offset for s in segments[1:]] + [log_end]


def cleanable(log_: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    segments = log_.segments
    start, end_of_log = log_.log_start_offset, log_.log_end_offset
    valid = checkpoint is not None and start <= checkpoint <= end_of_log
    first_dirty = checkpoint if valid and checkpoint is not None else start
    nexts = _next_bases(segments, end_of_log)
    active = segments[-1]
    lso = log_.last_stable_offset
    uncleanable = min(lso, active.base_offset)
    held = lso < active.base_offset and log_.first_unstable_offset is not None
    dirty = [s for s, n in zip(segments[:-1], nexts[:-1], strict=True) if n > first_dirty]
    cfg = log_.config
    if cfg.min_compaction_lag_ms > 0:
        young = next((s for s in dirty if s.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms), None)
        if young is not None and young.base_offset < uncleanable:
            uncleanable, held = young.base_offset, False
    end = max((s.base_offset for s in segments if s.base_offset <= uncleanable), default=start)
    end = max(end, segments[0].base_offset)
    clean_bytes = sum(s.size for s, n in zip(segments, nexts, strict=True) if n <= first_dirty)
    cleanable_bytes = sum(s.size for s, n in zip(segments, nexts, strict=True)
                          if n > first_dirty and s.base_offset < end and n <= end)
    now_needed = False
    if cfg.max_compaction_lag_ms < LONG_MAX and dirty:
        ts = dirty[0].first_batch_timestamp
        now_needed = ts is not None and 0 <= ts < now_ms - cfg.max_compaction_lag_ms
    return LogToClean(first_dirty, uncleanable, end, clean_bytes, cleanable_bytes, now_needed, held)


def should_clean(view: LogToClean, min_ratio: float) -> bool:
    if view.cleanable_bytes <= 0:
        return False
    return view.needs_compaction_now or view.ratio > min_ratio


def make_job(log_: Log, view: LogToClean, now_ms: int) -> CleanJob:
    """Snapshot what the cleaner thread needs: closed segments below the end, the
    aborted transactions over them, and every live producer's last batch."""
    segments = log_.segments
    nexts = _next_bases(segments, log_.log_end_offset)
    refs = tuple(
        SegmentRef(s, s.base_offset, s.log_path, s.size, n)
        for s, n in zip(segments[:-1], nexts[:-1], strict=True)
        if n <= view.end_offset
    )
    first = refs[0].base_offset if refs else view.end_offset
    aborted = tuple(log_.aborted_transactions(first, view.end_offset))
    producers = {
        pid: LastRecord(e.last_data_offset if e.batches else None, e.producer_epoch)
        for pid, e in log_.producer_state.entries().items()
    }
    cfg = log_.config
    return CleanJob(
        name=log_.directory.name,
        directory=log_.directory,
        segments=refs,
        first_dirty_offset=view.first_dirty_offset,
        end_offset=view.end_offset,
        aborted=aborted,
        producers=producers,
        delete_retention_ms=cfg.delete_retention_ms,
        segment_bytes=cfg.segment_bytes,
        index_interval_bytes=cfg.index_interval_bytes,
        now_ms=now_ms,
    )
