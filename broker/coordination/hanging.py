"""Hanging transactions, found by the broker itself (seed 001, KIP-664's `find-hanging`).

Every `transaction.hanging.check.interval.ms` the partitions this broker leads are
searched for transactions open longer than `transaction.max.timeout.ms` plus
`transaction.hanging.margin.ms` (the coordinator would have aborted any live one by
then) that no coordinator will finish: no transactional id owns the producer id, or
the owner's transaction does not include the partition. The selection rules are
the coordinator's (`coordinator/transaction/hanging.py`), which the `gregor transactions
find-hanging` tool follows too; the coordinators are asked directly here (this broker's) and
over the Kafka protocol (ListTransactions / DescribeTransactions, the others').

Each newly found one is a WARN line with the exact command that aborts it; with
`transaction.hanging.auto.abort.enable` the broker writes the ABORT marker itself,
through the same code path as that command's WriteTxnMarkers (marker_writer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from kafka.protocol.admin.transactions import DescribeTransactionsResponse
from kafka.protocol.producer import WriteTxnMarkersRequest

from broker.base.clock import now_ms
from broker.metrics.stats import STATS
from broker.net.client import BrokerClientPool, BrokerUnreachable
from broker.security.client import ClientSecurity
from coordinator.transaction.hanging import OpenTransaction, candidate_open_transactions, hanging_transactions
from coordinator.transaction.state import TxnMetadata, TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.types import Offset, ProducerEpoch, ProducerId, TopicPartition

if TYPE_CHECKING:
    from broker.api.services import Cluster, Markers, Partitions
    from broker.cluster.view import BrokerInfo
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS
REMOTE_TIMEOUT_S = 10.0
Marker = WriteTxnMarkersRequest.WritableTxnMarker


class CoordinatorUnknown(Exception):
    """A coordinator could not be asked: nothing is called hanging this round."""


TxnPartitions = frozenset[TopicPartition] | None  # an id's transaction's partitions; None: unknown id


class KnownTransactions(Protocol):
    def transactions(self) -> Mapping[str, TxnMetadata]: ...


def open_transactions(partitions: Partitions) -> list[OpenTransaction]:
    """Every open transaction of the partitions this broker leads."""
    found = []
    for part in partitions.all_partitions():
        if part.leader is None:
            continue
        state = part.log.producer_state
        for txn in part.log.ongoing_transactions():
            epoch = state.entry_for(txn.producer_id).coordinator_epoch
            found.append(OpenTransaction(part.topic, part.index, ProducerId(txn.producer_id),
                                         ProducerEpoch(txn.producer_epoch), epoch, Offset(txn.first_offset),
                                         txn.last_timestamp))
    return found


def _local(
    coordinator: KnownTransactions, producer_ids: set[ProducerId]
) -> tuple[dict[ProducerId, str], dict[str, TxnPartitions]]:
    """The transactional ids this broker's coordinator knows for `producer_ids`, described."""
    ids: dict[ProducerId, str] = {}
    descriptions: dict[str, TxnPartitions] = {}
    for tid, md in coordinator.transactions().items():
        if md.producer_id in producer_ids and md.state is not TxnState.DEAD:
            ids[md.producer_id] = tid
            descriptions[tid] = frozenset(md.partitions)
    return ids, descriptions


