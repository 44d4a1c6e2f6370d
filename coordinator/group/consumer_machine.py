"""Consumer-protocol groups (KIP-848) as a pure state machine: ConsumerGroupHeartbeat, member
expiry, ConsumerGroupDescribe and the member-epoch checks of offset commits and fetches.

A heartbeat, as Kafka's GroupMetadataManager.consumerGroupHeartbeat:
1. the member is created or updated; a change is a ConsumerGroupMemberMetadata record, and a
   changed subscription (or changed subscribed topics) bumps the group epoch
   (ConsumerGroupMetadata);
2. when the group epoch is ahead of the assignment epoch, the assignor computes a new target:
   a ConsumerGroupTargetAssignmentMember record per member whose target changed, then the
   ConsumerGroupTargetAssignmentMetadata record with the new assignment epoch;
3. the member's current assignment moves towards its target (``reconcile``), a
   ConsumerGroupCurrentMemberAssignment record when it changes.

The records are applied to the group as they are made (``ConsumerGroup.apply``, the replay a
load uses too), so the next request sees them, as Kafka's timeline does. The broker appends
them; their durable replay is then recognised and skipped; a failed write restores the group as
it was before the operation (``write_failed``).

Session and rebalance deadlines are soft state: a heartbeat pushes the member's session deadline
by ``group.consumer.session.timeout.ms``; a member asked to revoke partitions has its rebalance
timeout to do so. Either lapsing fences the member (``on_timer``).

The classic protocol's members of a group upgraded online are ``ClassicMembers``
(consumer_migration.py); the records of one operation are made by ``Writer``
(consumer_writer.py), the request checks are in consumer_checks.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from coordinator.group.assignors import ASSIGNORS, TopicsImage
from coordinator.group.consumer_checks import check_epoch
from coordinator.group.consumer_migration import ClassicMembers
from coordinator.group.consumer_state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberId,
    MemberState,
)
from coordinator.group.consumer_types import (
    ConsumerConfig,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    HeartbeatRequest,
    HeartbeatResponse,
)
from coordinator.group.consumer_writer import (
    MemberKey,
    PendingWrite,
    Refusal,
    Writer,
    metadata_hash,
    random_member_id,
    subscribed_topics,
)
from coordinator.group.reconcile import FencedMember, OwnedReport, next_member
from coordinator.group.state import ClassicGroup
from coordinator.group.types import Record
from protocol.consumer_group_log import (
    NO_PARTITIONS,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicPartitions,
    decode_consumer_key,
    decode_consumer_value,
)
from protocol.errors import ErrorCode
from protocol.group_log import GroupLogDecodeError
from protocol.types import TopicId, TopicPartition

_E = ErrorCode


class ConsumerGroups(ClassicMembers):
    """The consumer-protocol groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(self, config: ConsumerConfig, new_member_id: Callable[[], str] | None = None) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self.image: TopicsImage = {}  # the topics as the last heartbeat saw them
        self._pending: dict[str, list[PendingWrite]] = {}
        self._sessions: dict[MemberKey, int] = {}
        self._rebalances: dict[MemberKey, tuple[int, int]] = {}  # epoch to leave, deadline
        # a classic member told to rejoin must join, and once joined sync, within its rebalance timeout
        self._classic_deadlines: dict[MemberKey, int] = {}
        self._assigned_at: dict[str, int] = {}  # when each group's target was last computed
        self._new_member_id = new_member_id or random_member_id

    # ------------------------------------------------------------ replay

    def replay(self, key: bytes, value: bytes | None) -> bool:
        """Apply a durable record; False when the key is not a consumer-group record."""
        decoded = decode_consumer_key(key)
        if decoded is None:
            return False
        pending = self._pending.get(decoded.group)
        if pending and pending[0].records and pending[0].records[0] == (key, value):
            pending[0].records.pop(0)
            if not pending[0].records:
                pending.pop(0)
            return True
        try:
            parsed = None if value is None else decode_consumer_value(decoded.record, value)
        except GroupLogDecodeError:
            return True  # a value version we do not know: skipped, as Kafka skips it
        if value is not None and parsed is None:
            return True  # the partition metadata Kafka 4.0 wrote: the hash replaces it
        if value is None and decoded.record is RecordType.GROUP_METADATA:
            self.groups.pop(decoded.group, None)  # the group's last record: it is deleted
            self._pending.pop(decoded.group, None)
        elif value is not None or decoded.group in self.groups:
            self._group(decoded.group).apply(decoded, parsed)
        return True

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def write_failed(self, records: Iterable[Record]) -> None:
        """The append of ``records`` failed: their group goes back to before that operation."""
        for key, value in records:
            decoded = decode_consumer_key(key)
            pending = None if decoded is None else self._pending.get(decoded.group)
            if decoded is None or not pending:
                continue
            index = next((i for i, w in enumerate(pending) if (key, value) in w.records), None)
            if index is None:
                continue
            snapshot = pending[index].snapshot
            del pending[index:]
            if snapshot is None:
                self.groups.pop(decoded.group, None)
            else:
                self.groups[decoded.group] = snapshot

    def drop(self, owns: Callable[[str], bool]) -> None:
        for group_id in [g for g in self.groups if owns(g)]:
            del self.groups[group_id]
            self._pending.pop(group_id, None)
        self._sessions = {k: v for k, v in self._sessions.items() if not owns(k[0])}
        self._assigned_at = {g: t for g, t in self._assigned_at.items() if not owns(g)}
        self._rebalances = {k: v for k, v in self._rebalances.items() if not owns(k[0])}
        self._classic_deadlines = {k: d for k, d in self._classic_deadlines.items() if not owns(k[0])}

    def loaded(self, owns: Callable[[str], bool], now_ms: int) -> None:
        """After a load every member has a session timeout to heartbeat within, and one asked to
        revoke partitions its rebalance timeout to do so."""
        for group in [g for g in self.groups.values() if owns(g.group_id)]:
            for member_id, member in group.members.items():
                key = (group.group_id, member_id)
                self._sessions[key] = now_ms + self.config.session_timeout_ms
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                    self._rebalances[key] = (member.member_epoch, deadline)

    # ------------------------------------------------------------ the operation

    def heartbeat(
        self, req: HeartbeatRequest, image: TopicsImage, now_ms: int, upgrading: ClassicGroup | None = None
    ) -> tuple[HeartbeatResponse, list[Record]]:
        """``upgrading``: the classic group this first heartbeat converts (the online upgrade)."""
        self.image = image
        existed = req.group_id in self.groups
        if not existed and req.member_epoch != 0:
            return HeartbeatResponse(_E.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found."), []
        writer = Writer(self._group(req.group_id), existed)
        try:
            if upgrading is not None:
                self._convert(writer, upgrading, now_ms)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                response = self._leave(writer, req)
            else:
                response = self._heartbeat(writer, req, now_ms)
        except Refusal as refusal:
            self._restore(writer)
            return HeartbeatResponse(refusal.error, refusal.message), []
        if writer.records:
            pending = PendingWrite(list(writer.records), writer.snapshot)
            self._pending.setdefault(req.group_id, []).append(pending)
        elif not existed:
            del self.groups[req.group_id]
        return response, writer.records

    def _restore(self, writer: Writer) -> None:
        """The group as it was before the operation (gone, if the operation made it)."""
        group_id = writer.group.group_id
        if not writer.existed:
            self.groups.pop(group_id, None)
        elif writer.snapshot is not None:
            self.groups[group_id] = writer.snapshot

    def _heartbeat(self, writer: Writer, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        group = writer.group
        member_id = MemberId(req.member_id or self._new_member_id())
        member = self._member(writer, req, member_id)
        updated = self._updated(member, req)
        self._write_member(writer, member, updated)
        target_epoch, target = self._target(writer, updated, now_ms)
        current = group.members[member_id]
        reconciled = self._reconcile(writer, current, target_epoch, target, req.owned, now_ms)
        self._sessions[(group.group_id, member_id)] = now_ms + self.config.session_timeout_ms
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.owned is not None
        )
        changed = dict(reconciled.assigned) != dict(member.assigned)
        return HeartbeatResponse(
            _E.NONE,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=reconciled.assigned if full or changed else None,
        )

    # ------------------------------------------------------------ step 1: the member

    def _member(self, writer: Writer, req: HeartbeatRequest, member_id: MemberId) -> ConsumerMember:
        group = writer.group
        joining = req.member_epoch == 0
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise Refusal(_E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum size.")
        if req.instance_id is not None:
            return self._static_member(writer, req, member_id)
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise Refusal(_E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
            return ConsumerMember(member_id)
        check_epoch(member, req)
        return member

    def _static_member(self, writer: Writer, req: HeartbeatRequest, member_id: MemberId) -> ConsumerMember:
        group = writer.group
        assert req.instance_id is not None
        existing_id = group.static_members.get(req.instance_id)
        existing = None if existing_id is None else group.members.get(existing_id)
        if req.member_epoch != 0:
            if existing is None:
                raise Refusal(_E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if existing.member_id != member_id:
                message = f"Static member {member_id} was fenced by {existing.member_id}."
                raise Refusal(_E.FENCED_INSTANCE_ID, message)
            check_epoch(existing, req)
            return existing
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id)
        if existing.member_id == member_id:
            return existing
        if existing.member_epoch != STATIC_LEAVE_EPOCH:
            raise Refusal(
                _E.UNRELEASED_INSTANCE_ID,
                f"Instance id {req.instance_id} is owned by member {existing.member_id}.",
            )
        return self._replace_static(writer, existing, member_id)

    def _replace_static(self, writer: Writer, old: ConsumerMember, member_id: MemberId) -> ConsumerMember:
        """The rejoining static member takes over its predecessor's target and partitions."""
        target = writer.group.targets.get(old.member_id, NO_PARTITIONS)
        new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        writer.remove_member(old.member_id)
        self._forget(writer.group.group_id, old.member_id)
        writer.write(RecordType.MEMBER_METADATA, new.metadata_value(), member_id)
        writer.write(RecordType.TARGET_ASSIGNMENT_MEMBER, TargetAssignmentMemberValue(target), member_id)
        writer.write(RecordType.CURRENT_MEMBER_ASSIGNMENT, new.assignment_value(), member_id)
        return writer.group.members[member_id]

    def _updated(self, member: ConsumerMember, req: HeartbeatRequest) -> ConsumerMember:
        """The member with what the request changes (a null field changes nothing)."""
        return replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms
            ),
            server_assignor=(
                req.server_assignor if req.server_assignor is not None else member.server_assignor
            ),
            subscribed_topic_names=(
                tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=req.client_id,
            client_host=req.client_host,
        )

    def _write_member(self, writer: Writer, member: ConsumerMember, updated: ConsumerMember) -> None:
        """A changed member is written; a changed subscription or changed subscribed topics bump
        the group epoch."""
        group = writer.group
        is_new = updated.member_id not in group.members
        if is_new or updated.metadata_value() != member.metadata_value():
            writer.write(RecordType.MEMBER_METADATA, updated.metadata_value(), updated.member_id)
        subscription_changed = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        )
        hashed = metadata_hash(self._all_subscribed(group), self.image)
        if subscription_changed or hashed != group.metadata_hash:
            writer.bump_epoch(hashed)

    def _all_subscribed(self, group: ConsumerGroup) -> set[str]:
        return {t for m in group.members.values() for t in subscribed_topics(m, self.image)}

    # ------------------------------------------------------------ step 2: the target

    def _target(self, writer: Writer, member: ConsumerMember, now_ms: int) -> tuple[int, TopicPartitions]:
        """A new target when the group epoch moved on, at most once per
        ``group.consumer.assignment.interval.ms`` (Kafka 4.3's assignment batching, KIP-1263);
        meanwhile members reconcile towards the previous target."""
        group = writer.group
        last = self._assigned_at.get(group.group_id)
        due = last is None or now_ms >= last + self.config.assignment_interval_ms
        if group.group_epoch > group.assignment_epoch and due:
            self._assign(writer, member)
            self._assigned_at[group.group_id] = now_ms
        return group.assignment_epoch, group.targets.get(member.member_id, NO_PARTITIONS)

    def _assign(self, writer: Writer, member: ConsumerMember) -> None:
        group = writer.group
        assignor = ASSIGNORS[self._assignor_name(group, member)]
        subscriptions = {m.member_id: subscribed_topics(m, self.image) for m in group.members.values()}
        targets = assignor(subscriptions, self.image, group.targets)
        for member_id, target in sorted(targets.items()):
            previous = group.targets.get(member_id)
            if previous is None or dict(previous) != dict(target):
                value = TargetAssignmentMemberValue(target)
                writer.write(RecordType.TARGET_ASSIGNMENT_MEMBER, value, member_id)
        writer.write(RecordType.TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadataValue(group.group_epoch))

    def _assignor_name(self, group: ConsumerGroup, member: ConsumerMember) -> str:
        """Kafka: the assignor most members name, else the broker's first (default) one."""
        named = [m.server_assignor for m in group.members.values() if m.server_assignor]
        if named:
            return max(sorted(set(named)), key=named.count)
        return self.config.assignors[0]

    # ------------------------------------------------------------ step 3: reconciliation

    def _reconcile(
        self,
        writer: Writer,
        member: ConsumerMember,
        target_epoch: int,
        target: TopicPartitions,
        owned: OwnedReport,
        now_ms: int,
    ) -> ConsumerMember:
        group = writer.group
        if member.is_reconciled_to(target_epoch):
            return member
        try:
            updated = next_member(
                member,
                target_epoch,
                target,
                lambda p: group.is_owned_by_other(member.member_id, p),
                owned,
            )
        except FencedMember as exc:
            raise Refusal(_E.FENCED_MEMBER_EPOCH, str(exc)) from None
        if updated == member:
            return member
        writer.write(RecordType.CURRENT_MEMBER_ASSIGNMENT, updated.assignment_value(), member.member_id)
        key = (group.group_id, member.member_id)
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            timeout = max(updated.rebalance_timeout_ms, 0)
            self._rebalances[key] = (updated.member_epoch, now_ms + timeout)
        else:
            self._rebalances.pop(key, None)
        return group.members[member.member_id]

    # ------------------------------------------------------------ leaving and fencing

    def _leave(self, writer: Writer, req: HeartbeatRequest) -> HeartbeatResponse:
        group = writer.group
        member_id = MemberId(req.member_id)
        if req.instance_id is None:
            if member_id not in group.members:
                raise Refusal(_E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
            self._fence(writer, member_id)
            return HeartbeatResponse(_E.NONE, member_id=member_id, member_epoch=req.member_epoch)
        existing_id = group.static_members.get(req.instance_id)
        if existing_id is None:
            raise Refusal(_E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing_id != member_id:
            raise Refusal(_E.FENCED_INSTANCE_ID, f"Static member {member_id} was fenced by {existing_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            leaving = replace(
                group.members[member_id], member_epoch=STATIC_LEAVE_EPOCH, pending_revocation=NO_PARTITIONS
            )
            writer.write(RecordType.CURRENT_MEMBER_ASSIGNMENT, leaving.assignment_value(), member_id)
            return HeartbeatResponse(_E.NONE, member_id=member_id, member_epoch=STATIC_LEAVE_EPOCH)
        self._fence(writer, member_id)
        return HeartbeatResponse(_E.NONE, member_id=member_id, member_epoch=req.member_epoch)

    def _fence(self, writer: Writer, member_id: MemberId) -> None:
        """The member goes with its records; the group epoch is bumped for a new target. The
        last member gone, the (empty) target is at the new epoch at once (KAFKA-20442, Kafka
        4.4: an empty group's assignment epoch equals its group epoch)."""
        writer.remove_member(member_id)
        writer.bump_epoch(metadata_hash(self._all_subscribed(writer.group), self.image))
        if not writer.group.members:
            epoch = TargetAssignmentMetadataValue(writer.group.group_epoch)
            writer.write(RecordType.TARGET_ASSIGNMENT_METADATA, epoch)
        self._forget(writer.group.group_id, member_id)

    def _forget(self, group_id: str, member_id: MemberId) -> None:
        self._sessions.pop((group_id, member_id), None)
        self._rebalances.pop((group_id, member_id), None)
        self._classic_deadlines.pop((group_id, member_id), None)


    # ------------------------------------------------------------ timers

    def next_deadline_ms(self, live: Callable[[str], bool]) -> int | None:
        deadlines = [d for (g, _), d in self._sessions.items() if live(g)]
        deadlines += [d for (g, _), (_, d) in self._rebalances.items() if live(g)]
        deadlines += [d for (g, _), d in self._classic_deadlines.items() if live(g)]
        return min(deadlines, default=None)

    def due(self, now_ms: int, live: Callable[[str], bool]) -> set[MemberKey]:
        """Members whose session lapsed, or who did not revoke within the rebalance timeout."""
        expired = {k for k, d in self._sessions.items() if d <= now_ms and live(k[0])}
        expired |= {
            k for k, (epoch, d) in self._rebalances.items()
            if d <= now_ms and live(k[0]) and self._epoch_of(k) == epoch
        }
        expired |= {k for k, d in self._classic_deadlines.items() if d <= now_ms and live(k[0])}
        return expired

    def on_timer(self, now_ms: int, live: Callable[[str], bool]) -> list[Record]:
        """The members ``due`` are fenced."""
        expired = self.due(now_ms, live)
        self._rebalances = {k: v for k, v in self._rebalances.items() if v[1] > now_ms}
        records: list[Record] = []
        for group_id, member_id in sorted(expired):
            records.extend(self._expire(group_id, member_id))
        return records

    def _epoch_of(self, key: MemberKey) -> int | None:
        group = self.groups.get(key[0])
        member = None if group is None else group.members.get(key[1])
        return None if member is None else member.member_epoch

    def _expire(self, group_id: str, member_id: MemberId) -> list[Record]:
        group = self.groups.get(group_id)
        self._forget(group_id, member_id)
        if group is None or member_id not in group.members:
            return []
        writer = Writer(group)
        self._fence(writer, member_id)
        self._pending.setdefault(group_id, []).append(PendingWrite(list(writer.records), writer.snapshot))
        return writer.records

    # ------------------------------------------------------------ describe, delete

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            return DescribedConsumerGroup(group_id, _E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        members = tuple(
            DescribedConsumerMember(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                m.subscribed_topic_names, m.subscribed_topic_regex, m.assigned,
                group.targets.get(m.member_id, NO_PARTITIONS), m.uses_classic,
            )
            for m in group.members.values()
        )
        anyone = next(iter(group.members.values()), ConsumerMember(MemberId("")))
        assignor = self._assignor_name(group, anyone)
        return DescribedConsumerGroup(
            group_id, _E.NONE, None, group.state().value, group.group_epoch, group.assignment_epoch,
            assignor, members,
        )

    def delete_records(self, group_id: str) -> list[Record]:
        """Tombstones for every record of an Empty group (DeleteGroups, or a classic join)."""
        group = self.groups.pop(group_id)
        self._pending.pop(group_id, None)
        writer = Writer(ConsumerGroup(group_id))
        for member_id in list(group.targets):
            writer.write(RecordType.TARGET_ASSIGNMENT_MEMBER, None, member_id)
        writer.write(RecordType.TARGET_ASSIGNMENT_METADATA, None)
        writer.write(RecordType.GROUP_METADATA, None)
        self.groups.pop(group_id, None)
        return writer.records

    # ------------------------------------------------------------ offsets

    def commit_error(
        self, group_id: str, member_id: str, epoch: int, partitions: Iterable[TopicPartition],
        topic_ids: Mapping[str, uuid.UUID], txn: bool, api_version: int,
    ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit, with KIP-1251's assignment epochs: a
        member's commit at an epoch behind its own is accepted for partitions it was given at or
        before that epoch. A transactional commit says ILLEGAL_GENERATION for a stale epoch."""
        group = self.groups[group_id]
        if epoch < 0 and not group.members:
            return None
        member = group.members.get(MemberId(member_id))
        if member is None:
            return _E.UNKNOWN_MEMBER_ID
        if member.uses_classic:  # Kafka: a classic member's generation is its member epoch, exactly
            return None if epoch == member.member_epoch else _E.ILLEGAL_GENERATION
        if not txn and api_version < 9:
            return _E.UNSUPPORTED_VERSION
        if epoch == member.member_epoch:
            return None
        stale = _E.ILLEGAL_GENERATION if txn else _E.STALE_MEMBER_EPOCH
        if epoch > member.member_epoch:
            return stale
        for topic, index in partitions:
            topic_id = topic_ids.get(topic)
            given = None if topic_id is None else member.assignment_epochs.get((TopicId(topic_id), index))
            if given is None or given > epoch:
                return stale
        return None

    def fetch_error(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch."""
        if member_id is None and epoch < 0:
            return None
        group = self.groups[group_id]
        member = group.members.get(MemberId(member_id or ""))
        if member is None:
            return _E.UNKNOWN_MEMBER_ID
        if epoch == member.member_epoch:
            return None
        return _E.ILLEGAL_GENERATION if member.uses_classic else _E.STALE_MEMBER_EPOCH
