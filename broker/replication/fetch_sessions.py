"""Incremental fetch sessions (KIP-227) for followers, on the leader's side.

A follower's first Fetch (session id 0, epoch 0) names every partition it follows here;
the leader answers in full and with a new session id. After that each Fetch carries the
session id and the next epoch, names only the partitions whose fetch position changed
(and the ones to forget), and the answer holds only the partitions with something new:
records, an error, a diverging epoch, or a high watermark, last stable offset or log
start offset other than the last one sent.

A fetch costs what changed, not how many partitions the session holds: a partition found
*quiet* (the follower at the log end, told the current offsets, in the ISR with no change
in flight) is not looked at again, not even to record the follower's fetch, until it is
named again or the partition tells the session it changed (`Partition.watchers`: records
appended, the HW, LSO or log start moved; an append also wakes the session's waiting
fetch and records that the follower was caught up at its last fetch, which is what Kafka's
lastCaughtUpTime holds). What a fetch resolved is kept until the replica manager's
generation moves (partitions added or removed, a leadership change), and once a second
every partition is looked at anyway, for what changes without telling (retention moving a
log start). Consumers keep sessionless full fetches.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from kafka.protocol.consumer import FetchRequest

from protocol.errors import ErrorCode
from protocol.types import NodeId

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition

MAX_SESSIONS = 1000
IDLE_EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms
SWEEP_MS = 1000  # every partition of a session is looked at this often, changed or not
UNRESOLVED = -1
FetchTopic = FetchRequest.FetchTopic
FetchPartition = FetchRequest.FetchTopic.FetchPartition
TopicKey = str | uuid.UUID  # a topic's name (Fetch v12) or id (v13+)
PartitionKey = tuple[TopicKey, int]
Sent = tuple[int, int, int]  # (high watermark, last stable offset, log start offset) last answered


@dataclass
class Cached:
    """One partition of a session: its topic entry and latest fetch entry of the request, and
    the partition they resolved to (or the error) at generation `resolved_at`."""

    topic: FetchTopic
    fetch: FetchPartition
    sent: Sent | None = None
    part: Partition | None = None
    error: ErrorCode = ErrorCode.NONE
    resolved_at: int = UNRESOLVED


@dataclass(eq=False)
class FetchSession:
    session_id: int
    node: NodeId = NodeId(-1)  # the follower
    epoch: int = 1  # the epoch the next Fetch must carry
    partitions: dict[PartitionKey, Cached] = field(default_factory=dict)
    active: set[PartitionKey] = field(default_factory=set)  # looked at by the next fetch
    quiet: set[PartitionKey] = field(default_factory=set)  # not, until they change
    woken: list[PartitionKey] = field(default_factory=list)  # quiet ones changed since `begin`
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    generation: int = UNRESOLVED  # the replica manager's, when the session last resolved all
    last_fetch_ms: int = 0
    last_sweep_ms: int = 0
    closed: bool = False

    def update(self, request: FetchRequest) -> list[PartitionKey]:
        """Apply a Fetch's partitions and forgotten ones; the keys the request named."""
        named = []
        for topic in request.topics:
            for fetch in topic.partitions:
                key = (topic_key(topic), fetch.partition)
                found = self.partitions.get(key)
                self.partitions[key] = Cached(topic, fetch, found.sent if found else None)
                self.quiet.discard(key)
                self.active.add(key)
                named.append(key)
        for topic in request.forgotten_topics_data or ():
            name = topic_key(topic)
            for index in topic.partitions:
                self._forget((name, index))
        return named

    def _forget(self, key: PartitionKey) -> None:
        cached = self.partitions.pop(key, None)
        if cached is not None and cached.part is not None:
            cached.part.watchers.pop(self, None)
        self.active.discard(key)
        self.quiet.discard(key)

    def close(self) -> None:
        """The session ends: its partitions stop telling it of their changes."""
        self.closed = True
        for key in list(self.partitions):
            self._forget(key)

    def begin(self, generation: int, now_ms: int) -> list[PartitionKey]:
        """A fetch starts: the partitions it looks at (every one after a generation change,
        when each is resolved again, once every `SWEEP_MS`, and when the clock was set back)."""
        if generation != self.generation or not 0 <= now_ms - self.last_sweep_ms < SWEEP_MS:
            if generation != self.generation:
                for cached in self.partitions.values():
                    cached.resolved_at = UNRESOLVED
            self.generation, self.last_sweep_ms = generation, now_ms
            self.active.update(self.quiet)
            self.quiet.clear()
        self.last_fetch_ms = now_ms
        self.woken.clear()
        return list(self.active)

    def settle(self, keys: list[PartitionKey]) -> None:
        """The fetch found these quiet: skipped from now on until they change."""
        self.active.difference_update(keys)
        self.quiet.update(keys)

    def changed(self, key: object, part: Partition, appended: bool) -> bool:
        """`Partition.watchers`: `part`, which the session reads as `key`, changed."""
        mine = cast(PartitionKey, key)  # the key the session registered
        cached = self.partitions.get(mine)
        if self.closed or cached is None or cached.part is not part:
            return False
        if mine in self.quiet:
            self.quiet.discard(mine)
            self.active.add(mine)
            self.woken.append(mine)
            if appended and part.leader is not None:
                part.leader.caught_up(self.node, self.last_fetch_ms)
        if appended:
            for waiter in self.waiters:
                if not waiter.done():
                    waiter.set_result(None)
        return True

    def sent(self, key: PartitionKey) -> Sent | None:
        """The offsets last answered for a partition (None: never, or not in the session)."""
        cached = self.partitions.get(key)
        return cached.sent if cached is not None else None

    def answered(self, key: PartitionKey, sent: Sent) -> None:
        cached = self.partitions.get(key)
        if cached is not None:
            cached.sent = sent

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1


def topic_key(topic: FetchTopic | FetchRequest.ForgottenTopic) -> TopicKey:
    """A request topic's identity: its name (v12) or its id (v13+)."""
    return topic.topic or topic.topic_id


class FetchSessionCache:
    """The leader's sessions, oldest evicted first when there are more than `capacity`."""

    def __init__(self, capacity: int = MAX_SESSIONS) -> None:
        self._capacity = capacity
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 20))

    def create(self, request: FetchRequest, node: NodeId, now_ms: int) -> FetchSession:
        """A new session; sessions unused for `IDLE_EVICTION_MS` (a follower that started
        over) and the least recently used past the capacity are closed."""
        session = FetchSession(next(self._ids) & 0x7FFFFFFF or 1, node, last_fetch_ms=now_ms)
        session.update(request)
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if len(self._sessions) < self._capacity and now_ms - oldest.last_fetch_ms < IDLE_EVICTION_MS:
                break
            del self._sessions[oldest.session_id]
            oldest.close()
        self._sessions[session.session_id] = session
        return session

    def lookup(self, session_id: int, epoch: int) -> tuple[FetchSession | None, ErrorCode]:
        """The session a Fetch continues, or the error to answer it with."""
        session = self._sessions.get(session_id)
        if session is None:
            return None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if epoch != session.epoch:
            return None, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        self._sessions.move_to_end(session_id)
        return session, ErrorCode.NONE

    def close(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def __len__(self) -> int:
        return len(self._sessions)
