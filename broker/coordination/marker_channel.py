"""The transaction coordinator's markers, carried to each partition's leader.

One channel per other broker: the markers submitted for it in one event-loop turn
go out as one WriteTxnMarkers request over the inter-broker client, pipelined
behind any still in flight (a slow transaction's markers hold up no other); this
broker's own partitions are written at once through the same writer the
WriteTxnMarkers handler runs (`marker_writer.write_markers`), without the network. A marker counts when
its leader answers NONE (written and replicated); NOT_LEADER_OR_FOLLOWER and other
retriable answers send it again, to the leader the metadata names by then. Only
when every partition of a transaction is done does the coordinator hear of it
(and write CompleteCommit / CompleteAbort).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker import metrics
from broker.cluster.view import BrokerInfo
from broker.net.client import BrokerClient, BrokerUnreachable
from broker.security.client import ClientSecurity
from coordinator.transaction import MarkerIntent
from protocol.errors import ErrorCode
from protocol.types import TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
# A marker still not written after this long is logged (again each time as long): the
# transaction, and any InitProducerId for its id, waits on it (chaos seed 95: leaderless
# partitions held one for 90 minutes without a line).
STILL_WAITING_LOG_S = 30.0
WRITE_TXN_MARKERS_VERSION = 2  # v2 carries each marker's transaction version (KIP-1228)
REQUEST_TIMEOUT_S = 40.0
Marker = WriteTxnMarkersRequest.WritableTxnMarker
# The partition is gone (topic deleted): nothing left to mark, as in Kafka.
DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
# The producer or coordinator moved on: retrying cannot succeed.
GIVE_UP = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}

Send = Callable[[WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]
Results = dict[TopicPartition, ErrorCode]


def marker(intent: MarkerIntent, partitions: set[TopicPartition]) -> Marker:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        topics.setdefault(topic, []).append(index)
    return Marker(
        producer_id=intent.producer_id, producer_epoch=intent.producer_epoch,
        transaction_result=intent.commit, coordinator_epoch=intent.coordinator_epoch,
        transaction_version=intent.transaction_version,
        topics=[Marker.WritableTxnMarkerTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )


@dataclass
class _Destination:
    """One destination broker. The markers submitted in one event-loop turn go out as one
    WriteTxnMarkers request; a request does not wait for the ones before it (they are
    pipelined on the connection), so no transaction's markers queue behind another's."""

    send: Send
    queue: list[tuple[Marker, asyncio.Future[Results]]] = field(default_factory=list)
    in_flight: set[asyncio.Task[None]] = field(default_factory=set)

    def submit(self, entry: Marker) -> asyncio.Future[Results]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Results] = loop.create_future()
        if not self.queue:
            loop.call_soon(self._flush)
        self.queue.append((entry, future))
        return future

    def _flush(self) -> None:
        batch, self.queue = self.queue, []
        task = asyncio.get_running_loop().create_task(self._deliver(batch))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _deliver(self, batch: list[tuple[Marker, asyncio.Future[Results]]]) -> None:
        try:
            response = await self.send(WriteTxnMarkersRequest(markers=[m for m, _ in batch]))
            answers = [_results(r) for r in response.markers]
        except (BrokerUnreachable, TimeoutError) as exc:
            log.info("markers not delivered (%s); they will be sent again", exc)
            answers = [_all(m, ErrorCode.NETWORK_EXCEPTION) for m, _ in batch]
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)

    def cancel(self) -> None:
        for task in self.in_flight:
            task.cancel()


def _log_still_waiting(intent: MarkerIntent, remaining: set[TopicPartition], errors: Results,
                       waited_s: float) -> None:
    """`errors`: the last round's answers, which need not name every partition still waiting."""
    waiting = ", ".join(f"{t}-{p} ({errors[(t, p)].name if (t, p) in errors else 'no answer'})"
                        for t, p in sorted(remaining))
    log.warning("transactional id %s: markers not written after %.0f s, still retrying: %s",
                intent.transactional_id, waited_s, waiting)


def _results(marker_result: WriteTxnMarkersResponse.WritableTxnMarkerResult) -> Results:
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for t in marker_result.topics for p in t.partitions
    }


def _all(m: Marker, error: ErrorCode) -> Results:
    return {(t.name, i): error for t in m.topics for i in t.partition_indexes}


class MarkerChannel:
    def __init__(
        self, node_id: int, leader_of: Callable[[str, int], BrokerInfo | None], write_local: Send,
        on_written: Callable[[str], None], security: ClientSecurity | None = None,
    ) -> None:
        self.security = security
        self.node_id = node_id
        self._leader_of = leader_of
        self._write_local = write_local
        self.on_written = on_written
        self._destinations: dict[tuple[int, str, int], _Destination] = {}
        self._clients: list[BrokerClient] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, intent: MarkerIntent) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(intent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, intent: MarkerIntent) -> None:
        remaining = set(intent.partitions)
        started = next_log = asyncio.get_running_loop().time()
        while remaining:
            errors = await metrics.marker_round(self._round(intent, remaining))
            for tp, error in errors.items():
                if error in DONE or error in GIVE_UP:
                    remaining.discard(tp)
                if error in GIVE_UP:
                    log.info("transactional id %s: marker for %s-%d refused: %s (the producer or the "
                             "coordinator moved on; dropped)",
                             intent.transactional_id, tp[0], tp[1], error.name)
            if remaining:
                now = asyncio.get_running_loop().time()
                if now - next_log >= STILL_WAITING_LOG_S:
                    next_log = now
                    _log_still_waiting(intent, remaining, errors, now - started)
                await asyncio.sleep(RETRY_BACKOFF_S)
        self.on_written(intent.transactional_id)

    async def _round(self, intent: MarkerIntent, partitions: set[TopicPartition]) -> Results:
        """One attempt at every partition, grouped by the leader the metadata names now."""
        by_leader: dict[BrokerInfo, set[TopicPartition]] = {}
        results: Results = {}
        for tp in partitions:
            leader = self._leader_of(*tp)
            if leader is None:
                results[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(leader, set()).add(tp)
        sends = [self._send_to(b, marker(intent, tps)) for b, tps in by_leader.items()]
        for answer in await asyncio.gather(*sends):
            results.update(answer)
        return results

    def _send_to(self, broker: BrokerInfo, entry: Marker) -> Awaitable[Results]:
        if broker.node_id == self.node_id:
            return self._local(entry)
        return self._destination(broker).submit(entry)

    async def _local(self, entry: Marker) -> Results:
        """This broker's partitions: written at once, without the network or a queue."""
        response = await self._write_local(WriteTxnMarkersRequest(markers=[entry]))
        return _results(response.markers[0])

    def _destination(self, broker: BrokerInfo) -> _Destination:
        key = (broker.node_id, broker.host, broker.port)
        found = self._destinations.get(key)
        if found is None:
            found = self._destinations[key] = _Destination(self._sender(broker))
        return found

    def _sender(self, broker: BrokerInfo) -> Send:
        client = BrokerClient(broker.host, broker.port, f"gregor-markers-{self.node_id}",
                              security=self.security)
        self._clients.append(client)

        async def send(request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
            answer = await client.call(request, WRITE_TXN_MARKERS_VERSION, timeout_s=REQUEST_TIMEOUT_S)
            return cast(WriteTxnMarkersResponse, answer)  # the client decodes the request's response

        return send

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for destination in self._destinations.values():
            destination.cancel()
        await asyncio.gather(*(c.close() for c in self._clients))
