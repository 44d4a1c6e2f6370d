"""Fetch: read stored batches up to the high watermark (read_uncommitted) or the last
stable offset with the aborted transactions of the range (read_committed);
long-poll on appends.

A consumer's fetch session is declined by answering session id 0, so consumers
send full fetch requests; a follower gets an incremental session (KIP-227,
`broker/replication/fetch_sessions.py`): it names only the partitions whose
position moved, and hears only of the partitions with something new; the leader
looks only at the partitions named, changed since, or not yet quiet. A fetch
waits for min_bytes until max_wait_ms, never polling: a consumer's is woken by
appends and by moves of the HW or LSO of the partitions it reads (records become
visible), a follower's by appends only (it hears of a HW move with its next
records or at its max wait, as in Kafka).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka.protocol.consumer import FetchRequest, FetchResponse

from broker import metrics
from broker.api.authorize import authorize, authorize_cluster
from broker.api.partition_view import LogView, PartitionView
from broker.api.registry import Handlers
from broker.handlers.resolve import ZERO_UUID, check_leader_epoch, resolve_partition, topic_name
from broker.replication.fetch_sessions import (
    Cached,
    FetchPartition,
    FetchSession,
    FetchTopic,
    PartitionKey,
    TopicKey,
    topic_key,
)
from broker.replication.replica_manager import Partition
from broker.security.acl import AclOperation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.types import IsolationLevel, NodeId

if TYPE_CHECKING:
    from broker.api.context import RequestContext

API_KEY = ApiKey.FETCH
R = FetchResponse
PartitionData = R.FetchableTopicResponse.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
FINAL_EPOCH = -1  # a fetch that closes its session (or wants none)


@dataclass(frozen=True, slots=True)
class Wanted:
    topic: FetchTopic
    fetch: FetchPartition
    part: Partition | None
    error: ErrorCode
    key: PartitionKey | None = None  # in a fetch session


def _may_read(ctx: RequestContext, topic: FetchTopic, follower: bool) -> bool:
    """Kafka: a follower needs ClusterAction on the cluster, a consumer Read on the topic."""
    if follower:
        return authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    name, _ = topic_name(ctx, topic)
    return name is None or authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)


def _wanted(
    ctx: RequestContext, topics: Iterable[tuple[FetchTopic, list[FetchPartition]]], follower: bool
) -> list[Wanted]:
    """The partitions a sessionless fetch reads: (topic entry, its fetch entries) of the request."""
    result = []
    for topic, fetches in topics:
        if not _may_read(ctx, topic, follower):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result += [Wanted(topic, fetch, None, denied) for fetch in fetches]
            continue
        for fetch in fetches:
            part, error = resolve_partition(ctx, topic, fetch.partition)
            if part is not None:
                error = check_leader_epoch(part, fetch.current_leader_epoch)
            result.append(Wanted(topic, fetch, part, error))
    return result


def _by_id(topic: FetchTopic) -> bool:
    return not topic.topic and topic.topic_id is not None and topic.topic_id != ZERO_UUID


def _still_current(ctx: RequestContext, w: Wanted) -> Wanted:
    """The partition as it is after a wait: its topic may have been deleted (Kafka
    answers UNKNOWN_TOPIC_OR_PARTITION), or deleted and recreated under the same
    name, which makes a topic id from before the wait unknown (UNKNOWN_TOPIC_ID)."""
    if w.part is None:
        return w
    now = ctx.services.partitions.partition(w.part.topic, w.part.index)
    if now is w.part:
        if not now.is_leader:  # leadership lost while the fetch waited
            return Wanted(w.topic, w.fetch, None, ErrorCode.NOT_LEADER_OR_FOLLOWER, w.key)
        return w
    if now is not None and _by_id(w.topic):
        return Wanted(w.topic, w.fetch, None, ErrorCode.UNKNOWN_TOPIC_ID, w.key)
    return Wanted(w.topic, w.fetch, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, w.key)


def _empty(index: int, error: ErrorCode, part: PartitionView | None) -> PartitionData:
    """A partition without records. With an error, Kafka's: offsets -1 (INVALID_HIGH_WATERMARK),
    and no aborted-transactions field but for a partition it does not know (an empty list)."""
    if error != ErrorCode.NONE or part is None:
        return PartitionData(
            partition_index=index, error_code=error, high_watermark=-1, last_stable_offset=-1,
            log_start_offset=-1, aborted_transactions=[] if part is None else None, records=b"",
        )
    return PartitionData(
        partition_index=index, error_code=error, high_watermark=part.log.high_watermark,
        last_stable_offset=part.log.last_stable_offset, log_start_offset=part.log.log_start_offset,
        aborted_transactions=None, records=b"",
    )


def replica_id(request: FetchRequest) -> int:
    """The fetching follower's broker id (v15+: in ReplicaState), -1 for a consumer."""
    state = request.replica_state
    if state is not None and state.replica_id >= 0:
        return int(state.replica_id)
    return int(request.replica_id or -1)


