"""DeleteRecords: advance a partition's log start offset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DeleteRecordsResponse

from broker.api.authorize import authorize
from broker.handlers.resolve import resolve_partition, topic_name
from broker.security.acl import AclOperation, ResourceType
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = 21
R = DeleteRecordsResponse
PartResult = R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
HIGH_WATERMARK = -1


def _delete_one(ctx: RequestContext, topic: Any, query: Any) -> Any:
    index = query.partition_index
    name, _ = topic_name(ctx, topic)
    if name is not None and not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return PartResult(partition_index=index, low_watermark=-1, error_code=denied)
    part, error = resolve_partition(ctx, topic, index)
    if part is None:
        return PartResult(partition_index=index, low_watermark=-1, error_code=error)
    offset = part.log.high_watermark if query.offset == HIGH_WATERMARK else query.offset
    if offset < 0:
        return PartResult(partition_index=index, low_watermark=-1, error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    error = ErrorCode(part.log.delete_records_before(offset))
    low_watermark = part.log.log_start_offset if error == ErrorCode.NONE else -1  # as Kafka answers
    return PartResult(partition_index=index, low_watermark=low_watermark, error_code=error)


async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = [
        R.DeleteRecordsTopicResult(
            name=topic.name, partitions=[_delete_one(ctx, topic, q) for q in topic.partitions]
        )
        for topic in request.topics
    ]
    return R(throttle_time_ms=0, topics=topics)


VERSIONS = {API_KEY: (0, 2)}
HANDLERS = {API_KEY: handle}
