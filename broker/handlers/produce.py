"""Produce: validate per partition, append the batch as received, answer per partition."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from broker import metrics
from broker.api.authorize import authorize
from broker.api.partition_view import LogView, PartitionView
from broker.api.registry import Handlers
from broker.handlers.resolve import resolve_partition, topic_name
from broker.replication.replica_manager import Partition, effective_min_isr, replicated
from broker.security.acl import AclOperation, ResourceType
from coordinator.transaction import TxnOperation, produce_operation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import HEADER_SIZE, BatchHeader
from protocol.types import ProducerEpoch, ProducerId, TopicPartition
from storage.producer_state import Verification
from storage.validator import RecordError

if TYPE_CHECKING:
    from broker.api.context import RequestContext

log = logging.getLogger(__name__)
API_KEY = ApiKey.PRODUCE
CHECK_ROUNDS = 2  # a guard voided while its check waited is taken and checked once more
R = ProduceResponse
PartitionResponse = R.TopicProduceResponse.PartitionProduceResponse
RecordErrorEntry = PartitionResponse.BatchIndexAndErrorMessage
TopicData = ProduceRequest.TopicProduceData
# Kafka's ReplicaManager: a produce whose transaction check got a retriable coordinator error
# answers NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh; only a
# producer of transaction version 2 (Produce v12+, Kafka's ADD_PARTITION operation, which
# "supports epoch bump") gets CONCURRENT_TRANSACTIONS as it is, and retries it.
PRODUCE_RETRIABLE = {
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
}


def produce_error(error: ErrorCode, version: int) -> tuple[ErrorCode, str | None]:
    """A transaction check's error as Produce `version` answers it, with Kafka's message."""
    bumps = produce_operation(version) is TxnOperation.ADD_PARTITION  # v12+, transaction version 2
    if error == ErrorCode.CONCURRENT_TRANSACTIONS and bumps:
        return error, None
    if error in PRODUCE_RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the "
                                               f"transaction. Underlying error: {error.name}")
    if error == ErrorCode.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    return error, None


# Kafka's ReplicaManager answers these without the partition's log start offset (-1); any other
# error of an append to an existing partition carries it.
NO_LOG_START_OFFSET = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.KAFKA_STORAGE_ERROR,
})


def _error(
    index: int, error: ErrorCode, message: str | None = None, record_errors: tuple[RecordError, ...] = (),
    log_start_offset: int = -1,
) -> PartitionResponse:
    return PartitionResponse(
        index=index, error_code=error, base_offset=-1, error_message=message,
        log_start_offset=log_start_offset,
        record_errors=[
            RecordErrorEntry(batch_index=e.batch_index, batch_index_error_message=e.message)
            for e in record_errors
        ],
    )


def _header(records: bytes) -> BatchHeader | None:
    """The batch header, parsed once for the whole produce path (None when too short:
    the log rejects such records)."""
    return BatchHeader.parse(records) if len(records) >= HEADER_SIZE else None


@dataclass(frozen=True, slots=True)
class Target:
    """One partition's batch, resolved and its header parsed (once for the whole path)."""

    index: int
    part: Partition
    records: bytes
    header: BatchHeader | None


