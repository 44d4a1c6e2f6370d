"""The group coordinator's I/O edge around the pure GroupCoordinatorMachine.

Operations ask the machine for a Result, append its records to the group's
`__consumer_offsets` partition (as a transactional batch for TxnOffsetCommit),
wait until they are replicated (the CoordinatorLog), replay them, and answer;
the handlers call these operations, never the machine. Partitions load in the
background as this broker becomes their leader. Parked JoinGroup/SyncGroup requests wait on futures
that completions resolve; the machine's deadlines arm one loop timer. The machine's time is
`steady_ms`: a step of the wall clock expires no member and keeps no dead one alive.
Batches appended carry the wall clock's `now_ms`, as every append does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from broker import metrics
from broker.base.clock import now_ms, steady_ms
from broker.coordination.coordinator_log import CoordinatorLog
from broker.coordination.internal_topics import InternalRecord, record_batch
from broker.coordination.runtime import CoordinatorRuntime, InternalTopic
from coordinator.group import (
    Completion,
    DescribedGroup,
    GroupConfig,
    GroupCoordinatorMachine,
    JoinRequest,
    JoinResponse,
    Kind,
    LeaveMember,
    LeaveResponse,
    ListedGroup,
    OffsetCommitInput,
    OffsetDeleteResult,
    OffsetFetchResult,
    Result,
    SyncRequest,
    SyncResponse,
)
from coordinator.group.assignors import TopicInfo, TopicsImage
from coordinator.group.consumer_types import (
    ConsumerConfig,
    DescribedConsumerGroup,
    HeartbeatRequest,
    HeartbeatResponse,
)
from coordinator.group.types import UNKNOWN_MEMBER_ID
from coordinator.transaction import append_error_to_coordinator_error
from protocol.consumer_group_log import RecordType, decode_consumer_key
from protocol.errors import ErrorCode
from protocol.group_log import GroupMetadataKey, OffsetCommitKey, decode_key
from protocol.internal_topics import OFFSETS_TOPIC
from protocol.record_batch import ControlType
from protocol.types import ProducerId, TopicId, TopicPartition

if TYPE_CHECKING:
    from broker.api.services import Topics
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)
GROUP_MEMBERS_LOGGED = 5  # of a group whose JoinGroup refusal is logged
NO_PRODUCER = (-1, -1)
WaiterKey = tuple[str, str, Kind]
_K = TypeVar("_K")
Answer = TypeVar("Answer", JoinResponse, SyncResponse)  # what a JoinGroup / SyncGroup is answered


def consumer_config(config: BrokerConfig) -> ConsumerConfig:
    return ConsumerConfig(
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        session_timeout_ms=config.group_consumer_session_timeout_ms,
        max_size=config.group_consumer_max_size,
        assignment_interval_ms=config.group_consumer_assignment_interval_ms,
        assignors=tuple(config.group_consumer_assignors.split(",")),
        migration_policy=config.group_consumer_migration_policy,
    )


def group_config(config: BrokerConfig) -> GroupConfig:
    return GroupConfig(
        num_partitions=config.offsets_topic_num_partitions,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        max_group_size=config.group_max_size,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        consumer=consumer_config(config),
    )


class GroupCoordinator:
    """The group coordinator's I/O edge: `log` is its `__consumer_offsets` partitions, whose
    leadership it follows (`on_leadership`, called as this broker gains or loses one)."""

    def __init__(self, config: BrokerConfig, log: CoordinatorLog, topics: Topics) -> None:
        self.settings = config
        self.topics = topics
        self.config = group_config(config)
        self.machine = GroupCoordinatorMachine(self.config)
        self.log = log
        self.runtime = CoordinatorRuntime(log, topics, InternalTopic(
            OFFSETS_TOPIC, self.config.num_partitions, config.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)},
        ), self)
        self.on_leadership = self.runtime.on_leadership
        self.ensure_topic = self.runtime.ensure_topic
        self._waiters: dict[WaiterKey, asyncio.Future[JoinResponse | SyncResponse]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._expiry: asyncio.Task[None] | None = None

    # -- loading -----------------------------------------------------------------------

    async def start(self) -> None:
        self._expiry = asyncio.create_task(self._expire_offsets_loop())

    def coordinator_partition(self, key: str) -> TopicPartition:
        """The internal partition whose leader coordinates `key` (FindCoordinator)."""
        return OFFSETS_TOPIC, self.machine.partition_for(key)

    def partition_for(self, group_id: str) -> int:
        return self.machine.partition_for(group_id)

    def group_states(self) -> list[str]:
        """The state of every group this broker coordinates (the metrics' gauge)."""
        return [g.state.value for g in self.machine.groups.values()]

    def coordinator_epoch(self, index: int) -> int | None:
        return self.machine.coordinator_epoch(index)

    def begin_load(self, index: int, epoch: int) -> None:
        self.machine.begin_load(index, epoch)

    def unload(self, index: int) -> None:
        """The partition's groups go; their parked requests are answered NOT_COORDINATOR."""
        self._deliver(self.machine.unload(index))
        log.info("%s-%d: no longer coordinating its groups", OFFSETS_TOPIC, index)

    def loaded(self, index: int, epoch: int, started: float) -> None:
        if self.machine.coordinator_epoch(index) != epoch:
            return
        self.machine.finish_load(index, steady_ms())
        metrics.coordinator_loaded("group", started)
        self._arm_timer()
        log.info("%s-%d: now coordinating its groups (coordinator epoch %d, loaded in %.0f ms)",
                 OFFSETS_TOPIC, index, epoch, (time.monotonic() - started) * 1000)

    def replay_loaded(self, record: InternalRecord, index: int, epoch: int) -> None:
        if self.machine.coordinator_epoch(index) != epoch:
            return
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
        self.runtime.stop()
        for future in self._waiters.values():
            if not future.done():
                future.cancel()

    # -- persisting results ------------------------------------------------------------------

    async def persist(self, result: Result[Any], producer: tuple[int, int] = NO_PRODUCER) -> ErrorCode:
        """Append the result's records to their groups' partitions, wait until they are
        replicated, replay them, deliver completions, re-arm the timer; the append error, if any."""
        by_group: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for key, value in result.records:
            by_group.setdefault(_group_of(key), []).append((key, value))
        self._deliver(result.completions)
        errors = await asyncio.gather(
            *(self._append(group_id, tuple(records), producer) for group_id, records in by_group.items())
        )
        self._arm_timer()
        return next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)

    async def _append(
        self, group_id: str, records: tuple[tuple[bytes, bytes | None], ...], producer: tuple[int, int]
    ) -> ErrorCode:
        now = now_ms()  # the batch's and the append's time: the wall clock's, as every append's
        index = self.machine.partition_for(group_id)
        pid, epoch = producer
        batch = record_batch(list(records), now, pid, epoch, transactional=pid >= 0)
        written = await self.log.write(index, batch, now)
        epoch_now = self.machine.coordinator_epoch(index)
        if written.coordinator_epoch >= 0 and epoch_now != written.coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR  # unloaded meanwhile: parked requests were answered
        if written.error != ErrorCode.NONE:
            self._deliver(self.machine.write_failed(records, written.error, steady_ms()))
            return append_error_to_coordinator_error(written.error)
        completions: list[Completion] = []
        for i, (key, value) in enumerate(records):
            completions.extend(self.machine.replay(
                key, value, offset=written.base_offset + i, producer_id=pid, now_ms=steady_ms()
            ))
        self._deliver(completions)
        return ErrorCode.NONE

    def _deliver(self, completions: Iterable[Completion]) -> None:
        for completion in completions:
            future = self._waiters.pop((completion.group_id, completion.member_id, completion.kind), None)
            if future is not None and not future.done():
                future.set_result(completion.response)

    def _park(self, key: WaiterKey) -> asyncio.Future[JoinResponse | SyncResponse]:
        superseded = self._waiters.pop(key, None)
        if superseded is not None and not superseded.done():
            error = ErrorCode.REBALANCE_IN_PROGRESS
            superseded.set_result(JoinResponse(error) if key[2] is Kind.JOIN else SyncResponse(error))
        future: asyncio.Future[JoinResponse | SyncResponse] = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        return future

    # -- timers --------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.machine.next_deadline_ms()
        if deadline is not None:
            delay = max(0.0, (deadline - steady_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        result = self.machine.on_timer(steady_ms())
        _log_fenced(result.records)
        _log_migration(result.records)
        self.runtime.spawn(self.persist(result))

    async def _expire_offsets_loop(self) -> None:
        interval = self.settings.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self.runtime.spawn(self.persist(self.machine.expire_offsets(steady_ms())))

    # -- operations with parked answers -------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResponse:
        result = self.machine.join_group(request, steady_ms(), self._topics_image())
        answer = await self._answer(request.group_id, Kind.JOIN, result)
        if not isinstance(answer, JoinResponse):
            return JoinResponse(answer)
        if answer.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
            self._log_inconsistent(request)
        if answer.error == ErrorCode.NONE and answer.member_id == answer.leader:
            metrics.rebalance_completed()
            log.info("group %s: generation %d with %d members, leader %s, protocol %s",
                     request.group_id, answer.generation_id, len(answer.members), answer.leader,
                     answer.protocol_name)
        return answer

    def _log_inconsistent(self, request: JoinRequest) -> None:
        """A refusal the client cannot get past by retrying, with what the group has (Kafka
        logs none): chaos runs saw librdkafka consumers refused so for minutes."""
        group = self.machine.group(request.group_id)
        found = "gone" if group is None else (
            f"{group.state.name}, type {group.protocol_type!r}, members "
            + ", ".join(f"{m.member_id} {[n for n, _ in m.protocols]}"
                        for m in list(group.members.values())[:GROUP_MEMBERS_LOGGED]))
        log.info("group %s: JoinGroup v%d from member %r (client %s, %s) refused "
                 "INCONSISTENT_GROUP_PROTOCOL: it offers type %r, %s; the group is %s",
                 request.group_id, request.api_version, request.member_id, request.client_id,
                 request.client_host, request.protocol_type, [n for n, _ in request.protocols], found)

    async def sync_group(self, request: SyncRequest) -> SyncResponse:
        result = self.machine.sync_group(request, steady_ms())
        answer = await self._answer(request.group_id, Kind.SYNC, result)
        return answer if isinstance(answer, SyncResponse) else SyncResponse(answer)

    async def _answer(self, group_id: str, kind: Kind, result: Result[Answer]) -> Answer | ErrorCode:
        """The caller's own answer, or (parked) the completion that answers it later;
        an ErrorCode when the records could not be written."""
        response = result.response
        if response is not None:
            error = await self.persist(result)
            return response if error == ErrorCode.NONE else error
        parked = self._park((group_id, result.awaits or "", kind))
        await self.persist(result)
        return cast(Answer, await parked)  # a waiter of `kind` is answered with that kind's response

    # -- the other group APIs ------------------------------------------------------------------

    async def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode:
        result = self.machine.heartbeat(group_id, member_id, generation, steady_ms(), instance_id)
        await self.persist(result)
        return _response(result)

    async def leave_group(self, group_id: str, members: Sequence[LeaveMember]) -> LeaveResponse:
        result = self.machine.leave_group(group_id, members, steady_ms())
        await self.persist(result)
        return _response(result)

    def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        if not self.log.current():
            return [DescribedGroup(g, ErrorCode.NOT_COORDINATOR, "") for g in group_ids]
        return self.machine.describe_groups(group_ids)

    def list_groups(self, states: Iterable[str]) -> tuple[ErrorCode, list[ListedGroup]]:
        if not self.log.current():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return self.machine.list_groups(states)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        result = self.machine.delete_groups(group_ids)
        return _or_append_error(_response(result), await self.persist(result))

    async def offset_commit(
        self, group_id: str, generation: int, member_id: str,
        offsets: Mapping[TopicPartition, OffsetCommitInput], *,
        instance_id: str | None = None, api_version: int = 9, retention_ms: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        result = self.machine.offset_commit(
            group_id, generation, member_id, offsets, steady_ms(),
            instance_id=instance_id, api_version=api_version, retention_ms=retention_ms,
        )
        return _or_append_error(_response(result), await self.persist(result))

    async def txn_offset_commit(
        self, transactional_id: str, group_id: str, producer: tuple[int, int],
        offsets: Mapping[TopicPartition, OffsetCommitInput], *,
        generation: int = -1, member_id: str = UNKNOWN_MEMBER_ID, instance_id: str | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        result = self.machine.txn_offset_commit(
            transactional_id, group_id, *producer, offsets, steady_ms(),
            generation=generation, member_id=member_id, instance_id=instance_id,
        )
        return _or_append_error(_response(result), await self.persist(result, producer))

    def offset_fetch(
        self, group_id: str, partitions: Sequence[TopicPartition] | None, require_stable: bool,
        member: tuple[str | None, int] = (None, -1),
    ) -> OffsetFetchResult:
        if not self.log.current():
            return OffsetFetchResult(group_id, ErrorCode.NOT_COORDINATOR)
        return self.machine.offset_fetch(group_id, partitions, require_stable, member)

    # -- consumer-protocol groups (KIP-848) ------------------------------------------------------

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        result = self.machine.consumer_group_heartbeat(request, self._topics_image(), steady_ms())
        error = await self.persist(result)
        if error == ErrorCode.NONE:
            _log_migration(result.records)
        answer = _response(result)
        if error != ErrorCode.NONE:
            return HeartbeatResponse(error)
        _log_heartbeat(request, answer)
        return answer

    def consumer_group_describe(self, group_ids: Sequence[str]) -> list[DescribedConsumerGroup]:
        if not self.log.current():
            return [DescribedConsumerGroup(g, ErrorCode.NOT_COORDINATOR) for g in group_ids]
        return self.machine.consumer_group_describe(group_ids)

    def _topics_image(self) -> TopicsImage:
        return {
            name: TopicInfo(TopicId(t.topic_id), t.partitions)
            for name, t in self.topics.all().items()
            if not t.internal
        }

    async def offset_delete(self, group_id: str, partitions: Sequence[TopicPartition]) -> OffsetDeleteResult:
        result = self.machine.offset_delete(group_id, partitions)
        error = await self.persist(result)
        response = _response(result)
        return response if error == ErrorCode.NONE else OffsetDeleteResult(error, response.partitions)

    # -- markers ---------------------------------------------------------------------------

    def complete_transaction(self, partition: int, producer_id: ProducerId, commit: bool) -> None:
        """A COMMIT/ABORT marker in `__consumer_offsets`-`partition` is replicated."""
        self.machine.complete_transaction(partition, producer_id, commit)


def _log_heartbeat(request: HeartbeatRequest, answer: HeartbeatResponse) -> None:
    if answer.error == ErrorCode.GROUP_ID_NOT_FOUND:  # fatal to the client: worth a line
        log.info("group %s: heartbeat of member %s at epoch %d refused: %s", request.group_id,
                 request.member_id, request.member_epoch, answer.message)
    if answer.error != ErrorCode.NONE:
        return
    if request.member_epoch == 0:
        log.info("group %s: member %s (client %s, %s) joined with the consumer protocol, epoch %d",
                 request.group_id, answer.member_id, request.client_id, request.client_host,
                 answer.member_epoch)
    elif request.member_epoch < 0:
        log.info("group %s: member %s left (epoch %d)", request.group_id, request.member_id,
                 request.member_epoch)
    elif answer.assignment is not None:
        log.debug("group %s: member %s at epoch %d holds %d partitions", request.group_id,
                  answer.member_id, answer.member_epoch, sum(len(p) for p in answer.assignment.values()))


def _log_migration(records: Iterable[tuple[bytes, bytes | None]]) -> None:
    """A classic group's record beside a consumer group's in one append is a conversion: its
    tombstone the upgrade, a new GroupMetadata the downgrade."""
    records = list(records)
    if not any(decode_consumer_key(key) is not None for key, _ in records):
        return
    for key, value in records:
        if decode_consumer_key(key) is not None:
            continue
        decoded = decode_key(key)
        if isinstance(decoded, GroupMetadataKey):
            way = "upgraded to a consumer group" if value is None else "downgraded to a classic group"
            log.info("group %s: %s (group.consumer.migration.policy)", decoded.group, way)


def _log_fenced(records: Iterable[tuple[bytes, bytes | None]]) -> None:
    """A member whose records a timer removes was fenced: its session or rebalance timeout lapsed."""
    for key, value in records:
        decoded = decode_consumer_key(key)
        if decoded is not None and decoded.record is RecordType.MEMBER_METADATA and value is None:
            log.info("group %s: member %s fenced: no heartbeat within the session timeout, or its "
                     "partitions not revoked within its rebalance timeout", decoded.group, decoded.member)


def _response(result: Result[_K]) -> _K:
    """The answer of a result that always carries one (every operation but Join/Sync)."""
    assert result.response is not None
    return result.response


def _or_append_error(errors: dict[_K, ErrorCode], append_error: ErrorCode) -> dict[_K, ErrorCode]:
    """Per-entry answers, all replaced by the append error when the records were not written."""
    return errors if append_error == ErrorCode.NONE else dict.fromkeys(errors, append_error)


def _group_of(key: bytes) -> str:
    consumer_key = decode_consumer_key(key)
    if consumer_key is not None:
        return consumer_key.group
    decoded = decode_key(key)
    assert isinstance(decoded, GroupMetadataKey | OffsetCommitKey)
    return decoded.group
