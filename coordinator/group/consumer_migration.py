"""The classic protocol's members of a consumer-protocol group (Kafka's online migration,
``group.consumer.migration.policy``): the conversion of a classic group by the first
consumer-protocol member's heartbeat (``_convert``), and JoinGroup, SyncGroup, Heartbeat and
LeaveGroup of its classic members.

Members of the classic protocol take the same three steps as a heartbeat through JoinGroup
(``classic_join``: the subscription and owned partitions from the embedded consumer protocol);
SyncGroup hands them their current assignment, Heartbeat tells them to rejoin
(REBALANCE_IN_PROGRESS) when their epoch is behind or they must revoke. Told so, a member has
its rebalance timeout to join and then to sync (Kafka's join and sync timeouts). When only
classic members are left, the group's records end (``downgrade``) and it is classic again.

``ClassicMembers`` is the part of ``ConsumerGroups`` that does this; the heartbeat's steps it
reuses are declared here and defined there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType

from coordinator.group.assignors import TopicsImage
from coordinator.group.consumer_state import ConsumerGroup, ConsumerMember, MemberId, MemberState
from coordinator.group.consumer_types import ConsumerConfig
from coordinator.group.consumer_writer import MemberKey, PendingWrite, Refusal, Writer, metadata_hash
from coordinator.group.reconcile import OwnedReport
from coordinator.group.state import CONSUMER_PROTOCOL_TYPE, ClassicGroup
from coordinator.group.types import (
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveResponse,
    Record,
    SyncRequest,
    SyncResponse,
)
from protocol.consumer_group_log import (
    NO_PARTITIONS,
    ClassicMemberMetadata,
    GroupMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicPartitions,
    partitions,
)
from protocol.consumer_protocol import (
    Assignment,
    ByTopic,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from protocol.errors import ErrorCode
from protocol.group_log import GroupLogDecodeError

_E = ErrorCode


class ClassicMembers(ABC):
    """The classic protocol's members of the consumer-protocol groups (``ConsumerGroups``' part)."""

    config: ConsumerConfig
    groups: dict[str, ConsumerGroup]
    image: TopicsImage
    _pending: dict[str, list[PendingWrite]]
    _sessions: dict[MemberKey, int]
    _classic_deadlines: dict[MemberKey, int]
    _new_member_id: Callable[[], str]

    # ------------------------------------------------------------ the heartbeat's steps reused

    @abstractmethod
    def _write_member(self, writer: Writer, member: ConsumerMember, updated: ConsumerMember) -> None: ...

    @abstractmethod
    def _target(self, writer: Writer, member: ConsumerMember, now_ms: int) -> tuple[int, TopicPartitions]: ...

    @abstractmethod
    def _reconcile(
        self, writer: Writer, member: ConsumerMember, target_epoch: int, target: TopicPartitions,
        owned: OwnedReport, now_ms: int,
    ) -> ConsumerMember: ...

    @abstractmethod
    def _restore(self, writer: Writer) -> None: ...

    @abstractmethod
    def _forget(self, group_id: str, member_id: MemberId) -> None: ...

    @abstractmethod
    def _all_subscribed(self, group: ConsumerGroup) -> set[str]: ...

    @abstractmethod
    def delete_records(self, group_id: str) -> list[Record]: ...

    # ------------------------------------------------------------ the classic protocol's members

    def _convert(self, writer: Writer, classic: ClassicGroup, now_ms: int) -> None:
        """Kafka's ConsumerGroup.fromClassicGroup: each classic member becomes a member at the
        group's generation, Stable, its classic assignment both its target and its current one;
        the joining member's heartbeat then bumps the epoch and a new target follows."""
        epoch = classic.generation
        for m in classic.members.values():
            metadata = m.metadata(classic.protocol_name)
            subscription, assignment = _classic_protocol(classic, metadata, m.assignment)
            assigned = self._by_topic_id(assignment.partitions)
            member = ConsumerMember(
                MemberId(m.member_id), m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                tuple(sorted(set(subscription.topics))), None, m.rebalance_timeout_ms, None, epoch, epoch,
                MemberState.STABLE, assigned,
                assignment_epochs=MappingProxyType({(t, p): epoch for t, ps in assigned.items() for p in ps}),
                classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
            )
            writer.write(RecordType.MEMBER_METADATA, member.metadata_value(), member.member_id)
            target = TargetAssignmentMemberValue(assigned)
            writer.write(RecordType.TARGET_ASSIGNMENT_MEMBER, target, member.member_id)
            writer.write(RecordType.CURRENT_MEMBER_ASSIGNMENT, member.assignment_value(), member.member_id)
            self._sessions[(classic.group_id, member.member_id)] = now_ms + m.session_timeout_ms
        hashed = metadata_hash(self._all_subscribed(writer.group), self.image)
        writer.write(RecordType.GROUP_METADATA, GroupMetadataValue(epoch, hashed))
        writer.write(RecordType.TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadataValue(epoch))

    def _by_topic_id(self, by_name: ByTopic) -> TopicPartitions:
        known = {name: self.image[name].topic_id for name, _ in by_name if name in self.image}
        return partitions({known[name]: ps for name, ps in by_name if name in known})

    def _by_name(self, assigned: TopicPartitions) -> dict[str, frozenset[int]]:
        names = {info.topic_id: name for name, info in self.image.items()}
        return {names[t]: ps for t, ps in assigned.items() if t in names}

    def classic_join(
        self, req: JoinRequest, image: TopicsImage, now_ms: int
    ) -> tuple[JoinResponse, list[Record]]:
        """Kafka's classicGroupJoinToConsumerGroup: a classic member's JoinGroup runs the
        heartbeat's three steps (the subscription and owned partitions come from the embedded
        consumer protocol) and is answered at once, as a follower, with its member epoch as the
        generation; SyncGroup then hands it its current assignment."""
        self.image = image
        group = self.groups[req.group_id]
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not _supported(group, req.protocols):
            return JoinResponse(_E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id), []
        known = None if req.group_instance_id is None else group.static_members.get(req.group_instance_id)
        # a static member coming back without its id takes its place again (Kafka gives it a new id)
        member_id = MemberId(req.member_id or known or self._new_member_id())
        if not req.member_id and req.group_instance_id is None and req.api_version >= 4:
            return JoinResponse(_E.MEMBER_ID_REQUIRED, member_id=member_id), []
        writer = Writer(group)
        try:
            member = self._classic_joining(writer, req, member_id, now_ms)
        except Refusal as refusal:
            self._restore(writer)
            return JoinResponse(refusal.error, member_id=req.member_id), []
        self._keep_pending(writer)
        self._sessions[(req.group_id, member_id)] = now_ms + req.session_timeout_ms
        self._classic_deadlines[(req.group_id, member_id)] = now_ms + max(member.rebalance_timeout_ms, 0)
        name = req.protocols[0][0]
        response = JoinResponse(_E.NONE, member_id, member.member_epoch, CONSUMER_PROTOCOL_TYPE, name)
        return response, writer.records

    def _classic_joining(
        self, writer: Writer, req: JoinRequest, member_id: MemberId, now_ms: int
    ) -> ConsumerMember:
        group = writer.group
        member = self._classic_member(group, member_id, req.group_instance_id, joining=True)
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except GroupLogDecodeError:
            raise Refusal(_E.INCONSISTENT_GROUP_PROTOCOL, "Malformed embedded consumer protocol.") from None
        updated = replace(
            member,
            instance_id=req.group_instance_id,
            rack_id=subscription.rack_id or member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            client_id=req.client_id,
            client_host=req.client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, req.protocols),
        )
        self._write_member(writer, member, updated)
        target_epoch, target = self._target(writer, updated, now_ms)
        owned = [(t, tuple(ps)) for t, ps in self._by_topic_id(subscription.owned).items()]
        return self._reconcile(writer, group.members[member_id], target_epoch, target, owned, now_ms)

    def _classic_member(
        self, group: ConsumerGroup, member_id: MemberId, instance_id: str | None, joining: bool = False
    ) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember for a classic request (a joining member may be new)."""
        if instance_id is not None and (known := group.static_members.get(instance_id)) is not None:
            if known != member_id and member_id:
                raise Refusal(_E.FENCED_INSTANCE_ID, f"Static member {member_id} was fenced by {known}.")
            member_id = known
        member = group.members.get(member_id)
        if member is None and joining:
            if len(group.members) >= self.config.max_size:
                raise Refusal(_E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum size.")
            return ConsumerMember(member_id)
        if member is None or not member.uses_classic:
            raise Refusal(_E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a classic member of the group.")
        return member

    def classic_sync(self, req: SyncRequest, now_ms: int) -> SyncResponse:
        """Kafka's classicGroupSyncToConsumerGroup: the member's current assignment, once it has
        joined at the group's epoch (or is revoking)."""
        group = self.groups[req.group_id]
        try:
            member = self._classic_member(group, MemberId(req.member_id), req.group_instance_id)
        except Refusal as refusal:
            return SyncResponse(refusal.error)
        assert member.classic is not None
        name, subscription = member.classic.protocols[0]
        if req.generation_id != member.member_epoch:
            return SyncResponse(_E.ILLEGAL_GENERATION)
        if req.protocol_type not in (None, CONSUMER_PROTOCOL_TYPE) or req.protocol_name not in (None, name):
            return SyncResponse(_E.INCONSISTENT_GROUP_PROTOCOL)
        key = (group.group_id, member.member_id)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._classic_deadlines.setdefault(key, now_ms + max(member.rebalance_timeout_ms, 0))
            return SyncResponse(_E.REBALANCE_IN_PROGRESS)
        self._classic_deadlines.pop(key, None)
        self._sessions[key] = now_ms + member.classic.session_timeout_ms
        assignment = encode_assignment(self._by_name(member.assigned), subscription_version(subscription))
        return SyncResponse(_E.NONE, CONSUMER_PROTOCOL_TYPE, name, assignment)

    def classic_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS tells the member to
        rejoin when the group epoch moved on, it must revoke, or what it waits for is released."""
        group = self.groups[group_id]
        try:
            member = self._classic_member(group, MemberId(member_id), instance_id)
        except Refusal as refusal:
            return refusal.error
        assert member.classic is not None
        if generation != member.member_epoch:
            return _E.ILLEGAL_GENERATION
        self._sessions[(group_id, member.member_id)] = now_ms + member.classic.session_timeout_ms
        unrevoked = member.state is MemberState.UNREVOKED_PARTITIONS
        released = member.state is MemberState.UNRELEASED_PARTITIONS and not _waits_on_other(group, member)
        if member.member_epoch < group.group_epoch or unrevoked or released:
            deadline = now_ms + max(member.rebalance_timeout_ms, 0)
            self._classic_deadlines.setdefault((group_id, member.member_id), deadline)
            return _E.REBALANCE_IN_PROGRESS
        return _E.NONE

    def classic_leave(
        self, group_id: str, leaving: Sequence[LeaveMember]
    ) -> tuple[LeaveResponse, list[Record]]:
        """Kafka's classicGroupLeaveToConsumerGroup: each classic member named goes; the group
        epoch is bumped once."""
        writer = Writer(self.groups[group_id])
        answers: list[tuple[str, str | None, ErrorCode]] = []
        for one in leaving:
            try:
                member = self._classic_member(writer.group, MemberId(one.member_id), one.group_instance_id)
            except Refusal as refusal:
                answers.append((one.member_id, one.group_instance_id, refusal.error))
                continue
            writer.remove_member(member.member_id)
            self._forget(group_id, member.member_id)
            answers.append((member.member_id, one.group_instance_id, _E.NONE))
        if writer.records:
            writer.bump_epoch(metadata_hash(self._all_subscribed(writer.group), self.image))
            self._keep_pending(writer)
        return LeaveResponse(_E.NONE, tuple(answers)), writer.records

    def downgradable(self, group_id: str, leaving: Iterable[MemberId]) -> list[ConsumerMember]:
        """Kafka's validateOnlineDowngradeWithFencedMembers: when the members ``leaving`` go and
        only classic members remain, these (else nothing)."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        gone = set(leaving)
        others = [m for i, m in group.members.items() if i not in gone]
        return others if all(m.uses_classic for m in others) else []

    def downgrade(self, group_id: str) -> list[Record]:
        """Tombstones for every record of the group (its members' too); it is forgotten here."""
        group = self.groups[group_id]
        writer = Writer(ConsumerGroup(group_id))
        for member_id in list(group.members):
            writer.remove_member(member_id)
            self._forget(group_id, member_id)
        return writer.records + self.delete_records(group_id)

    def classic_assignment(self, group: ConsumerGroup, member: ConsumerMember) -> bytes:
        """The member's target as its classic assignment (Kafka's ClassicGroup.fromConsumerGroup)."""
        assert member.classic is not None
        target = self._by_name(group.targets.get(member.member_id, NO_PARTITIONS))
        return encode_assignment(target, subscription_version(member.classic.protocols[0][1]))

    def _keep_pending(self, writer: Writer) -> None:
        if writer.records:
            pending = PendingWrite(list(writer.records), writer.snapshot)
            self._pending.setdefault(writer.group.group_id, []).append(pending)


