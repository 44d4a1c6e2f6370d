"""OffsetCommit, OffsetFetch (incl. the batched multi-group versions), OffsetDelete,
TxnOffsetCommit."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from broker.api.authorize import authorize
from broker.api.registry import Handlers
from broker.handlers.resolve import topic_name
from broker.security.acl import AclOperation, ResourceType
from coordinator.group import OffsetCommitInput, OffsetFetchResult
from coordinator.group.types import FetchedOffset
from coordinator.transaction import txn_offset_commit_operation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.internal_topics import OFFSETS_TOPIC
from protocol.types import ProducerEpoch, ProducerId, TopicPartition

if TYPE_CHECKING:
    from broker.api.context import RequestContext

COMMIT, FETCH = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH
DELETE, TXN_COMMIT = ApiKey.OFFSET_DELETE, ApiKey.TXN_OFFSET_COMMIT


def _unready(ctx: RequestContext) -> ErrorCode | None:
    error = ctx.services.groups.ensure_topic()
    return None if error == ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE


CommitTopics = (
    list[OffsetCommitRequest.OffsetCommitRequestTopic]
    | list[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic]
)
FetchTopics = (
    list[OffsetFetchRequest.OffsetFetchRequestTopic]
    | list[OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics]
)
TopicT = TypeVar("TopicT")
PartT = TypeVar("PartT")


def _inputs(ctx: RequestContext, topics: CommitTopics) -> dict[TopicPartition, OffsetCommitInput]:
    offsets = {}
    for topic in topics:
        name, _ = topic_name(ctx, topic)
        for p in topic.partitions:
            epoch = p.committed_leader_epoch  # -1 before its version: the schema's default
            offsets[(name or "", p.partition_index)] = OffsetCommitInput(
                p.committed_offset, -1 if epoch is None else epoch, p.committed_metadata
            )
    return offsets


def _by_topic(
    errors: dict[TopicPartition, ErrorCode], topic_cls: Callable[..., TopicT], part_cls: Callable[..., PartT]
) -> list[TopicT]:
    topics: dict[str, list[PartT]] = {}
    for (topic, index), error in errors.items():
        topics.setdefault(topic, []).append(part_cls(partition_index=index, error_code=error))
    return [topic_cls(name=t, partitions=p) for t, p in topics.items()]


def _may(ctx: RequestContext, operation: AclOperation, resource: ResourceType, name: str) -> bool:
    return authorize(ctx, operation, resource, name)


def _denied_topics(
    ctx: RequestContext, operation: AclOperation, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """TOPIC_AUTHORIZATION_FAILED for the partitions of topics the caller may not `operation`."""
    allowed: dict[str, bool] = {}
    for topic, _ in partitions:
        if topic not in allowed:
            allowed[topic] = _may(ctx, operation, ResourceType.TOPIC, topic)
    return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in partitions if not allowed[tp[0]]}


def _unknown_partitions(ctx: RequestContext, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions of topics that do not exist (Kafka answers them UNKNOWN_TOPIC_OR_PARTITION
    before asking the group coordinator)."""
    unknown = []
    for topic, index in partitions:
        found = ctx.services.topics.get(topic)
        if found is None or not 0 <= index < found.partitions:
            unknown.append((topic, index))
    return unknown


