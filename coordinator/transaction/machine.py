"""The transaction coordinator as a pure state machine (Kafka's TransactionCoordinator logic).

An operation reads the current metadata, decides, and returns an ``Outcome``: at most one
``__transaction_state`` record to append, the response to send once that record is durable,
and, for Prepare* records, the markers to send afterwards. It never changes the metadata
itself: the broker appends ``outcome.record``, then calls ``replay`` with it (the same call
that loads the partition after a failover), then answers. While a record is in flight the id
is *pending* (Kafka's pendingState): other requests for it get CONCURRENT_TRANSACTIONS. If
the append fails the broker calls ``write_failed``.

Time comes in as ``now_ms``; ``next_deadline_ms`` says when ``abort_timed_out`` next has work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Concatenate, ParamSpec

from coordinator.hashing import coordinator_partition
from coordinator.producer_ids import ProducerIdsUnavailable
from coordinator.transaction.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TxnMetadata,
    TxnState,
    is_epoch_exhausted,
)
from protocol.errors import ErrorCode
from protocol.internal_topics import OFFSETS_TOPIC
from protocol.transaction_log import (
    TransactionLogDecodeError,
    TxnLogValue,
    UnknownRecordVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    known_versions,
)
from protocol.types import TV2, ProducerEpoch, ProducerId, TopicPartition

_NO_ERRORS: Mapping[TopicPartition, ErrorCode] = MappingProxyType({})
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class MarkerIntent:
    """WriteTxnMarkers to send for one transaction once its Prepare* record is durable."""

    transactional_id: str
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]
    transaction_version: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an operation decided. ``error`` and the response fields are sent after ``record``
    (if any) is durable; if the append fails, the append error is sent instead."""

    transactional_id: str
    error: ErrorCode
    record: Record | None = None
    markers: MarkerIntent | None = None
    producer_id: ProducerId = NO_PRODUCER_ID
    producer_epoch: ProducerEpoch = NO_PRODUCER_EPOCH
    partition_errors: Mapping[TopicPartition, ErrorCode] = field(default_factory=lambda: _NO_ERRORS)
    transit: TxnMetadata | None = None  # the metadata ``record`` encodes


@dataclass(frozen=True, slots=True)
class ListResult:
    error: ErrorCode
    transactions: tuple[TxnMetadata, ...] = ()
    unknown_state_filters: tuple[str, ...] = ()


@dataclass(slots=True)
class _Pending:
    transit: TxnMetadata | None  # None: a tombstone
    value: bytes | None
    is_fence: bool = False
    fenced_epoch: int = NO_PRODUCER_EPOCH


class TxnOperation(Enum):
    """What a transactional write asks of the transaction coordinator before it is appended
    (Kafka's TransactionSupportedOperation, chosen by the request version)."""

    DEFAULT_ERROR = "verify"  # the partition must be in the transaction; old clients' error
    GENERIC_ERROR_SUPPORTED = "verify, TRANSACTION_ABORTABLE"  # the client knows the newer error
    ADD_PARTITION = "add"  # transaction version 2: the write itself adds the partition

    @property
    def adds(self) -> bool:
        return self is TxnOperation.ADD_PARTITION


def produce_operation(api_version: int) -> TxnOperation:
    """Produce v12+ adds the partition, v11 knows TRANSACTION_ABORTABLE (KIP-890)."""
    return _operation(api_version, first_generic=11, first_add=12)


def txn_offset_commit_operation(api_version: int) -> TxnOperation:
    """TxnOffsetCommit v5+ adds the group's ``__consumer_offsets`` partition to the transaction
    (it does AddOffsetsToTxn's work), v4 knows TRANSACTION_ABORTABLE (KIP-890)."""
    return _operation(api_version, first_generic=4, first_add=5)


def _operation(api_version: int, *, first_generic: int, first_add: int) -> TxnOperation:
    if api_version >= first_add:
        return TxnOperation.ADD_PARTITION
    if api_version >= first_generic:
        return TxnOperation.GENERIC_ERROR_SUPPORTED
    return TxnOperation.DEFAULT_ERROR


