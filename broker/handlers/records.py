"""DeleteRecords: advance a partition's log start offset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from broker.api.authorize import authorize
from broker.api.partition_view import LogView
from broker.api.registry import Handlers
from broker.handlers.resolve import resolve_partition, topic_name
from broker.security.acl import AclOperation, ResourceType
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = 21
R = DeleteRecordsResponse
PartResult = R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
Topic = DeleteRecordsRequest.DeleteRecordsTopic
Query = DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition
HIGH_WATERMARK = -1  # the offset that means "up to the high watermark"


def _delete_one(ctx: RequestContext, topic: Topic, query: Query) -> PartResult:
    index = query.partition_index
    name, _ = topic_name(ctx, topic)
    if name is not None and not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return PartResult(partition_index=index, low_watermark=-1, error_code=denied)
    part, error = resolve_partition(ctx, topic, index)
    if part is None:
        return PartResult(partition_index=index, low_watermark=-1, error_code=error)
    plog: LogView = part.log  # read only: the deletion goes through the ReplicaManager
    if _deletes_refused(plog.config.cleanup_policy):  # Kafka's first check, before the offset's
        return PartResult(partition_index=index, low_watermark=-1, error_code=ErrorCode.POLICY_VIOLATION)
    if query.offset < HIGH_WATERMARK:
        return PartResult(partition_index=index, low_watermark=-1, error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    result = ctx.services.partitions.delete_records(part, query.offset)  # -1 on an error, as Kafka
    return PartResult(partition_index=index, low_watermark=result.low_watermark, error_code=result.error)


def _deletes_refused(cleanup_policy: str) -> bool:
    """A policy without `delete` refuses DeleteRecords; an empty one (no cleanup) does not (Kafka 4)."""
    policy = {p.strip() for p in cleanup_policy.split(",") if p.strip()}
    return bool(policy) and "delete" not in policy


async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = [
        R.DeleteRecordsTopicResult(
            name=topic.name, partitions=[_delete_one(ctx, topic, q) for q in topic.partitions]
        )
        for topic in request.topics
    ]
    return R(throttle_time_ms=0, topics=topics)


VERSIONS = {API_KEY: (0, 2)}
HANDLERS: Handlers = {API_KEY: handle}
