"""ElectLeaders (KIP-460): preferred or unclean leader election, run by the controller.

On a single broker every partition's preferred leader is this broker already
(ELECTION_NOT_NEEDED); in a cluster the controller elects (controller.elect).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from broker.api.authorize import authorize_cluster
from broker.api.registry import Handlers
from broker.handlers.forwarding import on_controller
from broker.security.acl import AclOperation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.types import TopicPartition

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.ELECT_LEADERS
R = ElectLeadersResponse


def _wanted(request: ElectLeadersRequest) -> list[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    return [(t.topic, p) for t in request.topic_partitions for p in t.partitions]


def _single_node(ctx: RequestContext, wanted: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
    if wanted is None:
        return {}  # nothing needed an election
    return {
        tp: ErrorCode.ELECTION_NOT_NEEDED if ctx.services.partitions.partition(*tp) is not None
        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for tp in wanted
    }


def _response(results: dict[TopicPartition, ErrorCode], error: ErrorCode = ErrorCode.NONE) -> R:
    by_topic: dict[str, list[R.ReplicaElectionResult.PartitionResult]] = {}
    for (topic, index), e in sorted(results.items()):
        by_topic.setdefault(topic, []).append(R.ReplicaElectionResult.PartitionResult(
            partition_id=index, error_code=e, error_message=None if e == ErrorCode.NONE else e.name,
        ))
    return R(throttle_time_ms=0, error_code=error, replica_election_results=[
        R.ReplicaElectionResult(topic=t, partition_result=p) for t, p in by_topic.items()
    ])


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    wanted = _wanted(request)
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: Alter on the cluster
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _response(dict.fromkeys(wanted or [], denied), denied)
    election_type = request.election_type  # 0 (preferred) below v1, the schema's default
    controller = ctx.services.controller
    if controller is None:
        return _response(_single_node(ctx, wanted))
    return _response(await controller.elect(election_type, wanted))


def _not_controller(request: ElectLeadersRequest) -> ElectLeadersResponse:
    error = ErrorCode.NOT_CONTROLLER
    return _response(dict.fromkeys(_wanted(request) or [], error), error)


VERSIONS = {API_KEY: (0, 2)}
HANDLERS: Handlers = {API_KEY: on_controller(handle, _not_controller)}
