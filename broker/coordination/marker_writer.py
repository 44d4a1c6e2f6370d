"""Writing COMMIT/ABORT markers into the partitions this broker leads: the one code path
for WriteTxnMarkers requests (from another broker's coordinator, or from
`kafka-transactions.sh abort` / `gregor transactions abort`) and for this broker's own
coordinator (through the marker channel, without the network)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.base.clock import now_ms
from broker.base.faults import crash_point
from broker.replication.replica_manager import Partition, replicated
from protocol.errors import ErrorCode
from protocol.internal_topics import OFFSETS_TOPIC
from protocol.types import CoordinatorEpoch, ProducerEpoch, ProducerId, TransactionVersion

if TYPE_CHECKING:
    from broker.api.services import Partitions, Topics, TransactionCompletions

log = logging.getLogger(__name__)
R = WriteTxnMarkersResponse
MarkerResult = R.WritableTxnMarkerResult
TopicResult = MarkerResult.WritableTxnMarkerTopicResult
PartResult = TopicResult.WritableTxnMarkerPartitionResult
Marker = WriteTxnMarkersRequest.WritableTxnMarker
MARKER_REPLICATION_TIMEOUT_S = 30.0


def _invalid(marker: Marker) -> str | None:
    """Checked before anything is written: a marker must name a real producer id and
    epoch (-1 means "none"; Kafka would write a marker no producer state can hold)."""
    if marker.producer_id < 0 or marker.producer_epoch < 0:
        return f"producer id {marker.producer_id}, epoch {marker.producer_epoch}"
    return None


class MarkerWriter:
    """The `Markers` port: `partitions` are written to, `topics` tell a partition led elsewhere
    from an unknown one, and `offsets` hears of every marker replicated in `__consumer_offsets`."""

    def __init__(self, partitions: Partitions, topics: Topics, offsets: TransactionCompletions) -> None:
        self.partitions = partitions
        self.topics = topics
        self.offsets = offsets

    async def write(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        return await write_markers(self, request)


def _write_one(
    writer: MarkerWriter, marker: Marker, topic: str, index: int
) -> tuple[ErrorCode, Partition | None, int]:
    """Append one marker where this broker leads the partition: (error, partition, offset)."""
    part = writer.partitions.led_partition(topic, index)
    if part is None:
        known = writer.topics.get(topic)
        hosted_elsewhere = known is not None and 0 <= index < known.partitions
        error = ErrorCode.NOT_LEADER_OR_FOLLOWER if hosted_elsewhere else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return error, None, -1
    if (problem := _invalid(marker)) is not None:  # as Kafka, once the partition is known to be here
        log.info("refused WriteTxnMarkers for %s-%d: %s", topic, index, problem)
        return ErrorCode.INVALID_REQUEST, None, -1
    result = writer.partitions.append_txn_marker(
        part, ProducerId(marker.producer_id), ProducerEpoch(marker.producer_epoch), marker.transaction_result,
        CoordinatorEpoch(marker.coordinator_epoch), now_ms(), TransactionVersion(marker.transaction_version),
    )
    if result.error != ErrorCode.NONE:
        return ErrorCode(result.error), None, -1
    crash_point("after-marker")
    log.debug("%s marker for producer %d at %s-%d offset %d",
             "COMMIT" if marker.transaction_result else "ABORT", marker.producer_id,
             topic, index, result.offset)
    return ErrorCode.NONE, part, result.offset


async def write_markers(writer: MarkerWriter, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """The one code path for markers, this broker's own (the coordinator's channel) and
    remote ones (the request). A marker counts once replicated (Kafka appends markers
    with acks=all): until then the answer waits; not in time is REQUEST_TIMED_OUT."""
    results = []
    written: list[tuple[PartResult, Marker, Partition, int]] = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            partitions = []
            for i in t.partition_indexes:
                error, part, offset = _write_one(writer, marker, t.name, i)
                partitions.append(PartResult(partition_index=i, error_code=error))
                if part is not None:
                    written.append((partitions[-1], marker, part, offset + 1))
            topics.append(TopicResult(name=t.name, partitions=partitions))
        results.append(MarkerResult(producer_id=marker.producer_id, topics=topics))
    errors = await replicated([(part, end) for _, _, part, end in written], MARKER_REPLICATION_TIMEOUT_S)
    for (result, marker, part, _), error in zip(written, errors, strict=True):
        result.error_code = error
        if error == ErrorCode.NONE and part.topic == OFFSETS_TOPIC:
            # replicated: the transaction's pending offsets become committed (or go)
            pid = ProducerId(marker.producer_id)
            writer.offsets.complete_transaction(part.index, pid, marker.transaction_result)
    return R(markers=results)