def write_check_error(error: ErrorCode, operation: TxnOperation) -> ErrorCode:
    """Kafka's AddPartitionsToTxnManager: what the writer's client is told when the coordinator
    refuses its partition. A fenced producer learns INVALID_PRODUCER_EPOCH; a partition outside
    the transaction is TRANSACTION_ABORTABLE, or INVALID_TXN_STATE for clients that predate it."""
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE and operation is TxnOperation.DEFAULT_ERROR:
        return ErrorCode.INVALID_TXN_STATE
    return error


def append_error_to_coordinator_error(error: ErrorCode) -> ErrorCode:
    """How Kafka reports a failed ``__transaction_state`` append to the client."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


_P = ParamSpec("_P")


def _needs_producer_ids(
    method: Callable[Concatenate[TransactionStateMachine, str, _P], Outcome],
) -> Callable[Concatenate[TransactionStateMachine, str, _P], Outcome]:
    """An operation that may allocate a producer id answers COORDINATOR_LOAD_IN_PROGRESS when
    none can be had now (Kafka's, while its producer-id block is not there yet). Nothing has
    changed by then: ids are allocated before any record is staged."""
    def answered(
        self: TransactionStateMachine, transactional_id: str, /, *args: _P.args, **kw: _P.kwargs
    ) -> Outcome:
        try:
            return method(self, transactional_id, *args, **kw)
        except ProducerIdsUnavailable:
            return Outcome(transactional_id, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return answered


class TransactionStateMachine:
    """Transaction metadata of the ``__transaction_state`` partitions this coordinator leads."""

    def __init__(
        self,
        *,
        num_partitions: int,
        max_timeout_ms: int,
        new_producer_id: Callable[[], int],
        transaction_version_level: int = TV2,
    ) -> None:
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self.transaction_version_level = transaction_version_level
        self._allocate = new_producer_id
        self._states: dict[str, TxnMetadata] = {}
        # The ids of `_states` by their partition (every one led here), and those of them in
        # Ongoing (the only ones that time out): what a load, a partition's completions and the
        # timer read, without a pass over every id.
        self._ids: dict[int, set[str]] = {}
        self._ongoing: set[str] = set()
        self._pending: dict[str, _Pending] = {}
        self._failed_fence: dict[str, int] = {}  # id -> epoch of a fence whose write failed
        self._epochs: dict[int, int] = {}  # loaded partition -> coordinator epoch
        self._loading: set[int] = set()
        self._staged: dict[int, dict[bytes, bytes | None]] = {}  # loading partition -> key -> last value

    # ------------------------------------------------------------ partitions and replay

    def partition_for(self, transactional_id: str) -> int:
        return coordinator_partition(transactional_id, self.num_partitions)

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        """Start leading ``partition``: forget what we had for it, then replay its log."""
        self._drop_partition(partition)
        self._epochs[partition] = coordinator_epoch
        self._loading.add(partition)
        self._staged[partition] = {}

    def stage(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One record of ``partition``'s log as it loads. The log is a changelog: only each
        id's last record counts (what compaction keeps), so values are decoded once, by
        `replay_staged`, not once per state change the log holds: tens of thousands of them
        for a busy producer, seconds of replay every time the coordinator moves. Records of
        versions this code does not know are skipped here, as `replay` skips them."""
        staged = self._staged.get(partition)
        if staged is not None and known_versions(key, value):
            staged[key] = value

    def replay_staged(self, partition: int) -> list[tuple[bytes, TransactionLogDecodeError]]:
        """Replay the last record of each id staged while ``partition`` loaded; the keys whose
        record could not be decoded, each with why (their ids stay unknown here)."""
        unreadable = []
        for key, value in self._staged.pop(partition, {}).items():
            try:
                self.replay(key, value)
            except TransactionLogDecodeError as exc:
                unreadable.append((key, exc))
        return unreadable

    def finish_load(self, partition: int) -> list[MarkerIntent]:
        """The log is replayed; the Prepare* transactions found must have their markers sent."""
        self._loading.discard(partition)
        return self.pending_completions(partition)

    def coordinator_epoch(self, partition: int) -> int | None:
        """The coordinator epoch ``partition`` is loaded (or loading) at; None if not led here."""
        return self._epochs.get(partition)

    def unload(self, partition: int) -> None:
        self._drop_partition(partition)
        self._epochs.pop(partition, None)
        self._loading.discard(partition)
        self._staged.pop(partition, None)

    def _drop_partition(self, partition: int) -> None:
        ids = self._ids.pop(partition, set())
        ids.update(t for t in self._pending if self.partition_for(t) == partition)
        for tid in ids:
            self._states.pop(tid, None)
            self._pending.pop(tid, None)
            self._failed_fence.pop(tid, None)
            self._ongoing.discard(tid)

    def replay(self, key: bytes, value: bytes | None) -> TxnMetadata | None:
        """Apply one ``__transaction_state`` record. Records of unknown versions are skipped,
        as Kafka does; so are records of partitions we do not lead."""
        try:
            tid = decode_key(key)
            pending = self._pending.get(tid)
            if pending is not None and pending.value == value:  # our own write: decoded already
                return self._apply(tid, pending.transit)
            decoded = None if value is None else decode_value(value)
        except UnknownRecordVersion:
            return None
        return self.apply(tid, decoded)

    def apply(self, transactional_id: str, value: TxnLogValue | None) -> TxnMetadata | None:
        """Typed ``replay``: the record's value, or None for a tombstone."""
        metadata = None if value is None else TxnMetadata.from_log_value(transactional_id, value)
        return self._apply(transactional_id, metadata)

    def _apply(self, tid: str, metadata: TxnMetadata | None) -> TxnMetadata | None:
        self._pending.pop(tid, None)
        partition = self.partition_for(tid)
        if partition not in self._epochs:
            return None
        if metadata is None:
            self._states.pop(tid, None)
            self._failed_fence.pop(tid, None)
            self._ids.get(partition, set()).discard(tid)
            self._ongoing.discard(tid)
            return None
        if metadata.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self._failed_fence.pop(tid, None)
        self._states[tid] = metadata
        self._ids.setdefault(partition, set()).add(tid)
        if metadata.state is TxnState.ONGOING:
            self._ongoing.add(tid)
        else:
            self._ongoing.discard(tid)
        return metadata

    def write_failed(self, transactional_id: str) -> None:
        """The append of the pending record failed: the id is free again, its state unchanged.
        A failed epoch fence is remembered so the retry does not bump the epoch again."""
        pending = self._pending.pop(transactional_id, None)
        if pending is not None and pending.is_fence and pending.transit is not None:
            self._failed_fence[transactional_id] = pending.fenced_epoch

    # ------------------------------------------------------------ helpers

    def _ownership_error(self, tid: str) -> ErrorCode | None:
        partition = self.partition_for(tid)
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._epochs:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _value_version(self) -> int:
        return 0 if self.transaction_version_level <= 0 else 1

    def _write(self, transit: TxnMetadata, *, fenced_epoch: int | None = None) -> Record:
        tid = transit.transactional_id
        value = encode_value(transit.to_log_value(), self._value_version())
        if fenced_epoch is None:
            self._pending[tid] = _Pending(transit, value)
        else:
            self._pending[tid] = _Pending(transit, value, True, fenced_epoch)
        return encode_key(tid), value

    def _markers(self, prepared: TxnMetadata) -> MarkerIntent:
        return MarkerIntent(
            transactional_id=prepared.transactional_id,
            producer_id=prepared.producer_id,
            producer_epoch=prepared.producer_epoch,
            commit=prepared.state is TxnState.PREPARE_COMMIT,
            coordinator_epoch=self._epochs[self.partition_for(prepared.transactional_id)],
            partitions=prepared.partitions,
            transaction_version=prepared.client_transaction_version,
        )

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._states.get(transactional_id)

    def is_pending(self, transactional_id: str) -> bool:
        return transactional_id in self._pending

    def is_settling(self, transactional_id: str) -> bool:
        """A record of the id is being written, or its transaction is completing (Prepare*):
        what answers CONCURRENT_TRANSACTIONS now changes once the next record is replayed."""
        current = self._states.get(transactional_id)
        return transactional_id in self._pending or (current is not None and current.state.is_prepare)

    @property
    def transactions(self) -> Mapping[str, TxnMetadata]:
        return MappingProxyType(self._states)

    # ------------------------------------------------------------ InitProducerId

    @_needs_producer_ids
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: ProducerId,
        expected_epoch: ProducerEpoch,
        now_ms: int,
    ) -> Outcome:
        tid = transactional_id
        if not tid:
            return Outcome(tid, ErrorCode.INVALID_REQUEST)
        if (expected_producer_id == NO_PRODUCER_ID) != (expected_epoch == NO_PRODUCER_EPOCH):
            return Outcome(tid, ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Outcome(tid, ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        if (err := self._ownership_error(tid)) is not None:
            return Outcome(tid, err)
        if tid in self._pending:
            return Outcome(tid, ErrorCode.CONCURRENT_TRANSACTIONS)
        current = self._states.get(tid) or self._fresh(tid, timeout_ms, now_ms)
        expected = None if expected_producer_id == NO_PRODUCER_ID else (expected_producer_id, expected_epoch)
        if expected is not None and not _is_valid_producer_id(current, *expected):
            return Outcome(tid, ErrorCode.PRODUCER_FENCED)
        state = current.state
        if state.is_prepare:
            return Outcome(tid, ErrorCode.CONCURRENT_TRANSACTIONS)
        if state is TxnState.ONGOING:
            return self._fence_and_abort(current, now_ms, ErrorCode.CONCURRENT_TRANSACTIONS)
        if state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise RuntimeError(f"{tid} found in state {state.display_name}, which is never stored")
        expected_epoch_opt = None if expected is None else expected[1]
        if is_epoch_exhausted(current.producer_epoch) and expected_epoch_opt in (
            None,
            current.producer_epoch,
        ):
            transit = current.transit(
                TxnState.EMPTY,
                producer_id=self._new_producer_id(),
                producer_epoch=0,
                last_producer_epoch=NO_PRODUCER_EPOCH if expected is None else current.producer_epoch,
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                txn_start_ms=-1,
                last_update_ms=now_ms,
            )
        else:
            epochs = _incremented_epochs(current, expected_epoch_opt)
            if epochs is None:
                return Outcome(tid, ErrorCode.PRODUCER_FENCED)
            transit = current.transit(
                TxnState.EMPTY,
                producer_epoch=epochs[0],
                last_producer_epoch=epochs[1],
                timeout_ms=timeout_ms,
                partitions=frozenset(),
                txn_start_ms=-1,
                last_update_ms=now_ms,
            )
        return Outcome(
            tid,
            ErrorCode.NONE,
            record=self._write(transit),
            producer_id=transit.producer_id,
            producer_epoch=transit.producer_epoch,
            transit=transit,
        )

    def _new_producer_id(self) -> ProducerId:
        return ProducerId(self._allocate())

    def _fresh(self, tid: str, timeout_ms: int, now_ms: int) -> TxnMetadata:
        return TxnMetadata(
            transactional_id=tid,
            producer_id=self._new_producer_id(),
            previous_producer_id=NO_PRODUCER_ID,
            next_producer_id=NO_PRODUCER_ID,
            producer_epoch=NO_PRODUCER_EPOCH,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            txn_start_ms=-1,
            last_update_ms=now_ms,
            client_transaction_version=0,
        )

    def _fence_and_abort(self, current: TxnMetadata, now_ms: int, error: ErrorCode) -> Outcome:
        """Kafka's prepareFenceProducerEpoch + the coordinator-initiated abort: bump the epoch
        (once, even across a failed attempt), then PrepareAbort at the server's transaction
        version. PrepareEpochFence itself is never written."""
        if current.producer_epoch >= MAX_EPOCH:
            raise RuntimeError(f"cannot fence {current.transactional_id}: epoch {current.producer_epoch}")
        tid = current.transactional_id
        fenced_epoch = max(self._failed_fence.get(tid, NO_PRODUCER_EPOCH), current.producer_epoch + 1)
        tv = self.transaction_version_level
        # The abort's markers carry the fenced epoch at every transaction version (Kafka 4.3: a
        # TV2 producer at epoch 0 fenced this way gets epoch 2 from its next InitProducerId).
        last_epoch = current.producer_epoch if tv >= TV2 else NO_PRODUCER_EPOCH
        epoch = fenced_epoch
        transit = current.transit(
            TxnState.PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            next_producer_id=NO_PRODUCER_ID,
            last_update_ms=now_ms,
            client_transaction_version=tv,
        )
        return Outcome(
            tid,
            error,
            record=self._write(transit, fenced_epoch=fenced_epoch),
            markers=self._markers(transit),
            transit=transit,
        )

    # ------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        verify_only: bool = False,
        client_transaction_version: int = 0,
    ) -> Outcome:
        tid = transactional_id
        wanted = frozenset(partitions)
        if verify_only:
            return self._verify_partitions(tid, producer_id, producer_epoch, wanted)
        error = self._add_partitions_error(tid, producer_id, producer_epoch, wanted)
        if error is not None:
            return Outcome(tid, error, partition_errors=_all(wanted, error))
        current = self._states[tid]
        if current.state is TxnState.ONGOING and wanted <= current.partitions:
            return Outcome(tid, ErrorCode.NONE, partition_errors=_all(wanted, ErrorCode.NONE))
        starting = current.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        transit = current.transit(
            TxnState.ONGOING,
            partitions=current.partitions | wanted,
            txn_start_ms=now_ms if starting else current.txn_start_ms,
            last_update_ms=now_ms,
            client_transaction_version=client_transaction_version,
        )
        return Outcome(
            tid,
            ErrorCode.NONE,
            record=self._write(transit),
            partition_errors=_all(wanted, ErrorCode.NONE),
            transit=transit,
        )

    def _add_partitions_error(
        self, tid: str, producer_id: ProducerId, producer_epoch: ProducerEpoch,
        wanted: frozenset[TopicPartition]
    ) -> ErrorCode | None:
        if not tid:
            return ErrorCode.INVALID_REQUEST
        if (err := self._ownership_error(tid)) is not None:
            return err
        if tid in self._pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        current = self._states.get(tid)
        if current is None or current.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if current.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if current.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    def _verify_partitions(
        self, tid: str, producer_id: ProducerId, producer_epoch: ProducerEpoch,
        wanted: frozenset[TopicPartition]
    ) -> Outcome:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ verifyOnly): no record, no pending check."""
        error: ErrorCode | None = ErrorCode.INVALID_REQUEST if not tid else self._ownership_error(tid)
        current = self._states.get(tid)
        if error is None:
            if current is None or current.producer_id != producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif current.producer_epoch != producer_epoch:
                error = ErrorCode.PRODUCER_FENCED
            elif current.state.is_prepare:
                error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not None or current is None:
            err = error or ErrorCode.INVALID_PRODUCER_ID_MAPPING
            return Outcome(tid, err, partition_errors=_all(wanted, err))
        results = {
            tp: ErrorCode.NONE if tp in current.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in wanted
        }
        return Outcome(tid, ErrorCode.NONE, partition_errors=MappingProxyType(results))

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_partition: TopicPartition,
        now_ms: int,
        client_transaction_version: int = 0,
    ) -> Outcome:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        outcome = self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            [group_partition],
            now_ms,
            client_transaction_version=client_transaction_version,
        )
        return replace(outcome, partition_errors=_NO_ERRORS)

    def offsets_partition_for(self, group_id: str, offsets_partitions: int) -> TopicPartition:
        return OFFSETS_TOPIC, coordinator_partition(group_id, offsets_partitions)

    # ------------------------------------------------------------ EndTxn and markers

    @_needs_producer_ids
    def end_txn(
        self,
        transactional_id: str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        commit: bool,
        now_ms: int,
        client_transaction_version: int = 0,
    ) -> Outcome:
        tid = transactional_id
        if not tid:
            return Outcome(tid, ErrorCode.INVALID_REQUEST)
        if (err := self._ownership_error(tid)) is not None:
            return Outcome(tid, err)
        current = self._states.get(tid)
        if current is None:
            return Outcome(tid, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if client_transaction_version >= TV2:
            return self._end_txn_v2(
                current, producer_id, producer_epoch, commit, now_ms, client_transaction_version
            )
        return self._end_txn_v1(current, producer_id, producer_epoch, commit, now_ms)

    def _end_txn_v1(
        self, current: TxnMetadata, producer_id: ProducerId, producer_epoch: ProducerEpoch, commit: bool,
        now_ms: int
    ) -> Outcome:
        tid = current.transactional_id
        if current.producer_id != producer_id:
            return Outcome(tid, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if current.producer_epoch != producer_epoch:
            return Outcome(tid, ErrorCode.PRODUCER_FENCED)
        if tid in self._pending:
            return Outcome(tid, ErrorCode.CONCURRENT_TRANSACTIONS)
        state = current.state
        if state is TxnState.ONGOING:
            return self._prepare_end(current, commit, now_ms, tv=0, retry_ids=False, no_partitions=False)
        return Outcome(tid, _settled_answer(state, commit, is_retry=True))

    def _end_txn_v2(
        self, current: TxnMetadata, producer_id: ProducerId, producer_epoch: ProducerEpoch, commit: bool,
        now_ms: int, tv: int
    ) -> Outcome:
        """KIP-890 part 2: every EndTxn bumps the epoch; a retry carries the epoch before the bump."""
        tid, state = current.transactional_id, current.state
        retry_on_overflow = (
            current.previous_producer_id == producer_id
            and producer_epoch == MAX_EPOCH - 1
            and current.producer_epoch == 0
        )
        retry_on_bump = current.producer_epoch == producer_epoch + 1
        # The next transaction's EndTxn (already at the bumped epoch) while this one completes:
        # ask again once it has (KAFKA-18464; an empty abort is sent at once by the Java client).
        next_while_prepared = state.is_prepare and producer_epoch == current.producer_epoch
        if state.is_prepare:
            valid_epoch = retry_on_bump or next_while_prepared
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == current.producer_epoch
        else:
            valid_epoch = producer_epoch == current.producer_epoch
        is_retry = retry_on_bump or retry_on_overflow
        if current.producer_id != producer_id and not retry_on_overflow:
            return Outcome(tid, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return Outcome(tid, ErrorCode.PRODUCER_FENCED)
        if tid in self._pending or next_while_prepared:
            return Outcome(tid, ErrorCode.CONCURRENT_TRANSACTIONS)
        if state is TxnState.ONGOING:
            return self._prepare_end(current, commit, now_ms, tv=tv, retry_ids=True, no_partitions=False)
        if (
            not commit
            and not is_retry
            and state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        ):
            return self._prepare_end(current, False, now_ms, tv=tv, retry_ids=True, no_partitions=True)
        if commit and is_retry and state is TxnState.COMPLETE_ABORT:
            # A commit sent before the coordinator aborted on its own (a timeout): fenced, which
            # clients survive, not INVALID_TXN_STATE, which is fatal (KAFKA-20785).
            return Outcome(tid, ErrorCode.PRODUCER_FENCED)
        error = _settled_answer(state, commit, is_retry)
        if error is ErrorCode.NONE:
            return Outcome(tid, error, producer_id=current.producer_id, producer_epoch=current.producer_epoch)
        return Outcome(tid, error)

    def _prepare_end(
        self,
        current: TxnMetadata,
        commit: bool,
        now_ms: int,
        *,
        tv: int,
        retry_ids: bool,
        no_partitions: bool,
    ) -> Outcome:
        """Kafka's prepareAbortOrCommit; at TV2 the epoch is bumped and, when that exhausts it,
        a next producer id is allocated now and taken over at Complete*."""
        next_pid = NO_PRODUCER_ID
        if tv >= TV2:
            if is_epoch_exhausted(current.producer_epoch):
                next_pid = self._new_producer_id()
            epoch, last_epoch = current.producer_epoch + 1, current.producer_epoch
        else:
            epoch, last_epoch = current.producer_epoch, current.last_producer_epoch
        transit = current.transit(
            TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            next_producer_id=next_pid,
            txn_start_ms=now_ms if no_partitions else current.txn_start_ms,
            last_update_ms=now_ms,
            client_transaction_version=tv,
        )
        answer_id, answer_epoch = ProducerId(NO_PRODUCER_ID), ProducerEpoch(NO_PRODUCER_EPOCH)
        if retry_ids:  # TV2 answers with the id/epoch the producer uses next
            answer_id, answer_epoch = (
                (ProducerId(next_pid), ProducerEpoch(0)) if next_pid != NO_PRODUCER_ID
                else (ProducerId(transit.producer_id), ProducerEpoch(epoch))
            )
        return Outcome(
            current.transactional_id,
            ErrorCode.NONE,
            record=self._write(transit),
            markers=self._markers(transit),
            producer_id=answer_id,
            producer_epoch=answer_epoch,
            transit=transit,
        )

    def complete_markers(self, transactional_id: str, now_ms: int) -> Outcome:
        """All markers are written: persist CompleteCommit / CompleteAbort (Kafka's prepareComplete)."""
        tid = transactional_id
        if (err := self._ownership_error(tid)) is not None:
            return Outcome(tid, err)
        if tid in self._pending:
            return Outcome(tid, ErrorCode.CONCURRENT_TRANSACTIONS)
        current = self._states.get(tid)
        if current is None:
            return Outcome(tid, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not current.state.is_prepare:
            return Outcome(tid, ErrorCode.INVALID_TXN_STATE)
        rotate = current.client_transaction_version >= TV2 and current.next_producer_id != NO_PRODUCER_ID
        transit = current.transit(
            TxnState.COMPLETE_COMMIT if current.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT,
            producer_id=current.next_producer_id if rotate else current.producer_id,
            producer_epoch=0 if rotate else current.producer_epoch,
            next_producer_id=NO_PRODUCER_ID,
            partitions=frozenset(),
            last_update_ms=now_ms,
        )
        return Outcome(
            tid,
            ErrorCode.NONE,
            record=self._write(transit),
            producer_id=transit.producer_id,
            producer_epoch=transit.producer_epoch,
            transit=transit,
        )

    def pending_completions(self, partition: int | None = None) -> list[MarkerIntent]:
        """Markers for every Prepare* transaction (after a load: the ones a previous leader left)."""
        prepared = (md for md in self._loaded(partition) if md.state.is_prepare)
        return [self._markers(md) for md in _by_id(prepared)]

    def _loaded(self, partition: int | None = None) -> Iterable[TxnMetadata]:
        """The metadata of the ids of `partition` (of every partition if None) once loaded."""
        partitions = list(self._ids) if partition is None else [partition]
        for p in partitions:
            if p not in self._loading:
                yield from (self._states[tid] for tid in self._ids.get(p, ()))

    # ------------------------------------------------------------ timeouts and expiration

    def _idle(self, md: TxnMetadata) -> bool:
        """No record of the id in flight, and its partition loaded."""
        tid = md.transactional_id
        return tid not in self._pending and self.partition_for(tid) not in self._loading

    def _ongoing_idle(self) -> Iterable[TxnMetadata]:
        return _by_id(md for tid in self._ongoing if self._idle(md := self._states[tid]))

    def abort_timed_out(self, now_ms: int) -> list[Outcome]:
        """Ongoing transactions older than their timeout: fence the producer and abort."""
        due = [md for md in self._ongoing_idle() if md.txn_start_ms + md.timeout_ms < now_ms]
        return [self._fence_and_abort(md, now_ms, ErrorCode.NONE) for md in due]

    def next_deadline_ms(self) -> int | None:
        """Earliest ``now_ms`` at which ``abort_timed_out`` has something to do."""
        return min((md.txn_start_ms + md.timeout_ms + 1 for md in self._ongoing_idle()), default=None)

    def _expirable(self, updated_by_ms: int | None = None) -> Iterable[TxnMetadata]:
        """The ids that may expire, of those last updated by `updated_by_ms` if given."""
        pending = self._pending
        return (md for md in self._loaded()
                if (updated_by_ms is None or md.last_update_ms <= updated_by_ms)
                and md.state.expiration_allowed and md.transactional_id not in pending)

    def expire_idle(self, now_ms: int, expiration_ms: int) -> list[Outcome]:
        """Tombstones for ids idle past ``transactional.id.expiration.ms`` (Empty / Complete*)."""
        outcomes = []
        for md in _by_id(self._expirable(now_ms - expiration_ms)):
            md.transit(TxnState.DEAD)  # checks the transition
            tid = md.transactional_id
            self._pending[tid] = _Pending(None, None)
            outcomes.append(Outcome(tid, ErrorCode.NONE, record=(encode_key(tid), None)))
        return outcomes

    def next_expiration_ms(self, expiration_ms: int) -> int | None:
        return min((md.last_update_ms + expiration_ms for md in self._expirable()), default=None)

    # ------------------------------------------------------------ admin queries (KIP-664)

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        tid = transactional_id
        if not tid:
            return ErrorCode.INVALID_REQUEST, None
        if (err := self._ownership_error(tid)) is not None:
            return err, None
        md = self._states.get(tid)
        pending = self._pending.get(tid)
        if md is None or md.state is TxnState.DEAD or (pending is not None and pending.transit is None):
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, md

    def list_transactions(
        self,
        now_ms: int,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> ListResult:
        if self._loading:
            return ListResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        names = list(state_filters)
        states = {s for s in (TxnState.from_display_name(n) for n in names) if s is not None}
        unknown = tuple(n for n in names if TxnState.from_display_name(n) is None)
        producers = set(producer_id_filters)
        found = _by_id(  # every id of `_states` is on a partition led here, none loading
            md
            for md in self._states.values()
            if md.state is not TxnState.DEAD
            and not (producers and md.producer_id not in producers)
            and not (names and md.state not in states)
            and not (duration_filter_ms >= 0 and now_ms - md.txn_start_ms <= duration_filter_ms)
        )
        return ListResult(ErrorCode.NONE, tuple(found), unknown)


# ---------------------------------------------------------------- pure helpers


def _by_id(found: Iterable[TxnMetadata]) -> list[TxnMetadata]:
    """In transactional id order (what the timer and the admin answers go by)."""
    return sorted(found, key=_transactional_id)


def _transactional_id(md: TxnMetadata) -> str:
    return md.transactional_id


def _all(partitions: frozenset[TopicPartition], error: ErrorCode) -> Mapping[TopicPartition, ErrorCode]:
    return MappingProxyType(dict.fromkeys(partitions, error))


def _is_valid_producer_id(current: TxnMetadata, producer_id: ProducerId, epoch: ProducerEpoch) -> bool:
    """KIP-360: a request naming an id may go on if the metadata was just created, the id is
    the current one, or it is the previous one and its epoch was exhausted (a retried rotation)."""
    return (
        current.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == current.producer_id
        or (producer_id == current.previous_producer_id and is_epoch_exhausted(epoch))
    )


def _incremented_epochs(current: TxnMetadata, expected_epoch: ProducerEpoch | None) -> tuple[int, int] | None:
    """(new epoch, last epoch) for InitProducerId on an idle id, or None if the caller is fenced."""
    bumped = current.producer_epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH
    if current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
        return bumped, current.producer_epoch
    if expected_epoch == current.last_producer_epoch:
        return current.producer_epoch, current.last_producer_epoch  # a retry of a call that succeeded
    return None


def _settled_answer(state: TxnState, commit: bool, is_retry: bool) -> ErrorCode:
    """EndTxn on a transaction that is not Ongoing (and not a TV2 abort that starts a new one)."""
    if state is TxnState.PREPARE_COMMIT:
        return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
    if state is TxnState.PREPARE_ABORT:
        return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
    if state is TxnState.COMPLETE_COMMIT and commit and is_retry:
        return ErrorCode.NONE
    if state is TxnState.COMPLETE_ABORT and not commit and is_retry:
        return ErrorCode.NONE
    if state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        return ErrorCode.INVALID_TXN_STATE
    raise RuntimeError(f"transaction found in state {state.display_name}, which is never stored")