async def handle_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    R = OffsetCommitResponse
    T = R.OffsetCommitResponseTopic
    requested = _inputs(ctx, request.topics)
    if not _may(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        errors = dict.fromkeys(requested, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return R(throttle_time_ms=0, topics=_by_topic(errors, T, T.OffsetCommitResponsePartition))
    refused = _denied_topics(ctx, AclOperation.READ, requested)
    unknown = _unknown_partitions(ctx, [tp for tp in requested if tp not in refused])
    refused.update(dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    known = {tp: commit for tp, commit in requested.items() if tp not in refused}
    answered = await _commit_known(ctx, request, known) if known else {}
    errors = {tp: answered[tp] if tp in answered else refused[tp] for tp in requested}
    return R(throttle_time_ms=0, topics=_by_topic(errors, T, T.OffsetCommitResponsePartition))


async def _commit_known(
    ctx: RequestContext, request: OffsetCommitRequest, offsets: dict[TopicPartition, OffsetCommitInput]
) -> dict[TopicPartition, ErrorCode]:
    if (error := _unready(ctx)) is not None:
        return dict.fromkeys(offsets, error)
    return await ctx.services.groups.offset_commit(  # a field before its version: the schema's default
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        offsets,
        instance_id=request.group_instance_id,
        api_version=ctx.version,
        retention_ms=request.retention_time_ms,
    )


def _fetch_group(
    ctx: RequestContext, group_id: str,
    topics: FetchTopics | None,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> OffsetFetchResult:
    """Kafka: Read on the group (GROUP_AUTHORIZATION_FAILED); topics the caller may not
    Describe are TOPIC_AUTHORIZATION_FAILED when named, left out when all are asked for.
    ``member``: v9's member id and epoch, checked against a consumer-protocol group."""
    if not _may(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return OffsetFetchResult(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if topics is None:
        result = ctx.services.groups.offset_fetch(group_id, None, require_stable, member)
        describe = AclOperation.DESCRIBE
        shown = [p for p in result.partitions if _may(ctx, describe, ResourceType.TOPIC, p.topic)]
        return OffsetFetchResult(result.group_id, result.error, tuple(shown))
    wanted = [(topic_name(ctx, t)[0] or "", i) for t in topics for i in t.partition_indexes]
    denied = _denied_topics(ctx, AclOperation.DESCRIBE, wanted)
    allowed = [tp for tp in wanted if tp not in denied]
    result = ctx.services.groups.offset_fetch(group_id, allowed, require_stable, member)
    hidden = tuple(FetchedOffset(t, i, error=e) for (t, i), e in denied.items())
    return OffsetFetchResult(result.group_id, result.error, result.partitions + hidden)


def _fetched_topics(
    result: OffsetFetchResult, topic_cls: Callable[..., TopicT], part_cls: Callable[..., PartT]
) -> list[TopicT]:
    topics: dict[str, list[PartT]] = {}
    for f in result.partitions:
        topics.setdefault(f.topic, []).append(
            part_cls(
                partition_index=f.partition,
                committed_offset=f.offset,
                committed_leader_epoch=f.leader_epoch,
                metadata=f.metadata,
                error_code=f.error,
            )
        )
    return [topic_cls(name=t, partitions=p) for t, p in topics.items()]


async def handle_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    unready = _unready(ctx)
    stable = bool(request.require_stable)  # false before v7, the schema's default
    if ctx.version >= 8:
        G = R.OffsetFetchResponseGroup
        groups = []
        for group in request.groups:
            if unready is not None and _may(ctx, AclOperation.READ, ResourceType.GROUP, group.group_id):
                groups.append(G(group_id=group.group_id, topics=[], error_code=unready))
                continue
            member = (group.member_id, group.member_epoch)  # before v9: the defaults, null and -1
            result = _fetch_group(ctx, group.group_id, group.topics, stable, member)
            topics = _fetched_topics(
                result, G.OffsetFetchResponseTopics, G.OffsetFetchResponseTopics.OffsetFetchResponsePartitions
            )
            groups.append(G(group_id=group.group_id, topics=topics, error_code=result.error))
        return R(throttle_time_ms=0, groups=groups)
    T = R.OffsetFetchResponseTopic
    if unready is not None and _may(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return R(throttle_time_ms=0, topics=[], error_code=unready)
    result = _fetch_group(ctx, request.group_id, request.topics, stable)
    topics = _fetched_topics(result, T, T.OffsetFetchResponsePartition)
    return R(throttle_time_ms=0, topics=topics, error_code=result.error)


async def handle_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    R = OffsetDeleteResponse
    T = R.OffsetDeleteResponseTopic
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not _may(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    if (error := _unready(ctx)) is not None:
        return R(error_code=error, throttle_time_ms=0, topics=[])
    denied = _denied_topics(ctx, AclOperation.READ, wanted)
    allowed = [tp for tp in wanted if tp not in denied]
    result = await ctx.services.groups.offset_delete(request.group_id, allowed)
    # Kafka: a group-level error answers no partitions
    errors = {**dict(result.partitions), **denied} if result.error == ErrorCode.NONE else {}
    error = result.error
    return R(
        error_code=error, throttle_time_ms=0, topics=_by_topic(errors, T, T.OffsetDeleteResponsePartition)
    )


async def _txn_commit_unready(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode | None:
    """Before the offsets are written, the group's `__consumer_offsets` partition must be in the
    transaction: v5+ (transaction version 2) adds it, as AddOffsetsToTxn did before; older
    versions only verify that AddOffsetsToTxn added it (KIP-890), so that the COMMIT or ABORT
    marker always reaches the offsets it completes."""
    if (error := _unready(ctx)) is not None:
        return error
    if not request.group_id or not request.transactional_id:
        return None  # the group machine answers INVALID_GROUP_ID / INVALID_REQUEST
    # As in Kafka, no producer id (-1) is checked too: the coordinator knows no such producer
    groups = ctx.services.groups
    tp = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
    found = await ctx.services.transactions.check_writes(
        request.transactional_id, ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
        [tp],
        txn_offset_commit_operation(ctx.version),
    )
    error = found[tp]
    return None if error == ErrorCode.NONE else error


def _txn_commit_denied(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode | None:
    """Kafka: Write on the transactional id, then Read on the group."""
    if not _may(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not _may(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


async def _txn_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest, offsets: dict[TopicPartition, OffsetCommitInput]
) -> dict[TopicPartition, ErrorCode]:
    if (error := await _txn_commit_unready(ctx, request)) is not None:
        return dict.fromkeys(offsets, error)
    return await ctx.services.groups.txn_offset_commit(
        request.transactional_id,
        request.group_id,
        (request.producer_id, request.producer_epoch),
        offsets,
        generation=request.generation_id,  # these three: the schema's defaults before v3
        member_id=request.member_id,
        instance_id=request.group_instance_id,
    )


async def handle_txn_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    """Topics the caller may not Read are TOPIC_AUTHORIZATION_FAILED; the others are committed."""
    R = TxnOffsetCommitResponse
    offsets = _inputs(ctx, request.topics)
    if (denied := _txn_commit_denied(ctx, request)) is not None:
        errors = dict.fromkeys(offsets, denied)
    else:
        refused = _denied_topics(ctx, AclOperation.READ, offsets)
        unknown = _unknown_partitions(ctx, [tp for tp in offsets if tp not in refused])  # as Kafka, first
        refused.update(dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        allowed = {tp: o for tp, o in offsets.items() if tp not in refused}
        answered = await _txn_commit(ctx, request, allowed) if allowed or not offsets else {}
        errors = {tp: answered[tp] if tp in answered else refused[tp] for tp in offsets}
    T = R.TxnOffsetCommitResponseTopic
    return R(throttle_time_ms=0, topics=_by_topic(errors, T, T.TxnOffsetCommitResponsePartition))


VERSIONS = {COMMIT: (0, 9), FETCH: (0, 9), DELETE: (0, 0), TXN_COMMIT: (0, 5)}
HANDLERS: Handlers = {
    COMMIT: handle_commit, FETCH: handle_fetch, DELETE: handle_delete, TXN_COMMIT: handle_txn_commit,
}
