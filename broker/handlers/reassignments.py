"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), run by the controller.

In a cluster the controller moves replicas (controller.reassign): the targets join as
followers, copy the log by normal replication, and the move completes once they are in
the ISR. On a single broker the only valid target is this broker, where a partition
already is: the checks answer as Kafka's, and nothing is ever in progress.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from broker.api.authorize import authorize_cluster
from broker.api.registry import Handlers
from broker.cluster.controller import check_reassignment
from broker.cluster.placement import Refused
from broker.handlers.forwarding import on_controller
from broker.security.acl import AclOperation
from broker.store.image import PartitionEpoch, PartitionState
from protocol.errors import ErrorCode
from protocol.types import LeaderEpoch, NodeId, TopicPartition

if TYPE_CHECKING:
    from broker.api.context import RequestContext

ALTER, LIST = 45, 46
A = AlterPartitionReassignmentsResponse
L = ListPartitionReassignmentsResponse
Wanted = list[tuple[str, int, list[int] | None]]


def _wanted(request: AlterPartitionReassignmentsRequest) -> Wanted:
    return [(t.name, p.partition_index, p.replicas) for t in request.topics for p in t.partitions]


def _single_node(ctx: RequestContext, wanted: Wanted) -> dict[TopicPartition, Refused | None]:
    me = NodeId(ctx.services.cluster.node_id)
    results: dict[TopicPartition, Refused | None] = {}
    for topic, index, target in wanted:
        meta = ctx.services.topics.get(topic)
        state = None
        if meta is not None and 0 <= index < meta.partitions:
            state = PartitionState((me,), (me,), me, LeaderEpoch(0), PartitionEpoch(0))
        results[(topic, index)] = check_reassignment(meta is not None, topic, index, state, target, {me})[0]
    return results


def _altered(wanted: Wanted, results: dict[TopicPartition, Refused | None]) -> A:
    by_topic: dict[str, list[A.ReassignableTopicResponse.ReassignablePartitionResponse]] = {}
    for topic, index, _ in wanted:
        refused = results[(topic, index)]
        by_topic.setdefault(topic, []).append(A.ReassignableTopicResponse.ReassignablePartitionResponse(
            partition_index=index, error_code=refused.error if refused else ErrorCode.NONE,
            error_message=refused.message if refused else None,
        ))
    return A(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=[
        A.ReassignableTopicResponse(name=t, partitions=p) for t, p in by_topic.items()
    ])


async def handle_alter(ctx: RequestContext, request: AlterPartitionReassignmentsRequest) -> A:
    wanted = _wanted(request)
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: Alter on the cluster
        denied = Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        answer = _altered(wanted, {(t, i): denied for t, i, _ in wanted})
        answer.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return answer
    controller = ctx.services.controller
    if controller is None:
        return _altered(wanted, _single_node(ctx, wanted))
    return _altered(wanted, await controller.reassign(wanted))


def _alter_not_controller(request: AlterPartitionReassignmentsRequest) -> A:
    refused = Refused(ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_CONTROLLER.name)
    wanted = _wanted(request)
    return _altered(wanted, {(t, i): refused for t, i, _ in wanted})


def _listed(found: dict[str, dict[int, PartitionState]], error: ErrorCode = ErrorCode.NONE) -> L:
    return L(throttle_time_ms=0, error_code=error, error_message=None, topics=[
        L.OngoingTopicReassignment(name=topic, partitions=[
            L.OngoingTopicReassignment.OngoingPartitionReassignment(
                partition_index=index, replicas=list(s.replicas), adding_replicas=list(s.adding),
                removing_replicas=list(s.removing),
            ) for index, s in sorted(states.items())
        ]) for topic, states in sorted(found.items())
    ])


async def handle_list(ctx: RequestContext, request: ListPartitionReassignmentsRequest) -> L:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):  # Kafka: Describe on the cluster
        return _listed({}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    controller = ctx.services.controller
    if controller is None:
        return _listed({})
    wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    return _listed(controller.reassignments(wanted))


def _list_not_controller(_request: ListPartitionReassignmentsRequest) -> L:
    return _listed({}, ErrorCode.NOT_CONTROLLER)


VERSIONS = {ALTER: (0, 0), LIST: (0, 0)}
HANDLERS: Handlers = {
    ALTER: on_controller(handle_alter, _alter_not_controller),
    LIST: on_controller(handle_list, _list_not_controller),
}
