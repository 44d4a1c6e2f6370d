"""Replica fetchers: a follower pulls its partitions from their leader over Kafka's Fetch.

One `ReplicaFetcher` per leader broker carries every partition this broker
follows there, in one Fetch request at a time (v12: replica id, current
leader epoch, last fetched epoch), in an incremental fetch session (KIP-227):
after the first, full request, a request names only the partitions whose
position changed since the last one (and those to forget), and the answer
holds only the partitions with something new. A session the leader no longer
knows starts over with a full request. Building a request costs the partitions
that may have moved (those in the last answer, followed or dropped since), not
all: every partition's position is compared once a second (`SWEEP_S`) for what
moves without the fetcher (retention raising a log start). Per partition, the
answer is one of:

- data: appended as the leader wrote it (Log.append_as_follower); the
  follower's HW becomes min(leader's HW, own log end);
- a diverging epoch (the follower has data the leader does not): truncate to
  where the two logs agree, rebuilding producer state, then fetch again;
- an epoch or leadership error: the partition waits for the metadata image to
  move it (the fetcher never guesses a leader).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from kafka.protocol.consumer import FetchRequest, FetchResponse

from broker.net.client import BrokerClient, BrokerUnreachable
from broker.replication.write_failures import WriteFailures
from protocol.errors import ErrorCode
from protocol.types import IsolationLevel, TopicPartition
from storage.log import Log, ReplicaDataError

log = logging.getLogger(__name__)
PartitionData = FetchResponse.FetchableTopicResponse.PartitionData

FETCH_VERSION = 12
BACKOFF_S = 0.2
SWEEP_S = 1.0


@dataclass
class FollowedPartition:
    topic: str
    index: int
    log: Log
    leader_epoch: int
    set_high_watermark: Callable[[int], object]  # the partition's own (Partition.set_high_watermark)


def truncation_offset(log_: Log, diverging_epoch: int, diverging_end: int) -> int:
    """Where a follower's log stops agreeing with the leader's (Kafka's rule)."""
    if diverging_end < 0:
        return log_.high_watermark
    epoch, end = log_.end_offset_for_epoch(diverging_epoch)
    if epoch == diverging_epoch:
        return min(end, diverging_end)
    return min(end if end >= 0 else log_.high_watermark, diverging_end, log_.log_end_offset)


Position = tuple[int, int, int, int]  # leader epoch, fetch offset, last fetched epoch, log start


def _position(p: FollowedPartition) -> Position:
    return p.leader_epoch, p.log.log_end_offset, p.log.latest_epoch, p.log.log_start_offset


class FollowerSession:
    """The follower's half of an incremental fetch session with one leader: the session id
    and next epoch, and the position last sent for each partition."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start over: the next request is full and asks for a new session."""
        self.session_id, self.epoch = 0, 0
        self._sent: dict[TopicPartition, Position] = {}

    def next_request(
        self, positions: dict[TopicPartition, Position | None], complete: bool = True
    ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """The partitions to name (position changed, or all in a full request) and to forget.
        `positions`: every partition followed (`complete`), or those that may have moved since
        the last request; None: no longer fetched (dropped, or stalled on an error). A full
        request (no session yet) must be complete."""
        full = self.session_id == 0
        changed = [tp for tp, pos in positions.items()
                   if pos is not None and (full or self._sent.get(tp) != pos)]
        if complete:
            forgotten = [] if full else [tp for tp in self._sent if positions.get(tp) is None]
            self._sent = {tp: pos for tp, pos in positions.items() if pos is not None}
            return changed, forgotten
        forgotten = [tp for tp, pos in positions.items() if pos is None and tp in self._sent]
        for tp in forgotten:
            del self._sent[tp]
        for tp in changed:
            self._sent[tp] = cast(Position, positions[tp])
        return changed, forgotten

    def answered(self, error: ErrorCode, session_id: int) -> bool:
        """The leader's answer to the last request: False when the session is gone (the next
        request starts over in full)."""
        if error != ErrorCode.NONE or session_id == 0:
            self.reset()
            return error == ErrorCode.NONE
        if self.session_id == 0:
            self.session_id = session_id
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1
        return True


class ReplicaFetcher:
    def __init__(
        self, node_id: int, client: BrokerClient, now_ms: Callable[[], int],
        max_wait_ms: int, max_bytes: int = 10 * 1024 * 1024,
        on_progress: Callable[[FollowedPartition], None] = lambda p: None,
        write_failures: WriteFailures | None = None,
    ) -> None:
        self.node_id = node_id
        self._write_failures = write_failures or WriteFailures()
        self.client = client
        self._now_ms = now_ms
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self._on_progress = on_progress
        self.partitions: dict[TopicPartition, FollowedPartition] = {}
        self._stalled: set[TopicPartition] = set()  # waiting for the image after an epoch or leadership error
        self._moved: set[TopicPartition] = set()  # positions that may differ from the last sent
        self._last_sweep = 0.0
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._session = FollowerSession()

    def follow(self, part: FollowedPartition) -> None:
        tp = (part.topic, part.index)
        self.partitions[tp] = part
        self._stalled.discard(tp)
        self._moved.add(tp)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.client.port}")

    def unfollow(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)
        self._stalled.discard((topic, index))
        self._moved.add((topic, index))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.client.close()

    async def _run(self) -> None:
        while True:
            if len(self.partitions) <= len(self._stalled):
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                response = await self.client.call(self._request(), FETCH_VERSION,
                                                  timeout_s=self._max_wait_ms / 1000 + 10)
            except (BrokerUnreachable, TimeoutError) as exc:
                log.info("fetch from broker at %s:%d failed: %s", self.client.host, self.client.port, exc)
                self._session.reset()
                await asyncio.sleep(BACKOFF_S)
                continue
            if not self._session.answered(ErrorCode(response.error_code), response.session_id):
                log.info("fetch session with broker at %s:%d ended (%s); fetching in full",
                         self.client.host, self.client.port, ErrorCode(response.error_code).name)
                await asyncio.sleep(BACKOFF_S)
                continue
            if not self._apply(response):
                await asyncio.sleep(BACKOFF_S)  # a log not written (a full disk) or refusing data

    def _positions(self) -> tuple[dict[TopicPartition, Position | None], bool]:
        """The positions to compare with the last sent: all (a full request, or once every
        `SWEEP_S`), else those that may have moved; and whether they are all."""
        now = asyncio.get_running_loop().time()
        complete = self._session.session_id == 0 or now - self._last_sweep >= SWEEP_S
        keys: Iterable[TopicPartition] = self.partitions if complete else self._moved
        if complete:
            self._last_sweep = now
        positions = {tp: self._position(tp) for tp in keys}
        self._moved = set()
        return positions, complete

    def _position(self, tp: TopicPartition) -> Position | None:
        part = self.partitions.get(tp)
        return None if part is None or tp in self._stalled else _position(part)

    def _request(self) -> FetchRequest:
        cls = FetchRequest
        positions, complete = self._positions()
        changed, forgotten = self._session.next_request(positions, complete)
        by_topic: dict[str, list[FetchRequest.FetchTopic.FetchPartition]] = {}
        for (topic, index) in changed:
            leader_epoch, fetch_offset, last_epoch, log_start = cast(Position, positions[(topic, index)])
            by_topic.setdefault(topic, []).append(cls.FetchTopic.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=fetch_offset,
                last_fetched_epoch=last_epoch, log_start_offset=log_start,
                partition_max_bytes=self._max_bytes,
            ))
        gone: dict[str, list[int]] = {}
        for topic, index in forgotten:
            gone.setdefault(topic, []).append(index)
        return cls(
            replica_id=self.node_id, max_wait_ms=self._max_wait_ms, min_bytes=1,
            max_bytes=self._max_bytes, isolation_level=IsolationLevel.READ_UNCOMMITTED,
            session_id=self._session.session_id, session_epoch=self._session.epoch,
            topics=[cls.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[cls.ForgottenTopic(topic=t, partitions=ps) for t, ps in gone.items()],
            rack_id="",
        )

    def _apply(self, response: FetchResponse) -> bool:
        """Apply a Fetch answer; False if a log could not be written or refused the
        leader's data (the loop then backs off instead of asking again at once)."""
        written = True
        for topic in response.responses:
            for data in topic.partitions:
                part = self.partitions.get((topic.topic, data.partition_index))
                if part is None:
                    continue
                self._moved.add((part.topic, part.index))
                try:
                    written = self._apply_partition(part, data) and written
                except OSError as exc:
                    self._write_failures.failed((part.topic, part.index), exc)
                    written = False
        return written

    def _apply_partition(self, part: FollowedPartition, data: PartitionData) -> bool:
        """Apply one partition's answer; False if its log refused the data."""
        error = ErrorCode(data.error_code)
        if error != ErrorCode.NONE:
            self._on_error(part, error)
            return True
        diverging = data.diverging_epoch
        if diverging is not None and diverging.epoch >= 0:
            self._truncate(part, truncation_offset(part.log, diverging.epoch, diverging.end_offset))
            return True
        try:
            if data.records:
                part.log.append_as_follower(data.records, self._now_ms())
                self._write_failures.succeeded((part.topic, part.index))
        except ReplicaDataError as exc:
            log.warning("%s", exc)
            return False
        part.set_high_watermark(min(data.high_watermark, part.log.log_end_offset))
        self._on_progress(part)
        return True

    def _truncate(self, part: FollowedPartition, offset: int) -> None:
        dropped = part.log.log_end_offset - offset
        log.info("partition %s-%d: truncating to %d (%d offsets the leader does not have)",
                 part.topic, part.index, offset, max(0, dropped))
        part.log.truncate_to(offset, self._now_ms())

    def _on_error(self, part: FollowedPartition, error: ErrorCode) -> None:
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._truncate(part, part.log.high_watermark)
            return
        log.info("partition %s-%d: leader answered %s; waiting for new metadata",
                 part.topic, part.index, error.name)
        self._stalled.add((part.topic, part.index))
