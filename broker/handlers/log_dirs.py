"""DescribeLogDirs: the partitions in each log dir and their sizes."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from broker.api.authorize import authorize_cluster
from broker.api.partition_view import LogView
from broker.api.registry import Handlers
from broker.security.acl import AclOperation
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
R = DescribeLogDirsResponse
Result = R.DescribeLogDirsResult
TopicResult = Result.DescribeLogDirsTopic
PartResult = TopicResult.DescribeLogDirsPartition


def _wanted(ctx: RequestContext, request: DescribeLogDirsRequest) -> dict[str, set[int]]:
    replicas = ctx.services.partitions.all_partitions()
    if request.topics is None:
        wanted: dict[str, set[int]] = {}
        for part in replicas:
            wanted.setdefault(part.topic, set()).add(part.index)
        return wanted
    return {t.topic: set(t.partitions) for t in request.topics}


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):  # Kafka: Describe on the cluster
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    services = ctx.services
    topics = []
    for name, indexes in sorted(_wanted(ctx, request).items()):
        parts = []
        for index in sorted(indexes):
            part = services.partitions.partition(name, index)
            if part is not None:
                plog: LogView = part.log
                parts.append(PartResult(partition_index=index, partition_size=plog.size_in_bytes,
                                        offset_lag=0, is_future_key=False))
        if parts:
            topics.append(TopicResult(name=name, partitions=parts))
    log_dir = services.configs.config.log_dirs[0]
    usage = shutil.disk_usage(log_dir)
    result = Result(error_code=ErrorCode.NONE, log_dir=str(log_dir.resolve()), topics=topics,
                    total_bytes=usage.total, usable_bytes=usage.free)
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])


VERSIONS = {API_KEY: (0, 5)}
HANDLERS: Handlers = {API_KEY: handle}
