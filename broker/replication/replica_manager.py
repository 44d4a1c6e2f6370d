"""Partitions this broker hosts: appends, reads, and the waiters woken by appends.

The partition on its leader is the one owner of the high watermark: it moves
it after every append and every follower fetch, from what its `LeaderState`
knows of the ISR (on a single broker, the sole replica: HW = log end). On a
follower the replica fetcher sets it from the leader's answers. Delayed
fetches wait on futures woken by appends and HW moves, acks=all produces on
futures resolved when the HW passes their last offset, never on sleeping loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from broker.replication.leader import LeaderState
from broker.replication.write_failures import WriteFailures
from broker.store.image import PartitionEpoch, PartitionState
from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader
from protocol.types import (
    NO_OFFSET,
    CoordinatorEpoch,
    LeaderEpoch,
    NodeId,
    Offset,
    ProducerEpoch,
    ProducerId,
    TopicPartition,
    TransactionVersion,
)
from storage.log import AppendResult, Log, MarkerResult
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state import AppendOrigin, Verification

log = logging.getLogger(__name__)



def _resolve(waiters: set[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
    waiters.clear()


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    error: ErrorCode
    low_watermark: Offset


class NotLeader(Exception):
    """This broker stopped leading the partition."""


class ChangeWatcher(Protocol):
    """Told of every change of a partition it reads (a follower's fetch session): records
    appended, or its HW, LSO or log start moved."""

    def changed(self, key: object, part: Partition, appended: bool) -> bool:
        """False: the watcher no longer reads `part` under `key` (it is dropped)."""


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    leader_epoch: int = 0
    waiters: set[asyncio.Future[None]] = field(default_factory=set)  # consumers' fetches
    follower_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    leader: LeaderState | None = None  # None while this broker follows the partition
    replicated: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    watchers: dict[ChangeWatcher, object] = field(default_factory=dict)  # watcher -> its key for us

    @property
    def is_leader(self) -> bool:
        return self.leader is not None

    def wake(self, appended: bool = True) -> None:
        """Wake the fetches waiting here: a consumer's at any change (records become visible
        as the HW moves), a follower's only when records were appended; as in Kafka, a
        follower hears of a HW move with its next records or at its max wait."""
        _resolve(self.waiters)
        if appended:
            _resolve(self.follower_waiters)
        if self.watchers:
            gone = [w for w, key in self.watchers.items() if not w.changed(key, self, appended)]
            for watcher in gone:
                del self.watchers[watcher]

    def advance_high_watermark(self) -> bool:
        """Leader: move the HW as far as the ISR allows; wakes fetches and acks=all waiters."""
        if self.leader is None:
            return False
        old = self.log.high_watermark
        new = self.leader.high_watermark(self.log.log_end_offset, old)
        if new <= old:
            return False
        self.set_high_watermark(new)
        return True

    def set_high_watermark(self, offset: int) -> None:
        """The one way the partition's HW moves, on the leader (advance_high_watermark) and
        on a follower (the leader's HW from a fetch answer); acks=all waiters below it resolve."""
        self.log.update_high_watermark(offset)
        hw = self.log.high_watermark
        still = []
        for end, future in self.replicated:
            if end <= hw:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end, future))
        self.replicated = still
        self.wake(appended=False)

    def until_replicated(self, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once the HW reaches `end_offset` (acks=all)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= end_offset:
            future.set_result(None)
        else:
            self.replicated.append((end_offset, future))
        return future

    def fail_waiters(self, error: Exception) -> None:
        """Leadership lost or partition gone: acks=all waiters learn it now."""
        for _, future in self.replicated:
            if not future.done():
                future.set_exception(error)
        self.replicated = []
        self.wake()


async def replicated(waits: list[tuple[Partition, int]], timeout_s: float) -> list[ErrorCode]:
    """acks=all: until the HW of each partition passes its end offset; per entry NONE,
    REQUEST_TIMED_OUT (not in time: the outcome is unknown), NOT_LEADER_OR_FOLLOWER
    (leadership lost meanwhile) or NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank
    below min.insync.replicas)."""
    futures = [part.until_replicated(end) for part, end in waits]
    pending = [f for f in futures if not f.done()]
    try:
        if pending:
            await asyncio.wait(pending, timeout=max(timeout_s, 0))
    except asyncio.CancelledError:  # the request went (its client, say): nobody reads these
        for future in pending:
            future.cancel()
        raise
    return [_replication_error(part, future) for (part, _), future in zip(waits, futures, strict=True)]


def effective_min_isr(part: Partition) -> int:
    """Kafka's effectiveMinIsr: min.insync.replicas, but never more than the partition's replicas."""
    if part.leader is not None:
        return part.leader.min_isr
    return part.log.config.min_insync_replicas


def _replication_error(part: Partition, future: asyncio.Future[None]) -> ErrorCode:
    if not future.done():
        future.cancel()
        return ErrorCode.REQUEST_TIMED_OUT
    if future.exception() is not None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    in_sync = len(part.leader.isr) if part.leader is not None else 0
    if in_sync < effective_min_isr(part):
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    return ErrorCode.NONE


class ReplicaManager:
    def __init__(self, log_manager: LogManager, node_id: int, verify_transactions: bool = True) -> None:
        self.log_manager = log_manager
        self.node_id = node_id
        self.verify_transactions = verify_transactions
        self._partitions: dict[TopicPartition, Partition] = {}
        self._topic_changes: dict[str, int] = {}  # topic -> the number of its last partition added or removed
        self._changes = itertools.count(1)
        # The number of the last partition added or removed, or of the last leadership change,
        # of any topic: what a fetch resolved before a different generation may be stale.
        self.generation = 0
        # Cluster mode: where ISR proposals go (an AlterPartition to the metadata store).
        self.isr_changes: Callable[[Partition, tuple[NodeId, ...]], None] | None = None
        self.replica_lag_ms = 30_000
        self._checkpointed_hw = log_manager.read_high_watermarks()
        # Cluster mode: False while this broker's registration may have lapsed; such a broker
        # must not acknowledge writes as leader (another may lead by now).
        self.may_lead: Callable[[], bool] = lambda: True
        # Told of every leadership change: (partition, True on becoming leader, False on losing it).
        self.leadership_listeners: list[Callable[[Partition, bool], None]] = []
        self.write_failures = WriteFailures()
        # Cluster mode: a led partition whose log just became unwritable (its leadership is
        # handed to an in-sync follower, as Kafka's controller does for an offline log dir).
        self.on_unwritable: Callable[[Partition], None] | None = None
        self._unsynced: list[TopicPartition] | None = None  # logs created in `one_dir_sync`

    @contextlib.contextmanager
    def one_dir_sync(self) -> Iterator[None]:
        """Logs created inside share one fsync of the log dirs, when it ends (ClusterRoles'
        apply, where a new topic's partitions arrive together), not one each."""
        self._unsynced = []
        try:
            yield
        finally:
            created, self._unsynced = self._unsynced, None
            if created:
                self.log_manager.sync_log_dirs()

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def led_partition(self, topic: str, index: int) -> Partition | None:
        """The partition if this broker leads it (coordinators write only there)."""
        part = self._partitions.get((topic, index))
        return part if part is not None and part.leader is not None else None

    def _leadership(self, part: Partition, leading: bool) -> None:
        for listener in self.leadership_listeners:
            listener(part, leading)

    def topic_change(self, topic: str) -> int | None:
        """The number of the last change of the topic's partitions here (one added or removed)."""
        return self._topic_changes.get(topic)

    def _changed(self, topic: str) -> None:
        self._topic_changes[topic] = self.generation = next(self._changes)

    def partitions_of(self, topic: str) -> list[Partition]:
        return [p for (t, _), p in self._partitions.items() if t == topic]

    def all_partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def make_leader(self, topic: str, index: int, config: LogConfig, epoch: int = 0) -> Partition:
        existing = self._partitions.get((topic, index))
        if existing is not None:
            return existing
        log_ = self.log_manager.get_log(topic, index) or self.log_manager.create_log(
            topic, index, config
        )
        log_.verify_transactions = self.verify_transactions
        if log_.epoch_cache.latest_epoch <= epoch:  # Kafka's makeLeader: the epoch starts at the log end
            # No follower ever asks a sole replica for its epochs, and each start assigns this
            # again: written with the first append (one fsync'd write less per partition created)
            log_.epoch_cache.assign(epoch, log_.log_end_offset, persist=False)
        part = Partition(topic, index, log_, epoch, leader=self._sole_replica(epoch, log_))
        part.advance_high_watermark()
        self._partitions[(topic, index)] = part
        self._changed(topic)
        self._leadership(part, True)
        return part

    def _hosted(self, topic: str, index: int, config: LogConfig) -> Partition:
        """The partition's entry, its log opened (or created) with the checkpointed HW."""
        part = self._partitions.get((topic, index))
        if part is not None:
            return part
        log_ = self.log_manager.get_log(topic, index)
        if log_ is None:
            log_ = self.log_manager.create_log(topic, index, config, sync=self._unsynced is None)
            if self._unsynced is not None:
                self._unsynced.append((topic, index))
        log_.verify_transactions = self.verify_transactions
        part = Partition(topic, index, log_, -1)
        part.set_high_watermark(self._checkpointed_hw.get((topic, index), 0))
        self._partitions[(topic, index)] = part
        self._changed(topic)
        return part

    def become_leader(
        self, topic: str, index: int, config: LogConfig, state: PartitionState, now_ms: int
    ) -> Partition:
        """Lead from this leader epoch on (Kafka's makeLeader): the epoch starts at the log end."""
        part = self._hosted(topic, index, config)
        if part.leader is not None and part.leader_epoch == state.leader_epoch:
            part.leader.committed(state)
            part.advance_high_watermark()  # the store's ISR may have dropped a member that held it back
            return part
        # An empty log's epoch entry is written with its first append (which assigns it again
        # before writing): one fsync'd checkpoint less per partition of a new topic.
        try:
            part.log.epoch_cache.assign(state.leader_epoch, part.log.log_end_offset,
                                        persist=part.log.log_end_offset > 0)
        except OSError as exc:  # a full disk, say: lead from memory and hand leadership on, as a
            self._write_failed(part, exc)  # failed append does (the next append writes the entry)
        part.leader_epoch = state.leader_epoch
        min_isr = min(config.min_insync_replicas, len(state.replicas))
        part.leader = LeaderState(NodeId(self.node_id), state, part.log.log_end_offset, min_isr, now_ms)
        self.generation = next(self._changes)
        part.advance_high_watermark()
        log.info("partition %s-%d: leader at epoch %d, ISR %s, log end %d, HW %d", topic, index,
                 state.leader_epoch, list(state.isr), part.log.log_end_offset, part.log.high_watermark)
        self._leadership(part, True)
        return part

    def become_follower(self, topic: str, index: int, config: LogConfig, state: PartitionState) -> Partition:
        """Follow from this leader epoch on; acks=all waiters of a lost leadership fail now."""
        part = self._hosted(topic, index, config)
        if part.leader is None and part.leader_epoch == state.leader_epoch:
            return part
        was_leader = part.leader is not None
        if was_leader:
            part.fail_waiters(NotLeader(f"{topic}-{index} is now led by broker {state.leader}"))
        part.leader = None
        part.leader_epoch = state.leader_epoch
        self.generation = next(self._changes)
        log.info("partition %s-%d: follower of broker %d at epoch %d", topic, index,
                 state.leader, state.leader_epoch)
        if was_leader:
            self._leadership(part, False)
        return part

    def _sole_replica(self, epoch: int, log_: Log) -> LeaderState:
        """Single broker: the only replica is the ISR, so the HW is the log end."""
        me = NodeId(self.node_id)
        state = PartitionState((me,), (me,), me, LeaderEpoch(epoch), PartitionEpoch(0))
        return LeaderState(me, state, log_.log_end_offset, min_isr=1, now_ms=0)

    def remove_topic(self, topic: str) -> list[int]:
        """Stop serving a deleted topic's partitions and wake their waiters (which then
        find the partition gone); returns their indexes. The caller deletes the logs."""
        removed = [k for k in self._partitions if k[0] == topic]
        for key in removed:
            self._partitions.pop(key).fail_waiters(NotLeader(f"{topic} was deleted"))
        self._changed(topic)
        return sorted(index for _, index in removed)

    def remove_partition(self, topic: str, index: int) -> None:
        part = self._partitions.pop((topic, index), None)
        self._changed(topic)
        if part is not None:
            part.fail_waiters(NotLeader(f"{topic}-{index} is no longer hosted here"))
            if part.leader is not None:
                self._leadership(part, False)

    def update_config(self, topic: str, config: LogConfig) -> None:
        """A topic's new configs: its logs use them, and its leaders the new min.insync.replicas."""
        self.log_manager.update_config(topic, config)
        for (name, _index), part in self._partitions.items():
            if name == topic and part.leader is not None:
                part.leader.min_isr = min(config.min_insync_replicas, len(part.leader.state.replicas))

    def append(
        self, part: Partition, records: bytes, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT,
        header: BatchHeader | None = None, verification: Verification | None = None,
    ) -> AppendResult:
        try:
            result = part.log.append_as_leader(
                records, part.leader_epoch, now_ms, origin, header, verification
            )
        except OSError as exc:
            self._write_failed(part, exc)
            return self._storage_error(part, f"cannot write the log: {exc.strerror or exc}")
        tp = (part.topic, part.index)
        if result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self.write_failures.failing(tp):
            # The gap may be the producer's batch the disk refused: Kafka, its log dir offline,
            # answers KAFKA_STORAGE_ERROR, which the producer retries in order (an out-of-order
            # answer makes librdkafka bump its epoch and send again what may be stored).
            return self._storage_error(part, f"an earlier write failed ({result.error_message})")
        if result.error == 0:
            self.write_failures.succeeded(tp)  # a write, not a refusal before any
            part.advance_high_watermark()
            part.wake()
        return result

    @staticmethod
    def _storage_error(part: Partition, message: str) -> AppendResult:
        return AppendResult(
            ErrorCode.KAFKA_STORAGE_ERROR, NO_OFFSET, NO_OFFSET, -1, part.log.log_start_offset, message
        )

    def _write_failed(self, part: Partition, exc: OSError) -> None:
        if self.write_failures.failed((part.topic, part.index), exc) and self.on_unwritable is not None:
            self.on_unwritable(part)

    def start_verification(
        self, part: Partition, header: BatchHeader, now_ms: int, supports_epoch_bump: bool
    ) -> Verification | None:
        """A client's transactional batch is about to be checked with its coordinator: the
        guard to append it with, None when its producer has a transaction open here."""
        return part.log.start_verification(header, now_ms, supports_epoch_bump)

    def verification_current(self, part: Partition, guard: Verification) -> bool:
        """`guard` still holds: no batch or marker of its producer ended it."""
        return part.log.producer_state.verification_current(guard)

    def append_txn_marker(
        self, part: Partition, producer_id: ProducerId, producer_epoch: ProducerEpoch, commit: bool,
        coordinator_epoch: CoordinatorEpoch, now_ms: int, transaction_version: TransactionVersion,
    ) -> MarkerResult:
        """A COMMIT/ABORT marker; the LSO may move, so read_committed fetches wake."""
        try:
            result = part.log.append_txn_marker(
                producer_id, producer_epoch, commit, coordinator_epoch, part.leader_epoch, now_ms,
                transaction_version,
            )
        except OSError as exc:
            self._write_failed(part, exc)
            message = f"cannot write the log: {exc.strerror}"
            return MarkerResult(ErrorCode.KAFKA_STORAGE_ERROR, NO_OFFSET, message)
        if result.error == 0:
            self.write_failures.succeeded((part.topic, part.index))
            part.advance_high_watermark()
            part.wake()
        return result

    def delete_records(self, part: Partition, offset: int) -> DeleteRecordsResult:
        """DeleteRecords on the leader: the log start moves up to `offset` (-1: the high
        watermark); a failed write is handled as an append's. The low watermark is the
        leader's log start, -1 on an error."""
        try:
            error = part.log.delete_records_before(offset)
        except OSError as exc:
            self._write_failed(part, exc)
            return DeleteRecordsResult(ErrorCode.KAFKA_STORAGE_ERROR, NO_OFFSET)
        if error != ErrorCode.NONE:
            return DeleteRecordsResult(error, NO_OFFSET)
        part.wake(appended=False)  # followers hear of the new log start
        return DeleteRecordsResult(ErrorCode.NONE, part.log.log_start_offset)

    def record_follower_fetch(self, part: Partition, node: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched: its log end is `fetch_offset`; the HW may move, the ISR may grow."""
        leader = part.leader
        if leader is None:
            return
        log_end = part.log.log_end_offset
        leader.record_fetch(NodeId(node), fetch_offset, log_end, now_ms)
        if fetch_offset == log_end == part.log.high_watermark and leader.settled(NodeId(node)):
            return  # a quiet partition: the HW is at the log end, the follower in the ISR
        part.advance_high_watermark()
        if self.isr_changes is not None:
            hw = part.log.high_watermark
            proposed = leader.proposal(hw, log_end, now_ms, self.replica_lag_ms, fetched_by=NodeId(node))
            if proposed is not None:
                self.isr_changes(part, proposed)

    def check_isr(self, now_ms: int) -> None:
        """Periodic (every half replica.lag.time.max.ms): lagging followers leave the ISR."""
        if self.isr_changes is None:
            return
        for part in self._partitions.values():
            if part.leader is not None:
                log = part.log
                proposed = part.leader.proposal(
                    log.high_watermark, log.log_end_offset, now_ms, self.replica_lag_ms
                )
                if proposed is not None:
                    self.isr_changes(part, proposed)

    def waiter(self, parts: Iterable[Partition], follower: bool = False) -> asyncio.Future[None]:
        """A future resolved by the next change of any of the partitions: an append, or for
        a consumer also a move of the HW or LSO (`Partition.wake`)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for part in parts:
            (part.follower_waiters if follower else part.waiters).add(future)
        return future

    def forget(self, future: asyncio.Future[None], parts: Iterable[Partition]) -> None:
        for part in parts:
            part.waiters.discard(future)
            part.follower_waiters.discard(future)
