"""Consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

kafka-python has neither API: their classes are built from `protocol/schemas/` at import, so no
stub types them, and their messages here are `protocol.messages`' untyped Request/Response."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.api.authorize import authorize, authorized_operations
from broker.api.registry import Handlers
from broker.security.acl import AclOperation, ResourceType
from coordinator.group.consumer_types import DescribedConsumerGroup, HeartbeatRequest, HeartbeatResponse
from protocol.api_keys import ApiKey
from protocol.consumer_group_log import TopicPartitions
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES, Request, Response
from protocol.types import TopicId

if TYPE_CHECKING:
    from broker.api.context import RequestContext

HEARTBEAT, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE
NOT_PROVIDED_OPERATIONS = -(2**31)  # AuthorizedOperations when not asked for


def _unready(ctx: RequestContext) -> ErrorCode | None:
    error = ctx.services.groups.ensure_topic()
    return None if error == ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE


def _refused(ctx: RequestContext, request: Request) -> ErrorCode | None:
    """Kafka: Read on the group, then Describe on every subscribed topic name."""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    for topic in request.subscribed_topic_names or ():
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return _unready(ctx)


def _heartbeat_request(ctx: RequestContext, request: Request) -> HeartbeatRequest:
    owned = request.topic_partitions
    names = request.subscribed_topic_names
    return HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=request.subscribed_topic_regex,  # v0 has none: the default, null
        server_assignor=request.server_assignor,
        owned=None if owned is None else [(TopicId(t.topic_id), list(t.partitions)) for t in owned],
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.caller.host}",
        api_version=ctx.version,
    )


async def handle_heartbeat(ctx: RequestContext, request: Request) -> Response:
    if (error := _refused(ctx, request)) is not None:
        answer = HeartbeatResponse(error)
    else:
        answer = await ctx.services.groups.consumer_group_heartbeat(_heartbeat_request(ctx, request))
    return _heartbeat_response(answer)


def _heartbeat_response(answer: HeartbeatResponse) -> Response:
    R = RESPONSES[HEARTBEAT]
    assignment = None
    if answer.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.Assignment.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(answer.assignment.items(), key=lambda item: str(item[0]))
        ])
    ok = answer.error == ErrorCode.NONE
    return R(
        throttle_time_ms=0,
        error_code=answer.error,
        error_message=answer.message,
        member_id=answer.member_id if ok else None,
        member_epoch=answer.member_epoch if ok else 0,
        heartbeat_interval_ms=answer.heartbeat_interval_ms if ok else 0,
        assignment=assignment,
    )


async def handle_describe(ctx: RequestContext, request: Request) -> Response:
    R = RESPONSES[DESCRIBE]
    allowed = [g for g in request.group_ids if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
    if (error := _unready(ctx)) is not None:
        described = {g: DescribedConsumerGroup(g, error) for g in allowed}
    else:
        described = {d.group_id: d for d in ctx.services.groups.consumer_group_describe(allowed)}
    groups = [
        _described(ctx, described[g], request.include_authorized_operations) if g in described
        else _described(ctx, DescribedConsumerGroup(g, ErrorCode.GROUP_AUTHORIZATION_FAILED), False)
        for g in request.group_ids
    ]
    return R(throttle_time_ms=0, groups=groups)


def _described(ctx: RequestContext, d: DescribedConsumerGroup, asks: bool) -> Response:
    G = RESPONSES[DESCRIBE].DescribedGroup
    operations = NOT_PROVIDED_OPERATIONS
    if asks and d.error == ErrorCode.NONE:
        operations = _bits(authorized_operations(ctx, ResourceType.GROUP, d.group_id))
    return G(
        error_code=d.error,
        error_message=d.message,
        group_id=d.group_id,
        group_state=d.state if d.error == ErrorCode.NONE else "",
        group_epoch=d.group_epoch,
        assignment_epoch=d.assignment_epoch,
        assignor_name=d.assignor,
        members=[
            G.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex or "",  # Kafka's "none"
                assignment=_assignment(ctx, m.assignment),
                target_assignment=_assignment(ctx, m.target_assignment),
                member_type=0 if m.classic else 1,  # a classic member (the online upgrade), or not
            )
            for m in d.members
        ],
        authorized_operations=operations,
    )


def _bits(operations: Iterable[int]) -> int:
    """Kafka's 32-bit field of authorized operations: bit n for operation code n."""
    return sum(1 << op for op in operations)


def _assignment(ctx: RequestContext, partitions: TopicPartitions) -> Response:
    A = RESPONSES[DESCRIBE].DescribedGroup.Member.Assignment
    return A(topic_partitions=[
        A.TopicPartitions(topic_id=topic_id, topic_name=_name(ctx, topic_id), partitions=sorted(indexes))
        for topic_id, indexes in sorted(partitions.items(), key=lambda item: str(item[0]))
    ])


def _name(ctx: RequestContext, topic_id: TopicId) -> str:
    topic = ctx.services.topics.by_id(topic_id)
    return "" if topic is None else topic.name


VERSIONS = {HEARTBEAT: (0, 1), DESCRIBE: (0, 1)}
HANDLERS: Handlers = {HEARTBEAT: handle_heartbeat, DESCRIBE: handle_describe}
