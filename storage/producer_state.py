"""Per-partition producer state for idempotent and transactional producers
(Kafka's ProducerStateEntry, ProducerAppendInfo and ProducerStateManager).

Entries are immutable values: validating a batch builds the next entry without
touching the map, and ``update`` commits it in one step once the batch is on
disk. Everything comes from the batch header; no record is decoded (markers
excepted, whose coordinator epoch the caller reads from the control record).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    ControlRecord,
    ControlType,
)
from protocol.types import (
    NO_OFFSET,
    TV2,
    CoordinatorEpoch,
    Offset,
    ProducerEpoch,
    ProducerId,
    TransactionVersion,
)
from storage.snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_TXN = Offset(-1)
NO_COORDINATOR_EPOCH = CoordinatorEpoch(-1)


class AppendOrigin(enum.Enum):
    CLIENT = "client"  # full validation
    COORDINATOR = "coordinator"  # epoch only (no sequences on coordinator writes)
    REPLICATION = "replication"  # none: replica fetch, recovery and snapshot replay


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Sequences wrap from Int32.MAX to 0."""
    if sequence < decrement:
        return sequence - decrement + INT32_MAX + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: Offset
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> Offset:  # Offset arithmetic: no NewType call per batch
        return self.last_offset - self.offset_delta  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ProducerStateInfo:
    """One producer as DescribeProducers (KIP-664) reports it."""

    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: Offset


@dataclass(frozen=True, slots=True)
class AppendError:
    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by the marker at ``last_offset`` (Kafka's CompletedTxn)."""

    producer_id: ProducerId
    first_offset: Offset
    last_offset: Offset
    is_aborted: bool

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"bad completed transaction range {self}")


@dataclass(frozen=True, slots=True)
class OngoingTxn:
    """An open transaction of one producer in this partition (ListTransactions,
    DescribeProducers, ``find-hanging``)."""

    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    first_offset: Offset
    last_timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """Invariant: at most NUM_BATCHES_TO_RETAIN batches, all of ``producer_epoch``,
    oldest first."""

    producer_id: ProducerId
    producer_epoch: ProducerEpoch = ProducerEpoch(NO_PRODUCER_EPOCH)
    batches: tuple[BatchMetadata, ...] = ()
    coordinator_epoch: CoordinatorEpoch = NO_COORDINATOR_EPOCH
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: Offset = NO_TXN

    def __post_init__(self) -> None:
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            raise ValueError(f"producer {self.producer_id} holds {len(self.batches)} batches")

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> Offset:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    @property
    def has_ongoing_txn(self) -> bool:
        return self.current_txn_first_offset >= 0

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch with the same epoch and sequence range, if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None

    def with_data_batch(self, header: BatchHeader) -> ProducerStateEntry:
        """The entry after appending the (offset-assigned) data batch ``header``."""
        kept = self.batches if header.producer_epoch == self.producer_epoch else ()
        batch = BatchMetadata(
            header.last_sequence,
            Offset(header.last_offset),
            header.last_offset - header.base_offset,
            header.max_timestamp,
        )
        txn = self.current_txn_first_offset
        if header.is_transactional and txn < 0:
            txn = Offset(header.base_offset)  # this batch begins a transaction
        return replace(
            self,
            producer_epoch=ProducerEpoch(header.producer_epoch),
            batches=(*kept[-(NUM_BATCHES_TO_RETAIN - 1) :], batch),
            last_timestamp=header.max_timestamp,
            current_txn_first_offset=txn,
        )

    def completed_by_marker(self, offset: Offset, control_type: ControlType) -> CompletedTxn | None:
        """The transaction a marker at ``offset`` ends; None when none is open (an empty
        transaction neither moves the LSO nor goes into the transaction index)."""
        if not self.has_ongoing_txn:
            return None
        aborted = control_type is ControlType.ABORT
        return CompletedTxn(self.producer_id, self.current_txn_first_offset, offset, aborted)

    def with_end_txn_marker(
        self, epoch: ProducerEpoch, coordinator_epoch: CoordinatorEpoch, timestamp: int
    ) -> ProducerStateEntry:
        """The entry after a COMMIT/ABORT marker: the transaction is over."""
        kept = self.batches if epoch == self.producer_epoch else ()
        return replace(
            self,
            producer_epoch=epoch,
            batches=kept,
            coordinator_epoch=coordinator_epoch,
            last_timestamp=timestamp,
            current_txn_first_offset=NO_TXN,
        )

    def info(self) -> ProducerStateInfo:
        return ProducerStateInfo(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def to_snapshot(self) -> SnapshotEntry:
        """Only the last batch goes into a snapshot (Kafka's format keeps one)."""
        return SnapshotEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_data_offset,
            self.last_offset_delta,
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, e: SnapshotEntry) -> ProducerStateEntry:
        batches: tuple[BatchMetadata, ...] = ()
        if e.last_offset >= 0:
            batches = (BatchMetadata(e.last_sequence, Offset(e.last_offset), e.offset_delta, e.timestamp),)
        return cls(
            ProducerId(e.producer_id),
            ProducerEpoch(e.epoch),
            batches,
            CoordinatorEpoch(e.coordinator_epoch),
            e.timestamp,
            Offset(e.current_txn_first_offset) if e.current_txn_first_offset >= 0 else NO_TXN,
        )


