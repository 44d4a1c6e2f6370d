"""Consumer-protocol groups (KIP-848): members, epochs, target and current assignments.

Facts from Kafka's ConsumerGroup / ConsumerGroupMember: the group epoch (bumped when a
subscription or the subscribed topics change, or a member goes), the target assignment and its
epoch, each member's epoch and previous epoch, its reconciliation state, the partitions it owns
and those it must still revoke. The group's state is derived: Empty without members, Assigning
while the group epoch is ahead of the assignment epoch, Reconciling until every member is
stable at the assignment epoch, then Stable.

A group changes only by ``apply`` of its records (``protocol.consumer_group_log``), live and at
load alike. Session and rebalance deadlines are soft state, never written (as Kafka's timers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import NewType

from protocol.consumer_group_log import (
    NO_PARTITIONS,
    ClassicMemberMetadata,
    ConsumerKey,
    ConsumerValue,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicPartitions,
)
from protocol.types import TopicId

MemberId = NewType("MemberId", str)
Owned = tuple[TopicId, int]  # a partition by topic id
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's MemberState, by the byte its record carries."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: MemberId
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=lambda: NO_PARTITIONS)
    pending_revocation: TopicPartitions = field(default_factory=lambda: NO_PARTITIONS)
    # KIP-1251: the member epoch at which each assigned partition was given to the member
    assignment_epochs: Mapping[Owned, int] = field(default_factory=lambda: MappingProxyType({}))
    classic: ClassicMemberMetadata | None = None  # a member of the classic protocol (online upgrade)

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex or "",  # Kafka writes "" for no regular expression
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            self.assigned,
            self.pending_revocation,
            self.assignment_epochs,
        )

    def with_metadata(self, v: MemberMetadataValue) -> ConsumerMember:
        return replace(
            self,
            instance_id=v.instance_id,
            rack_id=v.rack_id,
            client_id=v.client_id,
            client_host=v.client_host,
            subscribed_topic_names=v.subscribed_topic_names,
            subscribed_topic_regex=v.subscribed_topic_regex or None,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor,
            classic=v.classic,
        )

    def with_assignment(self, v: CurrentAssignmentValue) -> ConsumerMember:
        state = MemberState(v.state) if v.state in MemberState._value2member_map_ else MemberState.UNKNOWN
        return replace(
            self,
            member_epoch=v.member_epoch,
            previous_member_epoch=v.previous_member_epoch,
            state=state,
            assigned=v.assigned,
            pending_revocation=v.pending_revocation,
            assignment_epochs=v.assignment_epochs,
        )

    def owned(self) -> set[Owned]:
        """Assigned and pending revocation: the partitions no other member may be given yet."""
        held = (self.assigned, self.pending_revocation)
        return {(t, p) for part in held for t, ps in part.items() for p in ps}


@dataclass(slots=True)
class ConsumerGroup:
    """A new group starts at group and assignment epoch 1, an empty assignment, so that its first
    computed assignment has epoch 2 (Kafka 4.3, KAFKA-20268)."""

    group_id: str
    group_epoch: int = 1
    metadata_hash: int = 0
    assignment_epoch: int = 1
    assignment_timestamp_ms: int = 0
    members: dict[MemberId, ConsumerMember] = field(default_factory=dict)
    targets: dict[MemberId, TopicPartitions] = field(default_factory=dict)
    static_members: dict[str, MemberId] = field(default_factory=dict)  # instance id -> member id
    owners: dict[Owned, MemberId] = field(default_factory=dict)  # who holds each partition

    # ------------------------------------------------------------ derived

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def is_owned_by_other(self, member_id: MemberId, partition: Owned) -> bool:
        owner = self.owners.get(partition)
        return owner is not None and owner != member_id

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topic_names)

    def copy(self) -> ConsumerGroup:
        """A snapshot to restore if a write fails (members are immutable values)."""
        return replace(
            self,
            members=dict(self.members),
            targets=dict(self.targets),
            static_members=dict(self.static_members),
            owners=dict(self.owners),
        )

    # ------------------------------------------------------------ replay

    def apply(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        """One record of this group (a tombstone when ``value`` is None)."""
        member_id = MemberId(key.member)
        if key.record is RecordType.GROUP_METADATA and isinstance(value, GroupMetadataValue):
            self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif key.record is RecordType.TARGET_ASSIGNMENT_METADATA and isinstance(
            value, TargetAssignmentMetadataValue
        ):
            self.assignment_epoch = value.assignment_epoch
            self.assignment_timestamp_ms = value.assignment_timestamp
        elif key.record is RecordType.TARGET_ASSIGNMENT_MEMBER:
            self._apply_target(member_id, value)
        elif key.record is RecordType.MEMBER_METADATA:
            self._apply_member(member_id, value)
        elif key.record is RecordType.CURRENT_MEMBER_ASSIGNMENT:
            self._apply_current(member_id, value)

    def _apply_target(self, member_id: MemberId, value: ConsumerValue | None) -> None:
        if isinstance(value, TargetAssignmentMemberValue):
            self.targets[member_id] = value.partitions
        else:
            self.targets.pop(member_id, None)

    def _apply_member(self, member_id: MemberId, value: ConsumerValue | None) -> None:
        old = self.members.get(member_id)
        if old is not None and old.instance_id is not None:
            if self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        if not isinstance(value, MemberMetadataValue):
            if old is not None:
                self._release(old)
                del self.members[member_id]
            return
        member = (old or ConsumerMember(member_id)).with_metadata(value)
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _apply_current(self, member_id: MemberId, value: ConsumerValue | None) -> None:
        old = self.members.get(member_id)
        if old is None:
            if isinstance(value, CurrentAssignmentValue):  # a member's records in any order
                old = self.members[member_id] = ConsumerMember(member_id)
            else:
                return
        self._release(old)
        if isinstance(value, CurrentAssignmentValue):
            member = old.with_assignment(value)
        else:
            member = replace(old, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                             assigned=NO_PARTITIONS, pending_revocation=NO_PARTITIONS)
        self.members[member_id] = member
        self.owners.update(dict.fromkeys(member.owned(), member_id))

    def _release(self, member: ConsumerMember) -> None:
        for partition in member.owned():
            if self.owners.get(partition) == member.member_id:
                del self.owners[partition]
