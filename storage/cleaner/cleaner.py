"""The log cleaner: picks the filthiest compacted log, cleans it on its own thread
beside the event loop at a bounded I/O rate, and swaps the result in on the event
loop (Kafka's LogCleaner with one CleanerThread).

Split by thread: ``select`` and ``install`` read and change ``Log`` objects and run
on the event-loop thread; ``rewrite.clean`` reads and writes files only and runs on
the cleaner thread. ``clean_once`` chains the three on one thread (tests, tools)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from protocol.types import Offset, TopicPartition
from storage.checkpoints import CorruptCheckpointError, OffsetCheckpointFile
from storage.cleaner.job import CleanJob, CleanResult
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.records import BatchDecoder, UndecodableBatchError
from storage.cleaner.rewrite import CleaningAborted, clean
from storage.cleaner.selection import LogToClean, cleanable, is_compacted, make_job, should_clean
from storage.cleaner.swap import CrashPoint, abandon, install, no_crash_point, pass_leftovers, prepare
from storage.log import Log
from storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
T = TypeVar("T")
Args = TypeVarTuple("Args")


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` keys."""

    enable: bool = True
    io_max_bytes_per_second: float = float("inf")
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    backoff_ms: int = 15000

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> CleanerConfig:
        return cls(
            enable=bool(props.get("log.cleaner.enable", True)),
            io_max_bytes_per_second=float(props.get("log.cleaner.io.max.bytes.per.second", float("inf"))),
            dedupe_buffer_size=int(props.get("log.cleaner.dedupe.buffer.size", 134217728)),
            io_buffer_load_factor=float(props.get("log.cleaner.io.buffer.load.factor", 0.9)),
            backoff_ms=int(props.get("log.cleaner.backoff.ms", 15000)),
        )


def _prepare(job: CleanJob, result: CleanResult) -> None:
    try:
        for group in result.groups:
            prepare(job.directory, group)
    except BaseException:
        for group in result.groups:
            abandon(job.directory, group)
        raise


def _check_nothing_left(job: CleanJob) -> None:
    with contextlib.suppress(OSError):  # the directory itself may be gone or unreadable
        left = pass_leftovers(job.directory)
        for path in left:
            path.unlink(missing_ok=True)
        if left:
            log.error("%s: a failed cleaning pass left %s behind (removed)", job.name,
                      ", ".join(p.name for p in left))


