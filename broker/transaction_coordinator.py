"""The transaction coordinator's I/O edge around the pure TransactionStateMachine.

Each operation asks the machine for an Outcome, appends its record to this
transactional id's `__transaction_state` partition, replays it into the
machine, and only then answers. Marker intents go to the MarkerChannel, which
writes them through the WriteTxnMarkers code path and reports back so the
machine can persist Complete*. Timeouts and id expiration run on a timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.context import now_ms
from broker.coordination.marker_channel import MarkerChannel
from broker.coordination.marker_writer import write_markers
from broker.faults import crash_point
from broker.internal_topics import read_records, record_batch
from broker.net.client import BrokerClient, BrokerUnreachable
from coordinator.transaction import (
    TV2,
    ListResult,
    MarkerIntent,
    Outcome,
    TransactionStateMachine,
    TxnMetadata,
    TxnOperation,
    append_error_to_coordinator_error,
    write_check_error,
)
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from broker.cluster.view import BrokerInfo
    from broker.replica_manager import Partition
    from broker.server import Broker

log = logging.getLogger(__name__)
ADD_PARTITIONS_TO_TXN = 24
REMOTE_CHECK_TIMEOUT_S = 10.0
TRANSACTION_STATE_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]
# Kafka's ReplicaManager: a produce whose transaction check got a retriable coordinator error
# answers NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
PRODUCE_RETRIABLE = {
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
}


class TransactionCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.machine = TransactionStateMachine(
            num_partitions=self.num_partitions,
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            new_producer_id=broker.producer_ids.generate,
            transaction_version_level=int(config["transaction.version"]),
        )
        self.markers = MarkerChannel(
            broker.node_id, self._leader_of, lambda request: write_markers(broker, request),
            self._markers_written,
        )
        self._loaded = False
        self._loaded_epochs: dict[int, int] = {}  # partition -> leader epoch it was loaded at
        self._clients: dict[tuple[str, int], BrokerClient] = {}  # to other brokers' coordinators
        self._timer: asyncio.Task[None] | None = None
        broker.replicas.leadership_listeners.append(self.on_leadership)

    # -- start-up and loading ------------------------------------------------------

    async def start(self) -> None:
        """Load `__transaction_state` if it exists (finishing every Prepare* found)."""
        if self.broker.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            self._load()
        self._timer = asyncio.create_task(self._timer_loop())

    def _leader_of(self, topic: str, index: int) -> BrokerInfo | None:
        info = self.broker.view.partition(topic, index)
        if info is None or info.leader < 0:
            return None
        return next((b for b in self.broker.view.brokers() if b.node_id == info.leader), None)

    def coordinator_partition(self, key: str) -> tuple[str, int]:
        """The internal partition whose leader coordinates `key` (FindCoordinator)."""
        return TRANSACTION_STATE_TOPIC, self.machine.partition_for(key)

    def ensure_loaded(self) -> ErrorCode:
        """FindCoordinator: create the topic on first use, then load it."""
        if self._loaded:
            return ErrorCode.NONE
        if self.broker.topics.get(TRANSACTION_STATE_TOPIC) is None:
            result = self.broker.topics.create_internal(
                TRANSACTION_STATE_TOPIC, self.num_partitions,
                int(self.broker.config["transaction.state.log.replication.factor"]),
                {"cleanup.policy": "compact",
                 "segment.bytes": str(self.broker.config["transaction.state.log.segment.bytes"]),
                 "min.insync.replicas": str(self.broker.config["transaction.state.log.min.isr"])},
            )
            if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._load()
        return ErrorCode.NONE

    def _load(self) -> None:
        """Every partition of the topic this broker leads and has not loaded at its epoch."""
        pending = []
        for index in range(self.num_partitions):
            part = self.broker.replicas.led_partition(TRANSACTION_STATE_TOPIC, index)
            if part is not None:
                pending += self._load_partition(part)
        self._loaded = True
        log.info("loaded %d transactional ids from %s; %d transactions to complete",
                 len(self.machine.transactions), TRANSACTION_STATE_TOPIC, len(pending))
        for intent in pending:
            self.markers.send(intent)

    def _load_partition(self, part: Partition) -> list[MarkerIntent]:
        """Replay one led partition (its leader epoch is the coordinator epoch); the
        Prepare* transactions found, whose markers must be sent again."""
        index = part.index
        if self._loaded_epochs.get(index) == part.leader_epoch:
            return []
        self.machine.begin_load(index, part.leader_epoch)
        for record in read_records(part):
            if record.key is None:
                continue
            try:
                self.machine.replay(record.key, record.value)
            except ValueError as exc:  # start-up never fails on what the log holds
                log.warning("%s-%d: skipping unreadable record at offset %d: %s",
                            TRANSACTION_STATE_TOPIC, index, record.offset, exc)
        self._loaded_epochs[index] = part.leader_epoch
        return self.machine.finish_load(index)

    def on_leadership(self, part: Partition, leading: bool) -> None:
        """Coordinators follow the leadership of their `__transaction_state` partitions."""
        if part.topic != TRANSACTION_STATE_TOPIC:
            return
        if leading:
            self._loaded = True  # the topic exists and this broker coordinates some of it
            for intent in self._load_partition(part):
                self.markers.send(intent)
            log.info("%s-%d: now coordinating its transactional ids (coordinator epoch %d)",
                     TRANSACTION_STATE_TOPIC, part.index, part.leader_epoch)
        else:
            self.machine.unload(part.index)
            self._loaded_epochs.pop(part.index, None)
            log.info("%s-%d: no longer coordinating its transactional ids",
                     TRANSACTION_STATE_TOPIC, part.index)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        await self.markers.stop()
        await asyncio.gather(*(c.close() for c in self._clients.values()))

    # -- operations ------------------------------------------------------------------

    def _persist(self, outcome: Outcome) -> ErrorCode:
        """Append the outcome's record (if any) and replay it; the error to answer with."""
        if outcome.record is None:
            return outcome.error
        tid = outcome.transactional_id
        part = self.broker.replicas.led_partition(TRANSACTION_STATE_TOPIC, self.machine.partition_for(tid))
        if part is None:
            self.machine.write_failed(tid)
            return ErrorCode.NOT_COORDINATOR
        now = now_ms()
        state = outcome.transit.state.display_name if outcome.transit else "Dead"
        crash_point(f"before-txn-log-{state}")
        batch = record_batch([outcome.record], now)
        result = self.broker.replicas.append(part, batch, now, AppendOrigin.COORDINATOR)
        if result.error != ErrorCode.NONE:
            self.machine.write_failed(tid)
            log.warning("transactional id %s: writing %s failed: %s", tid, TRANSACTION_STATE_TOPIC,
                        ErrorCode(result.error).name)
            return append_error_to_coordinator_error(ErrorCode(result.error))
        crash_point(f"after-txn-log-{state}")
        key, value = outcome.record
        self.machine.replay(key, value)
        if outcome.transit is not None:
            log.info("transactional id %s: %s (producer id %d, epoch %d)", tid,
                     outcome.transit.state.display_name, outcome.transit.producer_id,
                     outcome.transit.producer_epoch)
        if outcome.markers is not None:
            self.markers.send(outcome.markers)
        return outcome.error

    def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        outcome = self.machine.init_producer_id(tid, timeout_ms, producer_id, epoch, now_ms())
        error = self._persist(outcome)
        return error, outcome.producer_id, outcome.producer_epoch

    def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition],
        verify_only: bool = False, transaction_version: int = 0,
    ) -> Outcome:
        outcome = self.machine.add_partitions(
            tid, producer_id, epoch, list(partitions), now_ms(), verify_only=verify_only,
            client_transaction_version=transaction_version,
        )
        error = self._persist(outcome)
        if error != outcome.error:
            return Outcome(tid, error, partition_errors={tp: error for tp in outcome.partition_errors})
        return outcome

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group_id: str) -> ErrorCode:
        partitions = int(self.broker.config["offsets.topic.num.partitions"])
        group_partition = self.machine.offsets_partition_for(group_id, partitions)
        return self._persist(self.machine.add_offsets(tid, producer_id, epoch, group_partition, now_ms()))

    def end_txn(
        self, tid: str, producer_id: int, epoch: int, commit: bool, transaction_version: int
    ) -> tuple[ErrorCode, int, int]:
        """The error, and (transaction version 2) the producer id and epoch to use next."""
        outcome = self.machine.end_txn(tid, producer_id, epoch, commit, now_ms(), transaction_version)
        return self._persist(outcome), outcome.producer_id, outcome.producer_epoch

    async def check_writes(
        self, tid: str, producer_id: int, epoch: int, tps: list[TopicPartition], operation: TxnOperation
    ) -> dict[TopicPartition, ErrorCode]:
        """`check_write` for several partitions, asked of whichever broker coordinates `tid`
        (Kafka's AddPartitionsToTxnManager: AddPartitionsToTxn v4 verify-only, v5 to add)."""
        leader = self._leader_of(*self.coordinator_partition(tid))
        if leader is None or leader.node_id == self.broker.node_id:
            return {tp: self.check_write(tid, producer_id, epoch, tp, operation) for tp in tps}
        return await self._remote_check(leader, tid, producer_id, epoch, tps, operation)

    async def _remote_check(
        self, coordinator: BrokerInfo, tid: str, producer_id: int, epoch: int,
        tps: list[TopicPartition], operation: TxnOperation,
    ) -> dict[TopicPartition, ErrorCode]:
        cls = REQUESTS[ADD_PARTITIONS_TO_TXN]
        topics: dict[str, list[int]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append(index)
        request = cls(transactions=[cls.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=producer_id, producer_epoch=epoch,
            verify_only=not operation.adds,
            topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in topics.items()],
        )])
        try:
            response = await self._client_for(coordinator).call(
                request, 5 if operation.adds else 4, timeout_s=REMOTE_CHECK_TIMEOUT_S
            )
        except (BrokerUnreachable, TimeoutError):
            return dict.fromkeys(tps, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        found = {
            (t.name, p.partition_index): ErrorCode(p.partition_error_code)
            for txn in response.results_by_transaction for t in txn.topic_results
            for p in t.results_by_partition
        }
        top = ErrorCode(response.error_code)
        return {tp: write_check_error(found.get(tp, top), operation) for tp in tps}

    def _client_for(self, broker: BrokerInfo) -> BrokerClient:
        key = (broker.host, broker.port)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = BrokerClient(broker.host, broker.port,
                                                       f"gregor-txn-verify-{self.broker.node_id}")
        return client

    def check_write(
        self, tid: str, producer_id: int, epoch: int, tp: TopicPartition, operation: TxnOperation
    ) -> ErrorCode:
        """Before a transactional write to `tp` is appended (Produce, TxnOffsetCommit): verify
        that `tp` is in the ongoing transaction, or (transaction version 2) add it. NONE, or
        the error for the writer's client as Kafka gives it."""
        if not self._loaded:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if operation.adds:
            outcome = self.add_partitions(tid, producer_id, epoch, [tp], transaction_version=TV2)
        else:
            outcome = self.machine.add_partitions(tid, producer_id, epoch, [tp], now_ms(), verify_only=True)
        return write_check_error(outcome.partition_errors.get(tp, outcome.error), operation)

    def describe(self, tid: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if not self._loaded:
            return ErrorCode.NOT_COORDINATOR, None
        return self.machine.describe(tid)

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> ListResult:
        return self.machine.list_transactions(now_ms(), states, producer_ids, duration_ms)

    # -- completion, timeouts, expiration ----------------------------------------------

    def _markers_written(self, tid: str) -> None:
        outcome = self.machine.complete_markers(tid, now_ms())
        error = self._persist(outcome)
        if error != ErrorCode.NONE:
            log.warning("transactional id %s: completing after markers failed: %s", tid, error.name)

    async def _timer_loop(self) -> None:
        interval = int(self.broker.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        expiration = int(self.broker.config["transactional.id.expiration.ms"])
        while True:
            await asyncio.sleep(interval / 1000)
            if not self._loaded:
                continue
            now = now_ms()
            for outcome in self.machine.abort_timed_out(now):
                log.info("transactional id %s: aborting, older than its timeout", outcome.transactional_id)
                self._persist(outcome)
            for outcome in self.machine.expire_idle(now, expiration):
                log.info("transactional id %s: expired after %d ms idle",
                         outcome.transactional_id, expiration)
                self._persist(outcome)


def produce_error(error: ErrorCode) -> ErrorCode:
    """On Produce, retriable coordinator errors are NOT_ENOUGH_REPLICAS (Kafka's ReplicaManager)."""
    return ErrorCode.NOT_ENOUGH_REPLICAS if error in PRODUCE_RETRIABLE else error
