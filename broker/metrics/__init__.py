"""Prometheus metrics for one broker process.

Most of what is reported is read at scrape time from the broker's state (collectors.py).
What must be counted as it happens goes through the hook functions below, each one call
placed in the code it measures; they cost a dict lookup and a few additions.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from broker.metrics.request_log import error_codes
from broker.metrics.stats import STATS, clock
from coordinator.transaction.state import TxnState
from protocol.errors import ErrorCode
from protocol.messages import Response

if TYPE_CHECKING:
    from broker.security.acl import ResourceType
    from coordinator.transaction import TxnMetadata
    from protocol.types import TopicPartition

__all__ = [
    "STATS", "authentication_failed", "authorization_denied",
    "accept_blocked", "accept_throttled", "clock", "connection_opened", "connection_refused",
    "coordinator_loaded", "fetch_failed",
    "fetched",
    "marker_round", "produce_failed", "produced", "rebalance_completed", "request_done", "txn_parked",
    "txn_transition",
]
PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
MS = 1000.0


# -- requests (broker.front.connection) -----------------------------------------------------


def request_done(api_key: int, version: int, received: float, started: float, response: Response) -> None:
    """A request answered: `received` when its frame was read, `started` when its handler ran."""
    now = time.monotonic()
    api = STATS.apis.get((api_key, version)) or STATS.api(api_key, version)
    api.requests += 1
    api.times.total.observe((now - received) * MS)
    api.times.queue.observe((started - received) * MS)
    if response is not None:
        _count_errors(api_key, response)


def _count_errors(api_key: int, response: Response) -> None:
    errors = STATS.errors
    if api_key == PRODUCE:
        for t in response.responses:
            for p in t.partition_responses:
                errors[(api_key, p.error_code)] += 1
    elif api_key == FETCH:
        errors[(api_key, response.error_code)] += 1
        for t in response.responses:
            for p in t.partitions:
                errors[(api_key, p.error_code)] += 1
    elif api_key == METADATA:  # every topic and partition, without walking each field of each
        errors[(api_key, response.error_code)] += 1
        for t in response.topics:
            errors[(api_key, t.error_code)] += 1
            for p in t.partitions:
                errors[(api_key, p.error_code)] += 1
    elif api_key == API_VERSIONS:  # each new connection's first request: its api keys have no errors
        errors[(api_key, response.error_code)] += 1
    else:
        for code, n in error_codes(response).items():
            errors[(api_key, code)] += n


def connection_opened(listener: str, protocol: str) -> None:
    """A client connected to `listener`, whose security protocol is `protocol`."""
    STATS.connections_created += 1
    STATS.connections_by_listener[(listener, protocol)] += 1


def connection_refused(listener: str) -> None:
    """A connection closed at once: its address was at `max.connections.per.ip`."""
    STATS.connections_refused[listener] += 1


def accept_throttled(listener: str, throttle_ms: int) -> None:
    """An accept waited `throttle_ms` for `max.connection.creation.rate`."""
    STATS.accept_throttle_ms[listener] += throttle_ms


def accept_blocked(listener: str, seconds: float) -> None:
    """The acceptor of `listener` waited `seconds` for a connection to close (`max.connections`)."""
    STATS.accept_blocked_s[listener] += seconds


def authentication_failed(listener: str) -> None:
    """A SASL authentication or a client certificate was refused on `listener`."""
    STATS.authentication_failures[listener] += 1


def authorization_denied(resource_type: ResourceType) -> None:
    """The authorizer said no (`resource_type` a ResourceType)."""
    STATS.authorization_denials[resource_type.name] += 1


# -- produce and fetch (broker.handlers) ------------------------------------------------


def produced(topic: str, size: int, records: int) -> None:
    t = STATS.topics.get(topic) or STATS.topic(topic)
    t.bytes_in += size
    t.messages_in += records


def produce_failed(topic: str) -> None:
    (STATS.topics.get(topic) or STATS.topic(topic)).failed_produce += 1


def fetched(topic: str, size: int, follower: bool) -> None:
    t = STATS.topics.get(topic) or STATS.topic(topic)
    if follower:
        t.replication_bytes_out += size
    else:
        t.bytes_out += size


def fetch_failed(topic: str) -> None:
    (STATS.topics.get(topic) or STATS.topic(topic)).failed_fetch += 1


# -- coordinators -----------------------------------------------------------------------


def txn_transition(transit: TxnMetadata | None) -> None:
    """The transaction coordinator wrote (and replayed) a state: Prepare* starts the
    completion clock, Complete* stops it and counts the transaction."""
    if transit is None:
        return
    txn = STATS.txn
    tid = transit.transactional_id
    if transit.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        txn.prepared_at[tid] = time.monotonic()
    elif transit.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        result = "commit" if transit.state is TxnState.COMPLETE_COMMIT else "abort"
        txn.completed[result] += 1
        prepared = txn.prepared_at.pop(tid, None)
        if prepared is not None:
            txn.completion_ms[result].observe((time.monotonic() - prepared) * MS)


def txn_parked() -> None:
    """A transaction coordinator request waits for its id's previous transaction to complete."""
    STATS.txn.parked += 1


async def marker_round(
    results: Awaitable[dict[TopicPartition, ErrorCode]],
) -> dict[TopicPartition, ErrorCode]:
    """Times one round of marker deliveries (MarkerChannel) and counts its failures."""
    started = time.monotonic()
    answer = await results
    STATS.txn.marker_round_ms.observe((time.monotonic() - started) * MS)
    for error in answer.values():
        if error != ErrorCode.NONE:
            STATS.txn.marker_failures[error.name] += 1
    return answer


def coordinator_loaded(kind: str, started: float) -> None:
    """A coordinator ("transaction" or "group") loaded one partition, begun at `clock()`."""
    STATS.load_ms[kind].observe((time.monotonic() - started) * MS)


def rebalance_completed() -> None:
    STATS.rebalances += 1


def flushed(seconds: float) -> None:
    """storage.log's flush listener: one fsync of a log took `seconds`."""
    STATS.flush_ms.observe(seconds * MS)
