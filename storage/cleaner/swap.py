"""Crash-safe replacement of cleaned segments, as Kafka does it (Log.replaceSegments and
LogLoader's swap recovery).

1. On the cleaner thread, for each cleaned group: ``<base>.swapend`` is written (the
   first offset after the replaced segments: a cleaned segment may end below it when
   its last batches were removed).

Then on the event-loop thread, for all groups of the pass together (one directory
fsync per step):

2. ``.cleaned`` → ``.swap`` for the indexes, then for the ``.log`` (the commit point);
3. the replaced segments are deleted;
4. ``.swap`` → final names, ``.swapend`` removed; the new segment is opened and put in
   the log's list.

Start-up (``recover_swaps``, before a log is opened): ``.cleaned`` files are deleted
(the swap never began); a ``.log.swap`` means the swap was committed: every segment
in its range is deleted and the swap files are renamed (a missing index is rebuilt
by the segment's own recovery); other ``.swap`` files are deleted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from protocol.record_batch import HEADER_SIZE, BatchHeader
from protocol.types import Offset
from storage.checkpoints import atomic_write, fsync_dir
from storage.cleaner.job import CleanedGroup
from storage.cleaner.rewrite import CLEANED_SUFFIX, SEGMENT_SUFFIXES, cleaned_path, discard_cleaned
from storage.segment import LOG_SUFFIX, LogSegment, segment_file_name

log = logging.getLogger(__name__)

SWAP_SUFFIX = ".swap"
SWAP_END_SUFFIX = ".swapend"
DELETED_SUFFIX = ".deleted"

# The broker passes broker.base.faults.crash_point (storage never imports broker).
CrashPoint = Callable[[str], None]


def no_crash_point(_name: str) -> None:
    return None


def swap_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / (segment_file_name(base_offset, suffix) + SWAP_SUFFIX)


def _swap_end_path(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, SWAP_END_SUFFIX)


def prepare(directory: Path, group: CleanedGroup) -> None:
    """Step 1, on the cleaner thread (its two fsyncs stay off the event loop): the
    ``.swapend`` of a group whose ``.cleaned`` files are written. A ``.swapend`` without
    a ``.log.swap`` is removed at start-up."""
    atomic_write(_swap_end_path(directory, group.base_offset), f"{group.end_offset}\n")


def install(
    directory: Path, groups: tuple[CleanedGroup, ...], index_interval: int, now_ms: int,
    crash_point: CrashPoint = no_crash_point,
) -> list[LogSegment]:
    """Steps 2-4 for the prepared groups of one pass, one directory fsync per step for
    all of them; returns the opened replacement segments, one per group. The caller has
    checked that each group's ``replaced`` are still the log's segments and puts the
    returned ones in their place."""
    for group in groups:
        for suffix in SEGMENT_SUFFIXES:  # indexes first, the .log last
            cleaned = cleaned_path(directory, group.base_offset, suffix)
            if cleaned.exists():
                cleaned.rename(swap_path(directory, group.base_offset, suffix))
    fsync_dir(directory)
    crash_point("cleaner.after_swap_rename")
    for group in groups:
        for ref in group.replaced:
            ref.segment.delete()
    crash_point("cleaner.after_delete_old")
    for group in groups:
        _finish_swap(directory, group.base_offset)
    fsync_dir(directory)
    return [LogSegment.open(directory, Offset(group.base_offset), index_interval, now_ms) for group in groups]


def _finish_swap(directory: Path, base: int) -> None:
    for suffix in SEGMENT_SUFFIXES:
        swapped = swap_path(directory, base, suffix)
        if swapped.exists():
            swapped.rename(directory / segment_file_name(base, suffix))
    _swap_end_path(directory, base).unlink(missing_ok=True)


def abandon(directory: Path, group: CleanedGroup) -> None:
    """A cleaned group that will not be swapped in (the log changed meanwhile)."""
    discard_cleaned(directory, group.base_offset)
    _swap_end_path(directory, group.base_offset).unlink(missing_ok=True)


def pass_leftovers(directory: Path) -> list[Path]:
    """The files of a pass that never reached its swap still in ``directory``: ``.cleaned``
    files, and ``.swapend`` files (or their temporaries) with no ``.log.swap`` beside them.
    A pass that failed removes its own, so after one the list is empty."""
    found = list(directory.glob("*" + CLEANED_SUFFIX))
    for end in directory.glob("*" + SWAP_END_SUFFIX + "*"):
        if not swap_path(directory, int(end.name[:20]), LOG_SUFFIX).exists():
            found.append(end)
    return sorted(found)


def recover_swaps(directory: Path) -> int:
    """Complete or roll back interrupted swaps in one partition directory; returns the
    number of swaps completed."""
    for leftover in directory.glob("*" + CLEANED_SUFFIX):
        leftover.unlink()
    for leftover in directory.glob("*" + DELETED_SUFFIX):
        leftover.unlink()
    completed = 0
    for log_swap in sorted(directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
        base = int(log_swap.name[:20])
        end = _swap_end(directory, base, log_swap)
        for old in _segment_bases(directory):
            if base <= old < end:
                for suffix in SEGMENT_SUFFIXES:
                    (directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
        for suffix in SEGMENT_SUFFIXES[:2]:  # a missing .index/.timeindex swap: rebuild both
            if not swap_path(directory, base, suffix).exists():
                for s in SEGMENT_SUFFIXES[:2]:
                    swap_path(directory, base, s).unlink(missing_ok=True)
        _finish_swap(directory, base)
        completed += 1
        log.warning("%s: completed the interrupted swap of cleaned segment %d (up to %d)",
                    directory.name, base, end)
    for stray in directory.glob("*" + SWAP_SUFFIX):
        stray.unlink()
    for stray in directory.glob("*" + SWAP_END_SUFFIX):
        stray.unlink()
    if completed:
        fsync_dir(directory)
    return completed


def _segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*" + LOG_SUFFIX) if p.name[:20].isdigit())


def _swap_end(directory: Path, base: int, log_swap: Path) -> int:
    """The recorded end of the swap's range, else the swap segment's next offset."""
    try:
        return int(_swap_end_path(directory, base).read_text().strip())
    except (OSError, ValueError):
        pass
    end, pos = base, 0
    data = log_swap.read_bytes()
    while pos + HEADER_SIZE <= len(data):
        header = BatchHeader.parse(data, pos)
        if header.batch_length <= 0:
            break
        end = header.next_offset
        pos += header.size_in_bytes
    return end