def validate_data_batch(
    current: ProducerStateEntry, header: BatchHeader, origin: AppendOrigin
) -> ProducerStateEntry | AppendError:
    """Kafka's ProducerAppendInfo.appendDataBatch for one offset-assigned batch:
    the next entry, or why the batch must be refused. ``current`` is not changed."""
    if origin is not AppendOrigin.REPLICATION:
        problem = _check_epoch(current, header.producer_epoch)
        if problem is None and origin is AppendOrigin.CLIENT:
            problem = _check_sequence(current, header)
        if problem is not None:
            return problem
        if current.has_ongoing_txn and not header.is_transactional:
            return AppendError(
                ErrorCode.INVALID_TXN_STATE,
                f"expected a transactional write from producer {header.producer_id} "
                f"at offset {header.base_offset}",
            )
    return current.with_data_batch(header)


def validate_end_txn_marker(
    current: ProducerStateEntry, producer_epoch: ProducerEpoch, coordinator_epoch: int, origin: AppendOrigin,
    transaction_version: TransactionVersion,
) -> AppendError | None:
    """Kafka's ProducerAppendInfo.appendEndTxnMarker checks: a stale producer epoch,
    then a stale coordinator epoch (a zombie coordinator). Replication checks nothing.
    At transaction version 2 the coordinator bumps the epoch to end every transaction, and
    the producer writes its next transaction at that epoch: a marker at the producer's epoch
    while a transaction is open is a late copy of the previous transaction's marker, which
    would end the open one (KIP-1228); with none open it is a retry of this one, written
    again (KAFKA-19999: refused, the coordinator would never complete the transaction)."""
    if origin is AppendOrigin.REPLICATION:
        return None
    problem = _check_epoch(current, producer_epoch)
    if problem is None and transaction_version >= TV2:
        problem = _check_marker_not_late(current, producer_epoch)
    if problem is None and coordinator_epoch < current.coordinator_epoch:
        problem = AppendError(
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"invalid coordinator epoch {coordinator_epoch} (zombie) for producer "
            f"{current.producer_id}, current {current.coordinator_epoch}",
        )
    return problem


def _check_epoch(current: ProducerStateEntry, epoch: ProducerEpoch) -> AppendError | None:
    if epoch < current.producer_epoch:
        return AppendError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"epoch {epoch} of producer {current.producer_id} is smaller than "
            f"the last seen epoch {current.producer_epoch}",
        )
    return None


def _check_marker_not_late(current: ProducerStateEntry, epoch: ProducerEpoch) -> AppendError | None:
    if epoch == current.producer_epoch and current.has_ongoing_txn:
        return AppendError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"transaction version 2 marker at epoch {epoch} of producer {current.producer_id}: "
            f"not above the epoch of its open transaction (a late marker of the previous one)",
        )
    return None


def _check_sequence(current: ProducerStateEntry, header: BatchHeader) -> AppendError | None:
    first = header.base_sequence
    if header.producer_epoch != current.producer_epoch:
        if first != 0 and current.producer_epoch != NO_PRODUCER_EPOCH:
            return AppendError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"invalid sequence {first} for new epoch {header.producer_epoch} of producer "
                f"{header.producer_id} (current epoch {current.producer_epoch})",
            )
        return None
    # No known epoch (e.g. its data was deleted): any sequence is accepted (KIP-360).
    if current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(current.last_seq, first):
        return None
    return AppendError(
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        f"out of order sequence {first} from producer {header.producer_id}, expected {current.last_seq} + 1",
    )


