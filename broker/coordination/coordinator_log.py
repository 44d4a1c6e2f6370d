"""A coordinator's writes to the internal partitions it leads, and its loads of them.

Coordinator records count only once replicated (Kafka appends them with acks=all): a
write answers when the high watermark passes it, or with the error that says why not;
the caller replays the record into its machine only then (or, for a record no answer
waits on, as soon as it is appended: the `appended` callback). Each write and each load
carries the partition's leader epoch (the coordinator epoch) it started at, so the
caller can tell a result that belongs to a leadership since lost.

A load waits until the high watermark reaches the log end the new leader found (so a
coordinator acts only on records that a later failover cannot take back), then hands
replays the records, yielding to the event loop every few hundred.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.base.faults import slow_point
from broker.coordination.internal_topics import InternalRecord, read_records
from broker.replication.replica_manager import NotLeader, Partition, replicated
from protocol.errors import ErrorCode
from storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from broker.api.services import PartitionWriter

log = logging.getLogger(__name__)
LOAD_CHUNK = 500  # records replayed between two yields to the event loop


@dataclass(frozen=True, slots=True)
class Written:
    """The outcome of one coordinator write: NONE once replicated."""

    error: ErrorCode
    base_offset: int = -1
    coordinator_epoch: int = -1


class CoordinatorLog:
    """Writes and loads of one internal topic (`__transaction_state`, `__consumer_offsets`)."""

    def __init__(self, replicas: PartitionWriter, topic: str, timeout_s: float) -> None:
        self.replicas = replicas
        self.topic = topic
        self.timeout_s = timeout_s

    def current(self) -> bool:
        """Whether this broker's coordinator state may be read: not once its cluster registration
        may have lapsed, when another broker may lead the partitions by now and hold newer state
        than this memory does (a reader acting on it, e.g. a consumer rewinding to a stale
        committed offset, would undo what the successor accepted)."""
        return self.replicas.may_lead()

    def leader(self, index: int) -> Partition | None:
        """The partition if this broker leads it and may act as its leader."""
        part = self.replicas.led_partition(self.topic, index)
        return part if part is not None and self.replicas.may_lead() else None

    async def write(
        self, index: int, batch: bytes, now_ms: int, appended: Callable[[int], object] | None = None
    ) -> Written:
        """Append `batch` to partition `index` and wait until it is replicated: NONE;
        NOT_LEADER_OR_FOLLOWER when this broker does not (or no longer) lead it;
        REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS(_AFTER_APPEND) when the outcome is open.
        `appended(coordinator_epoch)` runs once the batch is in the leader's log, before the wait."""
        await slow_point(f"{self.topic}-write")
        part = self.leader(index)
        if part is None:
            return Written(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        epoch = part.leader_epoch
        result = self.replicas.append(part, batch, now_ms, AppendOrigin.COORDINATOR)
        if result.error != ErrorCode.NONE:
            return Written(ErrorCode(result.error), coordinator_epoch=epoch)
        if appended is not None:
            appended(epoch)
        [error] = await replicated([(part, result.last_offset + 1)], self.timeout_s)
        return Written(error, result.base_offset, epoch)

    def start_load(
        self, part: Partition, replay: Callable[[InternalRecord], object], loaded: Callable[[float], None],
    ) -> Coroutine[Any, Any, None] | None:
        """Load a partition led from a new epoch, then call `loaded(started)`. A new (empty)
        partition has nothing to replay or wait for: it is loaded at once, so the request that
        created it does not find it loading. Otherwise the work to run as a background task."""
        started = time.monotonic()
        if part.log.log_end_offset == 0:
            loaded(started)
            return None
        return self._load_then(part, replay, loaded, started)

    async def _load_then(
        self, part: Partition, replay: Callable[[InternalRecord], object], loaded: Callable[[float], None],
        started: float,
    ) -> None:
        await slow_point(f"{self.topic}-load")
        if await self.load(part, replay):
            loaded(started)

    async def load(self, part: Partition, replay: Callable[[InternalRecord], object]) -> bool:
        """Replay the partition's committed records, from its start to the log end found on
        becoming leader; False if the leadership of this epoch ended meanwhile. A record
        that cannot be replayed is skipped with a warning: loading never fails on what the
        log holds."""
        epoch = part.leader_epoch
        try:
            await part.until_replicated(part.log.log_end_offset)
        except NotLeader:
            return False
        for count, record in enumerate(read_records(part), 1):
            try:
                replay(record)
            except ValueError as exc:
                log.warning("%s-%d: skipping unreadable record at offset %d: %s",
                            self.topic, part.index, record.offset, exc)
            if count % LOAD_CHUNK == 0:
                await asyncio.sleep(0)
                if part.leader_epoch != epoch or not part.is_leader:
                    return False
        return part.leader_epoch == epoch and part.is_leader
