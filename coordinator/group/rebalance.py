"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Kafka's GroupMetadataManager (classicGroupJoin*, classicGroupSync, classicGroupHeartbeat,
classicGroupLeave, prepareRebalance, completeClassicGroupJoin, the initial-rebalance delay,
heartbeat and pending-sync expiration), written against ``ClassicGroup`` and an ``Effects``
accumulator: records to append, answers to parked requests, and the GroupMetadata writes whose
durability has consequences (``PendingWrite``: the leader's assignment becomes the group's only
when its record is replayed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum

from coordinator.group.state import ClassicGroup, GroupState, InitialDelay, Member
from coordinator.group.types import (
    UNKNOWN_MEMBER_ID,
    Completion,
    GroupConfig,
    JoinMember,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveResponse,
    Record,
    SyncRequest,
    SyncResponse,
)
from protocol.errors import ErrorCode
from protocol.group_log import encode_group_metadata_key, encode_group_metadata_value

_S = GroupState
_MAX_TIMER_ROUNDS = 16
SKIP_ASSIGNMENT_VERSION = 9  # JoinGroup v9+: a static leader's rejoin skips assignment


class WriteKind(Enum):
    PLAIN = "plain"  # nothing waits on it
    SYNC = "sync"  # the leader's assignment
    STATIC = "static"  # a static member replaced while Stable


@dataclass(slots=True)
class PendingWrite:
    value: bytes
    kind: WriteKind = WriteKind.PLAIN
    generation: int = -1
    assignment: dict[str, bytes] = field(default_factory=dict)
    member_id: str = ""
    api_version: int = 0
    leader_before: str | None = None


@dataclass(slots=True)
class Effects:
    records: list[Record] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    awaits: str | None = None


class Rebalancer:
    def __init__(
        self,
        config: GroupConfig,
        pending_writes: dict[str, list[PendingWrite]],
        new_member_id: Callable[[str], str],
    ) -> None:
        self.config = config
        self.pending_writes = pending_writes
        self._new_member_id = new_member_id

    # ------------------------------------------------------------ effects helpers

    def complete_join(self, group: ClassicGroup, member: Member, response: JoinResponse, fx: Effects) -> None:
        if member.awaiting_join:
            member.awaiting_join = False
            fx.completions.append(Completion(group.group_id, member.member_id, response))

    def complete_sync(self, group: ClassicGroup, member: Member, response: SyncResponse, fx: Effects) -> bool:
        if not member.awaiting_sync:
            return False
        member.awaiting_sync = False
        fx.completions.append(Completion(group.group_id, member.member_id, response))
        return True

    def heartbeat_after(self, member: Member, now_ms: int, timeout_ms: int | None = None) -> None:
        member.heartbeat_deadline_ms = now_ms + (
            member.session_timeout_ms if timeout_ms is None else timeout_ms
        )

    def write_group(
        self, group: ClassicGroup, assignment: dict[str, bytes], write: PendingWrite, fx: Effects
    ) -> None:
        write.value = encode_group_metadata_value(group.to_record(assignment))
        fx.records.append((encode_group_metadata_key(group.group_id), write.value))
        self.pending_writes.setdefault(group.group_id, []).append(write)

    def _join_answer(self, group: ClassicGroup, member_id: str, with_members: bool) -> JoinResponse:
        members: tuple[JoinMember, ...] = ()
        if with_members:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name) or b"")
                for m in group.members.values()
            )
        return JoinResponse(
            ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    # ------------------------------------------------------------ JoinGroup

    def join(self, group: ClassicGroup, req: JoinRequest, now_ms: int, fx: Effects) -> JoinResponse | None:
        """The response, or None when the request is parked (``fx.awaits`` names the member)."""
        if not self._accept(group, req.member_id):
            group.remove(req.member_id)
            return JoinResponse(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if req.member_id == UNKNOWN_MEMBER_ID:
            return self._join_new(group, req, now_ms, fx)
        return self._join_existing(group, req, now_ms, fx)

    def _accept(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_group_size
        if group.is_in(_S.EMPTY, _S.DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_in(_S.PREPARING_REBALANCE):
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or awaiting < limit
        return member is not None or len(group.members) < limit

    def _join_new(
        self, group: ClassicGroup, req: JoinRequest, now_ms: int, fx: Effects
    ) -> JoinResponse | None:
        if group.is_in(_S.DEAD):
            return JoinResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return JoinResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        instance = req.group_instance_id
        new_id = self._new_member_id(req.client_id if instance is None else instance)
        if instance is not None:
            existing = group.static_members.get(instance)
            if existing is not None:
                return self._replace_static(group, req, existing, new_id, now_ms, fx)
            return self._add_member(group, req, new_id, now_ms, fx)
        if req.api_version >= 4:
            group.pending_members[new_id] = now_ms + req.session_timeout_ms
            return JoinResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
        return self._add_member(group, req, new_id, now_ms, fx)

    def _join_existing(
        self, group: ClassicGroup, req: JoinRequest, now_ms: int, fx: Effects
    ) -> JoinResponse | None:
        member_id = req.member_id
        if group.is_in(_S.DEAD):
            return JoinResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return JoinResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                return JoinResponse(ErrorCode.INVALID_REQUEST, member_id=member_id)
            return self._add_member(group, req, member_id, now_ms, fx)
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            return JoinResponse(error, member_id=member_id)
        member = group.members[member_id]
        if group.is_in(_S.PREPARING_REBALANCE):
            return self._update_member(group, member, req, now_ms, fx)
        if group.is_in(_S.COMPLETING_REBALANCE):
            if member.protocols == req.protocols:
                return self._join_answer(group, member_id, with_members=group.leader_id == member_id)
            return self._update_member(group, member, req, now_ms, fx)
        if group.is_in(_S.STABLE):
            if group.leader_id == member_id or member.protocols != req.protocols:
                return self._update_member(group, member, req, now_ms, fx)
            return self._join_answer(group, member_id, with_members=False)
        return JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)  # Empty

    def _park_join(self, member: Member, req: JoinRequest, fx: Effects) -> None:
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.awaiting_join = True
        fx.awaits = member.member_id

    def _update_member(
        self, group: ClassicGroup, member: Member, req: JoinRequest, now_ms: int, fx: Effects
    ) -> JoinResponse | None:
        self._park_join(member, req, fx)
        self.rebalance_or_complete(group, now_ms, fx)
        return None
        return None

    def _add_member(
        self, group: ClassicGroup, req: JoinRequest, member_id: str, now_ms: int, fx: Effects
    ) -> JoinResponse | None:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            _rebalance_timeout(req),
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
            is_new=True,
        )
        if group.is_in(_S.PREPARING_REBALANCE) and group.previous_state is _S.EMPTY:
            group.new_member_added = True
        group.add(member)
        self._park_join(member, req, fx)
        self.heartbeat_after(member, now_ms, self.config.new_member_join_timeout_ms)
        self.rebalance_or_complete(group, now_ms, fx)
        return None

    def _replace_static(
        self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str, now_ms: int, fx: Effects
    ) -> JoinResponse | None:
        leader_before = group.leader_id
        instance = req.group_instance_id
        assert instance is not None
        old, new = group.replace_static(instance, old_id, new_id)
        self.complete_join(group, old, JoinResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id), fx)
        self.complete_sync(group, old, SyncResponse(ErrorCode.FENCED_INSTANCE_ID), fx)
        self.heartbeat_after(new, now_ms)
        self._park_join(new, req, fx)
        if group.is_in(_S.STABLE):
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                write = PendingWrite(
                    b"", WriteKind.STATIC, group.generation, member_id=new_id,
                    api_version=req.api_version, leader_before=leader_before,
                )  # fmt: skip
                self.write_group(group, assignment, write, fx)
                return None
            self.rebalance_or_complete(group, now_ms, fx)
        elif group.is_in(_S.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, now_ms, fx)
        else:
            self.maybe_complete_join_phase(group, now_ms, fx)
        return None

    def static_write_durable(self, group: ClassicGroup, write: PendingWrite, fx: Effects) -> None:
        member = group.members.get(write.member_id)
        if member is None:
            return
        if write.api_version >= SKIP_ASSIGNMENT_VERSION:
            is_leader = group.leader_id == member.member_id
            answer = self._join_answer(group, member.member_id, with_members=is_leader)
            answer = replace(answer, skip_assignment=is_leader)
        else:
            answer = self._join_answer(group, member.member_id, with_members=False)
            answer = replace(answer, leader=write.leader_before or "")
        self.complete_join(group, member, answer, fx)

    # ------------------------------------------------------------ rebalance core

    def rebalance_or_complete(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now_ms, fx)
        else:
            self.maybe_complete_join_phase(group, now_ms, fx)

    def maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if (
            group.is_in(_S.PREPARING_REBALANCE)
            and group.previous_state is not _S.EMPTY
            and group.has_all_members_joined()
        ):
            self.complete_join_phase(group, now_ms, fx)

    def prepare_rebalance(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if group.is_in(_S.COMPLETING_REBALANCE):
            self._propagate_assignment(group, {}, ErrorCode.REBALANCE_IN_PROGRESS, now_ms, fx)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        initial = group.is_in(_S.EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay = InitialDelay(delay, max(group.rebalance_timeout_ms() - delay, 0))
            group.join_deadline_ms = now_ms + delay
        group.transition(_S.PREPARING_REBALANCE, now_ms)
        if not initial:
            if group.has_all_members_joined():
                self.complete_join_phase(group, now_ms, fx)
            else:
                group.initial_delay = None
                group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def complete_join_phase(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        """Kafka's completeClassicGroupJoin."""
        group.join_deadline_ms = None
        group.initial_delay = None
        for member in [
            m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None
        ]:
            self.drop_member(group, member, fx)
        if group.is_in(_S.DEAD):
            return
        if not group.elect_joined_leader() and group.members:
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.generation += 1
        group.protocol_name = group.select_protocol() if group.members else None
        group.transition(_S.COMPLETING_REBALANCE if group.members else _S.EMPTY, now_ms)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        if group.is_in(_S.EMPTY):
            self.write_group(group, {}, PendingWrite(b""), fx)
            return
        for member in group.members.values():
            answer = self._join_answer(
                group, member.member_id, with_members=group.leader_id == member.member_id
            )
            self.complete_join(group, member, answer, fx)
            self.heartbeat_after(member, now_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def _propagate_assignment(
        self, group: ClassicGroup, assignment: dict[str, bytes], error: ErrorCode, now_ms: int, fx: Effects
    ) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
            answer = SyncResponse(
                error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if self.complete_sync(group, member, answer, fx):
                self.heartbeat_after(member, now_ms)

    def drop_member(self, group: ClassicGroup, member: Member, fx: Effects) -> None:
        """Remove a member; parked answers get UNKNOWN_MEMBER_ID so a live client rejoins."""
        self.complete_join(group, member, JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID), fx)
        self.complete_sync(group, member, SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID), fx)
        group.remove(member.member_id)

    def remove_member_and_update(self, group: ClassicGroup, member: Member, now_ms: int, fx: Effects) -> None:
        self.drop_member(group, member, fx)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self.rebalance_or_complete(group, now_ms, fx)
        elif group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join_phase(group, now_ms, fx)

    # ------------------------------------------------------------ SyncGroup

    def sync(self, group: ClassicGroup, req: SyncRequest, now_ms: int, fx: Effects) -> SyncResponse | None:
        if group.is_in(_S.DEAD):
            return SyncResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            return SyncResponse(error)
        if req.generation_id != group.generation:
            return SyncResponse(ErrorCode.ILLEGAL_GENERATION)
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
            req.protocol_name, group.protocol_name
        ):
            return SyncResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(_S.PREPARING_REBALANCE):
            return SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members[req.member_id]
        self._synced(group, req.member_id)
        if group.is_in(_S.STABLE):
            return SyncResponse(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        member.awaiting_sync = True
        fx.awaits = member.member_id
        if group.leader_id == req.member_id:
            assignment = {m: req.assignments.get(m, b"") for m in group.members}
            write = PendingWrite(b"", WriteKind.SYNC, group.generation, assignment)
            self.write_group(group, assignment, write, fx)
        return None

    def _synced(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None

    def sync_write_durable(self, group: ClassicGroup, write: PendingWrite, now_ms: int, fx: Effects) -> None:
        if group.is_in(_S.COMPLETING_REBALANCE) and group.generation == write.generation:
            self._propagate_assignment(group, write.assignment, ErrorCode.NONE, now_ms, fx)
            group.transition(_S.STABLE, now_ms)

    def write_failed(
        self, group: ClassicGroup, write: PendingWrite, error: ErrorCode, now_ms: int, fx: Effects
    ) -> None:
        if write.kind is WriteKind.SYNC:
            if group.is_in(_S.COMPLETING_REBALANCE) and group.generation == write.generation:
                self._propagate_assignment(group, {}, error, now_ms, fx)
                self.rebalance_or_complete(group, now_ms, fx)
        elif write.kind is WriteKind.STATIC:
            member = group.members.get(write.member_id)
            if member is not None:
                self.complete_join(group, member, JoinResponse(error, generation_id=group.generation), fx)

    # ------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        if group.is_in(_S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(_S.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.heartbeat_after(group.members[member_id], now_ms)
        if group.is_in(_S.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self, group: ClassicGroup, leaving: list[LeaveMember], now_ms: int, fx: Effects
    ) -> LeaveResponse:
        if group.is_in(_S.DEAD):
            return LeaveResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        answers = [(m.member_id, m.group_instance_id, self._leave_one(group, m, fx)) for m in leaving]
        if any(error is ErrorCode.NONE for _, _, error in answers):
            if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
                self.rebalance_or_complete(group, now_ms, fx)
            elif group.is_in(_S.PREPARING_REBALANCE):
                self.maybe_complete_join_phase(group, now_ms, fx)
        return LeaveResponse(ErrorCode.NONE, tuple(answers))

    def _leave_one(self, group: ClassicGroup, who: LeaveMember, fx: Effects) -> ErrorCode:
        if who.member_id == UNKNOWN_MEMBER_ID:
            static_id = (
                None if who.group_instance_id is None else group.static_members.get(who.group_instance_id)
            )
            if static_id is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self.drop_member(group, group.members[static_id], fx)
            return ErrorCode.NONE
        if who.member_id in group.pending_members:
            group.pending_members.pop(who.member_id)
            return ErrorCode.NONE
        error = group.validate_member(who.member_id, who.group_instance_id)
        if error is not None:
            return error
        self.drop_member(group, group.members[who.member_id], fx)
        return ErrorCode.NONE

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self, group: ClassicGroup) -> int | None:
        deadlines: list[int] = [d for d in (group.join_deadline_ms, group.sync_deadline_ms) if d is not None]
        deadlines += group.pending_members.values()
        deadlines += [
            m.heartbeat_deadline_ms for m in group.members.values() if m.heartbeat_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    def on_timer(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        """Fire every deadline due at ``now_ms``, including ones re-armed for ``now_ms`` (a zero
        initial-rebalance delay extended by a late joiner)."""
        for _ in range(_MAX_TIMER_ROUNDS):
            deadline = self.next_deadline_ms(group)
            if deadline is None or deadline > now_ms:
                return
            self._fire(group, now_ms, fx)

    def _fire(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now_ms:
                group.pending_members.pop(member_id)
                if group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
                    self.complete_join_phase(group, now_ms, fx)
        for member in list(group.members.values()):
            due = member.heartbeat_deadline_ms
            if due is None or due > now_ms or member.member_id not in group.members:
                continue
            member.heartbeat_deadline_ms = None
            if not member.has_satisfied_heartbeat():
                self.remove_member_and_update(group, member, now_ms, fx)
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
            self._expire_pending_sync(group, now_ms, fx)
        if group.join_deadline_ms is not None and group.join_deadline_ms <= now_ms:
            self._join_timer(group, now_ms, fx)

    def _expire_pending_sync(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        group.sync_deadline_ms = None
        if group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE) and group.pending_sync:
            for member_id in list(group.pending_sync):
                self.drop_member(group, group.members[member_id], fx)
            self.prepare_rebalance(group, now_ms, fx)

    def _join_timer(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        initial = group.initial_delay
        if initial is not None and group.new_member_added and initial.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, initial.remaining_ms)
            group.initial_delay = InitialDelay(delay, max(initial.remaining_ms - initial.delay_ms, 0))
            group.join_deadline_ms = now_ms + delay
            return
        self.complete_join_phase(group, now_ms, fx)


def _rebalance_timeout(req: JoinRequest) -> int:
    return req.session_timeout_ms if req.rebalance_timeout_ms < 0 else req.rebalance_timeout_ms


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and requested != current
