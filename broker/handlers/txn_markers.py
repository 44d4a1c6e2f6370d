"""WriteTxnMarkers: append COMMIT/ABORT control batches (from the coordinator or
from `kafka-transactions.sh abort` / `gregor transactions abort`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import WriteTxnMarkersResponse

from broker.context import now_ms
from broker.faults import crash_point
from broker.group_coordinator import OFFSETS_TOPIC
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.context import RequestContext
    from broker.server import Broker

log = logging.getLogger(__name__)
API_KEY = 27
R = WriteTxnMarkersResponse
MarkerResult = R.WritableTxnMarkerResult
TopicResult = MarkerResult.WritableTxnMarkerTopicResult
PartResult = TopicResult.WritableTxnMarkerPartitionResult


def _invalid(marker: Any) -> str | None:
    """Checked before anything is written: a marker must name a real producer id and
    epoch (-1 means "none"; Kafka would write a marker no producer state can hold)."""
    if marker.producer_id < 0 or marker.producer_epoch < 0:
        return f"producer id {marker.producer_id}, epoch {marker.producer_epoch}"
    return None


def _write_one(broker: Broker, marker: Any, topic: str, index: int) -> ErrorCode:
    part = broker.replicas.partition(topic, index)
    if part is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    result = broker.replicas.append_txn_marker(
        part, marker.producer_id, marker.producer_epoch, marker.transaction_result,
        marker.coordinator_epoch, now_ms(),
    )
    if result.error == ErrorCode.NONE:
        crash_point("after-marker")
        if topic == OFFSETS_TOPIC:  # pending transactional offsets become committed or go
            broker.groups.complete_transaction(index, marker.producer_id, marker.transaction_result)
        log.info("%s marker for producer %d at %s-%d offset %d",
                 "COMMIT" if marker.transaction_result else "ABORT", marker.producer_id,
                 topic, index, result.offset)
    return ErrorCode(result.error)


def write_markers(broker: Broker, request: Any) -> Any:
    """The one code path for markers, local (coordinator) and remote (request)."""
    results = []
    for marker in request.markers:
        problem = _invalid(marker)
        if problem is not None:
            log.info("refused WriteTxnMarkers: %s", problem)
            results.append(_refused(marker))
            continue
        topics = [
            TopicResult(name=t.name, partitions=[
                PartResult(partition_index=i, error_code=_write_one(broker, marker, t.name, i))
                for i in t.partition_indexes
            ])
            for t in marker.topics
        ]
        results.append(MarkerResult(producer_id=marker.producer_id, topics=topics))
    return R(markers=results)


def _refused(marker: Any) -> Any:
    topics = [
        TopicResult(name=t.name, partitions=[
            PartResult(partition_index=i, error_code=ErrorCode.INVALID_REQUEST) for i in t.partition_indexes
        ])
        for t in marker.topics
    ]
    return MarkerResult(producer_id=marker.producer_id, topics=topics)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return write_markers(ctx.broker, request)


VERSIONS = {API_KEY: (0, 1)}
HANDLERS = {API_KEY: handle}
