"""Classic consumer groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups, DeleteGroups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from broker.api.authorize import authorize, authorize_cluster, authorized_operations
from broker.api.registry import Handlers
from broker.security.acl import NOT_PROVIDED, AclOperation, ResourceType
from coordinator.group import DescribedGroup, JoinRequest, LeaveMember, SyncRequest
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

JOIN, HEARTBEAT, LEAVE, SYNC = ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP
DESCRIBE, LIST, DELETE = ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS


def _unready(ctx: RequestContext) -> ErrorCode | None:
    error = ctx.services.groups.ensure_topic()
    return None if error == ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE


def _may(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return authorize(ctx, operation, ResourceType.GROUP, group_id)


def _member_unready(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """A member's request: Read on the group (GROUP_AUTHORIZATION_FAILED), then a ready coordinator."""
    if not _may(ctx, AclOperation.READ, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return _unready(ctx)


JOIN_NULLABLE_PROTOCOL_NAME = 7


def _protocol_name(ctx: RequestContext, name: str | None) -> str | None:
    """JoinGroup's ProtocolName is nullable from v7 only: older answers carry "" (as Kafka's)."""
    return "" if name is None and ctx.version < JOIN_NULLABLE_PROTOCOL_NAME else name


async def handle_join(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    R = JoinGroupResponse
    if (error := _member_unready(ctx, request.group_id)) is not None:
        return R(
            throttle_time_ms=0,
            error_code=error,
            generation_id=-1,
            protocol_name=_protocol_name(ctx, None),
            leader="",
            member_id=request.member_id if error == ErrorCode.GROUP_AUTHORIZATION_FAILED else "",
            members=[],
        )
    answer = await ctx.services.groups.join_group(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in request.protocols),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            group_instance_id=request.group_instance_id,
            client_id=ctx.header.client_id or "",
            client_host=f"/{ctx.caller.host}",
            api_version=ctx.version,
        )
    )
    return R(
        throttle_time_ms=0,
        error_code=answer.error,
        generation_id=answer.generation_id,
        protocol_type=answer.protocol_type,
        protocol_name=_protocol_name(ctx, answer.protocol_name),
        leader=answer.leader,
        skip_assignment=answer.skip_assignment,
        member_id=answer.member_id,
        members=[
            R.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in answer.members
        ],
    )


async def handle_sync(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    R = SyncGroupResponse
    if (error := _member_unready(ctx, request.group_id)) is not None:
        return R(throttle_time_ms=0, error_code=error, assignment=b"")
    answer = await ctx.services.groups.sync_group(
        SyncRequest(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            assignments={a.member_id: a.assignment for a in request.assignments},
            group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
        )
    )
    return R(
        throttle_time_ms=0,
        error_code=answer.error,
        protocol_type=answer.protocol_type,
        protocol_name=answer.protocol_name,
        assignment=answer.assignment,
    )


async def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if (error := _member_unready(ctx, request.group_id)) is None:
        error = await ctx.services.groups.heartbeat(
            request.group_id,
            request.member_id,
            request.generation_id,
            request.group_instance_id,
        )
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


async def handle_leave(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    R = LeaveGroupResponse
    if (error := _member_unready(ctx, request.group_id)) is not None:
        return R(throttle_time_ms=0, error_code=error, members=[])
    if ctx.version >= 3:
        leaving = [LeaveMember(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [LeaveMember(request.member_id)]
    answer = await ctx.services.groups.leave_group(request.group_id, leaving)
    members = [R.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for m, i, e in answer.members]
    error = answer.error
    if ctx.version < 3 and members and error == ErrorCode.NONE:
        error = ErrorCode(members[0].error_code)  # one member, one top-level error
    return R(throttle_time_ms=0, error_code=error, members=members)


async def handle_describe(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    R = DescribeGroupsResponse
    G = R.DescribedGroup
    if (error := _unready(ctx)) is not None:
        return R(
            throttle_time_ms=0,
            groups=[
                G(
                    error_code=error,
                    group_id=g,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
                for g in request.groups
            ],
        )
    asks = request.include_authorized_operations
    allowed = [g for g in request.groups if _may(ctx, AclOperation.DESCRIBE, g)]
    described = {g.group_id: g for g in ctx.services.groups.describe_groups(allowed)}
    groups = [
        _described(ctx, described[g], asks) if g in described
        else G(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g, group_state="", protocol_type="",
               protocol_data="", members=[])
        for g in request.groups
    ]
    return R(throttle_time_ms=0, groups=groups)


def _described(ctx: RequestContext, g: DescribedGroup, asks: bool) -> DescribeGroupsResponse.DescribedGroup:
    G = DescribeGroupsResponse.DescribedGroup
    return (
        G(
            error_code=g.error,
            group_id=g.group_id,
            group_state=g.state,
            protocol_type=g.protocol_type,
            protocol_data=g.protocol_data,
            members=[
                G.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in g.members
            ],
            authorized_operations=_group_operations(ctx, g.group_id, asks and g.error == ErrorCode.NONE),
        )
    )


def _group_operations(ctx: RequestContext, group_id: str, asked: bool) -> set[int]:
    """Kafka answers them only when asked (v3+), and only for a group described without error."""
    return authorized_operations(ctx, ResourceType.GROUP, group_id) if asked else NOT_PROVIDED


async def handle_list(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    R = ListGroupsResponse
    if (error := _unready(ctx)) is not None:
        return R(throttle_time_ms=0, error_code=error, groups=[])
    states = request.states_filter
    types = {t.lower() for t in request.types_filter}
    error, listed = ctx.services.groups.list_groups(states)
    everything = authorize_cluster(ctx, AclOperation.DESCRIBE)  # else only groups it may Describe
    groups = [
        R.ListedGroup(
            group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type
        )
        for g in listed
        if (not types or g.group_type in types)
        and (everything or _may(ctx, AclOperation.DESCRIBE, g.group_id))
    ]
    return R(throttle_time_ms=0, error_code=error, groups=groups)


async def handle_delete(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    R = DeleteGroupsResponse
    allowed = [g for g in request.groups_names if _may(ctx, AclOperation.DELETE, g)]
    if (error := _unready(ctx)) is not None:
        found = dict.fromkeys(allowed, error)
    else:
        found = await ctx.services.groups.delete_groups(allowed) if allowed else {}
    results = {g: found.get(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in request.groups_names}
    return R(
        throttle_time_ms=0,
        results=[R.DeletableGroupResult(group_id=g, error_code=e) for g, e in results.items()],
    )


VERSIONS = {
    JOIN: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE: (0, 5),
    SYNC: (0, 5),
    DESCRIBE: (0, 5),
    LIST: (0, 5),
    DELETE: (0, 2),
}
HANDLERS: Handlers = {
    JOIN: handle_join,
    HEARTBEAT: handle_heartbeat,
    LEAVE: handle_leave,
    SYNC: handle_sync,
    DESCRIBE: handle_describe,
    LIST: handle_list,
    DELETE: handle_delete,
}