def _diverging(w: Wanted) -> PartitionData.EpochEndOffset | None:
    """Fetch v12+: where a follower's last fetched epoch ends on this leader, if before its fetch offset."""
    last_epoch = w.fetch.last_fetched_epoch
    if w.part is None or last_epoch < 0:
        return None
    plog: LogView = w.part.log
    epoch, end = plog.end_offset_for_epoch(last_epoch)
    if end < w.fetch.fetch_offset or epoch < last_epoch:
        return PartitionData.EpochEndOffset(epoch=epoch, end_offset=end)
    return None


def _read(
    w: Wanted, budget: int, isolation: IsolationLevel, first: bool, follower: bool
) -> tuple[PartitionData, int]:
    """One partition's data: below the high watermark, or below the LSO for read_committed;
    a follower reads to the log end, or learns where its log diverged."""
    index = w.fetch.partition
    if w.part is None or w.error != ErrorCode.NONE:
        return _empty(index, w.error, w.part), 0
    log: LogView = w.part.log
    stable = log.last_stable_offset
    diverging = _diverging(w) if follower else None
    if diverging is not None:
        data = _empty(index, ErrorCode.NONE, w.part)
        data.diverging_epoch = diverging
        return data, 0
    committed = isolation is IsolationLevel.READ_COMMITTED
    upper = log.log_end_offset if follower else stable if committed else log.high_watermark
    max_bytes = min(w.fetch.partition_max_bytes, budget)
    info = log.read(w.fetch.fetch_offset, max_bytes, upper, first, collect_aborted=committed)
    if info.error != ErrorCode.NONE:
        return _empty(index, ErrorCode(info.error), w.part), 0
    aborted = None
    if committed:
        aborted = [
            AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
            for t in info.aborted_transactions or ()
        ]
    data = PartitionData(
        partition_index=index, error_code=ErrorCode.NONE, high_watermark=log.high_watermark,
        last_stable_offset=stable, log_start_offset=log.log_start_offset,
        aborted_transactions=aborted, records=info.records,
    )
    return data, len(info.records)


def _read_all(
    wanted: list[Wanted], request: FetchRequest, follower: bool
) -> tuple[list[PartitionData], int, bool]:
    budget = request.max_bytes
    total = 0
    errors = False
    out = []
    isolation = IsolationLevel.of(request.isolation_level)
    for w in wanted:
        data, size = _read(w, max(budget - total, 0), isolation, total == 0, follower)
        total += size
        errors = errors or data.error_code != ErrorCode.NONE
        out.append(data)
    return out, total, errors


def _response(wanted: list[Wanted], parts: list[PartitionData], session_id: int = 0) -> R:
    by_topic: dict[TopicKey, tuple[FetchTopic, list[PartitionData]]] = {}
    for w, data in zip(wanted, parts, strict=True):
        by_topic.setdefault(topic_key(w.topic), (w.topic, []))[1].append(data)
    topics = [
        R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=partitions)
        for t, partitions in by_topic.values()
    ]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=session_id, responses=topics)


