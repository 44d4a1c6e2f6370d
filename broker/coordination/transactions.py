"""The transaction coordinator's I/O edge around the pure TransactionStateMachine.

Each operation asks the machine for an Outcome, appends its record to this
transactional id's `__transaction_state` partition, waits until the record is
replicated (the CoordinatorLog), replays it into the machine, and only then
answers; meanwhile the id is pending and the event loop serves everything else.
A request that finds its id pending or its transaction completing is parked until the
id's next record is replayed (`Parking`), bounded by `transaction.completion.wait.ms`,
instead of being bounced with CONCURRENT_TRANSACTIONS. Partitions load in the background as
this broker becomes their leader. Marker intents go to the MarkerChannel, which
writes them through the WriteTxnMarkers code path and reports back so the
machine can persist Complete*. Timeouts and id expiration run on a timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from broker import metrics
from broker.base.clock import now_ms
from broker.base.faults import crash_point
from broker.coordination.coordinator_log import CoordinatorLog
from broker.coordination.internal_topics import InternalRecord, record_batch
from broker.coordination.marker_channel import MarkerChannel
from broker.coordination.parking import Parking
from broker.coordination.runtime import CoordinatorRuntime, InternalTopic
from broker.net.client import BrokerClientPool, BrokerUnreachable
from broker.security.client import ClientSecurity
from coordinator.transaction import (
    ListResult,
    Outcome,
    TransactionStateMachine,
    TxnMetadata,
    TxnOperation,
    append_error_to_coordinator_error,
    write_check_error,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.internal_topics import TRANSACTION_STATE_TOPIC
from protocol.messages import REQUESTS
from protocol.types import TV2, ProducerEpoch, ProducerId, TopicPartition

if TYPE_CHECKING:
    from broker.api.services import Cluster, Markers, ProducerIds, Topics
    from broker.cluster.view import BrokerInfo
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)
ADD_PARTITIONS_TO_TXN = ApiKey.ADD_PARTITIONS_TO_TXN
REMOTE_CHECK_TIMEOUT_S = 10.0
COMPLETE_RETRY_S = 0.2
COMPLETE_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


def _log_completion(tid: str, error: ErrorCode) -> None:
    """Why a transaction whose markers are all written was not completed here."""
    if error == ErrorCode.NONE:
        return
    if error in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.INVALID_TXN_STATE):
        log.debug("transactional id %s: markers written; another completion of the transaction is"
                  " in flight or done (%s)", tid, error.name)
    elif error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        log.info("transactional id %s: markers written; the partition's next coordinator completes"
                 " the transaction (it sends the markers again when it loads): %s", tid, error.name)
    else:
        log.warning("transactional id %s: markers written, but writing the transaction's completion"
                    " failed: %s", tid, error.name)


class TransactionCoordinator:
    """The transaction coordinator's I/O edge: `log` is its `__transaction_state` partitions
    (on_leadership is called as this broker gains or loses one), `markers` writes the
    markers of partitions this broker leads."""

    def __init__(
        self, config: BrokerConfig, log: CoordinatorLog, topics: Topics, cluster: Cluster,
        producer_ids: ProducerIds, markers: Markers, security: ClientSecurity | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.num_partitions = config.transaction_state_log_num_partitions
        self.machine = TransactionStateMachine(
            num_partitions=self.num_partitions,
            max_timeout_ms=config.transaction_max_timeout_ms,
            new_producer_id=producer_ids.generate,
            transaction_version_level=config.transaction_version,
        )
        self.log = log
        topic = InternalTopic(
            TRANSACTION_STATE_TOPIC, self.num_partitions,
            config.transaction_state_log_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(config.transaction_state_log_segment_bytes),
             "min.insync.replicas": str(config.transaction_state_log_min_isr)},
        )
        self.runtime = CoordinatorRuntime(log, topics, topic, self)
        self.on_leadership = self.runtime.on_leadership
        self.ensure_topic = self.runtime.ensure_topic
        self.markers = MarkerChannel(cluster.node_id, self._leader_of, markers.write, self._markers_written,
                                     security)
        # to other coordinators
        self._clients = BrokerClientPool(f"gregor-txn-verify-{cluster.node_id}", security)
        self._parking = Parking()
        self._wait_ms = config.transaction_completion_wait_ms
        self._timer: asyncio.Task[None] | None = None

    # -- start-up and loading ------------------------------------------------------

    async def start(self) -> None:
        self._timer = asyncio.create_task(self._timer_loop())

    def _leader_of(self, topic: str, index: int) -> BrokerInfo | None:
        info = self.cluster.partition(topic, index)
        if info is None or info.leader < 0:
            return None
        return next((b for b in self.cluster.brokers() if b.node_id == info.leader), None)

    def transactions(self) -> Mapping[str, TxnMetadata]:
        """Every transactional id this broker coordinates (metrics, the hanging check)."""
        return self.machine.transactions

    def coordinator_partition(self, key: str) -> TopicPartition:
        """The internal partition whose leader coordinates `key` (FindCoordinator)."""
        return TRANSACTION_STATE_TOPIC, self.machine.partition_for(key)

    def coordinator_epoch(self, index: int) -> int | None:
        return self.machine.coordinator_epoch(index)

    def begin_load(self, index: int, epoch: int) -> None:
        self.machine.begin_load(index, epoch)
        self._wake_partition(index)

    def unload(self, index: int) -> None:
        self.machine.unload(index)
        self._wake_partition(index)
        log.info("%s-%d: no longer coordinating its transactional ids", TRANSACTION_STATE_TOPIC, index)

    def loaded(self, index: int, epoch: int, started: float) -> None:
        """Replayed: coordinate the partition's ids and send the markers of every Prepare*
        transaction found."""
        if self.machine.coordinator_epoch(index) != epoch:
            return
        for key, exc in self.machine.replay_staged(index):
            log.warning("%s-%d: skipping the unreadable last record of key %r: %s",
                        TRANSACTION_STATE_TOPIC, index, key, exc)
        pending = self.machine.finish_load(index)
        metrics.coordinator_loaded("transaction", started)
        log.info("%s-%d: now coordinating its transactional ids (coordinator epoch %d, loaded in %.0f ms,"
                 " %d transactions to complete)", TRANSACTION_STATE_TOPIC, index, epoch,
                 (time.monotonic() - started) * 1000, len(pending))
        for intent in pending:
            self.markers.send(intent)

    def replay_loaded(self, record: InternalRecord, index: int, epoch: int) -> None:
        if record.key is not None and self.machine.coordinator_epoch(index) == epoch:
            self.machine.stage(index, record.key, record.value)

    def _wake_partition(self, index: int) -> None:
        """Parked requests of the partition's ids ask the machine again (which now answers
        NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS)."""
        self._parking.wake_all([t for t in self._parking.keys() if self.machine.partition_for(t) == index])

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.runtime.stop()
        await self.markers.stop()
        await self._clients.close()

    # -- operations ------------------------------------------------------------------

    async def _persist(self, outcome: Outcome, early: bool = False) -> ErrorCode:
        """Append the outcome's record (if any), wait until it is replicated, then replay it;
        the error to answer with. A write whose coordinator epoch ended meanwhile answers
        NOT_COORDINATOR and leaves the machine alone (the successor owns the id now). Either
        way the requests parked on the id then ask again.

        `early` (Complete* records): replay as soon as the record is in the leader's log. The
        id's next request, parked on it, goes on at once, and its own record, written behind
        this one in the same partition, is replicated only with it; nobody waits on a Complete*
        alone, and a failover that loses it reloads Prepare* and completes again. That is one
        replication round less per transaction: the next one no longer waits for this record's."""
        if outcome.record is None:
            return outcome.error
        try:
            return await self._write(outcome, early)
        finally:
            self._parking.wake(outcome.transactional_id)

    async def _write(self, outcome: Outcome, early: bool) -> ErrorCode:
        assert outcome.record is not None
        tid = outcome.transactional_id
        index = self.machine.partition_for(tid)
        state = outcome.transit.state.display_name if outcome.transit else "Dead"
        crash_point(f"before-txn-log-{state}")
        now = now_ms()
        appended = self._replay_appended(outcome, index) if early else None
        written = await self.log.write(index, record_batch([outcome.record], now), now, appended)
        if written.coordinator_epoch < 0:  # not the leader: nothing was written
            self.machine.write_failed(tid)
            return ErrorCode.NOT_COORDINATOR
        if self.machine.coordinator_epoch(index) != written.coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR  # unloaded meanwhile: the successor owns the id
        if written.error != ErrorCode.NONE and not (early and written.base_offset >= 0):
            self.machine.write_failed(tid)
            log.warning("transactional id %s: writing %s failed: %s", tid, TRANSACTION_STATE_TOPIC,
                        written.error.name)
            return append_error_to_coordinator_error(written.error)
        if written.error != ErrorCode.NONE:
            log.info("transactional id %s: %s appended, not yet replicated (%s); a coordinator that "
                     "loads without it completes the transaction again", tid, state, written.error.name)
        crash_point(f"after-txn-log-{state}")
        if not early:
            self._replay(outcome)
        return outcome.error

    def _replay_appended(self, outcome: Outcome, index: int) -> Callable[[int], None]:
        def appended(coordinator_epoch: int) -> None:
            if self.machine.coordinator_epoch(index) == coordinator_epoch:
                self._replay(outcome)
                self._parking.wake(outcome.transactional_id)
        return appended

    def _replay(self, outcome: Outcome) -> None:
        """The outcome's record is ours to apply: into the machine, the metrics, the markers."""
        assert outcome.record is not None
        key, value = outcome.record
        self.machine.replay(key, value)
        metrics.txn_transition(outcome.transit)
        if outcome.transit is not None:
            log.debug("transactional id %s: %s (producer id %d, epoch %d)", outcome.transactional_id,
                      outcome.transit.state.display_name, outcome.transit.producer_id,
                      outcome.transit.producer_epoch)
        if outcome.markers is not None:
            self.markers.send(outcome.markers)

    def _deadline(self, wait_ms: int | None = None) -> float:
        """When a request parked from now on is answered anyway: after the configured wait,
        or the request's own timeout if that is shorter."""
        wait = self._wait_ms if wait_ms is None else min(wait_ms, self._wait_ms)
        return asyncio.get_running_loop().time() + wait / 1000

    async def _decide(self, tid: str, decide: Callable[[], Outcome], deadline: float) -> Outcome:
        """The machine's decision; while it is CONCURRENT_TRANSACTIONS only because `tid` is
        settling, park until the id's next replay and ask again (until `deadline`: then the
        client gets CONCURRENT_TRANSACTIONS, as from Kafka, and retries)."""
        while True:
            outcome = decide()
            if (outcome.error is not ErrorCode.CONCURRENT_TRANSACTIONS or outcome.record is not None
                    or not self.machine.is_settling(tid)):
                return outcome
            metrics.txn_parked()
            if not await self._parking.wait(tid, deadline):
                return outcome

    async def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: ProducerId, epoch: ProducerEpoch
    ) -> tuple[ErrorCode, int, int]:
        """An id whose transaction is ongoing is fenced and its transaction aborted; as in Kafka,
        the first answer is then CONCURRENT_TRANSACTIONS (no id, no epoch), and the client's
        retry is served once the abort completes (parked meanwhile)."""
        outcome = await self._decide(
            tid, lambda: self.machine.init_producer_id(tid, timeout_ms, producer_id, epoch, now_ms()),
            self._deadline(),
        )
        error = await self._persist(outcome)
        return error, outcome.producer_id, outcome.producer_epoch

    async def add_partitions(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, partitions: Iterable[TopicPartition],
        verify_only: bool = False, transaction_version: int = 0, wait_ms: int | None = None,
    ) -> Outcome:
        wanted = list(partitions)
        outcome = await self._decide(tid, lambda: self.machine.add_partitions(
            tid, producer_id, epoch, wanted, now_ms(), verify_only=verify_only,
            client_transaction_version=transaction_version,
        ), self._deadline(wait_ms))
        error = await self._persist(outcome)
        if error != outcome.error:
            return Outcome(tid, error, partition_errors={tp: error for tp in outcome.partition_errors})
        return outcome

    async def add_offsets(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, group_id: str
    ) -> ErrorCode:
        partitions = self.config.offsets_topic_num_partitions
        group_partition = self.machine.offsets_partition_for(group_id, partitions)
        outcome = await self._decide(
            tid, lambda: self.machine.add_offsets(tid, producer_id, epoch, group_partition, now_ms()),
            self._deadline(),
        )
        return await self._persist(outcome)

    async def end_txn(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, commit: bool, transaction_version: int
    ) -> tuple[ErrorCode, int, int]:
        """The error, and (transaction version 2) the producer id and epoch to use next."""
        outcome = await self._decide(
            tid, lambda: self.machine.end_txn(tid, producer_id, epoch, commit, now_ms(), transaction_version),
            self._deadline(),
        )
        if outcome.error is ErrorCode.INVALID_TXN_STATE:  # fatal for the client: say what was found
            self._log_refused_end(tid, producer_id, epoch, commit)
        return await self._persist(outcome), outcome.producer_id, outcome.producer_epoch

    def _log_refused_end(self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, commit: bool) -> None:
        _, found = self.machine.describe(tid)
        state = "no metadata" if found is None else (
            f"{found.state.display_name} (producer id {found.producer_id}, epoch {found.producer_epoch}, "
            f"{len(found.partitions)} partitions)")
        log.info("transactional id %s: EndTxn %s from producer id %d, epoch %d refused "
                 "INVALID_TXN_STATE: the transaction is %s", tid, "commit" if commit else "abort",
                 producer_id, epoch, state)

    async def check_writes(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, tps: list[TopicPartition],
        operation: TxnOperation,
        wait_ms: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """`check_write` for several partitions, asked of whichever broker coordinates `tid`
        (Kafka's AddPartitionsToTxnManager: AddPartitionsToTxn v4 verify-only, v5 to add). A
        check that finds the transaction completing waits for it, at most `wait_ms`."""
        leader = self._leader_of(*self.coordinator_partition(tid))
        if leader is None or leader.node_id == self.cluster.node_id:
            return {tp: await self.check_write(tid, producer_id, epoch, tp, operation, wait_ms) for tp in tps}
        return await self._remote_check(leader, tid, producer_id, epoch, tps, operation, wait_ms)

    async def _remote_check(
        self, coordinator: BrokerInfo, tid: str, producer_id: ProducerId, epoch: ProducerEpoch,
        tps: list[TopicPartition], operation: TxnOperation, wait_ms: int | None,
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
            timeout_s = REMOTE_CHECK_TIMEOUT_S if wait_ms is None else min(wait_ms / 1000,
                                                                           REMOTE_CHECK_TIMEOUT_S)
            response = await self._clients.get(coordinator.host, coordinator.port).call(
                request, 5 if operation.adds else 4, timeout_s=timeout_s
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

    async def check_write(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, tp: TopicPartition,
        operation: TxnOperation,
        wait_ms: int | None = None,
    ) -> ErrorCode:
        """Before a transactional write to `tp` is appended (Produce, TxnOffsetCommit): verify
        that `tp` is in the ongoing transaction, or (transaction version 2) add it. NONE, or
        the error for the writer's client as Kafka gives it."""
        outcome = await self.add_partitions(tid, producer_id, epoch, [tp], verify_only=not operation.adds,
                                            transaction_version=TV2, wait_ms=wait_ms)
        return write_check_error(outcome.partition_errors.get(tp, outcome.error), operation)

    def describe(self, tid: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if not self.log.current():
            return ErrorCode.NOT_COORDINATOR, None
        return self.machine.describe(tid)

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> ListResult:
        if not self.log.current():
            return ListResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self.machine.list_transactions(now_ms(), states, producer_ids, duration_ms)

    # -- completion, timeouts, expiration ----------------------------------------------

    def _markers_written(self, tid: str) -> None:
        self.runtime.spawn(self._complete(tid))

    async def _complete(self, tid: str) -> None:
        """Every marker is written: persist CompleteCommit / CompleteAbort, trying again while
        the write failed and this broker still coordinates the id at the same epoch. That
        includes NOT_COORDINATOR from a write refused while this broker's registration had
        lapsed (etcd unreachable) but its leadership came back unchanged: nothing else would
        complete the transaction, and its id would answer CONCURRENT_TRANSACTIONS for ever.
        A partition lost or reloaded ends the loop (a load re-sends every Prepare*'s markers)."""
        index = self.machine.partition_for(tid)
        epoch = self.machine.coordinator_epoch(index)
        while True:
            error = await self._persist(self.machine.complete_markers(tid, now_ms()), early=True)
            if error not in COMPLETE_RETRIABLE or self.machine.coordinator_epoch(index) != epoch:
                break
            await asyncio.sleep(COMPLETE_RETRY_S)
        _log_completion(tid, error)

    async def _timer_loop(self) -> None:
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        expiration = self.config.transactional_id_expiration_ms
        while True:
            await asyncio.sleep(interval / 1000)
            now = now_ms()
            for outcome in self.machine.abort_timed_out(now):
                log.info("transactional id %s: aborting, older than its timeout", outcome.transactional_id)
                self.runtime.spawn(self._persist(outcome))
            for outcome in self.machine.expire_idle(now, expiration):
                log.info("transactional id %s: expired after %d ms idle",
                         outcome.transactional_id, expiration)
                self.runtime.spawn(self._persist(outcome))
