"""WriteTxnMarkers: markers written where this broker leads, answered once replicated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.api.authorize import authorize_cluster
from broker.api.registry import Handlers
from broker.security.acl import AclOperation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS


def _denied(request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
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


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Broker-to-broker: ClusterAction on the cluster."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request)
    return await ctx.services.markers.write(request)


VERSIONS = {API_KEY: (0, 2)}
HANDLERS: Handlers = {API_KEY: handle}