def _session(
    ctx: RequestContext, request: FetchRequest, follower: int
) -> tuple[FetchSession | None, ErrorCode]:
    """The follower's fetch session this request opens or continues (None: a full, sessionless
    fetch), or the error to answer with. Closing a session (epoch -1) leaves a full fetch;
    a consumer's session is declined (session id 0), so it fetches in full."""
    sessions = ctx.services.fetch_sessions
    session_id, epoch = request.session_id, request.session_epoch
    if epoch == FINAL_EPOCH:
        if session_id:
            sessions.close(session_id)
        return None, ErrorCode.NONE
    if session_id == 0:
        if epoch > 0:
            return None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if follower < 0:
            return None, ErrorCode.NONE
        return sessions.create(request, NodeId(follower), ctx.now_ms()), ErrorCode.NONE
    session, error = sessions.lookup(session_id, epoch)
    if session is not None:
        session.update(request)
        session.advance()
    return session, error


def _quiet(session: FetchSession, w: Wanted) -> bool:
    """A session partition with nothing to tell: the follower is at the log end, in the
    leader's latest epoch (or has fetched nothing yet), and has heard the current offsets.
    It is not read at all."""
    if w.part is None or w.error != ErrorCode.NONE:
        return False
    log: LogView = w.part.log
    last_epoch = w.fetch.last_fetched_epoch
    if w.fetch.fetch_offset != log.log_end_offset or (last_epoch >= 0 and last_epoch != log.latest_epoch):
        return False
    sent = session.sent((topic_key(w.topic), w.fetch.partition))
    return (
        sent is not None and sent[0] == log.high_watermark and sent[2] == log.log_start_offset
        and sent[1] == log.last_stable_offset  # the one that costs: asked last
    )


def _changed_only(
    session: FetchSession, wanted: list[Wanted], parts: list[PartitionData]
) -> tuple[list[Wanted], list[PartitionData]]:
    """A session's answer: the partitions read with records, an error, a diverging epoch or
    offsets other than the last answered (every partition when the request opened the
    session); the session remembers what it sent."""
    kept_w, kept_p = [], []
    for w, data in zip(wanted, parts, strict=True):
        key = (topic_key(w.topic), w.fetch.partition)
        sent = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
        diverging = data.diverging_epoch is not None and data.diverging_epoch.epoch >= 0
        if data.records or data.error_code or diverging or session.sent(key) != sent:
            session.answered(key, sent)
            kept_w.append(w)
            kept_p.append(data)
    return kept_w, kept_p


def _resolved(ctx: RequestContext, session: FetchSession, key: PartitionKey, cached: Cached) -> None:
    """A session partition's resolution, kept until the replica manager's generation moves;
    the partition tells the session of its changes from now on."""
    part, error = resolve_partition(ctx, cached.topic, cached.fetch.partition)
    if part is not None:
        error = check_leader_epoch(part, cached.fetch.current_leader_epoch)
        part.watchers[session] = key
    cached.part, cached.error, cached.resolved_at = part, error, session.generation


def _looked_at(
    ctx: RequestContext, session: FetchSession, keys: list[PartitionKey], record: bool
) -> list[Wanted]:
    """The session's partitions a fetch reads, resolved; with `record`, the follower's fetch
    position is recorded for each (the HW may move, the ISR grow)."""
    out = []
    now_ms = ctx.now_ms()
    partitions = ctx.services.partitions
    for key in keys:
        cached = session.partitions.get(key)
        if cached is None:
            continue
        if cached.resolved_at != session.generation:
            _resolved(ctx, session, key, cached)
        w = Wanted(cached.topic, cached.fetch, cached.part, cached.error, key)
        if record and w.part is not None and w.error == ErrorCode.NONE:
            partitions.record_follower_fetch(w.part, session.node, w.fetch.fetch_offset, now_ms)
        out.append(w)
    return out


def _denied(session: FetchSession) -> list[Wanted]:
    """Kafka: a follower without ClusterAction on the cluster reads none of its partitions."""
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return [Wanted(c.topic, c.fetch, None, denied, key) for key, c in session.partitions.items()]


