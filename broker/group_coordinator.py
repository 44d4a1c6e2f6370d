"""The group coordinator's I/O edge around the pure GroupCoordinatorMachine.

Operations ask the machine for a Result, append its records to the group's
`__consumer_offsets` partition (as a transactional batch for TxnOffsetCommit),
replay them, and answer. Parked JoinGroup/SyncGroup requests wait on futures
that completions resolve; the machine's deadlines arm one loop timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.context import now_ms
from broker.internal_topics import read_records, record_batch
from coordinator.group import (
    Completion,
    GroupConfig,
    GroupCoordinatorMachine,
    JoinRequest,
    JoinResponse,
    Kind,
    Result,
    SyncRequest,
    SyncResponse,
)
from coordinator.transaction import append_error_to_coordinator_error
from protocol.errors import ErrorCode
from protocol.group_log import GroupMetadataKey, OffsetCommitKey, decode_key
from protocol.record_batch import ControlType
from storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from broker.replica_manager import Partition
    from broker.server import Broker

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
NO_PRODUCER = (-1, -1)
WaiterKey = tuple[str, str, Kind]


def group_config(config: Any) -> GroupConfig:
    return GroupConfig(
        num_partitions=int(config["offsets.topic.num.partitions"]),
        min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
        max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
        initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
        max_group_size=int(config["group.max.size"]),
        offset_metadata_max_bytes=int(config["offset.metadata.max.bytes"]),
        offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60_000,
    )


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = group_config(broker.config)
        self.machine = GroupCoordinatorMachine(self.config)
        broker.replicas.leadership_listeners.append(self.on_leadership)
        self._waiters: dict[WaiterKey, asyncio.Future[Any]] = {}
        self._loaded = False
        self._loaded_epochs: dict[int, int] = {}  # partition -> leader epoch it was loaded at
        self._timer: asyncio.TimerHandle | None = None
        self._expiry: asyncio.Task[None] | None = None

    # -- loading -----------------------------------------------------------------------

    async def start(self) -> None:
        if self.broker.topics.get(OFFSETS_TOPIC) is not None:
            self._load()
        self._expiry = asyncio.create_task(self._expire_offsets_loop())

    def coordinator_partition(self, key: str) -> tuple[str, int]:
        """The internal partition whose leader coordinates `key` (FindCoordinator)."""
        return OFFSETS_TOPIC, self.machine.partition_for(key)

    def ensure_loaded(self) -> ErrorCode:
        if self._loaded:
            return ErrorCode.NONE
        if self.broker.topics.get(OFFSETS_TOPIC) is None:
            result = self.broker.topics.create_internal(
                OFFSETS_TOPIC,
                self.config.num_partitions,
                int(self.broker.config["offsets.topic.replication.factor"]),
                {"cleanup.policy": "compact",
                 "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"])},
            )
            if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._load()
        return ErrorCode.NONE

    def _load(self) -> None:
        """Every partition of the topic this broker leads and has not loaded at its epoch."""
        for index in range(self.config.num_partitions):
            part = self.broker.replicas.led_partition(OFFSETS_TOPIC, index)
            if part is not None:
                self._load_partition(part)
        self._loaded = True
        log.info("loaded %d groups from %s", len(self.machine.groups), OFFSETS_TOPIC)
        self._arm_timer()

    def _load_partition(self, part: Partition) -> None:
        index = part.index
        if self._loaded_epochs.get(index) == part.leader_epoch:
            return
        self.machine.begin_load(index, part.leader_epoch)
        for record in read_records(part):
            try:
                self._replay_loaded(index, record)
            except ValueError as exc:  # start-up never fails on what the log holds
                log.warning("%s-%d: skipping unreadable record at offset %d: %s",
                            OFFSETS_TOPIC, index, record.offset, exc)
        self.machine.finish_load(index, now_ms())
        self._loaded_epochs[index] = part.leader_epoch

    def on_leadership(self, part: Partition, leading: bool) -> None:
        """Coordinators follow the leadership of their `__consumer_offsets` partitions; groups
        of a partition lost are unloaded and their parked requests answered NOT_COORDINATOR."""
        if part.topic != OFFSETS_TOPIC:
            return
        if leading:
            self._loaded = True  # the topic exists and this broker coordinates some of it
            self._load_partition(part)
            self._arm_timer()
            log.info("%s-%d: now coordinating its groups (epoch %d)", OFFSETS_TOPIC, part.index,
                     part.leader_epoch)
        else:
            self._loaded_epochs.pop(part.index, None)
            self._deliver(self.machine.unload(part.index))
            log.info("%s-%d: no longer coordinating its groups", OFFSETS_TOPIC, part.index)

    def _replay_loaded(self, index: int, record: Any) -> None:
        if record.control is not None:
            self.machine.complete_transaction(index, record.producer_id, record.control == ControlType.COMMIT)
        elif record.key is not None:
            pid = record.producer_id if record.transactional else -1
            self.machine.replay(record.key, record.value, offset=record.offset, producer_id=pid)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._expiry is not None:
            self._expiry.cancel()
        for future in self._waiters.values():
            if not future.done():
                future.cancel()

    # -- persisting results ------------------------------------------------------------------

    def persist(self, result: Result[Any], producer: tuple[int, int] = NO_PRODUCER) -> ErrorCode:
        """Append the result's records to their groups' partitions, replay them, deliver
        completions, re-arm the timer; the append error, if any."""
        completions = list(result.completions)
        error = ErrorCode.NONE
        by_group: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for key, value in result.records:
            by_group.setdefault(_group_of(key), []).append((key, value))
        for group_id, records in by_group.items():
            error = self._append(group_id, tuple(records), producer, completions) or error
        self._deliver(completions)
        self._arm_timer()
        return error

    def _append(
        self,
        group_id: str,
        records: tuple[tuple[bytes, bytes | None], ...],
        producer: tuple[int, int],
        completions: list[Completion],
    ) -> ErrorCode:
        now = now_ms()
        part = self.broker.replicas.led_partition(OFFSETS_TOPIC, self.machine.partition_for(group_id))
        pid, epoch = producer
        error = ErrorCode.NOT_COORDINATOR
        if part is not None:
            batch = record_batch(list(records), now, pid, epoch, transactional=pid >= 0)
            appended = self.broker.replicas.append(part, batch, now, AppendOrigin.COORDINATOR)
            error = ErrorCode(appended.error)
        if error != ErrorCode.NONE:
            completions.extend(self.machine.write_failed(records, error, now))
            return append_error_to_coordinator_error(error)
        for i, (key, value) in enumerate(records):
            completions.extend(
                self.machine.replay(key, value, offset=appended.base_offset + i, producer_id=pid, now_ms=now)
            )
        return ErrorCode.NONE

    def _deliver(self, completions: Iterable[Completion]) -> None:
        for completion in completions:
            future = self._waiters.pop((completion.group_id, completion.member_id, completion.kind), None)
            if future is not None and not future.done():
                future.set_result(completion.response)

    def _park(self, key: WaiterKey) -> asyncio.Future[Any]:
        superseded = self._waiters.pop(key, None)
        if superseded is not None and not superseded.done():
            error = ErrorCode.REBALANCE_IN_PROGRESS
            superseded.set_result(JoinResponse(error) if key[2] is Kind.JOIN else SyncResponse(error))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        return future

    # -- timers --------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.machine.next_deadline_ms()
        if deadline is not None:
            delay = max(0.0, (deadline - now_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.persist(self.machine.on_timer(now_ms()))

    async def _expire_offsets_loop(self) -> None:
        interval = int(self.broker.config["offsets.retention.check.interval.ms"]) / 1000
        while True:
            await asyncio.sleep(interval)
            if self._loaded:
                self.persist(self.machine.expire_offsets(now_ms()))

    # -- operations with parked answers -------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResponse:
        result = self.machine.join_group(request, now_ms())
        answer = await self._answer(request.group_id, Kind.JOIN, result)
        if not isinstance(answer, JoinResponse):
            return JoinResponse(answer)
        if answer.error == ErrorCode.NONE and answer.member_id == answer.leader:
            log.info("group %s: generation %d with %d members, leader %s, protocol %s",
                     request.group_id, answer.generation_id, len(answer.members), answer.leader,
                     answer.protocol_name)
        return answer

    async def sync_group(self, request: SyncRequest) -> SyncResponse:
        result = self.machine.sync_group(request, now_ms())
        answer = await self._answer(request.group_id, Kind.SYNC, result)
        return answer if isinstance(answer, SyncResponse) else SyncResponse(answer)

    async def _answer(self, group_id: str, kind: Kind, result: Result[Any]) -> Any:
        """The caller's own answer, or (parked) the completion that answers it later;
        an ErrorCode when the records could not be written."""
        parked = None
        if result.response is None:
            parked = self._park((group_id, result.awaits or "", kind))
        error = self.persist(result)
        if parked is None:
            return result.response if error == ErrorCode.NONE else error
        return await parked

    # -- markers ---------------------------------------------------------------------------

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker landed in `__consumer_offsets`-`partition`."""
        if self._loaded:
            self.machine.complete_transaction(partition, producer_id, commit)


def _group_of(key: bytes) -> str:
    decoded = decode_key(key)
    assert isinstance(decoded, GroupMetadataKey | OffsetCommitKey)
    return decoded.group
