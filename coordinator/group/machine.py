"""The group coordinator as a pure state machine over ``__consumer_offsets`` records.

The broker owns the I/O. For every operation it appends ``result.records`` to the group's
``__consumer_offsets`` partition (a TxnOffsetCommit's records in a transactional batch of that
producer id and epoch), calls ``replay`` for each record once durable (the same call that loads
a partition after a failover), then sends ``result.response`` and ``result.completions`` plus
whatever ``replay`` returned. A COMMIT/ABORT marker landing in a ``__consumer_offsets``
partition is replayed with ``complete_transaction``. If an append fails it calls
``write_failed`` and answers with the append error.

Offsets change only by replay. Group membership mostly changes in place, as in Kafka, because
Kafka persists only the outcome of a rebalance (the GroupMetadata record), never who is
joining: a GroupMetadata record this machine emitted confirms the in-memory group when it is
replayed (and, for the leader's SyncGroup, installs the assignment and answers the members);
a record it did not emit, and every record during a load, rebuilds the group.

Time comes in as ``now_ms``; ``next_deadline_ms`` says when ``on_timer`` next has work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar, cast

from coordinator.group.assignors import TopicsImage
from coordinator.group.consumer_checks import request_error
from coordinator.group.consumer_machine import ConsumerGroups
from coordinator.group.consumer_state import LEAVE_EPOCH, MemberId
from coordinator.group.consumer_types import DescribedConsumerGroup, HeartbeatRequest, HeartbeatResponse
from coordinator.group.index import GroupIndex, cached_partition
from coordinator.group.offsets import OffsetStore, expiration_base, is_expired, validate_offset_commit
from coordinator.group.rebalance import Effects, PendingWrite, Rebalancer, WriteKind
from coordinator.group.state import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from coordinator.group.types import (
    UNKNOWN_MEMBER_ID,
    Completion,
    DescribedGroup,
    DescribedMember,
    FetchedOffset,
    GroupConfig,
    JoinRequest,
    JoinResponse,
    Kind,
    LeaveMember,
    LeaveResponse,
    ListedGroup,
    OffsetCommitInput,
    OffsetDeleteResult,
    OffsetFetchResult,
    Record,
    Result,
    SyncRequest,
    SyncResponse,
)
from coordinator.transaction.machine import append_error_to_coordinator_error
from protocol.consumer_group_log import decode_consumer_key
from protocol.errors import ErrorCode
from protocol.group_log import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordVersion,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from protocol.types import TopicPartition

_S = GroupState
_R = TypeVar("_R", JoinResponse, SyncResponse)
NO_PRODUCER_ID = -1
OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION = 9  # OffsetCommit v9+: GROUP_ID_NOT_FOUND, not ILLEGAL_GENERATION


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinatorMachine:
    """Classic groups and offsets of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(
        self, config: GroupConfig | None = None, new_member_id: Callable[[str], str] | None = None
    ) -> None:
        self.config = config or GroupConfig()
        self.offsets = OffsetStore()
        self._groups = GroupIndex()
        self._pending_writes: dict[str, list[PendingWrite]] = {}
        self._epochs: dict[int, int] = {}
        self._loading: set[int] = set()
        self._rebalancer = Rebalancer(self.config, self._pending_writes, new_member_id or _random_member_id)
        self.consumer = ConsumerGroups(self.config.consumer)
        self._image: TopicsImage = {}  # the topics as the last consumer-group operation saw them

    # ------------------------------------------------------------ partitions

    def partition_for(self, group_id: str) -> int:
        return cached_partition(group_id, self.config.num_partitions)

    def _in(self, partition: int) -> Callable[[str], bool]:
        return lambda group_id: self.partition_for(group_id) == partition

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        """Start leading ``partition``: forget what we had for it, then replay its log."""
        self._drop_partition(partition)
        self._epochs[partition] = coordinator_epoch
        self._loading.add(partition)

    def finish_load(self, partition: int, now_ms: int) -> None:
        """The log is replayed: every loaded member must heartbeat within its session timeout."""
        self._loading.discard(partition)
        for group in self._groups_of(partition):
            for member in group.members.values():
                self._rebalancer.heartbeat_after(member, now_ms)
            self._groups.may_have_deadlines(group.group_id)
        self.consumer.loaded(self._in(partition), now_ms)

    def coordinator_epoch(self, partition: int) -> int | None:
        """The coordinator epoch ``partition`` is loaded (or loading) at; None if not led here."""
        return self._epochs.get(partition)

    def unload(self, partition: int) -> list[Completion]:
        """Stop leading ``partition``; parked requests are answered NOT_COORDINATOR."""
        fx = Effects()
        for group in self._groups_of(partition):
            for member in group.members.values():
                self._rebalancer.complete_join(group, member, JoinResponse(ErrorCode.NOT_COORDINATOR), fx)
                self._rebalancer.complete_sync(group, member, SyncResponse(ErrorCode.NOT_COORDINATOR), fx)
        self._drop_partition(partition)
        self._epochs.pop(partition, None)
        self._loading.discard(partition)
        return fx.completions

    def _drop_partition(self, partition: int) -> None:
        owns = self._in(partition)
        for group_id in [g for g in self._groups if owns(g)]:
            self._groups.pop(group_id)
            self._pending_writes.pop(group_id, None)
        self.consumer.drop(owns)
        self.offsets.drop(owns)

    def _groups_of(self, partition: int) -> list[ClassicGroup]:
        return [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]

    def _ownership_error(self, group_id: str) -> ErrorCode | None:
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._epochs:
            return ErrorCode.NOT_COORDINATOR
        return None

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        return self._groups

    # ------------------------------------------------------------ replay

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        *,
        offset: int,
        producer_id: int = NO_PRODUCER_ID,
        now_ms: int | None = None,
    ) -> list[Completion]:
        """Apply one durable record at log ``offset``; ``producer_id`` is the batch's producer id
        when the batch is transactional. Returns answers the record releases."""
        consumer_key = decode_consumer_key(key)
        if consumer_key is not None:
            group_id = consumer_key.group
            if self.partition_for(group_id) in self._epochs and not self._converted_away(group_id, True):
                self._drop_simple_group(group_id)
                self.consumer.replay(key, value)
            return []
        try:
            decoded = decode_key(key)
        except UnknownRecordVersion:
            return []
        if self.partition_for(decoded.group) not in self._epochs:
            return []
        if isinstance(decoded, OffsetCommitKey):
            self._replay_offset(decoded, value, offset, producer_id)
            return []
        return self._replay_group(decoded, value, now_ms)

    def _converted_away(self, group_id: str, consumer_record: bool) -> bool:
        """A record of the group's other kind, written before a conversion (upgrade or downgrade)
        and made durable after it: live, the conversion's own records (appended after it) end
        what it would make again, so it is skipped; a load replays every record in log order."""
        if self.partition_for(group_id) in self._loading:
            return False
        if consumer_record:
            classic = self._groups.get(group_id)
            return group_id not in self.consumer.groups and classic is not None and bool(classic.members)
        return group_id not in self._groups and group_id in self.consumer.groups

    def _drop_simple_group(self, group_id: str) -> None:
        """A consumer group's records win over the "simple" group its offsets made (a compacted
        log may hold an offset before the group's first record)."""
        simple = self._groups.get(group_id)
        if simple is not None and not simple.members and simple.protocol_type is None:
            self._groups.pop(group_id)

    def _replay_offset(
        self, key: OffsetCommitKey, value: bytes | None, offset: int, producer_id: int
    ) -> None:
        try:
            decoded = None if value is None else decode_offset_commit_value(value)
        except UnknownRecordVersion:
            return
        if decoded is not None and key.group not in self._groups and key.group not in self.consumer.groups:
            self._groups.add(ClassicGroup(key.group))  # a "simple" group
        self.offsets.replay(key.group, (key.topic, key.partition), decoded, offset, producer_id)

    def _replay_group(
        self, key: GroupMetadataKey, value: bytes | None, now_ms: int | None
    ) -> list[Completion]:
        group_id = key.group
        writes = self._pending_writes.get(group_id, [])
        match = next((w for w in writes if w.value == value), None)
        group = self._groups.get(group_id)
        if match is not None and group is not None and self.partition_for(group_id) not in self._loading:
            writes.remove(match)
            self._groups.may_have_deadlines(group_id)
            return self._write_durable(group, match, now_ms)
        if value is None:
            self._groups.pop(group_id)
            self._pending_writes.pop(group_id, None)
            return []
        if self._converted_away(group_id, False):
            return []
        try:
            decoded = decode_group_metadata_value(value)
        except UnknownRecordVersion:
            return []
        if group is None or self.partition_for(group_id) in self._loading:
            self._groups.add(ClassicGroup.from_record(group_id, decoded))
            self._pending_writes.pop(group_id, None)
        return []

    def _write_durable(
        self, group: ClassicGroup, write: PendingWrite, now_ms: int | None
    ) -> list[Completion]:
        fx = Effects()
        when = (group.state_timestamp_ms or 0) if now_ms is None else now_ms
        if write.kind is WriteKind.SYNC:
            self._rebalancer.sync_write_durable(group, write, when, fx)
        elif write.kind is WriteKind.STATIC:
            self._rebalancer.static_write_durable(group, write, fx)
        return fx.completions

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> int:
        """A COMMIT/ABORT marker of ``producer_id`` landed in ``partition``: its pending offsets
        there become committed or are dropped. Returns how many offsets were materialised."""
        if partition not in self._epochs:
            return 0
        return self.offsets.complete(producer_id, commit, self._in(partition))

    def write_failed(self, records: Iterable[Record], error: ErrorCode, now_ms: int) -> list[Completion]:
        """The append of ``records`` failed with ``error``: undo what waited on them."""
        fx = Effects()
        mapped = append_error_to_coordinator_error(error)
        records = list(records)
        self.consumer.write_failed(records)
        for key, value in records:
            try:
                decoded = decode_key(key)
            except UnknownRecordVersion:
                continue
            writes = self._pending_writes.get(decoded.group, [])
            match = next((w for w in writes if w.value == value), None)
            group = self._groups.get(decoded.group)
            if isinstance(decoded, GroupMetadataKey) and match is not None and group is not None:
                writes.remove(match)
                self._groups.may_have_deadlines(decoded.group)
                self._rebalancer.write_failed(group, match, mapped, now_ms, fx)
        return fx.completions

    # ------------------------------------------------------------ JoinGroup / SyncGroup

    def join_group(
        self, req: JoinRequest, now_ms: int, image: TopicsImage | None = None
    ) -> Result[JoinResponse]:
        """``image``: the topics as the metadata knows them now, for a classic member of a consumer
        group (its embedded subscription names topics, the group's records hold topic ids)."""
        if image is not None:
            self._image = image
        error = self._join_error(req)
        if error is not None:
            return Result(JoinResponse(error, member_id=req.member_id))
        consumer_group = self.consumer.groups.get(req.group_id)
        if consumer_group is not None and consumer_group.members:  # a classic member of a consumer group
            answer, records = self.consumer.classic_join(req, self._image, now_ms)
            return Result(answer, tuple(records))
        if consumer_group is not None:  # an Empty consumer group becomes a classic one
            dropped = self.consumer.delete_records(req.group_id)
            result = self.join_group(req, now_ms)
            return Result(result.response, tuple(dropped) + result.records, result.completions, result.awaits)
        group = self._groups.get(req.group_id)
        is_new = group is None
        if group is None:
            if req.member_id != UNKNOWN_MEMBER_ID:
                return Result(JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id))
            group = self._groups.add(ClassicGroup(req.group_id, state_timestamp_ms=now_ms))
        self._groups.may_have_deadlines(req.group_id)
        fx = Effects()
        response = self._rebalancer.join(group, req, now_ms, fx)
        if is_new and not fx.records:
            self._write_empty_group(group, fx)
        return self._result(req.group_id, response, fx, Kind.JOIN)

    def _join_error(self, req: JoinRequest) -> ErrorCode | None:
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return self._ownership_error(req.group_id)

    def _write_empty_group(self, group: ClassicGroup, fx: Effects) -> None:
        """Kafka commits a new group to the log with an empty GroupMetadata record."""
        ts = -1 if group.state_timestamp_ms is None else group.state_timestamp_ms
        value = encode_group_metadata_value(GroupMetadataValue("", 0, None, None, ts, ()))
        fx.records.append((encode_group_metadata_key(group.group_id), value))
        self._pending_writes.setdefault(group.group_id, []).append(PendingWrite(value))

    def sync_group(self, req: SyncRequest, now_ms: int) -> Result[SyncResponse]:
        error = ErrorCode.INVALID_GROUP_ID if not req.group_id else self._ownership_error(req.group_id)
        if error is not None:
            return Result(SyncResponse(error))
        if req.group_id in self.consumer.groups:
            return Result(self.consumer.classic_sync(req, now_ms))
        group = self._groups.get(req.group_id)
        if group is None or group.is_in(_S.EMPTY):
            return Result(SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID))
        self._groups.may_have_deadlines(req.group_id)
        fx = Effects()
        response = self._rebalancer.sync(group, req, now_ms, fx)
        return self._result(req.group_id, response, fx, Kind.SYNC)

    def _result(self, group_id: str, response: _R | None, fx: Effects, kind: Kind) -> Result[_R]:
        """A parked caller whose own answer is already among the completions gets it directly."""
        completions = list(fx.completions)
        awaits = None
        if response is None and fx.awaits is not None:
            own = next((c for c in completions if c.member_id == fx.awaits and c.kind is kind), None)
            if own is None:
                awaits = fx.awaits
            else:
                completions.remove(own)
                response = cast(_R, own.response)
        return Result(response, tuple(fx.records), tuple(completions), awaits)

    # ------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, now_ms: int, instance_id: str | None = None
    ) -> Result[ErrorCode]:
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        if error is not None:
            return Result(error)
        if group_id in self.consumer.groups:
            consumer = self.consumer
            return Result(consumer.classic_heartbeat(group_id, member_id, instance_id, generation, now_ms))
        group = self._groups.get(group_id)
        if group is None:
            return Result(ErrorCode.UNKNOWN_MEMBER_ID)
        self._groups.may_have_deadlines(group_id)
        return Result(self._rebalancer.heartbeat(group, member_id, instance_id, generation, now_ms))

    def leave_group(
        self, group_id: str, members: Sequence[LeaveMember], now_ms: int
    ) -> Result[LeaveResponse]:
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        if error is not None:
            return Result(LeaveResponse(error))
        if group_id in self.consumer.groups:
            response, records = self.consumer.classic_leave(group_id, members)
            return Result(response, tuple(records))
        group = self._groups.get(group_id)
        if group is None:
            return Result(LeaveResponse(ErrorCode.UNKNOWN_MEMBER_ID))
        self._groups.may_have_deadlines(group_id)
        fx = Effects()
        response = self._rebalancer.leave(group, list(members), now_ms, fx)
        return Result(response, tuple(fx.records), tuple(fx.completions))

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        """The earliest timer of any group; only groups that may hold one are looked at (a group
        found without any leaves that set until an operation touches it again)."""
        earliest = self.consumer.next_deadline_ms(self._is_live)
        for group in self._timed_live_groups():
            deadline = self._rebalancer.next_deadline_ms(group)
            if deadline is None:
                self._groups.no_deadlines(group.group_id)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        return earliest

    def _is_live(self, group_id: str) -> bool:
        return self._ownership_error(group_id) is None

    def on_timer(self, now_ms: int) -> Result[None]:
        """Session, join, initial-delay and sync timeouts due at ``now_ms``."""
        fx = Effects()
        for group in self._timed_live_groups():
            self._rebalancer.on_timer(group, now_ms, fx)
        fenced: dict[str, set[MemberId]] = {}
        for group_id, member_id in self.consumer.due(now_ms, self._is_live):
            fenced.setdefault(group_id, set()).add(member_id)
        for group_id, members in sorted(fenced.items()):
            self._downgrade(group_id, members, now_ms, fx)  # the group's members are then gone
        fx.records.extend(self.consumer.on_timer(now_ms, self._is_live))
        return Result(None, tuple(fx.records), tuple(fx.completions))

    def _timed_live_groups(self) -> list[ClassicGroup]:
        return [g for g in self._groups.timed() if self._ownership_error(g.group_id) is None]

    def _live_groups(self) -> list[ClassicGroup]:
        return [g for g in self._groups.values() if self._ownership_error(g.group_id) is None]

    # ------------------------------------------------------------ Describe / List / Delete

    def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        return [self._describe(group_id) for group_id in group_ids]

    def _describe(self, group_id: str) -> DescribedGroup:
        error = self._ownership_error(group_id)
        if error is not None:
            return DescribedGroup(group_id, error, "")
        group = self._groups.get(group_id)
        if group is None:
            return DescribedGroup(group_id, ErrorCode.NONE, _S.DEAD.value)
        stable = group.is_in(_S.STABLE)
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                (m.metadata(group.protocol_name) or b"") if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        protocol_data = (group.protocol_name or "") if stable else ""
        return DescribedGroup(
            group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "", protocol_data, members
        )

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[ListedGroup]]:
        """With a states filter, only the groups in those states are looked at."""
        wanted = {name.strip().lower() for name in states}
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._loading else ErrorCode.NONE
        if wanted:
            candidates: Iterable[ClassicGroup] = self._groups.in_states(
                s for s in _S if s.value.lower() in wanted
            )
        else:
            candidates = self._groups.values()
        ready = self._epochs.keys() - self._loading
        partition_for = self.partition_for
        listed = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in candidates
            if partition_for(g.group_id) in ready
        ]
        listed.extend(
            ListedGroup(g.group_id, "consumer", g.state().value, "consumer")
            for g in self.consumer.groups.values()
            if partition_for(g.group_id) in ready and (not wanted or g.state().value.lower() in wanted)
        )
        return error, listed

    def delete_groups(self, group_ids: Sequence[str]) -> Result[dict[str, ErrorCode]]:
        records: list[Record] = []
        errors: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            errors[group_id] = self._delete_group(group_id, records)
        return Result(errors, tuple(records))

    def _delete_group(self, group_id: str, records: list[Record]) -> ErrorCode:
        error = self._ownership_error(group_id)
        if error is not None:
            return error
        if group_id in self.consumer.groups:
            return self._delete_consumer_group(group_id, records)
        group = self._groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not group.is_in(_S.EMPTY):
            return ErrorCode.NON_EMPTY_GROUP
        partitions = set(self.offsets.offsets_of(group_id)) | self.offsets.pending_partitions(group_id)
        records.extend(_offset_tombstone(group_id, tp) for tp in sorted(partitions))
        records.append((encode_group_metadata_key(group_id), None))
        return ErrorCode.NONE

    def _delete_consumer_group(self, group_id: str, records: list[Record]) -> ErrorCode:
        if self.consumer.groups[group_id].members:
            return ErrorCode.NON_EMPTY_GROUP
        partitions = set(self.offsets.offsets_of(group_id)) | self.offsets.pending_partitions(group_id)
        records.extend(_offset_tombstone(group_id, tp) for tp in sorted(partitions))
        records.extend(self.consumer.delete_records(group_id))
        return ErrorCode.NONE

    # ------------------------------------------------------------ ConsumerGroupHeartbeat / Describe

    def consumer_group_heartbeat(
        self, req: HeartbeatRequest, image: TopicsImage, now_ms: int
    ) -> Result[HeartbeatResponse]:
        """KIP-848's heartbeat; ``image`` is every topic as the metadata knows it now."""
        refused = request_error(req, self.config.consumer.assignors)
        if refused is not None:
            return Result(HeartbeatResponse(*refused))
        if (error := self._ownership_error(req.group_id)) is not None:
            return Result(HeartbeatResponse(error))
        self._image = image
        classic = self._groups.get(req.group_id)
        if classic is None:
            fx = Effects()
            if req.member_epoch == LEAVE_EPOCH and self._leaves_only_classic(req):
                self._downgrade(req.group_id, {MemberId(req.member_id)}, now_ms, fx)
            if fx.records:  # Kafka answers the leave as any other
                left = HeartbeatResponse(ErrorCode.NONE, member_id=req.member_id, member_epoch=LEAVE_EPOCH)
                return Result(left, tuple(fx.records), tuple(fx.completions))
            response, records = self.consumer.heartbeat(req, image, now_ms)
            return Result(response, tuple(records))
        refusal = self._upgrade_refusal(classic) if req.member_epoch == 0 else "is not a consumer group."
        if refusal is not None:
            message = f"Group {req.group_id} {refusal}"
            return Result(HeartbeatResponse(ErrorCode.GROUP_ID_NOT_FOUND, message))
        return self._upgrade(classic, req, image, now_ms)

    def _upgrade_refusal(self, classic: ClassicGroup) -> str | None:
        """Kafka's validateOnlineUpgrade (an Empty group simply gives way): the migration policy
        allows it, the group is one of consumers (protocol type "consumer") no larger than a
        consumer group may be; else why not."""
        if classic.is_in(_S.EMPTY):
            return None
        why = "cannot be upgraded to a consumer group because"
        if not self.config.consumer.upgrade_enabled or classic.is_in(_S.DEAD):
            return f"{why} online upgrade is disabled."
        if not classic.uses_consumer_protocol():
            return f"{why} the group does not use the consumer embedded protocol."
        if len(classic.members) > self.config.consumer.max_size:
            return f"{why} the group size exceeds the consumer group maximum size."
        return None

    def _upgrade(
        self, classic: ClassicGroup, req: HeartbeatRequest, image: TopicsImage, now_ms: int
    ) -> Result[HeartbeatResponse]:
        """The classic group gives way to a consumer group (Kafka writes its tombstone); an Empty
        one simply goes, a live one is converted (its members keep their assignments) and its
        parked JoinGroup / SyncGroup requests are told REBALANCE_IN_PROGRESS, to rejoin."""
        self._groups.pop(req.group_id)
        pending = self._pending_writes.pop(req.group_id, None)
        live = bool(classic.members)
        response, records = self.consumer.heartbeat(req, image, now_ms, classic if live else None)
        if response.error is not ErrorCode.NONE:
            self._groups.add(classic)
            if pending is not None:
                self._pending_writes[req.group_id] = pending
            return Result(response)
        fx = Effects()
        for member in classic.members.values():
            self._rebalancer.complete_join(classic, member, JoinResponse(ErrorCode.REBALANCE_IN_PROGRESS), fx)
            self._rebalancer.complete_sync(classic, member, SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS), fx)
        tombstone = (encode_group_metadata_key(req.group_id), None)
        return Result(response, (tombstone, *records), tuple(fx.completions))

    def _leaves_only_classic(self, req: HeartbeatRequest) -> bool:
        """A dynamic member, or the static member its instance id names, leaving."""
        group = self.consumer.groups.get(req.group_id)
        if group is None or req.member_id not in group.members:
            return False
        return req.instance_id is None or group.static_members.get(req.instance_id) == req.member_id

    def _downgrade(self, group_id: str, leaving: set[MemberId], now_ms: int, fx: Effects) -> None:
        """The last member of the consumer protocol leaves (or is fenced): instead of its removal,
        the classic members left become a classic group at the group's epoch, each member's
        target its assignment, which rebalances so that they rejoin (Kafka's
        convertToClassicGroup), if the migration policy allows it and the group is no larger
        than a classic group may be."""
        others = self.consumer.downgradable(group_id, leaving)
        if not others or not self.config.consumer.downgrade_enabled:
            return
        if len(others) > self.config.max_group_size:
            return
        consumer = self.consumer.groups[group_id]
        members: dict[str, Member] = {
            str(m.member_id): Member(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, m.classic.protocols,
                self.consumer.classic_assignment(consumer, m),
            )
            for m in others
            if m.classic is not None
        }
        fx.records.extend(self.consumer.downgrade(group_id))
        epoch = consumer.group_epoch
        group = ClassicGroup(group_id, _S.STABLE, _S.EMPTY, now_ms, epoch, CONSUMER_PROTOCOL_TYPE)
        group.members.update(members)
        statics = {m.group_instance_id: i for i, m in members.items() if m.group_instance_id is not None}
        group.static_members.update(statics)
        group.protocol_name = group.select_protocol()
        group.leader_id = next(iter(members))
        self._groups.add(group)
        self._groups.may_have_deadlines(group_id)
        for member in members.values():
            self._rebalancer.heartbeat_after(member, now_ms)
        assignment = {i: m.assignment for i, m in members.items()}
        self._rebalancer.write_group(group, assignment, PendingWrite(b""), fx)
        self._rebalancer.prepare_rebalance(group, now_ms, fx)

    def consumer_group_describe(self, group_ids: Sequence[str]) -> list[DescribedConsumerGroup]:
        described = []
        for group_id in group_ids:
            error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
            if error is not None:
                described.append(DescribedConsumerGroup(group_id, error))
            elif group_id in self._groups:
                message = f"Group {group_id} is not a consumer group."
                described.append(DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message))
            else:
                described.append(self.consumer.describe(group_id))
        return described

    # ------------------------------------------------------------ OffsetCommit / TxnOffsetCommit

    def offset_commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, OffsetCommitInput],
        now_ms: int,
        *,
        instance_id: str | None = None,
        api_version: int = 9,
        retention_ms: int = -1,
    ) -> Result[dict[TopicPartition, ErrorCode]]:
        """``generation`` -1 with no member is the "simple" commit of a consumer that does not
        use group management; ``retention_ms`` is OffsetCommit v2-v4's retention_time_ms."""
        error = self._commit_error(group_id, generation, member_id, instance_id, False, api_version, offsets)
        if error is not None:
            return Result(dict.fromkeys(offsets, error))
        if group_id in self.consumer.groups:
            return self._commit_records(group_id, offsets, now_ms, -1)
        group = self._groups[group_id]
        member = group.members.get(member_id)
        if member is not None and group.is_in(_S.STABLE, _S.PREPARING_REBALANCE):
            self._rebalancer.heartbeat_after(member, now_ms)
            self._groups.may_have_deadlines(group_id)
        expire = -1 if retention_ms == -1 else min(now_ms + retention_ms, 2**63 - 1)
        return self._commit_records(group_id, offsets, now_ms, expire)

    def txn_offset_commit(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, OffsetCommitInput],
        now_ms: int,
        *,
        generation: int = -1,
        member_id: str = UNKNOWN_MEMBER_ID,
        instance_id: str | None = None,
    ) -> Result[dict[TopicPartition, ErrorCode]]:
        """The records must be appended as a transactional batch of ``producer_id`` /
        ``producer_epoch`` (the log fences a stale epoch) and replayed with ``producer_id``: they
        stay pending until ``complete_transaction``. KIP-447: a member of an older generation is
        fenced with ILLEGAL_GENERATION."""
        if not transactional_id or producer_id < 0:  # below 0 is "no producer id"
            return Result(dict.fromkeys(offsets, ErrorCode.INVALID_REQUEST))
        error = self._commit_error(group_id, generation, member_id, instance_id, True, 0, offsets)
        if error is not None:
            return Result(dict.fromkeys(offsets, error))
        return self._commit_records(group_id, offsets, now_ms, -1)

    def _commit_error(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        txn: bool,
        version: int,
        offsets: Mapping[TopicPartition, OffsetCommitInput],
    ) -> ErrorCode | None:
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        if error is not None:
            return error
        if group_id in self.consumer.groups:
            topic_ids = {name: info.topic_id for name, info in self.consumer.image.items()}
            consumer = self.consumer
            return consumer.commit_error(group_id, member_id, generation, offsets, topic_ids, txn, version)
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                if not txn and version >= OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION:
                    return ErrorCode.GROUP_ID_NOT_FOUND
                return ErrorCode.ILLEGAL_GENERATION
            group = self._groups.add(ClassicGroup(group_id))
        return validate_offset_commit(group, member_id, instance_id, generation, txn)

    def _commit_records(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetCommitInput], now_ms: int, expire: int
    ) -> Result[dict[TopicPartition, ErrorCode]]:
        records: list[Record] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for (topic, partition), commit in offsets.items():
            metadata = commit.metadata or ""
            if len(metadata) > self.config.offset_metadata_max_bytes:
                errors[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            value = OffsetCommitValue(commit.offset, commit.leader_epoch, metadata, now_ms, expire)
            records.append(
                (encode_offset_commit_key(group_id, topic, partition), encode_offset_commit_value(value))
            )
            errors[(topic, partition)] = ErrorCode.NONE
        return Result(errors, tuple(records))

    # ------------------------------------------------------------ OffsetFetch / OffsetDelete

    def offset_fetch(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
        member: tuple[str | None, int] = (None, -1),
    ) -> OffsetFetchResult:
        """``partitions`` None fetches all the group's committed offsets; ``member`` is OffsetFetch
        v9+'s member id and epoch, checked for a consumer-protocol group."""
        error = self._ownership_error(group_id)
        if error is None and group_id in self.consumer.groups:
            error = self.consumer.fetch_error(group_id, *member)
        if error is not None:
            return OffsetFetchResult(group_id, error)
        group = self._groups.get(group_id)
        known = (group is not None and not group.is_in(_S.DEAD)) or group_id in self.consumer.groups
        committed = self.offsets.offsets_of(group_id) if known else {}
        wanted = sorted(committed) if partitions is None else list(partitions)
        fetched = []
        for tp in wanted:
            if require_stable and self.offsets.has_pending(group_id, tp):
                fetched.append(FetchedOffset(tp[0], tp[1], error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif (offset := committed.get(tp)) is None:
                fetched.append(FetchedOffset(tp[0], tp[1]))
            else:
                fetched.append(
                    FetchedOffset(tp[0], tp[1], offset.offset, offset.leader_epoch, offset.metadata)
                )
        return OffsetFetchResult(group_id, ErrorCode.NONE, tuple(fetched))

    def offset_delete(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> Result[OffsetDeleteResult]:
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        if error is not None:
            return Result(OffsetDeleteResult(error))
        if group_id in self.consumer.groups:
            return self._consumer_offset_delete(group_id, partitions)
        group = self._groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return Result(OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND))
        if not group.is_in(_S.EMPTY) and not group.uses_consumer_protocol():
            return Result(OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP))
        records: list[Record] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            if group.is_subscribed_to(tp[0]):
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[tp] = ErrorCode.NONE
            if self.offsets.get(group_id, tp) is not None or self.offsets.has_pending(group_id, tp):
                records.append(_offset_tombstone(group_id, tp))
        return Result(OffsetDeleteResult(ErrorCode.NONE, errors), tuple(records))

    def _consumer_offset_delete(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> Result[OffsetDeleteResult]:
        subscribed = self.consumer.groups[group_id].subscribed_topics()
        records: list[Record] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            if tp[0] in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[tp] = ErrorCode.NONE
            if self.offsets.get(group_id, tp) is not None or self.offsets.has_pending(group_id, tp):
                records.append(_offset_tombstone(group_id, tp))
        return Result(OffsetDeleteResult(ErrorCode.NONE, errors), tuple(records))

    # ------------------------------------------------------------ retention

    def expire_offsets(self, now_ms: int, retention_ms: int | None = None) -> Result[int]:
        """Tombstones for expired offsets (offsets.retention.minutes) and for Empty groups left
        with no offsets; the response is how many offsets expired."""
        retention = self.config.offsets_retention_ms if retention_ms is None else retention_ms
        records: list[Record] = []
        expired = 0
        for group in self._live_groups():
            all_gone, tombstones = self._expired_offsets(group, now_ms, retention)
            records.extend(tombstones)
            expired += len(tombstones)
            if all_gone and group.is_in(_S.EMPTY) and not self.offsets.has_open_transactions(group.group_id):
                records.append((encode_group_metadata_key(group.group_id), None))
        for group_id in [g for g, c in self.consumer.groups.items() if not c.members and self._is_live(g)]:
            tombstones = self._expired_consumer_offsets(group_id, now_ms, retention)
            records.extend(tombstones)
            expired += len(tombstones)
            left = len(self.offsets.offsets_of(group_id)) - len(tombstones)
            if left == 0 and not self.offsets.has_open_transactions(group_id):
                records.extend(self.consumer.delete_records(group_id))
        return Result(expired, tuple(records))

    def _expired_consumer_offsets(self, group_id: str, now_ms: int, retention_ms: int) -> list[Record]:
        """Kafka's ConsumerGroup.offsetExpirationCondition: an Empty group's offsets expire by their
        commit timestamp (a group with members keeps them)."""
        return [
            _offset_tombstone(group_id, tp)
            for tp, offset in sorted(self.offsets.offsets_of(group_id).items())
            if is_expired(offset, offset.commit_timestamp_ms, now_ms, retention_ms)
            and not self.offsets.has_pending(group_id, tp)
        ]

    def _expired_offsets(
        self, group: ClassicGroup, now_ms: int, retention_ms: int
    ) -> tuple[bool, list[Record]]:
        committed = self.offsets.offsets_of(group.group_id)
        if not committed:
            return True, []
        base = expiration_base(group)
        if base is None:
            return False, []
        tombstones: list[Record] = []
        for tp, offset in sorted(committed.items()):
            if (
                not group.is_subscribed_to(tp[0])
                and is_expired(offset, base(offset), now_ms, retention_ms)
                and not self.offsets.has_pending(group.group_id, tp)
            ):
                tombstones.append(_offset_tombstone(group.group_id, tp))
        return len(tombstones) == len(committed), tombstones


def _offset_tombstone(group_id: str, tp: TopicPartition) -> Record:
    return encode_offset_commit_key(group_id, tp[0], tp[1]), None