def _supported(group: ConsumerGroup, protocols: Sequence[tuple[str, bytes]]) -> bool:
    """Kafka's supportsClassicProtocols: a protocol offered that every classic member supports."""
    classic = [m.classic for m in group.members.values() if m.classic is not None]
    return any(all(name in {n for n, _ in c.protocols} for c in classic) for name, _ in protocols)


def _classic_protocol(
    classic: ClassicGroup, metadata: bytes | None, assignment: bytes
) -> tuple[Subscription, Assignment]:
    """A classic member's subscription and assignment, if Kafka's upgrade takes them: not when
    malformed, nor when the assignment carries a client-side assignor's user data, which the
    consumer group would lose (Kafka 4.3's UnsupportedVersionException)."""
    upgrade = f"Cannot upgrade classic group {classic.group_id} to consumer group because"
    try:
        subscription, decoded = decode_subscription(metadata or b""), decode_assignment(assignment)
    except GroupLogDecodeError:
        malformed = f"{upgrade} the embedded consumer protocol is malformed."
        raise Refusal(_E.GROUP_ID_NOT_FOUND, malformed) from None
    if decoded.user_data:
        message = f"{upgrade} an unsupported custom assignor is in use. Please refer to the documentation " \
            "or switch to a default assignor before re-attempting the upgrade."
        raise Refusal(_E.GROUP_ID_NOT_FOUND, message)
    return subscription, decoded


def _waits_on_other(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target another member still holds."""
    target = group.targets.get(member.member_id, NO_PARTITIONS)
    return any(
        p not in member.assigned.get(t, frozenset()) and group.is_owned_by_other(member.member_id, (t, p))
        for t, ps in target.items()
        for p in ps
    )


