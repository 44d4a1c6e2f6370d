"""ListOffsets (earliest, latest, by timestamp, max timestamp) and OffsetForLeaderEpoch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from broker.api.authorize import authorize, authorize_cluster
from broker.api.partition_view import LogView, PartitionView
from broker.api.registry import Handlers
from broker.handlers.resolve import check_leader_epoch, resolve_partition, topic_name
from broker.security.acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.types import IsolationLevel

if TYPE_CHECKING:
    from broker.api.context import RequestContext

LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH
L = ListOffsetsResponse
LPart = L.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
E = OffsetForLeaderEpochResponse
EPart = E.OffsetForLeaderTopicResult.EpochEndOffset
LTopic = ListOffsetsRequest.ListOffsetsTopic
ETopic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -5, -6  # tiered storage: Gregor has none, so no offset
TIERED = (LATEST_TIERED, EARLIEST_PENDING_UPLOAD)
# The first version that knows each negative timestamp (Kafka's ReplicaManager): an older
# request naming it, or any other negative timestamp, is answered UNSUPPORTED_VERSION.
SPEC_MIN_VERSION = {
    LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}


def _unsupported(timestamp: int, version: int) -> bool:
    """Kafka answers UNSUPPORTED_VERSION for a negative timestamp it does not know at `version`."""
    return timestamp < 0 and version < SPEC_MIN_VERSION.get(timestamp, 1 << 15)


def _lookup(part: PartitionView, timestamp: int, isolation: IsolationLevel) -> tuple[int, int, int]:
    """(offset, timestamp, leader_epoch) for one ListOffsets query."""
    log: LogView = part.log
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1, part.leader_epoch
    if timestamp == LATEST:
        end = log.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else log.high_watermark
        return end, -1, part.leader_epoch
    if timestamp in TIERED:
        return -1, -1, -1
    found = log.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else log.offset_for_timestamp(timestamp)
    # As Kafka, a record a consumer of this isolation level could not fetch yet is not found
    fetchable = log.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else log.high_watermark
    if found is None or found.offset >= fetchable:
        return -1, -1, -1
    return found.offset, found.timestamp, found.leader_epoch


def _may_describe(ctx: RequestContext, topic: LTopic | ETopic) -> bool:
    name, _ = topic_name(ctx, topic)
    return name is None or authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _list_one(
    ctx: RequestContext, topic: LTopic, query: LTopic.ListOffsetsPartition, isolation: IsolationLevel
) -> LPart:
    index = query.partition_index
    if not _may_describe(ctx, topic):
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return LPart(partition_index=index, error_code=denied, old_style_offsets=[])
    if _unsupported(query.timestamp, ctx.version):  # Kafka asks before it looks for the partition
        return LPart(partition_index=index, error_code=ErrorCode.UNSUPPORTED_VERSION, old_style_offsets=[])
    part, error = resolve_partition(ctx, topic, index)
    if part is not None:
        error = check_leader_epoch(part, query.current_leader_epoch)
    if part is None or error != ErrorCode.NONE:
        return LPart(partition_index=index, error_code=error, old_style_offsets=[])
    offset, ts, epoch = _lookup(part, query.timestamp, isolation)
    old = [offset] if offset >= 0 else []
    return LPart(
        partition_index=index, error_code=ErrorCode.NONE, old_style_offsets=old,
        timestamp=ts, offset=offset, leader_epoch=epoch,
    )


async def handle_list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> L:
    isolation = IsolationLevel.of(request.isolation_level)
    topics = [
        L.ListOffsetsTopicResponse(
            name=topic.name,
            partitions=[_list_one(ctx, topic, q, isolation) for q in topic.partitions],
        )
        for topic in request.topics
    ]
    return L(throttle_time_ms=0, topics=topics)


def _epoch_one(
    ctx: RequestContext, topic: ETopic, query: ETopic.OffsetForLeaderPartition, denied: ErrorCode | None
) -> EPart:
    if denied is None and not _may_describe(ctx, topic):
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if denied is not None:
        return EPart(error_code=denied, partition=query.partition, leader_epoch=-1, end_offset=-1)
    part, error = resolve_partition(ctx, topic, query.partition)
    if part is not None:
        error = check_leader_epoch(part, query.current_leader_epoch)
    if part is None or error != ErrorCode.NONE:
        return EPart(error_code=error, partition=query.partition, leader_epoch=-1, end_offset=-1)
    plog: LogView = part.log
    epoch, end = plog.end_offset_for_epoch(query.leader_epoch)
    return EPart(error_code=ErrorCode.NONE, partition=query.partition, leader_epoch=epoch, end_offset=end)


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> E:
    """A follower (v3+ replica id) needs ClusterAction on the cluster, a client Describe per topic."""
    follower = request.replica_id >= 0  # -2 (a consumer) below v3, the schema's default
    denied = None
    if follower and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    topics = [
        E.OffsetForLeaderTopicResult(
            topic=topic.topic, partitions=[_epoch_one(ctx, topic, q, denied) for q in topic.partitions]
        )
        for topic in request.topics
    ]
    return E(throttle_time_ms=0, topics=topics)


VERSIONS = {LIST_OFFSETS: (0, 11), OFFSET_FOR_LEADER_EPOCH: (0, 4)}
HANDLERS: Handlers = {
    LIST_OFFSETS: handle_list_offsets, OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}
