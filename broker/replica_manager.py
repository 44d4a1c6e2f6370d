"""Partitions this broker hosts: appends, reads, and the waiters woken by appends.

Single-node for now: this broker leads every partition, the high watermark is
the log end offset. Delayed fetches and acks=all produces wait on futures
resolved here, never on sleeping loops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.record_batch import BatchHeader
from storage.log import AppendResult, Log, MarkerResult
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    leader_epoch: int = 0
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    def wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


class ReplicaManager:
    def __init__(self, log_manager: LogManager, node_id: int) -> None:
        self.log_manager = log_manager
        self.node_id = node_id
        self._partitions: dict[TopicPartition, Partition] = {}

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions_of(self, topic: str) -> list[Partition]:
        return [p for (t, _), p in self._partitions.items() if t == topic]

    def all_partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def make_leader(self, topic: str, index: int, config: LogConfig, epoch: int = 0) -> Partition:
        existing = self._partitions.get((topic, index))
        if existing is not None:
            return existing
        log_ = self.log_manager.get_log(topic, index) or self.log_manager.create_log(
            topic, index, config
        )
        log_.update_high_watermark(log_.log_end_offset)  # sole replica: HW = LEO
        part = Partition(topic, index, log_, epoch)
        self._partitions[(topic, index)] = part
        return part

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self._partitions if k[0] == topic]:
            part = self._partitions.pop(key)
            part.wake()
            self.log_manager.delete_log(topic, key[1])

    def update_config(self, topic: str, config: LogConfig) -> None:
        self.log_manager.update_config(topic, config)

    def append(
        self, part: Partition, records: bytes, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT,
        header: BatchHeader | None = None,
    ) -> AppendResult:
        result = part.log.append_as_leader(records, part.leader_epoch, now_ms, origin, header)
        if result.error == 0:
            part.log.update_high_watermark(part.log.log_end_offset)
            part.wake()
        return result

    def append_txn_marker(
        self, part: Partition, producer_id: int, producer_epoch: int, commit: bool,
        coordinator_epoch: int, now_ms: int,
    ) -> MarkerResult:
        """A COMMIT/ABORT marker; the LSO may move, so read_committed fetches wake."""
        result = part.log.append_txn_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, part.leader_epoch, now_ms
        )
        if result.error == 0:
            part.log.update_high_watermark(part.log.log_end_offset)
            part.wake()
        return result

    def waiter(self, parts: Iterable[Partition]) -> asyncio.Future[None]:
        """A future resolved by the next append to any of the partitions."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for part in parts:
            part.waiters.add(future)
        return future

    def forget(self, future: asyncio.Future[None], parts: Iterable[Partition]) -> None:
        for part in parts:
            part.waiters.discard(future)
