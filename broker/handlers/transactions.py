"""FindCoordinator, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and the KIP-664
admin queries ListTransactions / DescribeTransactions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)

from broker.api.authorize import authorize, authorize_cluster
from broker.api.registry import Handlers
from broker.cluster.view import BrokerInfo
from broker.security.acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey, fenced_error_for_version
from protocol.errors import ErrorCode
from protocol.types import TV2, ProducerEpoch, ProducerId, TopicPartition

if TYPE_CHECKING:
    from broker.api.context import RequestContext

FIND_COORDINATOR, END_TXN = ApiKey.FIND_COORDINATOR, ApiKey.END_TXN
ADD_PARTITIONS, ADD_OFFSETS = ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS
GROUP_KEY, TRANSACTION_KEY = 0, 1
FIRST_TV2_ADD_PARTITIONS, FIRST_TV2_END_TXN = 5, 5
F = FindCoordinatorResponse
A = AddPartitionsToTxnResponse
TopicResult = A.AddPartitionsToTxnTopicResult
PartResult = TopicResult.AddPartitionsToTxnPartitionResult
# the topics of a v3 request, or of one transaction of a v4+ one
AddTopics = Sequence[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]


def _coordinator_error(ctx: RequestContext, key_type: int, key: str) -> ErrorCode:
    if key_type == TRANSACTION_KEY:
        return ctx.services.transactions.ensure_topic() if key else ErrorCode.INVALID_REQUEST
    if key_type == GROUP_KEY:
        return ctx.services.groups.ensure_topic() if key else ErrorCode.INVALID_REQUEST
    return ErrorCode.INVALID_REQUEST  # share groups (key type 2) are not served


def _may_write_txn(ctx: RequestContext, tid: str) -> bool:
    return authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


def _find_denied(ctx: RequestContext, key_type: int, key: str) -> ErrorCode:
    """Kafka: finding a coordinator needs Describe on the group or transactional id."""
    if key_type == GROUP_KEY and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if key_type == TRANSACTION_KEY and not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, BrokerInfo | None]:
    """The broker leading the key's internal partition; COORDINATOR_NOT_AVAILABLE when none does."""
    error = _find_denied(ctx, key_type, key)
    if error != ErrorCode.NONE:
        return error, None
    error = _coordinator_error(ctx, key_type, key)
    if error != ErrorCode.NONE:
        return error, None
    edge = ctx.services.transactions if key_type == TRANSACTION_KEY else ctx.services.groups
    topic, index = edge.coordinator_partition(key)
    info = ctx.services.cluster.partition(topic, index)
    leader = info.leader if info is not None else -1
    brokers = ctx.services.cluster.brokers_on(ctx.caller.listener)
    found = next((b for b in brokers if b.node_id == leader), None)
    return (ErrorCode.NONE, found) if found is not None else (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)


async def handle_find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> F:
    if ctx.version < 4:
        error, node = _coordinator(ctx, request.key_type if ctx.version else GROUP_KEY, request.key)
        return F(throttle_time_ms=0, error_code=error, error_message=None if node else error.name,
                 node_id=node.node_id if node else -1, host=node.host if node else "",
                 port=node.port if node else -1)
    coordinators = []
    for key in request.coordinator_keys:
        error, node = _coordinator(ctx, request.key_type, key)
        coordinators.append(F.Coordinator(
            key=key, node_id=node.node_id if node else -1, host=node.host if node else "",
            port=node.port if node else -1, error_code=error, error_message=None if node else error.name,
        ))
    return F(throttle_time_ms=0, coordinators=coordinators)


def _topic_results(partitions: dict[TopicPartition, ErrorCode]) -> list[TopicResult]:
    by_topic: dict[str, list[PartResult]] = {}
    for (topic, index), error in sorted(partitions.items()):
        by_topic.setdefault(topic, []).append(PartResult(partition_index=index, partition_error_code=error))
    return [TopicResult(name=t, results_by_partition=p) for t, p in by_topic.items()]


def _exists(ctx: RequestContext, topic: str, index: int) -> bool:
    """In the metadata (in a cluster its leader may be another broker)."""
    found = ctx.services.topics.get(topic)
    return found is not None and 0 <= index < found.partitions


