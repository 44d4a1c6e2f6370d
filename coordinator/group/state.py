"""Classic group states, the legal-transition table, members and the group itself.

Facts from Kafka's ClassicGroupState / ClassicGroup / ClassicGroupMember: state names, the
VALID_PREVIOUS_STATES table, leader choice (first member added; on removal the next member),
protocol selection by vote among the protocols every member supports, static member
bookkeeping, and how a group is rebuilt from its GroupMetadataValue record (Stable with its
members, Empty without).

A group's *persistent* part (generation, protocol, leader, members with assignments) is what a
GroupMetadata record carries. The rebalance bookkeeping (who is awaiting a JoinGroup or SyncGroup
answer, heartbeat deadlines, pending member ids) is soft state that Kafka never writes either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from protocol.errors import ErrorCode
from protocol.group_log import GroupMetadataValue, MemberMetadata, parse_consumer_subscription_topics

CONSUMER_PROTOCOL_TYPE = "consumer"
Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """Case-insensitive, as ListGroups' states filter."""
        return _BY_LOWER.get(name.strip().lower())


_BY_LOWER = {s.value.lower(): s for s in GroupState}
_S = GroupState
# target state -> states it may be entered from (Kafka's ClassicGroupState).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A transition VALID_PREVIOUS_STATES forbids: a bug, never a client error."""


def check_transition(current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(f"{current.value} -> {target.value} is not allowed")


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    def metadata(self, protocol: str | None) -> bytes | None:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return None

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: new members must heartbeat (they may time out while awaiting join); members
        awaiting a rebalance answer satisfy the expectation automatically."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass(slots=True)
class InitialDelay:
    """Timer of the delayed initial rebalance (group.initial.rebalance.delay.ms)."""

    delay_ms: int
    remaining_ms: int


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> join deadline
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    join_deadline_ms: int | None = None
    initial_delay: InitialDelay | None = None
    sync_deadline_ms: int | None = None
    # Told (group, previous state) after every transition: the coordinator's index by state.
    on_transition: Callable[[ClassicGroup, GroupState], None] | None = field(
        default=None, repr=False, compare=False
    )

    # ------------------------------------------------------------ state

    def transition(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.state, target)
        previous = self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms
        if self.on_transition is not None:
            self.on_transition(self, previous)

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------ members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> tuple[Member, Member]:
        """The old member object (its awaiting flags tell which answers to fence) and the new one."""
        old = self.members.pop(old_id)
        new = Member(
            new_id,
            instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        self.members[new_id] = new
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return old, new

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateMember: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID, or None if valid."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return None if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def elect_joined_leader(self) -> bool:
        """Kafka's maybeElectNewJoinedLeader."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        joined = next((m.member_id for m in self.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined
        return True

    # ------------------------------------------------------------ protocols

    def _supported_counts(self) -> Counter[str]:
        return Counter(name for m in self.members.values() for name in {n for n, _ in m.protocols})

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._supported_counts().items() if count == n}

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsProtocols: some offered protocol is supported by every member. A
        group that is not Empty but has no member left (its last one left while another's
        member-id round trip was pending) accepts any, as Kafka's (0 supporters == 0 members)."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        counts = self._supported_counts()
        return self.protocol_type == protocol_type and any(counts[n] == len(self.members) for n in names)

    def select_protocol(self) -> str:
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def subscribed_topics(self) -> frozenset[str] | None:
        """Kafka's computeSubscribedTopics; None when unknown."""
        if self.protocol_type is None:
            return None
        if not self.members:
            return frozenset()
        if not self.uses_consumer_protocol() or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            data = member.metadata(self.protocol_name)
            parsed = None if data is None else parse_consumer_subscription_topics(data)
            if parsed is None:
                return None
            topics |= parsed
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        topics = self.subscribed_topics()
        return self.uses_consumer_protocol() if topics is None else topic in topics

    # ------------------------------------------------------------ records

    def to_record(self, assignment: dict[str, bytes]) -> GroupMetadataValue:
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name) or b"",
                assignment=assignment.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=-1 if self.state_timestamp_ms is None else self.state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        group = cls(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=None if value.current_state_timestamp == -1 else value.current_state_timestamp,
            generation=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            rebalance = m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout
            protocols: Protocols = ((value.protocol or "", m.subscription),)
            member = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                rebalance,
                m.session_timeout,
                value.protocol_type,
                protocols,
                m.assignment,
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        return group
