"""One partition's durable log (Kafka's UnifiedLog/LocalLog, single replica for now)."""

from __future__ import annotations

import bisect
import logging
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.record_batch import (
    BatchHeader,
    ControlRecord,
    ControlType,
    CorruptBatchError,
    TimestampType,
    build_control_batch,
    compute_crc,
    iter_batches,
    parse_control_batch,
    patch_offset_and_epoch,
    set_log_append_time,
    set_max_timestamp,
)
from protocol.types import (
    NO_OFFSET,
    TV0,
    CoordinatorEpoch,
    Offset,
    ProducerEpoch,
    ProducerId,
    TopicPartition,
    TransactionVersion,
)
from storage.checkpoints import fsync_dir
from storage.index import AbortedTxn
from storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache
from storage.log_config import LogConfig
from storage.producer_state import (
    AppendError,
    AppendOrigin,
    CompletedTxn,
    OngoingTxn,
    ProducerStateEntry,
    ProducerStateInfo,
    ProducerStateLoad,
    ProducerStateManager,
    Verification,
    validate_data_batch,
    validate_end_txn_marker,
)
from storage.segment import LOG_SUFFIX, MAX_RELATIVE_OFFSET, LogSegment
from storage.validator import (
    RecordError,
    Rejected,
    ValidationPolicy,
    check_header,
    validate_records,
)

log = logging.getLogger(__name__)

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: Offset
    last_offset: Offset
    log_append_time: int
    log_start_offset: Offset
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()


