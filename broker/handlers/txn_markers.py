"""WriteTxnMarkers: markers written where this broker leads, answered once replicated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import WriteTxnMarkersResponse

from broker.api.authorize import authorize_cluster
from broker.security.acl import AclOperation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS


def _denied(request: Any) -> Any:
    """Every partition of every marker CLUSTER_AUTHORIZATION_FAILED."""
    R = WriteTxnMarkersResponse
    M = R.WritableTxnMarkerResult
    T = M.WritableTxnMarkerTopicResult
    error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return R(markers=[
        M(producer_id=m.producer_id, topics=[
            T(name=t.name, partitions=[
                T.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error)
                for p in t.partition_indexes
            ])
            for t in m.topics
        ])
        for m in request.markers
    ])


async def handle(ctx: RequestContext, request: Any) -> Any:
    """Broker-to-broker: ClusterAction on the cluster."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request)
    return await ctx.services.markers.write(request)


VERSIONS = {API_KEY: (0, 2)}
HANDLERS = {API_KEY: handle}
