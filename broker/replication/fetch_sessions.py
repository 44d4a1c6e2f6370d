"""Incremental fetch sessions (KIP-227) for followers, on the leader's side.

A follower's first Fetch (session id 0, epoch 0) names every partition it follows here;
the leader answers in full and with a new session id. After that each Fetch carries the
session id and the next epoch, names only the partitions whose fetch position changed
(and the ones to forget), and the answer holds only the partitions with something new:
records, an error, a diverging epoch, or a high watermark, last stable offset or log
start offset other than the last one sent. The session remembers every partition's last
fetch request, so the leader records the follower's position for all of them at each
Fetch, as for a full request, but reads none that is quiet (the follower at the log end
and told the current offsets). Consumers keep sessionless full fetches.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from kafka.protocol.consumer import FetchRequest

from protocol.errors import ErrorCode

MAX_SESSIONS = 1000
FetchTopic = FetchRequest.FetchTopic
FetchPartition = FetchRequest.FetchTopic.FetchPartition
TopicKey = str | uuid.UUID  # a topic's name (Fetch v12) or id (v13+)
PartitionKey = tuple[TopicKey, int]
Sent = tuple[int, int, int]  # (high watermark, last stable offset, log start offset) last answered


@dataclass
class Cached:
    """One partition of a session: its topic entry and latest fetch entry of the request."""

    topic: FetchTopic
    fetch: FetchPartition
    sent: Sent | None = None


@dataclass
class FetchSession:
    session_id: int
    epoch: int = 1  # the epoch the next Fetch must carry
    partitions: dict[PartitionKey, Cached] = field(default_factory=dict)

    def update(self, request: FetchRequest) -> list[PartitionKey]:
        """Apply a Fetch's partitions and forgotten ones; the keys the request named."""
        named = []
        for topic in request.topics:
            for fetch in topic.partitions:
                key = (topic_key(topic), fetch.partition)
                found = self.partitions.get(key)
                self.partitions[key] = Cached(topic, fetch, found.sent if found else None)
                named.append(key)
        for topic in request.forgotten_topics_data or ():
            name = topic_key(topic)
            for index in topic.partitions:
                self.partitions.pop((name, index), None)
        return named

    def by_topic(self) -> list[tuple[FetchTopic, list[FetchPartition]]]:
        """Every partition's latest fetch entry, grouped under its topic's latest entry."""
        grouped: dict[TopicKey, tuple[FetchTopic, list[FetchPartition]]] = {}
        for (name, _), cached in self.partitions.items():
            entry = grouped.setdefault(name, (cached.topic, []))
            entry[1].append(cached.fetch)
        return list(grouped.values())

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

    def create(self, request: FetchRequest) -> FetchSession:
        session = FetchSession(next(self._ids) & 0x7FFFFFFF or 1)
        session.update(request)
        self._sessions[session.session_id] = session
        while len(self._sessions) > self._capacity:
            self._sessions.popitem(last=False)
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
        self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)