@dataclass(frozen=True, slots=True)
class MarkerResult:
    """Outcome of appending one COMMIT/ABORT marker (WriteTxnMarkers)."""

    error: ErrorCode
    offset: Offset
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole batches read from one segment. ``segment_path``/``file_position`` say
    where ``records`` came from, for a future sendfile path. ``aborted_transactions``
    is filled when asked for (read_committed): those overlapping the returned range."""

    error: ErrorCode
    records: bytes
    log_start_offset: Offset
    log_end_offset: Offset
    high_watermark: Offset
    segment_path: Path | None = None
    file_position: int = 0
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    offset: Offset
    timestamp: int
    leader_epoch: int


class ReplicaDataError(ValueError):
    """Data fetched from a leader that a follower must not append."""


class _WriteBuffer:
    """The one buffer a produced batch is copied into to get its offsets assigned in
    place. A fresh 1 MB bytearray per batch costs more in page faults than the copy
    (measured: about 1.4 ms per MB on the loaded 2-core development machine); reused,
    it costs the memcpy. Safe because appends run on the broker's single event-loop
    thread, the segment write is synchronous and nothing keeps a view of the buffer;
    it is replaced, never resized, so a stale view cannot block it."""

    INITIAL = 1 << 20
    KEEP = 8 << 20

    def __init__(self) -> None:
        self._buf = bytearray(self.INITIAL)

    def copy_of(self, data: bytes) -> memoryview:
        size = len(data)
        if len(self._buf) < size or (len(self._buf) > self.KEEP >= size):
            self._buf = bytearray(max(size, self.INITIAL))
        view = memoryview(self._buf)[:size]
        view[:] = data
        return view


_WRITE_BUFFER = _WriteBuffer()


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` → (topic, partition); None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return topic, int(part)


class Log:
    """Invariants: segments sorted by base offset and contiguous in offsets;
    log_start_offset <= high_watermark <= log_end_offset;
    recovery_point <= log_end_offset."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: Offset,
        recovery_point: Offset,
        now_ms: int,
    ) -> None:
        if not segments:
            raise ValueError("a log needs at least one segment")
        self.directory = directory
        self.config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._high_watermark = log_start_offset
        self._last_flush_ms = now_ms
        self._pending_roll_flush: Offset | None = None
        # Told the seconds each flush that fsynced something took (its owner's metrics).
        self.on_flush: Callable[[float], None] | None = None
        self.epoch_cache = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory)
        self.producer_state_load: ProducerStateLoad | None = None
        self._policy: ValidationPolicy | None = None
        self._policy_config: LogConfig | None = None
        # Kafka's transaction.partition.verification.enable (the broker turns it on): a
        # client's transactional batch that opens a transaction needs its check's guard.
        self.verify_transactions = False

    # -- opening and recovery ----------------------------------------------

    @classmethod
    def create(cls, directory: Path, config: LogConfig, now_ms: int) -> Log:
        """A new empty log in a directory made now (FileExistsError when it exists): nothing
        on disk to list, recover or reload, so none of `open`'s scans."""
        directory.mkdir(parents=True)
        segment = LogSegment(directory, Offset(0), config.index_interval_bytes, now_ms)
        made = cls(directory, config, [segment], Offset(0), Offset(0), now_ms)
        made.producer_state_load = ProducerStateLoad(None, 0, 0)
        return made

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        recovery_point: Offset,
        log_start_offset: Offset | None,
        clean_shutdown: bool,
        now_ms: int,
    ) -> Log:
        directory.mkdir(parents=True, exist_ok=True)
        for tmp in directory.glob("*.tmp"):
            tmp.unlink()
        bases = sorted(Offset(int(p.name[: -len(LOG_SUFFIX)])) for p in directory.glob("*" + LOG_SUFFIX))
        interval = config.index_interval_bytes
        segments = [LogSegment.open(directory, b, interval, now_ms) for b in bases]
        if not segments:
            start = log_start_offset or Offset(0)
            segments = [LogSegment(directory, start, interval, now_ms)]
        recovered: list[LogSegment] = []
        if not clean_shutdown:
            recovery_point = _recover_from(segments, recovery_point, directory, recovered)
        else:
            for seg in segments:
                if seg.needs_recovery:
                    log.warning("%s: rebuilding indexes of segment %d", directory, seg.base_offset)
                    seg.recover()
                    recovered.append(seg)
            recovery_point = segments[-1].next_offset
        first = segments[0].base_offset
        start = first if log_start_offset is None else max(log_start_offset, first)
        start = min(start, segments[-1].next_offset)
        opened = cls(directory, config, segments, start, recovery_point, now_ms)
        opened.epoch_cache.truncate_from_end(opened.log_end_offset, persist=False)
        opened.epoch_cache.truncate_from_start(start, persist=False)
        bases = [s.base_offset for s in segments]
        opened.producer_state.remove_stray_snapshots(bases, opened.log_end_offset)
        opened._rebuild_txn_indexes(recovered)
        opened._rebuild_producer_state(now_ms)
        return opened

    def _rebuild_txn_indexes(self, recovered: list[LogSegment]) -> None:
        """Rewrite the ``.txnindex`` of every recovered segment by replaying markers over a
        scratch copy of the producer state taken at the first one (Kafka's recoverSegment)."""
        live = [s for s in recovered if s in self._segments]
        if not live:
            return
        first, last = live[0].base_offset, live[-1].base_offset
        scratch = ProducerStateManager(self.directory)
        snap = scratch.load_snapshot_at_or_below(first)
        start = self._segments[0].base_offset if snap is None else max(snap, self._segments[0].base_offset)
        if snap is not None and snap < self._segments[0].base_offset:
            scratch = ProducerStateManager(self.directory)  # its data is gone: start empty
        for seg in self._segments[self._segment_index_for(start) :]:
            if seg.base_offset > last:
                break
            rebuild = seg in live
            if rebuild:
                seg.txn_index.reset()
            for pos, header in seg.iter_headers():
                if header.base_offset < start or not header.has_producer_id:
                    continue
                marker = None
                if header.is_control:
                    marker = _marker(seg.read_at(pos, header.size_in_bytes), header)
                prepared = scratch.prepare_replayed(header, marker)
                if prepared is None:
                    continue
                entry, completed = prepared
                if rebuild and completed is not None and completed.is_aborted:
                    lso = scratch.last_stable_offset_after(completed)
                    seg.txn_index.append(_aborted(completed, lso))
                scratch.update(entry, completed)
            if rebuild:
                seg.txn_index.flush()
                log.debug(
                    "%s: rebuilt transaction index of segment %d (%d aborted)",
                    self.directory.name,
                    seg.base_offset,
                    len(seg.txn_index),
                )

    def _rebuild_producer_state(self, now_ms: int | None) -> None:
        """Load the newest intact snapshot at or below the log end offset, then replay
        the batch headers after it (Kafka's rebuildProducerState)."""
        ps = self.producer_state
        end = self.log_end_offset
        snap = ps.truncate_and_reload(
            self._log_start_offset, end, now_ms, self.config.producer_id_expiration_ms
        )
        start = max(ps.map_end_offset, self._log_start_offset)
        if start < end:
            self._replay_producer_state(start, end)
        ps.map_end_offset = end
        ps.on_high_watermark_updated(self._high_watermark)
        ps.take_snapshot()
        self.producer_state_load = ProducerStateLoad(snap, start, end)
        log.debug(
            "%s: producer state of %d producers from snapshot %s and offsets [%d, %d)",
            self.directory.name,
            ps.producer_count,
            snap,
            start,
            end,
        )

    def _replay_producer_state(self, start: Offset, end: Offset) -> None:
        """Apply the producer fields of every batch in [start, end) without validation."""
        for seg in self._segments[self._segment_index_for(start) :]:
            if seg.base_offset >= end:
                break
            found = seg.translate_offset(start)
            if found is None:
                continue
            for pos, header in seg.iter_headers(found[0]):
                if header.base_offset >= end:
                    break
                if not header.has_producer_id:
                    continue
                marker = None
                if header.is_control:  # the only batches whose records are read
                    marker = _marker(seg.read_at(pos, header.size_in_bytes), header)
                self.producer_state.apply_replicated(header, marker)

    # -- properties ---------------------------------------------------------

    @property
    def topic_partition(self) -> TopicPartition | None:
        return parse_partition_dir(self.directory.name)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> Offset:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> Offset:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> Offset:
        return self._high_watermark

    @property
    def recovery_point(self) -> Offset:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    def update_high_watermark(self, offset: int) -> Offset:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset];
        transactions whose marker falls below it stop holding the LSO back. Appends never
        move it: its one owner is the partition (the broker's replica manager)."""
        self._high_watermark = Offset(min(max(offset, self._log_start_offset), self.log_end_offset))
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> Offset | None:
        """Lowest first offset of an open (or completed but unreplicated) transaction,
        never below the log start offset; None when there is none."""
        fuo = self.producer_state.first_unstable_offset()
        return None if fuo is None else max(fuo, self._log_start_offset)

    @property
    def last_stable_offset(self) -> Offset:
        """LSO = min(first unstable offset, high watermark): read_committed reads below it."""
        fuo = self.first_unstable_offset
        return fuo if fuo is not None and fuo < self._high_watermark else self._high_watermark

    # -- produce path -------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        header: BatchHeader | None = None,
        verification: Verification | None = None,
    ) -> AppendResult:
        """Validate one batch (storage.validator: header, then every record), assign
        offsets, append it. ``header`` is the caller's parsed view of ``records``, if any.
        A coordinator's own batch (origin COORDINATOR: transactional offset commits)
        carries no sequence numbers, so only its producer epoch is checked, as in Kafka.
        A client's transactional batch that opens a transaction here needs the
        ``verification`` guard of its check with the coordinator (`start_verification`)."""
        checked = check_header(records, self.config.max_message_bytes, origin, header)
        if isinstance(checked, Rejected):
            return self._rejected(checked)
        validated = validate_records(records, checked, self._validation_policy(), now_ms)
        if isinstance(validated, Rejected):
            return self._rejected(validated)
        received = validated.header
        current = self._producer_entry(received)
        if current is not None and origin is AppendOrigin.CLIENT:
            duplicate = current.find_duplicate(received)
            if duplicate is not None:
                # Kafka answers a duplicate with the timestamp it kept for the batch as its
                # log append time, whatever the topic's timestamp type.
                first, last = duplicate.first_offset, duplicate.last_offset
                return AppendResult(ErrorCode.NONE, first, last, duplicate.timestamp, self._log_start_offset)
        buf = _WRITE_BUFFER.copy_of(validated.records)
        base = self.log_end_offset
        patch_offset_and_epoch(buf, 0, base, leader_epoch)
        append_time = NO_TIMESTAMP
        if self.config.log_append_time:
            header = set_log_append_time(buf, 0, now_ms)
            append_time = now_ms
        elif received.timestamp_type is not TimestampType.CREATE_TIME:
            # Kafka's setMaxTimestamp(CREATE_TIME, ...): a producer's LogAppendTime bit is cleared
            # (its records' timestamps are the batch's maxTimestamp, which therefore stays).
            header = set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, received.max_timestamp)
        else:
            header = replace(received, base_offset=base, partition_leader_epoch=leader_epoch)
        entry = None
        if current is not None:
            outcome = self._verified(header, origin, verification) or validate_data_batch(
                current, header, origin
            )
            if isinstance(outcome, AppendError):
                log.info("%s: producer %d: %s", self.directory.name, header.producer_id, outcome.message)
                return AppendResult(
                    outcome.error, NO_OFFSET, NO_OFFSET, NO_TIMESTAMP, self._log_start_offset, outcome.message
                )
            entry = outcome
        self.epoch_cache.assign(leader_epoch, base)
        self._append(buf, header, now_ms, entry)
        return AppendResult(ErrorCode.NONE, base, header.last_offset, append_time, self._log_start_offset)

    def _verified(
        self, header: BatchHeader, origin: AppendOrigin, verification: Verification | None
    ) -> AppendError | None:
        if not self.verify_transactions or origin is not AppendOrigin.CLIENT or not header.has_producer_id:
            return None
        if not header.is_transactional:  # a check in progress for its producer id binds it too (Kafka)
            return self.producer_state.check_pending_sequence(header)
        return self.producer_state.check_verified(header, verification)

    def start_verification(
        self, header: BatchHeader, now_ms: int, supports_epoch_bump: bool = False
    ) -> Verification | None:
        """See ProducerStateManager.start_verification; None too when verification is off."""
        if not self.verify_transactions:
            return None
        return self.producer_state.start_verification(
            header.producer_id, header.base_sequence, header.producer_epoch, now_ms, supports_epoch_bump
        )

    def _rejected(self, rejected: Rejected) -> AppendResult:
        return AppendResult(
            rejected.error, NO_OFFSET, NO_OFFSET, NO_TIMESTAMP, self._log_start_offset, rejected.message,
            rejected.record_errors,
        )

    def _validation_policy(self) -> ValidationPolicy:
        """The validator's view of the current config (recomputed when the config changes)."""
        if self._policy is None or self._policy_config is not self.config:
            self._policy = ValidationPolicy.of(self.config, self.directory.name)
            self._policy_config = self.config
        return self._policy

    def _producer_entry(self, header: BatchHeader) -> ProducerStateEntry | None:
        """The producer's current entry (empty when unknown), None without a producer id."""
        if not header.has_producer_id:
            return None
        return self.producer_state.entry_for(header.producer_id)

    def append_control_batch(self, batch: bytes, leader_epoch: int, now_ms: int) -> int:
        """Append a broker-built control batch (e.g. a transaction marker); returns its offset."""
        buf = bytearray(batch)
        base = self.log_end_offset
        patch_offset_and_epoch(buf, 0, base, leader_epoch)
        header = BatchHeader.parse(buf)
        if not header.is_control or compute_crc(buf, 0, header) != header.crc:
            raise ValueError("not a valid control batch")
        self.epoch_cache.assign(leader_epoch, base)
        self._append(buf, header, now_ms)
        return base

    def append_txn_marker(
        self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        commit: bool,
        coordinator_epoch: CoordinatorEpoch,
        leader_epoch: int,
        now_ms: int,
        transaction_version: TransactionVersion = TV0,
    ) -> MarkerResult:
        """Append the COMMIT/ABORT marker of one producer's transaction (WriteTxnMarkers).
        Refused with INVALID_PRODUCER_EPOCH for an epoch below the producer's (at transaction
        version 2 also at it while a transaction is open), and with
        TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the one recorded. A marker
        for a producer without an open transaction is still written."""
        if producer_id < 0 or producer_epoch < 0:  # -1 is "none": a marker must name one
            message = f"invalid producer id {producer_id} or epoch {producer_epoch} in a marker"
            return MarkerResult(ErrorCode.INVALID_REQUEST, NO_OFFSET, message)
        current = self.producer_state.entry_for(producer_id)
        origin = AppendOrigin.COORDINATOR
        problem = validate_end_txn_marker(
            current, producer_epoch, coordinator_epoch, origin, transaction_version
        )
        if problem is not None:
            log.info("%s: marker refused: %s", self.directory.name, problem.message)
            return MarkerResult(problem.error, NO_OFFSET, problem.message)
        control = ControlType.COMMIT if commit else ControlType.ABORT
        base = self.log_end_offset
        buf = bytearray(
            build_control_batch(
                control,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp=now_ms,
                base_offset=base,
                partition_leader_epoch=leader_epoch,
            )
        )
        if self.config.log_append_time:
            header = set_log_append_time(buf, 0, now_ms)
        else:
            header = BatchHeader.parse(buf)
        entry = current.with_end_txn_marker(producer_epoch, coordinator_epoch, now_ms)
        completed = current.completed_by_marker(base, control)
        self.epoch_cache.assign(leader_epoch, base)
        self._append(buf, header, now_ms, entry, completed)
        log.debug(
            "%s: %s marker for producer %d at %d (transaction from %s)",
            self.directory.name,
            control.name,
            producer_id,
            base,
            completed.first_offset if completed is not None else "none",
        )
        return MarkerResult(ErrorCode.NONE, base)

    def append_as_follower(self, records: bytes | memoryview, now_ms: int) -> int:
        """Append batches fetched from the leader, offsets and epochs as the leader gave them.

        Every batch is checked (complete, CRC, magic 2, at or past the log end and
        above the batch before it) before the first one is written; producer state,
        the transaction index and the leader-epoch cache follow the batches as on the
        leader. A batch may start past the log end: the leader's cleaner removes whole
        batches, so the next one a lagging follower is sent can lie beyond a gap (seed
        109's followers of ``__transaction_state`` refused such a batch for 55 minutes).
        Returns the new log end offset; raises ReplicaDataError (nothing written) on
        data a follower must not take.
        """
        try:
            batches = list(iter_batches(records, check_crc=True))
        except CorruptBatchError as exc:
            raise ReplicaDataError(f"{self.directory.name}: fetched data corrupt at {exc.position}") from None
        lowest = self.log_end_offset
        for _pos, header in batches:
            if header.magic != 2:
                raise ReplicaDataError(f"{self.directory.name}: fetched batch at {header.base_offset}"
                                       f" has magic {header.magic}")
            if header.base_offset < lowest:
                raise ReplicaDataError(f"{self.directory.name}: fetched batch at {header.base_offset}"
                                       f" is below {lowest}, the log end or the end of the batch before it")
            lowest = header.next_offset
        view = memoryview(records)
        for pos, header in batches:
            self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self._append(bytes(view[pos : pos + header.size_in_bytes]), header, now_ms)
        return self.log_end_offset

    def _append(
        self,
        batch: bytearray | bytes | memoryview,
        header: BatchHeader,
        now_ms: int,
        producer_entry: ProducerStateEntry | None = None,
        completed: CompletedTxn | None = None,
    ) -> None:
        """Core append for validated, offset-assigned batches (leader and, later, follower).
        ``producer_entry`` is the leader's validated next state for the batch's producer
        (and ``completed`` the transaction its marker ends); without it the producer state
        is updated unvalidated (replication). An ABORT goes into the transaction index of
        the segment holding its marker."""
        if header.base_offset < self.log_end_offset:
            raise ValueError(f"batch offset {header.base_offset} below log end {self.log_end_offset}")
        if producer_entry is None and header.has_producer_id:
            prepared = self.producer_state.prepare_replicated(header, _marker(batch, header))
            if prepared is not None:
                producer_entry, completed = prepared
        if producer_entry is not None:  # refuse before the first byte is written
            problem = self.producer_state.check_update(producer_entry, completed)
            if problem is not None:
                raise ValueError(f"{self.directory.name}: append refused: {problem}")
        segment = self._maybe_roll(header, now_ms)
        size_before = segment.size
        try:
            segment.append(header, batch)
            if producer_entry is not None:
                if completed is not None and completed.is_aborted:
                    lso = self.producer_state.last_stable_offset_after(completed)
                    segment.txn_index.append(_aborted(completed, lso))
                self.producer_state.update(producer_entry, completed)
        except BaseException:
            if segment.size > size_before:  # never a half-applied append
                segment.truncate_to(header.base_offset)
            raise
        self.producer_state.map_end_offset = header.next_offset
        if header.is_transactional:
            self.producer_state.end_verification(header.producer_id)
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush(now_ms=now_ms)

    def _maybe_roll(self, header: BatchHeader, now_ms: int) -> LogSegment:
        seg = self.active_segment
        if seg.size == 0:
            return seg
        full = seg.size > self.config.segment_bytes - header.size_in_bytes
        if seg.first_batch_timestamp is not None and seg.first_batch_timestamp >= 0:
            waited = header.max_timestamp - seg.first_batch_timestamp
        else:
            waited = now_ms - seg.created_ms
        too_old = waited > self.config.segment_ms
        overflow = header.last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
        if full or too_old or overflow:
            return self.roll(now_ms, header.base_offset)
        return seg

    def roll(self, now_ms: int, new_base: Offset | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when it is empty)."""
        seg = self.active_segment
        base = self.log_end_offset if new_base is None else new_base
        if seg.size == 0 and seg.base_offset == base:
            return seg
        seg.on_become_inactive()
        new = LogSegment(self.directory, base, self.config.index_interval_bytes, now_ms)
        self._segments.append(new)
        # A snapshot at the new segment's base lets recovery start replay at this segment.
        self.producer_state.take_snapshot(base)
        # Kafka flushes the rolled segment asynchronously; flush_due() does it here.
        self._pending_roll_flush = base
        log.info("%s: rolled new segment at offset %d", self.directory.name, base)
        return new

    # -- fetch path ---------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        max_offset: int,
        min_one_batch: bool,
        collect_aborted: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from one segment starting at the batch holding ``fetch_offset``
        whose last offset is below ``max_offset`` (exclusive: read_committed passes the
        LSO, so a batch straddling it is held back), within ``max_bytes`` (the first batch
        is returned whole when ``min_one_batch``: KIP-74). ``collect_aborted`` adds the
        aborted transactions overlapping the returned range (Kafka's addAbortedTransactions)."""
        if not self._log_start_offset <= fetch_offset <= self.log_end_offset:
            return self._fetch_info(ErrorCode.OFFSET_OUT_OF_RANGE, b"")
        if fetch_offset >= min(max_offset, self.log_end_offset):  # caught up: nothing to look for
            info = self._fetch_info(ErrorCode.NONE, b"")
            return replace(info, aborted_transactions=[]) if collect_aborted else info
        i = self._segment_index_for(fetch_offset)
        for j, seg in enumerate(self._segments[i:], start=i):
            found = seg.translate_offset(fetch_offset)
            if found is None:
                continue
            info, upper = self._read_from(seg, found[0], max_bytes, max_offset, min_one_batch)
            if upper is None:
                nxt = self._segments[j + 1] if j + 1 < len(self._segments) else None
                upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if collect_aborted:
                aborted = self.aborted_transactions(fetch_offset, upper)
                info = replace(info, aborted_transactions=aborted)
            return info
        info = self._fetch_info(ErrorCode.NONE, b"")
        return replace(info, aborted_transactions=[]) if collect_aborted else info

    def _read_from(
        self, seg: LogSegment, start: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> tuple[FetchDataInfo, Offset | None]:
        """The batches read, and the base offset of the first batch after them in this
        segment (None when they run to its end): the upper bound for aborted txns."""
        end = start
        upper: Offset | None = None
        for pos, header in seg.iter_headers(start):
            if header.last_offset >= max_offset:
                upper = header.base_offset
                break
            too_big = pos + header.size_in_bytes - start > max_bytes
            if too_big and not (min_one_batch and pos == start):
                upper = header.base_offset
                break
            end = pos + header.size_in_bytes
        records = seg.read_at(start, end - start) if end > start else b""
        return self._fetch_info(ErrorCode.NONE, records, seg, start), upper

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset): from the
        ``.txnindex`` of the segment holding ``start_offset`` onward, until an entry's
        LSO reaches the upper bound (Kafka's collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for seg in self._segments[self._segment_index_for(start_offset) :]:
            for txn in seg.txn_index:
                if txn.last_offset >= start_offset and txn.first_offset < upper_bound_offset:
                    found.append(txn)
                if txn.last_stable_offset >= upper_bound_offset:
                    return found
        return found

    def _fetch_info(
        self, error: ErrorCode, records: bytes, seg: LogSegment | None = None, position: int = 0
    ) -> FetchDataInfo:
        return FetchDataInfo(
            error,
            records,
            self._log_start_offset,
            self.log_end_offset,
            self._high_watermark,
            seg.log_path if seg is not None else None,
            position,
        )

    def _segment_index_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self._segments]
        return max(bisect.bisect_right(bases, offset) - 1, 0)

    # -- ListOffsets / OffsetForLeaderEpoch ---------------------------------

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after log start with timestamp >= ``timestamp``."""
        start = self._log_start_offset
        for seg in self._segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            # a batch that matches only below the log start: on to the next batch (Kafka too)
            for pos, header in seg.find_by_timestamp(timestamp, start):
                batch = seg.read_at(pos, header.size_in_bytes)
                hit = _first_record_at_or_after(batch, header, lambda o, ts: ts >= timestamp and o >= start)
                if hit is not None:
                    return hit
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp."""
        live = [s for s in self._segments if s.max_timestamp >= 0]
        if not live:
            return None
        seg = max(live, key=lambda s: s.max_timestamp)
        found = seg.translate_offset(seg.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        batch = seg.read_at(pos, header.size_in_bytes)
        hit = _first_record_at_or_after(batch, header, lambda _o, ts: ts == seg.max_timestamp)
        return hit or TimestampOffset(header.last_offset, header.max_timestamp, header.partition_leader_epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) when unknown."""
        return self.epoch_cache.end_offset_for_epoch(epoch, self.log_end_offset)

    # -- deletion -----------------------------------------------------------

    def delete_records_before(self, offset: int) -> ErrorCode:
        """Advance the log start offset (DeleteRecords); -1 means the high watermark."""
        target = self._high_watermark if offset == -1 else Offset(offset)
        if target < 0 or target > self._high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if target > self._log_start_offset:
            self._advance_log_start(target)
            self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset
            )
        return ErrorCode.NONE

    def _advance_log_start(self, offset: Offset) -> None:
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, offset)
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms / retention.bytes; returns how many."""
        if "delete" not in self.config.cleanup_policy:
            return 0
        deleted = 0
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(
                lambda seg, _n: now_ms - seg.largest_timestamp() > retention_ms, now_ms
            )
        if self.config.retention_bytes >= 0:
            excess = [self.size_in_bytes - self.config.retention_bytes]

            def over_size(seg: LogSegment, _n: LogSegment | None) -> bool:
                if excess[0] - seg.size < 0:
                    return False
                excess[0] -= seg.size
                return True

            deleted += self._delete_segments(over_size, now_ms)
        return deleted

    def _delete_segments(
        self,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        now_ms: int | None = None,
    ) -> int:
        """Delete the oldest segments while ``predicate`` holds and all their data is
        below the high watermark; the active segment only when non-empty (roll first)."""
        doomed: list[LogSegment] = []
        for i, seg in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if upper > self._high_watermark or (nxt is None and seg.size == 0):
                break
            if nxt is None and now_ms is None:
                break
            if not predicate(seg, nxt):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if doomed[-1] is self.active_segment:
            self.roll(now_ms if now_ms is not None else 0)
        for seg in doomed:
            self._segments.remove(seg)
            log.info("%s: deleting segment %d", self.directory.name, seg.base_offset)
            seg.delete()
            self.producer_state.delete_snapshot(seg.base_offset)
        self.producer_state.delete_snapshots_below(self._segments[0].base_offset)
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        if new_start > self._log_start_offset:
            self._advance_log_start(new_start)
        return len(doomed)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put ``new``, the cleaned copy of the consecutive closed segments ``old``, in
        their place (the log cleaner's swap; it has written and renamed the files)."""
        i = self._segments.index(old[0]) if old and old[0] in self._segments else -1
        if i < 0 or self._segments[i : i + len(old)] != old or old[-1] is self.active_segment:
            raise ValueError(f"{self.directory.name}: segments to replace are not closed segments of the log")
        if new.base_offset != old[0].base_offset:
            raise ValueError(f"cleaned segment {new.base_offset} does not start at {old[0].base_offset}")
        self._segments[i : i + len(old)] = [new]

    def truncate_to(self, offset: int, now_ms: int | None = None) -> None:
        """Remove everything at and after ``offset`` (follower truncation, later issues);
        producer state is reloaded from a snapshot at or below it plus replay."""
        if offset >= self.log_end_offset:
            # An epoch this broker started as leader without appending to it may still end
            # the cache: drop it, or the leader reports the same divergence forever.
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return
        offset = max(offset, self._log_start_offset)
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop().delete()
        self._segments[-1].truncate_to(offset)
        self._recovery_point = min(self._recovery_point, self.log_end_offset)
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state(now_ms)

    # -- producer state -----------------------------------------------------

    def active_producers(self) -> list[ProducerStateInfo]:
        """Producers with state in this partition (DescribeProducers, KIP-664)."""
        return self.producer_state.active_producers()

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """Open transactions, lowest first offset first (ListTransactions, find-hanging)."""
        return self.producer_state.ongoing_transactions()

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (not those in a transaction)."""
        removed = self.producer_state.remove_expired_producers(now_ms, self.config.producer_id_expiration_ms)
        if removed:
            log.info("%s: expired %d idle producer ids", self.directory.name, removed)
        return removed

    # -- durability and lifecycle ------------------------------------------

    def flush(self, up_to: Offset | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets in [recovery_point, up_to); move the recovery point."""
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if now_ms is not None:
            self._last_flush_ms = now_ms
        if target > self._recovery_point:
            started = time.monotonic()
            first = self._segment_index_for(self._recovery_point)
            for seg in self._segments[first:]:
                if seg.base_offset >= target:
                    break
                seg.flush()
            fsync_dir(self.directory)
            self._recovery_point = target
            if self.on_flush is not None:
                self.on_flush(time.monotonic() - started)
        pending = self._pending_roll_flush
        if pending is not None and pending <= self._recovery_point:
            self._pending_roll_flush = None

    def flush_due(self, now_ms: int) -> bool:
        """Time-based flush (flush.ms) and the flush Kafka schedules after a roll.
        Returns True when something was fsynced."""
        if now_ms - self._last_flush_ms >= self.config.flush_ms and self.unflushed_messages:
            self.flush(now_ms=now_ms)
            return True
        if self._pending_roll_flush is not None:
            self.flush(self._pending_roll_flush)
            return True
        return False

    def close(self) -> None:
        """Clean close: a snapshot at the log end spares the next open any replay."""
        self.producer_state.take_snapshot(self.log_end_offset)
        self.active_segment.on_become_inactive()
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        for seg in self._segments:
            seg.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _recover_from(
    segments: list[LogSegment], recovery_point: Offset, directory: Path, recovered: list[LogSegment]
) -> Offset:
    """Unclean shutdown: re-validate every segment from the one holding the recovery
    point; truncate at the first bad byte and drop later segments. Returns the new
    recovery point (the recovered log end, after an fsync); ``recovered`` gets every
    segment recovered (their transaction indexes are rebuilt afterwards)."""
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
    for seg in segments[:first]:
        if seg.needs_recovery:
            seg.recover()
            recovered.append(seg)
    i = first
    while i < len(segments):
        seg = segments[i]
        truncated = seg.recover()
        recovered.append(seg)
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if truncated or (nxt is not None and nxt.base_offset < seg.next_offset):
            log.warning(
                "%s: truncated %d torn bytes in segment %d; dropping %d later segments",
                directory.name,
                truncated,
                seg.base_offset,
                len(segments) - i - 1,
            )
            for later in segments[i + 1 :]:
                later.delete()
            del segments[i + 1 :]
            seg.flush()
            break
        if seg.size:  # an empty segment has nothing to make durable (a partition never written)
            seg.flush()
        i += 1
    return segments[-1].next_offset


def _marker(batch: bytes | bytearray | memoryview, header: BatchHeader) -> ControlRecord | None:
    """The end-transaction marker of a control batch; None for data batches and for
    empty or undecodable control batches."""
    if not header.is_control or header.records_count < 1:
        return None
    try:
        return parse_control_batch(bytes(batch))
    except CorruptBatchError:
        return None


def _aborted(completed: CompletedTxn, last_stable_offset: Offset) -> AbortedTxn:
    c = completed
    return AbortedTxn(c.producer_id, c.first_offset, c.last_offset, last_stable_offset)


def _first_record_at_or_after(
    batch: bytes, header: BatchHeader, match: Callable[[int, int], bool]
) -> TimestampOffset | None:
    """Decode one batch (off the hot path) and return its first matching record."""
    epoch = header.partition_leader_epoch
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        for off in range(header.base_offset, header.next_offset):
            if match(off, header.max_timestamp):
                return TimestampOffset(Offset(off), header.max_timestamp, epoch)
        return None
    try:
        with warnings.catch_warnings():  # kafka-python's import-time read_text warning
            warnings.filterwarnings("ignore", "(read|open)_text", DeprecationWarning)
            from kafka.record.default_records import DefaultRecordBatch

        for record in DefaultRecordBatch(bytearray(batch)):
            if match(record.offset, record.timestamp):
                return TimestampOffset(record.offset, record.timestamp, epoch)
    except Exception:  # undecodable (e.g. codec missing): fall back to the batch
        if match(header.last_offset, header.max_timestamp):
            return TimestampOffset(header.base_offset, header.max_timestamp, epoch)
    return None


__all__ = [
    "UNDEFINED_EPOCH",
    "AppendResult",
    "AbortedTxn",
    "FetchDataInfo",
    "Log",
    "MarkerResult",
    "OngoingTxn",
    "ProducerStateInfo",
    "TimestampOffset",
    "parse_partition_dir",
]
