"""InitProducerId (idempotent producers) and DescribeProducers (KIP-664)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from broker.api.authorize import authorize, authorize_any, authorize_cluster
from broker.api.partition_view import LogView
from broker.api.registry import Handlers
from broker.handlers.resolve import resolve_partition
from broker.security.acl import AclOperation, ResourceType
from coordinator.producer_ids import ProducerIdsUnavailable
from protocol.api_keys import ApiKey, fenced_error_for_version
from protocol.errors import ErrorCode
from protocol.types import ProducerEpoch, ProducerId

if TYPE_CHECKING:
    from broker.api.context import RequestContext

log = logging.getLogger(__name__)
INIT_PRODUCER_ID, DESCRIBE_PRODUCERS = ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_PRODUCERS
InitResponse = InitProducerIdResponse
D = DescribeProducersResponse
PartResponse = D.TopicResponse.PartitionResponse
ProducerState = PartResponse.ProducerState


def _init_denied(ctx: RequestContext, tid: str | None) -> ErrorCode:
    """Kafka: Write on the transactional id; an idempotent producer IdempotentWrite on the
    cluster or Write on some topic (KIP-679)."""
    if tid is not None:
        allowed = authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)
        return ErrorCode.NONE if allowed else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) or authorize_any(
        ctx, AclOperation.WRITE, ResourceType.TOPIC
    ):
        return ErrorCode.NONE
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def handle_init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    denied = _init_denied(ctx, request.transactional_id)
    if denied != ErrorCode.NONE:
        return InitResponse(throttle_time_ms=0, error_code=denied, producer_id=-1, producer_epoch=-1)
    if ctx.version >= 3 and (request.producer_id == -1) != (request.producer_epoch == -1):  # as KafkaApis
        error = ErrorCode.INVALID_REQUEST
        return InitResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        error, pid, epoch = await ctx.services.transactions.init_producer_id(  # -1, -1 below v3
            request.transactional_id, request.transaction_timeout_ms,
            ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
        )
        error = fenced_error_for_version(error, INIT_PRODUCER_ID, ctx.version)
        return InitResponse(throttle_time_ms=0, error_code=error, producer_id=pid, producer_epoch=epoch)
    # Like Kafka, an idempotent producer always gets a fresh id with epoch 0,
    # also when it asks for an epoch bump of its current id (KIP-360).
    try:
        producer_id = ctx.services.producer_ids.generate()
    except ProducerIdsUnavailable:  # etcd out of reach for long: Kafka's answer, the client retries
        return InitResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                            producer_id=-1, producer_epoch=-1)
    log.info("new idempotent producer id %d for client %s", producer_id, ctx.header.client_id)
    return InitResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0
    )


def _describe_partition(
    ctx: RequestContext, topic: DescribeProducersRequest.TopicRequest, index: int
) -> PartResponse:
    if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, topic.name):
        return PartResponse(partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            active_producers=[])
    part, error = resolve_partition(ctx, topic, index)
    if part is None:
        return PartResponse(partition_index=index, error_code=error, active_producers=[])
    plog: LogView = part.log
    producers = [
        ProducerState(
            producer_id=p.producer_id, producer_epoch=p.producer_epoch,
            last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
            coordinator_epoch=p.coordinator_epoch, current_txn_start_offset=p.current_txn_start_offset,
        )
        for p in plog.active_producers()
    ]
    return PartResponse(partition_index=index, error_code=ErrorCode.NONE, active_producers=producers)


async def handle_describe_producers(
    ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    topics = [
        D.TopicResponse(
            name=topic.name,
            partitions=[_describe_partition(ctx, topic, i) for i in topic.partition_indexes],
        )
        for topic in request.topics
    ]
    return D(throttle_time_ms=0, topics=topics)


# InitProducerId v6 (KIP-939 two-phase commit) is not served; Kafka 4.3 also advertises up to v5.
VERSIONS = {INIT_PRODUCER_ID: (0, 5), DESCRIBE_PRODUCERS: (0, 0)}
HANDLERS: Handlers = {
    INIT_PRODUCER_ID: handle_init_producer_id, DESCRIBE_PRODUCERS: handle_describe_producers,
}