def _quiet_now(session: FetchSession, wanted: list[Wanted], reading: list[Wanted]) -> list[PartitionKey]:
    """The partitions this fetch found quiet, whose follower is in the ISR with no change in
    flight (else each fetch must record it: it may join)."""
    read = {id(w) for w in reading}
    return [
        w.key for w in wanted
        if id(w) not in read and w.key is not None and w.part is not None
        and w.part.leader is not None and w.part.leader.settled(session.node)
    ]


async def _session_fetch(ctx: RequestContext, request: FetchRequest, session: FetchSession) -> R:
    """A follower's fetch in its session: only the partitions named, changed or not yet quiet
    are looked at; a change of a quiet one wakes the wait (`FetchSession.changed`)."""
    partitions = ctx.services.partitions
    keys = session.begin(partitions.generation, ctx.now_ms())
    if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        wanted = _looked_at(ctx, session, keys, record=True)
    else:
        wanted = _denied(session)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while True:
        reading = [w for w in wanted if not _quiet(session, w)]
        parts, total, errors = _read_all(reading, request, True)
        if total >= request.min_bytes or errors or deadline - loop.time() <= 0 or not session.partitions:
            _count(reading, parts, True)
            session.settle(_quiet_now(session, wanted, reading))
            return _response(*_changed_only(session, reading, parts), session.session_id)
        waiter = loop.create_future()
        session.waiters.add(waiter)
        try:
            await _until(waiter, deadline)
        finally:
            session.waiters.discard(waiter)
        wanted += _looked_at(ctx, session, session.woken, record=False)
        session.woken.clear()
        if partitions.generation != session.generation:  # a partition read may be gone since
            wanted = [_still_current(ctx, w) for w in wanted]


async def _until(waiter: asyncio.Future[None], deadline: float) -> None:
    """Wait for `waiter`, which a change resolves, or the deadline does: asyncio.wait_for's
    cancel, extra future and TimeoutError cost every expiring long poll of an idle consumer
    (bench/connections)."""
    expiry = asyncio.get_running_loop().call_at(deadline, _expire, waiter)
    try:
        await waiter
    finally:
        expiry.cancel()


async def handle(ctx: RequestContext, request: FetchRequest) -> R:
    follower = replica_id(request)
    session, error = _session(ctx, request, follower)
    if error != ErrorCode.NONE:
        return R(throttle_time_ms=0, error_code=error, session_id=0, responses=[])
    if session is not None:
        return await _session_fetch(ctx, request, session)
    wanted = _wanted(ctx, [(t, t.partitions) for t in request.topics], follower >= 0)
    if follower >= 0:
        _record_follower(ctx, wanted, follower)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    partitions = ctx.services.partitions
    seen = partitions.generation
    live = [w.part for w in wanted if w.part is not None]
    while True:
        if partitions.generation != seen:  # after a wait: a partition read may be gone since
            seen = partitions.generation
            wanted = [_still_current(ctx, w) for w in wanted]
            live = [w.part for w in wanted if w.part is not None]
        parts, total, errors = _read_all(wanted, request, follower >= 0)
        if total >= request.min_bytes or errors or deadline - loop.time() <= 0 or not live:
            _count(wanted, parts, follower >= 0)
            return _response(wanted, parts)
        waiter = partitions.waiter(live, follower >= 0)
        try:
            await _until(waiter, deadline)
        finally:
            partitions.forget(waiter, live)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _count(wanted: list[Wanted], parts: list[PartitionData], follower: bool) -> None:
    """Bytes out and failures per topic (metrics), once for the answer sent."""
    for w, data in zip(wanted, parts, strict=True):
        if w.part is None:
            continue
        if data.error_code != ErrorCode.NONE:
            metrics.fetch_failed(w.part.topic)
        elif data.records:
            metrics.fetched(w.part.topic, len(data.records), follower)


def _record_follower(ctx: RequestContext, wanted: list[Wanted], node: int) -> None:
    """The fetch offset is the follower's log end: the leader's HW and ISR may move."""
    for w in wanted:
        if w.part is not None and w.error == ErrorCode.NONE:
            ctx.services.partitions.record_follower_fetch(w.part, node, w.fetch.fetch_offset, ctx.now_ms())


VERSIONS = {API_KEY: (4, 18)}
HANDLERS: Handlers = {API_KEY: handle}