class Verification:
    """Kafka's VerificationStateEntry: a transactional producer's first batch for this
    partition is being checked with its transaction coordinator. The object is the guard
    the append must present: any transactional batch or marker of the producer ends it, so
    a check answered before an abort cannot open a transaction after the abort's marker.
    It keeps the lowest sequence seen meanwhile: a later batch cannot be appended before an
    earlier one whose check failed with a retriable error and is being retried."""

    __slots__ = ("epoch", "lowest_seq", "started_ms", "supports_epoch_bump")

    def __init__(
        self, sequence: int, epoch: ProducerEpoch, now_ms: int, supports_epoch_bump: bool = False
    ) -> None:
        self.lowest_seq = sequence
        self.epoch = epoch
        self.started_ms = now_ms
        # Checked for a transaction version 2 client (Produce v12+): a producer with no state
        # here must start at sequence 0 (Kafka's VerificationStateEntry.supportsEpochBump). Set
        # by the request that began the check, kept by later ones (Kafka's computeIfAbsent).
        self.supports_epoch_bump = supports_epoch_bump

    def saw(self, sequence: int, epoch: ProducerEpoch) -> None:
        """A lower sequence of the same epoch, or any sequence of a newer epoch."""
        if epoch == self.epoch and sequence < self.lowest_seq:
            self.lowest_seq = sequence
        elif epoch > self.epoch:
            self.epoch, self.lowest_seq = epoch, sequence


@dataclass(frozen=True, slots=True)
class ProducerStateLoad:
    """How producer state was rebuilt at open / truncation (for logs and tests)."""

    snapshot_offset: Offset | None
    replay_from: int
    replay_to: int