def _topic_targets(ctx: RequestContext, topic_data: TopicData) -> list[Target | PartitionResponse]:
    """The topic's partitions to append to, or the error answer for each (Write on the topic is
    decided once for all its partitions, as Kafka does)."""
    name, _ = topic_name(ctx, topic_data)
    if name is not None and not authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, name):
        return [_error(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic_data.partition_data]
    return [_target(ctx, topic_data, p) for p in topic_data.partition_data]


def _target(
    ctx: RequestContext, topic_data: TopicData, part_data: TopicData.PartitionProduceData
) -> Target | PartitionResponse:
    """The partition to append to, or the error answer for it."""
    index = part_data.index
    part, error = resolve_partition(ctx, topic_data, index)
    if part is None:
        return _error(index, error)
    if part.topic.startswith("__"):
        return _error(index, ErrorCode.INVALID_TOPIC_EXCEPTION, "cannot append to internal topic")
    if not ctx.services.partitions.may_lead():
        return _error(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, "this broker's cluster registration lapsed")
    if part_data.records is None:
        return _error(index, ErrorCode.INVALID_RECORD, "produce request has null records")
    return Target(index, part, part_data.records, _header(part_data.records))


@dataclass(slots=True)
class Checked:
    """What the transaction checks of one request found: per partition the error to answer
    (absent: none), and the guard to append with where the check opened the transaction."""

    errors: dict[TopicPartition, tuple[ErrorCode, str | None]] = field(default_factory=dict)
    guards: dict[TopicPartition, Verification] = field(default_factory=dict)


async def _transaction_checks(
    ctx: RequestContext, transactional_id: str | None, targets: list[Target], timeout_ms: int
) -> Checked:
    """KIP-890: a transactional batch must go to a partition of the ongoing transaction,
    so a late write after an abort cannot open a hanging transaction. Produce v12+
    (transaction version 2) adds the partition itself; older clients must have added it.
    As in Kafka, only a producer's first batch of a transaction here is checked (with the
    transaction coordinator, on this broker or over the network), under a guard that a
    marker in between voids. A check that finds the producer's previous transaction
    completing waits for it, within the request's timeout; the marker of that completion
    voids the guard, so such a batch is checked once more under a fresh guard."""
    found = Checked()
    if transactional_id is None:
        return found
    targets = [t for t in targets if t.header is not None and t.header.is_transactional]
    for _ in range(CHECK_ROUNDS):
        targets = await _check_round(ctx, transactional_id, targets, found, timeout_ms)
        if not targets:
            break
    return found


async def _check_round(
    ctx: RequestContext, transactional_id: str, targets: list[Target], found: Checked, timeout_ms: int
) -> list[Target]:
    """Guard and check `targets` (into `found`); the ones whose guard a marker voided meanwhile."""
    by_producer: dict[tuple[ProducerId, ProducerEpoch], list[TopicPartition]] = {}
    guarded: list[tuple[Target, Verification]] = []
    operation = produce_operation(ctx.version)  # v11 knows TRANSACTION_ABORTABLE, v12+ adds the partition
    for t in targets:
        assert t.header is not None
        tp = (t.part.topic, t.part.index)
        if _stale_epoch(t.part, t.header):  # KAFKA-18042: refused before any check
            found.errors[tp] = (ErrorCode.INVALID_PRODUCER_EPOCH, None)
            continue
        guard = ctx.services.partitions.start_verification(t.part, t.header, ctx.now_ms(), operation.adds)
        if guard is None:  # its producer's transaction is open here now: nothing to check
            found.guards.pop(tp, None)
            continue
        found.guards[tp] = guard
        guarded.append((t, guard))
        by_producer.setdefault((t.header.producer_id, t.header.producer_epoch), []).append(tp)
    for (pid, epoch), tps in by_producer.items():
        answers = await ctx.services.transactions.check_writes(
            transactional_id, pid, epoch, tps, operation, wait_ms=timeout_ms
        )
        found.errors.update(
            {tp: produce_error(e, ctx.version) for tp, e in answers.items() if e != ErrorCode.NONE}
        )
    return [
        t for t, guard in guarded
        if (t.part.topic, t.part.index) not in found.errors
        and not ctx.services.partitions.verification_current(t.part, guard)
    ]


def _stale_epoch(part: PartitionView, header: BatchHeader) -> bool:
    """The partition knows the batch's producer at a newer epoch."""
    entry = part.log.producer_state.last_entry(header.producer_id)
    return entry is not None and header.producer_epoch < entry.producer_epoch


def _append(
    ctx: RequestContext, t: Target, checked: Checked, acks: int, pending: Pending
) -> PartitionResponse:
    index, part = t.index, t.part
    tp = (part.topic, index)
    if tp in checked.errors:
        metrics.produce_failed(part.topic)
        return _error(index, *checked.errors[tp])
    if not part.is_leader:  # lost while the request waited for its checks or its turn
        return _error(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, "no longer the partition's leader")
    if acks == -1 and _in_sync(part) < effective_min_isr(part):
        return _error(index, ErrorCode.NOT_ENOUGH_REPLICAS, "fewer in-sync replicas than min.insync.replicas")
    result = ctx.services.partitions.append(part, t.records, ctx.now_ms(), header=t.header,
                                        verification=checked.guards.get(tp))
    if result.error != ErrorCode.NONE:
        metrics.produce_failed(part.topic)
        if result.error != ErrorCode.KAFKA_STORAGE_ERROR:  # logged once per partition by its owner
            log.info("rejected produce to %s-%d: %s %s", part.topic, index,
                     ErrorCode(result.error).name, result.error_message or "")
        error = ErrorCode(result.error)
        start = -1 if error in NO_LOG_START_OFFSET else result.log_start_offset
        return _error(index, error, result.error_message, result.record_errors, start)
    metrics.produced(part.topic, len(t.records), result.last_offset - result.base_offset + 1)
    response = PartitionResponse(
        index=index, error_code=ErrorCode.NONE, base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time, log_start_offset=result.log_start_offset,
    )
    plog: LogView = part.log
    if acks == -1 and plog.high_watermark <= result.last_offset:
        pending.append((response, part, result.last_offset + 1))
    return response


def _in_sync(part: Partition) -> int:
    return len(part.leader.isr) if part.leader is not None else 0


Pending = list[tuple[PartitionResponse, Partition, int]]


async def _until_replicated(pending: Pending, timeout_ms: int) -> None:
    """acks=all: each answer waits for the HW to pass its batch; what is not replicated
    in time, or whose leadership was lost meanwhile, gets the protocol's error."""
    errors = await replicated([(part, end) for _, part, end in pending], timeout_ms / 1000)
    for (response, _, _), error in zip(pending, errors, strict=True):
        if error != ErrorCode.NONE:
            response.error_code = error
            response.base_offset = -1


def _all_failed(request: ProduceRequest, error: ErrorCode) -> R:
    return R(throttle_time_ms=0, responses=[
        _topic_response(t, [_error(p.index, error) for p in t.partition_data]) for t in request.topic_data
    ])


def _has_transactional_records(request: ProduceRequest) -> bool:
    return any(
        (header := _header(p.records or b"")) is not None and header.is_transactional
        for t in request.topic_data for p in t.partition_data
    )


def _transaction_authorized(ctx: RequestContext, request: ProduceRequest) -> bool:
    """Kafka: transactional records need Write on the request's transactional id. Without a
    transactional id Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED even with no
    authorizer; Gregor does so only with one (without, its transaction checks refuse such a
    batch: INVALID_TXN_STATE or INVALID_RECORD, which the hanging-transaction tools' tests use)."""
    if ctx.services.acls is None:  # no authorizer: nothing to check (and no header to parse)
        return True
    if not _has_transactional_records(request):
        return True
    tid = request.transactional_id
    if tid is None:
        return False
    return authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


async def handle(ctx: RequestContext, request: ProduceRequest) -> R:
    acks = request.acks
    if acks not in (-1, 0, 1):
        return _all_failed(request, ErrorCode.INVALID_REQUIRED_ACKS)
    if not _transaction_authorized(ctx, request):
        return _all_failed(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    prepared = [_topic_targets(ctx, t) for t in request.topic_data]
    targets = [x for per_topic in prepared for x in per_topic if isinstance(x, Target)]
    checked = await _transaction_checks(ctx, request.transactional_id, targets, request.timeout_ms)
    if ctx.turn is not None:  # the connection's earlier produce requests append first
        await ctx.turn.reached()
    pending: Pending = []
    responses = [
        _topic_response(topic_data, [
            _append(ctx, x, checked, acks, pending) if isinstance(x, Target) else x
            for x in per_topic
        ])
        for topic_data, per_topic in zip(request.topic_data, prepared, strict=True)
    ]
    if ctx.turn is not None:
        ctx.turn.done()
    if pending:
        await _until_replicated(pending, request.timeout_ms)
    return R(responses=responses, throttle_time_ms=0)


def _topic_response(topic_data: TopicData, parts: list[PartitionResponse]) -> R.TopicProduceResponse:
    return R.TopicProduceResponse(
        name=topic_data.name, topic_id=topic_data.topic_id, partition_responses=parts
    )


VERSIONS = {API_KEY: (3, 13)}
HANDLERS: Handlers = {API_KEY: handle}