def _refused(ctx: RequestContext, wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """Partitions that cannot be added: Write on the topic missing, or unknown."""
    denied = {t for t, _ in wanted if not authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, t)}
    refused = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] in denied}
    unknown = [tp for tp in wanted if tp[0] not in denied and not _exists(ctx, *tp)]
    refused.update(dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    return refused


async def _add_one(
    ctx: RequestContext, tid: str, pid: ProducerId, epoch: ProducerEpoch, topics: AddTopics, verify: bool
) -> dict[TopicPartition, ErrorCode]:
    wanted = [(t.name, i) for t in topics for i in t.partitions]
    if ctx.version <= 3 and not _may_write_txn(ctx, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = _refused(ctx, wanted)
    if refused:  # Kafka: their errors, OPERATION_NOT_ATTEMPTED for the rest
        return {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    # v5 (a broker adding a partition for a transaction version 2 write) marks the transaction TV2
    version = TV2 if ctx.version >= FIRST_TV2_ADD_PARTITIONS else 0
    outcome = await ctx.services.transactions.add_partitions(
        tid, pid, epoch, wanted, verify_only=verify, transaction_version=version
    )
    error = fenced_error_for_version(outcome.error, ADD_PARTITIONS, ctx.version)
    return {tp: fenced_error_for_version(outcome.partition_errors.get(tp, error), ADD_PARTITIONS,
                                         ctx.version) for tp in wanted}


async def handle_add_partitions(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> A:
    if ctx.version <= 3:
        errors = await _add_one(ctx, request.v3_and_below_transactional_id,
                                ProducerId(request.v3_and_below_producer_id),
                                ProducerEpoch(request.v3_and_below_producer_epoch),
                                request.v3_and_below_topics, False)
        return A(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+ is broker-to-broker
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return A(throttle_time_ms=0, error_code=denied, results_by_transaction=[])
    answers = await asyncio.gather(*(
        _add_one(ctx, txn.transactional_id, ProducerId(txn.producer_id), ProducerEpoch(txn.producer_epoch),
                 txn.topics, txn.verify_only)
        for txn in request.transactions
    ))
    results = [
        A.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_topic_results(errors))
        for t, errors in zip(request.transactions, answers, strict=True)
    ]
    return A(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=results)


async def handle_add_offsets(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not _may_write_txn(ctx, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        error = await ctx.services.transactions.add_offsets(
            request.transactional_id, ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
            request.group_id,
        )
    return AddOffsetsToTxnResponse(
        throttle_time_ms=0, error_code=fenced_error_for_version(error, ADD_OFFSETS, ctx.version)
    )


async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    # EndTxn v5: the client speaks transaction version 2. As in Kafka, the request version
    # decides, whatever level the broker finalized (a client at level 1 never sends v5).
    version = TV2 if ctx.version >= FIRST_TV2_END_TXN else 0
    if not _may_write_txn(ctx, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return EndTxnResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)
    error, pid, epoch = await ctx.services.transactions.end_txn(
        request.transactional_id, ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
        request.committed, version,
    )
    error = fenced_error_for_version(error, END_TXN, ctx.version)
    return EndTxnResponse(throttle_time_ms=0, error_code=error, producer_id=pid, producer_epoch=epoch)


async def handle_describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    D = DescribeTransactionsResponse
    states = []
    for tid in request.transactional_ids:
        if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            error, md = ctx.services.transactions.describe(tid)
        else:
            error, md = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if md is None:
            # Kafka answers an id it does not describe with the schema's defaults, 0, whatever the error
            states.append(D.TransactionState(error_code=error, transactional_id=tid, transaction_state="",
                                             transaction_timeout_ms=0, transaction_start_time_ms=0,
                                             producer_id=0, producer_epoch=0, topics=[]))
            continue
        topics: dict[str, list[int]] = {}
        for topic, index in sorted(md.partitions):
            if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):  # Kafka hides the rest
                topics.setdefault(topic, []).append(index)
        states.append(D.TransactionState(
            error_code=ErrorCode.NONE, transactional_id=tid, transaction_state=md.state.display_name,
            transaction_timeout_ms=md.timeout_ms, transaction_start_time_ms=md.txn_start_ms,
            producer_id=md.producer_id, producer_epoch=md.producer_epoch,
            topics=[D.TransactionState.TopicData(topic=t, partitions=p) for t, p in topics.items()],
        ))
    return D(throttle_time_ms=0, transaction_states=states)


async def handle_list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    L = ListTransactionsResponse
    duration = request.duration_filter  # -1 below v1, the schema's default
    result = ctx.services.transactions.list_transactions(
        request.state_filters, request.producer_id_filters, duration
    )
    return L(
        throttle_time_ms=0, error_code=result.error, unknown_state_filters=list(result.unknown_state_filters),
        transaction_states=[
            L.TransactionState(transactional_id=md.transactional_id, producer_id=md.producer_id,
                               transaction_state=md.state.display_name)
            for md in result.transactions
            if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, md.transactional_id)
        ],
    )


# AddPartitionsToTxn v4+ (batched, verifyOnly) is meant for brokers; Kafka 4.x advertises it to
# everyone (0-5) and guards it with the ClusterAction ACL only, which an unsecured cluster grants.
# AddPartitionsToTxn v4+ (batched, verify-only) is for brokers: served (another broker's
# partition leader checks a transactional write here) but never advertised to clients, so
# no client takes the broker-only form (KIP-890, KAFKA-15757).
ADVERTISED_MAX = {ADD_PARTITIONS: 3}
VERSIONS = {
    FIND_COORDINATOR: (0, 6), ADD_PARTITIONS: (0, 5), ADD_OFFSETS: (0, 4), END_TXN: (0, 5),
    DESCRIBE_TRANSACTIONS: (0, 0), LIST_TRANSACTIONS: (0, 1),
}
HANDLERS: Handlers = {
    FIND_COORDINATOR: handle_find_coordinator,
    ADD_PARTITIONS: handle_add_partitions,
    ADD_OFFSETS: handle_add_offsets,
    END_TXN: handle_end_txn,
    DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    LIST_TRANSACTIONS: handle_list_transactions,
}