class HangingTransactionCheck:
    def __init__(
        self, config: BrokerConfig, partitions: Partitions, coordinator: KnownTransactions,
        cluster: Cluster, markers: Markers, security: ClientSecurity | None = None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.coordinator = coordinator
        self.cluster = cluster
        self.markers = markers
        self.interval_s = config.transaction_hanging_check_interval_ms / 1000
        margin = config.transaction_hanging_margin_ms
        self.threshold_ms = config.transaction_max_timeout_ms + margin
        self.auto_abort = config.transaction_hanging_auto_abort_enable
        self._reported: set[tuple[str, int, int, int]] = set()
        self._clients = BrokerClientPool(f"gregor-hanging-check-{cluster.node_id}", security)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="hanging-transactions")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._clients.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except CoordinatorUnknown as exc:
                log.info("hanging-transaction check skipped: %s", exc)
            except Exception:
                log.exception("hanging-transaction check failed")

    async def check(self) -> list[OpenTransaction]:
        """One search; reports (and with auto-abort, aborts) what it finds."""
        now = now_ms()
        candidates = candidate_open_transactions(open_transactions(self.partitions), now, self.threshold_ms)
        hanging: list[OpenTransaction] = []
        if candidates:
            ids, descriptions = await self._coordinators({t.producer_id for t in candidates})
            # Asking another broker took time: what was finished meanwhile is not hanging.
            still_open = set(open_transactions(self.partitions))
            hanging = [t for t in hanging_transactions(candidates, ids, descriptions) if t in still_open]
        STATS.hanging.checks += 1
        STATS.hanging.found = [(t.topic, t.partition, t.producer_id, t.start_offset) for t in hanging]
        for txn in hanging:
            self._report(txn, now)
        if self.auto_abort:
            for txn in hanging:
                await self._abort(txn)
        self._reported &= set(STATS.hanging.found)
        return hanging

    async def _coordinators(
        self, producer_ids: set[ProducerId]
    ) -> tuple[dict[ProducerId, str], dict[str, TxnPartitions]]:
        ids, descriptions = _local(self.coordinator, producer_ids)
        missing = producer_ids - set(ids)
        for other in self._other_brokers():
            if not missing:
                break
            found = await self._remote(other, missing)
            for pid, (tid, description) in found.items():
                ids[pid] = tid
                descriptions[tid] = description
            missing -= set(found)
        return ids, descriptions

    def _other_brokers(self) -> list[BrokerInfo]:
        return [b for b in self.cluster.brokers() if b.node_id != self.cluster.node_id]

    async def _remote(
        self, other: BrokerInfo, producer_ids: set[ProducerId]
    ) -> dict[ProducerId, tuple[str, TxnPartitions]]:
        """ListTransactions then DescribeTransactions on another broker's coordinator."""
        client = self._clients.get(other.host, other.port)
        try:
            listed = await client.call(REQUESTS[LIST_TRANSACTIONS](
                state_filters=[], producer_id_filters=sorted(producer_ids)), 0, timeout_s=REMOTE_TIMEOUT_S)
            owners = {t.transactional_id: t.producer_id for t in listed.transaction_states
                      if t.producer_id in producer_ids}
            if listed.error_code != ErrorCode.NONE:
                raise CoordinatorUnknown(f"broker {other.node_id}: ListTransactions "
                                         f"{ErrorCode(listed.error_code).name}")
            if not owners:
                return {}
            described = await client.call(REQUESTS[DESCRIBE_TRANSACTIONS](
                transactional_ids=sorted(owners)), 0, timeout_s=REMOTE_TIMEOUT_S)
        except (BrokerUnreachable, TimeoutError) as exc:
            raise CoordinatorUnknown(f"broker {other.node_id} unreachable ({exc})") from None
        return {owners[s.transactional_id]: (s.transactional_id, _description(s))
                for s in described.transaction_states if s.transactional_id in owners}

    def _report(self, txn: OpenTransaction, now: int) -> None:
        key = (txn.topic, txn.partition, txn.producer_id, txn.start_offset)
        if key in self._reported:
            return
        self._reported.add(key)
        ad = self.config.advertised
        log.warning(
            "hanging transaction in %s-%d: producer id %d (epoch %d), start offset %d, no write for %d s "
            "and no coordinator will finish it; it holds the last stable offset back. Abort it with: "
            "gregor transactions --bootstrap-server %s:%d abort --topic %s --partition %d --start-offset %d",
            txn.topic, txn.partition, txn.producer_id, txn.producer_epoch, txn.start_offset,
            (now - txn.last_timestamp) // 1000, ad.host, ad.port, txn.topic, txn.partition, txn.start_offset,
        )

    async def _abort(self, txn: OpenTransaction) -> None:
        """An ABORT marker through WriteTxnMarkers' own code path, as the abort tool sends it."""
        marker = Marker(
            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, transaction_result=False,
            coordinator_epoch=max(txn.coordinator_epoch, 0),
            topics=[Marker.WritableTxnMarkerTopic(name=txn.topic, partition_indexes=[txn.partition])],
        )
        response = await self.markers.write(WriteTxnMarkersRequest(markers=[marker]))
        error = ErrorCode(response.markers[0].topics[0].partitions[0].error_code)
        if error == ErrorCode.NONE:
            STATS.hanging.aborted += 1
            log.warning("aborted hanging transaction in %s-%d: producer id %d (epoch %d), start offset %d "
                        "(transaction.hanging.auto.abort.enable)", txn.topic, txn.partition,
                        txn.producer_id, txn.producer_epoch, txn.start_offset)
        else:
            log.warning("could not abort hanging transaction in %s-%d (producer id %d, start offset %d): %s",
                        txn.topic, txn.partition, txn.producer_id, txn.start_offset, error.name)


def _description(state: DescribeTransactionsResponse.TransactionState) -> TxnPartitions:
    if state.error_code != ErrorCode.NONE:
        return None
    return frozenset(_partitions(state.topics))


def _partitions(
    topics: Iterable[DescribeTransactionsResponse.TransactionState.TopicData],
) -> Iterable[TopicPartition]:
    for t in topics:
        for p in t.partitions:
            yield t.topic, p