class Throttler:
    """Keeps the cleaner's reads plus writes under ``rate`` bytes/s (Kafka's Throttler);
    raises CleaningAborted once ``stop`` is set."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.rate = rate
        self.stop = stop
        self._start = time.monotonic()
        self._bytes = 0

    def __call__(self, n: int) -> None:
        if self.stop.is_set():
            raise CleaningAborted("the cleaner is stopping")
        if self.rate == float("inf"):
            return
        self._bytes += n
        ahead = self._bytes / self.rate - (time.monotonic() - self._start)
        if ahead > 0.01 and self.stop.wait(ahead):
            raise CleaningAborted("the cleaner is stopping")


class LogCleaner:
    """Invariant: at most one log is being cleaned at a time (``_cleaning``)."""

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        config: CleanerConfig,
        crash_point: CrashPoint = no_crash_point,
    ) -> None:
        self._logs = logs
        self.config = config
        self._crash_point = crash_point
        self._checkpoints: dict[Path, dict[TopicPartition, Offset]] = {}
        self._uncleanable: set[TopicPartition] = set()  # data it cannot decode: until restart
        self._io_failed: dict[TopicPartition, int] = {}  # after an I/O error: not before (ms)
        self._held: dict[TopicPartition, int] = {}  # last reported hanging-transaction offset
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.passes = 0  # finished cleaning passes (tests, metrics)

    # -- checkpoints ------------------------------------------------------------------

    def _checkpoint_of(self, directory: Path) -> dict[TopicPartition, Offset]:
        found = self._checkpoints.get(directory)
        if found is None:
            try:
                found = OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).read()
            except (CorruptCheckpointError, OSError) as exc:
                log.warning("ignoring unreadable cleaner checkpoint in %s: %s", directory, exc)
                found = {}
            self._checkpoints[directory] = found
        return found

    def first_dirty_checkpoint(self, tp: TopicPartition, lg: Log) -> Offset | None:
        return self._checkpoint_of(lg.directory.parent).get(tp)

    def _update_checkpoint(self, tp: TopicPartition, lg: Log, offset: Offset) -> None:
        directory = lg.directory.parent
        offsets = self._checkpoint_of(directory)
        offsets[tp] = offset
        live = self._logs()
        kept = {t: o for t, o in offsets.items() if t in live}
        self._checkpoints[directory] = kept
        OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).write(kept)

    # -- event-loop side ----------------------------------------------------------------

    def select(self, now_ms: int) -> tuple[TopicPartition, CleanJob] | None:
        """The filthiest cleanable compacted log, as a job for the cleaner thread."""
        best: tuple[float, TopicPartition, Log, LogToClean] | None = None
        for tp, lg in self._logs().items():
            if tp in self._uncleanable or self._io_failed.get(tp, 0) > now_ms or not is_compacted(lg):
                continue
            view = cleanable(lg, self.first_dirty_checkpoint(tp, lg), now_ms)
            self._report_hanging(tp, lg, view)
            if not should_clean(view, lg.config.min_cleanable_dirty_ratio):
                continue
            score = float("inf") if view.needs_compaction_now else view.ratio
            if best is None or score > best[0]:
                best = (score, tp, lg, view)
        if best is None:
            return None
        _score, tp, lg, view = best
        return tp, make_job(lg, view, now_ms)

    def _report_hanging(self, tp: TopicPartition, lg: Log, view: LogToClean) -> None:
        if not view.held_by_transaction:
            self._held.pop(tp, None)
            return
        if self._held.get(tp) == view.first_uncleanable_offset:
            return
        self._held[tp] = view.first_uncleanable_offset
        ongoing = lg.ongoing_transactions()
        first = ongoing[0] if ongoing else None
        who = f"producer {first.producer_id} epoch {first.producer_epoch}" if first else "a transaction"
        log.warning(
            "%s: cleaning held back at offset %d by an open transaction of %s (a hanging "
            "transaction keeps every later record uncleaned until it is committed or aborted)",
            lg.directory.name, view.first_uncleanable_offset, who,
        )

    def install(self, tp: TopicPartition, result: CleanResult) -> bool:
        """Swap the cleaned segments in, if the log still has the segments they replace."""
        job = result.job
        lg = self._logs().get(tp)
        if lg is None or not self._unchanged(lg, result):
            for group in result.groups:
                abandon(job.directory, group)
            log.info("%s: log changed while cleaning; cleaned segments dropped", job.name)
            return False
        self._crash_point("cleaner.before_swap")
        new = install(job.directory, result.groups, job.index_interval_bytes, job.now_ms, self._crash_point)
        for group, segment in zip(result.groups, new, strict=True):
            lg.replace_segments([ref.segment for ref in group.replaced], segment)
        self._crash_point("cleaner.after_swap")
        self._update_checkpoint(tp, lg, Offset(result.first_dirty_offset))
        self.passes += 1
        if self._io_failed.pop(tp, None) is not None:
            log.info("%s: cleaned again after an I/O error", job.name)
        s = result.stats
        log.info(
            "%s: cleaned %d segments up to offset %d: %d -> %d bytes, %d of %d records kept, "
            "%d batches removed", job.name, sum(len(g.replaced) for g in result.groups),
            result.first_dirty_offset, s.bytes_read, s.bytes_written, s.records_kept, s.records_read,
            s.batches_removed,
        )
        return True

    @staticmethod
    def _unchanged(lg: Log, result: CleanResult) -> bool:
        current: list[LogSegment] = lg.segments
        for group in result.groups:
            for ref in group.replaced:
                seg = ref.segment
                if seg not in current or seg is current[-1] or seg.size != ref.size:
                    return False
        return True

    # -- cleaner-thread side ---------------------------------------------------------------

    def clean_job(self, job: CleanJob, decoder: BatchDecoder | None = None) -> CleanResult:
        """The pass's ``.cleaned`` segments, prepared for the swap. A pass that fails (a
        full disk) removes every file it wrote before raising; a file of its kind left
        after that is a bug, logged and removed (`_check_nothing_left`)."""
        offset_map = OffsetMap.for_buffer(self.config.dedupe_buffer_size, self.config.io_buffer_load_factor)
        throttle = Throttler(self.config.io_max_bytes_per_second, self._stop)
        try:
            result = clean(job, offset_map, decoder, throttle)
            _prepare(job, result)
        except BaseException:
            _check_nothing_left(job)
            raise
        return result

    def clean_once(self, now_ms: int) -> CleanResult | None:
        """Select, clean and install on the calling thread; the result, or None."""
        picked = self.select(now_ms)
        if picked is None:
            return None
        tp, job = picked
        try:
            result = self.clean_job(job)
        except (UndecodableBatchError, OSError, ValueError) as exc:
            self._failed(tp, job, exc, now_ms)
            return None
        return result if self.install(tp, result) else None

    def _failed(self, tp: TopicPartition, job: CleanJob, exc: Exception, now_ms: int) -> None:
        """An I/O error (a full disk) holds the log back one ``log.cleaner.backoff.ms``,
        logged once until it is cleaned again; data the cleaner cannot decode leaves it
        uncleaned until restart (Kafka's uncleanable partitions)."""
        if isinstance(exc, OSError):
            if tp not in self._io_failed:
                log.error("%s: cannot clean (trying again every %d ms): %s", job.name,
                          self.config.backoff_ms, exc)
            self._io_failed[tp] = now_ms + self.config.backoff_ms
            return
        self._uncleanable.add(tp)
        log.error("%s: cannot clean (left uncleaned until restart): %s", job.name, exc)

    # -- the thread ---------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()
        log.info("log cleaner started (backoff %d ms, io limit %s bytes/s)", self.config.backoff_ms,
                 self.config.io_max_bytes_per_second)

    async def stop(self) -> None:
        """Stop the thread; the event loop keeps running meanwhile (the thread may be
        waiting for it)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        self._thread = None

    def _run(self) -> None:
        decoder = BatchDecoder()
        while not self._stop.is_set():
            try:
                worked = self._one_pass(decoder)
            except CleaningAborted:
                return
            except Exception:
                log.exception("log cleaner pass failed")
                worked = False
            if not worked:
                self._stop.wait(self.config.backoff_ms / 1000)

    def _one_pass(self, decoder: BatchDecoder) -> bool:
        now_ms = int(time.time() * 1000)
        picked = self._on_loop(self.select, now_ms)
        if picked is None:
            return False
        tp, job = picked
        try:
            result = self.clean_job(job, decoder)
        except CleaningAborted:
            raise
        except (UndecodableBatchError, OSError, ValueError) as exc:
            self._on_loop(self._failed, tp, job, exc, now_ms)
            return False
        return self._on_loop(self.install, tp, result)

    def _on_loop(self, fn: Callable[[*Args], T], *args: *Args) -> T:
        """Run ``fn`` on the event-loop thread and wait for it (CleaningAborted when the
        cleaner stops before it ran)."""
        loop = self._loop
        assert loop is not None
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn(*args))
            except BaseException as exc:
                done.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError as exc:  # the loop is closed
            raise CleaningAborted(str(exc)) from None
        while True:
            try:
                return done.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self._stop.is_set() and done.cancel():
                    raise CleaningAborted("the cleaner is stopping") from None
