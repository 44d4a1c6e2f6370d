"""Sends COMMIT/ABORT markers for the transaction coordinator, retrying until written.

Partitions this broker leads go through the same WriteTxnMarkers code path a
remote leader runs (`broker.handlers.txn_markers.write_markers`); with
replication, remote leaders get the same request over the network.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafka.protocol.producer import WriteTxnMarkersRequest

from coordinator.transaction import MarkerIntent
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.1
Marker = WriteTxnMarkersRequest.WritableTxnMarker
# The partition is gone (topic deleted): nothing left to mark, as in Kafka.
DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
# The producer or coordinator moved on: retrying cannot succeed.
GIVE_UP = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}


def marker_request(intent: MarkerIntent, partitions: set[tuple[str, int]]) -> WriteTxnMarkersRequest:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        topics.setdefault(topic, []).append(index)
    marker = Marker(
        producer_id=intent.producer_id, producer_epoch=intent.producer_epoch,
        transaction_result=intent.commit, coordinator_epoch=intent.coordinator_epoch,
        topics=[Marker.WritableTxnMarkerTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )
    return WriteTxnMarkersRequest(markers=[marker])


class MarkerSender:
    def __init__(self, broker: Broker, on_written: Callable[[str], None]) -> None:
        self.broker = broker
        self.on_written = on_written
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, intent: MarkerIntent) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(intent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, intent: MarkerIntent) -> None:
        from broker.handlers.txn_markers import write_markers

        remaining = set(intent.partitions)
        while remaining:
            response = write_markers(self.broker, marker_request(intent, remaining))
            for topic in response.markers[0].topics:
                for result in topic.partitions:
                    error = ErrorCode(result.error_code)
                    tp = (topic.name, result.partition_index)
                    if error in DONE or error in GIVE_UP:
                        remaining.discard(tp)
                    if error in GIVE_UP:
                        log.error("transactional id %s: marker for %s-%d refused: %s",
                                  intent.transactional_id, tp[0], tp[1], error.name)
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_S)
        self.on_written(intent.transactional_id)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