class ProducerStateManager:
    """Owner of the producer map and the ``.snapshot`` files of one partition.
    Invariants: ``map_end_offset`` is the offset the map is current up to; a
    snapshot file named N holds the map as it was at offset N."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._producers: dict[ProducerId, ProducerStateEntry] = {}
        self._snapshots = list_snapshots(directory)
        self.map_end_offset = Offset(0)
        self._last_snap_offset = Offset(0)
        # Open transactions, first offset -> producer id. Insertion order is offset
        # order (a transaction starts at the log end), so the first key is the lowest.
        self._ongoing: dict[Offset, ProducerId] = {}
        # Completed transactions whose marker is not yet below the high watermark:
        # first offset -> (producer id, marker offset). They still hold the LSO back.
        self._unreplicated: dict[Offset, tuple[ProducerId, Offset]] = {}
        # Producers whose first transactional batch here is being checked with their
        # coordinator (leader only; in memory, as in Kafka).
        self._verifying: dict[int, Verification] = {}

    # -- queries ------------------------------------------------------------

    def last_entry(self, producer_id: ProducerId) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def entry_for(self, producer_id: ProducerId) -> ProducerStateEntry:
        return self._producers.get(producer_id) or ProducerStateEntry(ProducerId(producer_id))

    def entries(self) -> dict[ProducerId, ProducerStateEntry]:
        """A copy of the producer map (the log cleaner keeps each producer's last batch)."""
        return dict(self._producers)

    def active_producers(self) -> list[ProducerStateInfo]:
        return [e.info() for _pid, e in sorted(self._producers.items())]

    @property
    def producer_count(self) -> int:
        return len(self._producers)

    def first_undecided_offset(self) -> Offset | None:
        """The lowest first offset of an open transaction."""
        return next(iter(self._ongoing), None)

    def first_unstable_offset(self) -> Offset | None:
        """The lowest first offset of an open transaction or of a completed one whose
        marker is not yet below the high watermark (Kafka's firstUnstableOffset)."""
        undecided = self.first_undecided_offset()
        unreplicated = min(self._unreplicated, default=None)  # a handful at most
        if unreplicated is None or (undecided is not None and undecided < unreplicated):
            return undecided
        return unreplicated

    def last_stable_offset_after(self, completed: CompletedTxn) -> Offset:
        """The LSO once ``completed`` is over, for its transaction-index entry: the first
        offset of the next open transaction of another producer, else the offset after
        the marker (Kafka's lastStableOffset(CompletedTxn); the high watermark is ignored)."""
        for first, pid in self._ongoing.items():
            if pid != completed.producer_id:
                return first
        return Offset(completed.last_offset + 1)

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """Open transactions, lowest first offset first."""
        out = []
        for first, pid in self._ongoing.items():
            e = self._producers[pid]
            out.append(OngoingTxn(pid, e.producer_epoch, first, e.last_timestamp))
        return out

    def latest_snapshot_offset(self) -> Offset | None:
        return max(self._snapshots, default=None)

    # -- changes ------------------------------------------------------------

    def check_update(self, entry: ProducerStateEntry, completed: CompletedTxn | None = None) -> str | None:
        """Why ``update(entry, completed)`` would break the map's invariants, or None.
        Appends call it before writing a byte, so a refused update never follows a write."""
        pid = entry.producer_id
        if pid < 0:
            return f"invalid producer id {pid}"
        before = self._producers.get(pid)
        open_before = before.current_txn_first_offset if before is not None else NO_TXN
        open_after = entry.current_txn_first_offset
        if completed is not None:
            if completed.producer_id != pid or completed.first_offset != open_before or open_after >= 0:
                return f"{completed} does not end the transaction of {before}"
        elif open_before >= 0 and open_after != open_before:
            return f"producer {pid}: transaction at {open_before} ended without a marker"
        if open_after >= 0 and open_after != open_before:
            last = next(reversed(self._ongoing), None)
            if last is not None and open_after <= last:
                return f"transaction start {open_after} not after open transaction {last}"
        return None

    def update(self, entry: ProducerStateEntry, completed: CompletedTxn | None = None) -> None:
        """Commit an entry built by validate_data_batch / with_end_txn_marker. A data
        entry with a new transaction opens it; a marker entry passes the transaction
        it ``completed`` (the caller writes the transaction index first)."""
        problem = self.check_update(entry, completed)
        if problem is not None:
            raise ValueError(problem)
        pid = entry.producer_id
        before = self._producers.get(pid)
        open_before = before.current_txn_first_offset if before is not None else NO_TXN
        open_after = entry.current_txn_first_offset
        self._producers[pid] = entry
        if completed is not None:
            del self._ongoing[completed.first_offset]
            self._unreplicated[completed.first_offset] = (pid, completed.last_offset)
        elif open_after >= 0 and open_after != open_before:
            self._ongoing[open_after] = pid

    def on_high_watermark_updated(self, high_watermark: Offset) -> None:
        """Completed transactions whose marker is below the high watermark are stable."""
        self._drop_unreplicated_below(high_watermark)

    def _drop_unreplicated_below(self, offset: Offset) -> None:
        if self._unreplicated:
            self._unreplicated = {f: v for f, v in self._unreplicated.items() if v[1] >= offset}

    def prepare_replicated(
        self, header: BatchHeader, marker: ControlRecord | None
    ) -> tuple[ProducerStateEntry, CompletedTxn | None] | None:
        """The next entry (and the transaction a marker ends) for a batch already in the
        log, without validation; None for an empty control batch (its transaction was
        cleaned away). ``marker`` is the decoded record of a control batch."""
        current = self.entry_for(header.producer_id)
        if not header.is_control:
            return current.with_data_batch(header), None
        if marker is None:
            return None
        completed = current.completed_by_marker(header.base_offset, marker.control_type)
        entry = current.with_end_txn_marker(
            ProducerEpoch(header.producer_epoch), CoordinatorEpoch(marker.coordinator_epoch),
            header.max_timestamp,
        )
        return entry, completed

    def apply_replicated(
        self, header: BatchHeader, marker: ControlRecord | None = None
    ) -> CompletedTxn | None:
        """Replay a batch already in the log (no validation, no transaction index)."""
        prepared = self.prepare_replayed(header, marker)
        if prepared is None:
            return None
        entry, completed = prepared
        self.update(entry, completed)
        return completed

    def prepare_replayed(
        self, header: BatchHeader, marker: ControlRecord | None
    ) -> tuple[ProducerStateEntry, CompletedTxn | None] | None:
        """prepare_replicated for recovery: whatever a stored batch holds, the result is
        an update the map accepts, or None (the batch leaves producer state alone, with
        one log line saying why). Start-up never fails on the content of the log."""
        if not header.has_producer_id:
            return None
        try:
            prepared = self.prepare_replicated(header, marker)
        except ValueError as exc:  # e.g. a marker before its transaction's first offset
            problem: str | None = str(exc)
        else:
            if prepared is None:
                return None
            problem = self.check_update(*prepared)
            if problem is None:
                return prepared
        log.warning(
            "%s: batch at offset %d leaves producer state unchanged: %s",
            self.directory.name, header.base_offset, problem,
        )
        return None

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` without an open transaction, and
        checks started that long ago whose batch never came."""
        expired = [pid for pid, e in self._producers.items() if _is_expired(e, now_ms, expiration_ms)]
        for pid in expired:
            del self._producers[pid]
        self._verifying = {
            pid: v for pid, v in self._verifying.items() if now_ms - v.started_ms < expiration_ms
        }
        return len(expired)

    # -- transaction verification (KIP-890) ------------------------------------

    def start_verification(
        self, producer_id: ProducerId, sequence: int, epoch: ProducerEpoch, now_ms: int,
        supports_epoch_bump: bool = False,
    ) -> Verification | None:
        """Before a client's transactional batch is checked with its coordinator: the guard
        to append it with, or None when the producer has a transaction open here already
        (nothing to check: the coordinator knows the partition is in it). A transaction open
        at an older epoch is not this batch's: under transaction version 2 every EndTxn bumps
        the epoch, and the next transaction's first batch may arrive before the marker that
        ends the previous one; it is checked (and waits for that completion) like any other."""
        if self._open_txn_at(producer_id, epoch):
            return None
        pending = self._verifying.get(producer_id)
        if pending is None:
            pending = Verification(sequence, epoch, now_ms, supports_epoch_bump)
            self._verifying[producer_id] = pending
        pending.saw(sequence, epoch)
        return pending

    def verification_current(self, guard: Verification) -> bool:
        """`guard` is still its producer's check in progress (no batch or marker ended it)."""
        return guard in self._verifying.values()

    def _open_txn_at(self, producer_id: ProducerId, epoch: ProducerEpoch) -> bool:
        """The producer has a transaction open here, begun at `epoch` (Kafka's
        hasOngoingTransaction(producerId, producerEpoch))."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.has_ongoing_txn and entry.producer_epoch == epoch

    def check_verified(self, header: BatchHeader, guard: Verification | None) -> AppendError | None:
        """A client's transactional batch may open a transaction here only with the guard of
        the check that allowed it, and may not overtake a lower sequence still being checked."""
        pid = header.producer_id
        pending = self._verifying.get(pid)
        if not self._open_txn_at(pid, header.producer_epoch) and (pending is None or pending is not guard):
            return AppendError(ErrorCode.INVALID_TXN_STATE,
                               f"producer {pid}: record was not part of an ongoing transaction")
        return None if pending is None else self._checked_sequence(header, pending)

    def check_pending_sequence(self, header: BatchHeader) -> AppendError | None:
        """An idempotent batch of a producer id a transactional check is in progress for (Kafka's
        ProducerAppendInfo applies the verification's sequence rules to every batch)."""
        pending = self._verifying.get(header.producer_id)
        return None if pending is None else self._checked_sequence(header, pending)

    def _checked_sequence(self, header: BatchHeader, pending: Verification) -> AppendError | None:
        pid, first = header.producer_id, header.base_sequence
        if pending.supports_epoch_bump and first != 0 and self._stateless(pid):
            return AppendError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"sequence {first} from producer {pid}, which has no state here: "
                "a transaction version 2 producer starts at 0",
            )
        # a check of an older epoch (-1: none), refused by the coordinator and left behind, does
        # not hold back the open transaction's batches; one of the same or a newer epoch does
        if pending.epoch >= header.producer_epoch and first > pending.lowest_seq:
            return AppendError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence {first} from producer {pid}: "
                f"sequence {pending.lowest_seq} is still being checked",
            )
        return None

    def _stateless(self, producer_id: ProducerId) -> bool:
        entry = self._producers.get(producer_id)
        return entry is None or not entry.batches

    def end_verification(self, producer_id: ProducerId) -> None:
        """A transactional batch or marker of the producer was appended: the transaction
        is open (or over), so its check is done."""
        self._verifying.pop(producer_id, None)

    def on_log_start_offset_incremented(self, log_start_offset: Offset) -> None:
        self._drop_unreplicated_below(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = log_start_offset if latest is None else latest

    # -- snapshots ----------------------------------------------------------

    def take_snapshot(self, offset: Offset | None = None) -> Path | None:
        """Write the map as a snapshot at ``offset`` (default: the map end offset),
        unless that offset is not past the last snapshot taken."""
        if offset is not None:
            self.map_end_offset = offset
        if self.map_end_offset <= self._last_snap_offset:
            return None
        path = snapshot_path(self.directory, self.map_end_offset)
        write_snapshot(path, (e.to_snapshot() for e in self._producers.values()))
        self._snapshots[self.map_end_offset] = path
        self._last_snap_offset = self.map_end_offset
        log.debug(
            "%s: producer snapshot at %d with %d producers",
            self.directory.name,
            self.map_end_offset,
            len(self._producers),
        )
        return path

    def delete_snapshot(self, offset: Offset) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: Offset) -> None:
        for snap in [o for o in self._snapshots if o < offset]:
            self.delete_snapshot(snap)

    def remove_stray_snapshots(self, segment_bases: list[Offset], log_end_offset: Offset) -> None:
        """Delete snapshots above the log end, then those that belong to no segment
        except the newest one when it is above every segment base (the one written
        at clean shutdown)."""
        for offset in [o for o in self._snapshots if o > log_end_offset]:
            log.info("%s: deleting producer snapshot %d above the log end", self.directory.name, offset)
            self.delete_snapshot(offset)
        bases = set(segment_bases)
        strays = [o for o in sorted(self._snapshots) if o not in bases]
        keep = strays[-1] if strays and segment_bases and strays[-1] > max(segment_bases) else None
        for offset in strays:
            if offset != keep:
                log.info("%s: deleting stray producer snapshot %d", self.directory.name, offset)
                self.delete_snapshot(offset)

    def truncate_and_reload(
        self, log_start_offset: Offset, log_end_offset: Offset, now_ms: int | None, expiration_ms: int
    ) -> Offset | None:
        """Drop snapshots outside [log start, log end] and load the newest intact one
        (deleting corrupt ones); returns its offset, None when the map starts empty at
        the log start. Replay then runs from ``map_end_offset``."""
        for offset in [o for o in self._snapshots if o > log_end_offset or o < log_start_offset]:
            self.delete_snapshot(offset)
        self._clear()
        while self._snapshots:
            offset = max(self._snapshots)
            try:
                self._load_entries(read_snapshot(self._snapshots[offset]), now_ms, expiration_ms)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning(
                    "%s: deleting unreadable producer snapshot %d: %s", self.directory.name, offset, exc
                )
                self._clear()
                self.delete_snapshot(offset)
                continue
            self.map_end_offset = self._last_snap_offset = offset
            return offset
        self.map_end_offset = self._last_snap_offset = log_start_offset
        return None

    def load_snapshot_at_or_below(self, offset: Offset) -> Offset | None:
        """Load the newest intact snapshot at or below ``offset`` into this (empty) map
        without deleting any file; its offset, or None. For a scratch copy of the state,
        e.g. to rebuild transaction indexes during recovery (Kafka's recoverSegment)."""
        for snap in sorted((o for o in self._snapshots if o <= offset), reverse=True):
            self._clear()
            try:
                self._load_entries(read_snapshot(self._snapshots[snap]), None, 0)
            except (CorruptSnapshotError, OSError):
                self._clear()
                continue
            self.map_end_offset = snap
            return snap
        return None

    def _load_entries(self, entries: list[SnapshotEntry], now_ms: int | None, expiration_ms: int) -> None:
        loaded = [ProducerStateEntry.from_snapshot(e) for e in entries]
        if now_ms is not None:
            loaded = [e for e in loaded if not _is_expired(e, now_ms, expiration_ms)]
        if len({e.producer_id for e in loaded}) != len(loaded):
            raise CorruptSnapshotError("a producer id appears twice")
        for entry in sorted(loaded, key=lambda e: e.current_txn_first_offset):
            try:
                self.update(entry)  # checks the entry first (check_update), changes nothing if refused
            except ValueError as exc:  # CRC-valid but impossible: rebuild from the log
                raise CorruptSnapshotError(str(exc)) from exc

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()


def _is_expired(entry: ProducerStateEntry, now_ms: int, expiration_ms: int) -> bool:
    return not entry.has_ongoing_txn and now_ms - entry.last_timestamp >= expiration_ms
