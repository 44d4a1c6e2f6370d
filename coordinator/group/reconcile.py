"""A member's next current assignment on its way to the target (Kafka's CurrentAssignmentBuilder).

The rules, as Kafka's:
- A stable member behind the target epoch is reconciled towards the target.
- A member with partitions pending revocation stays at its epoch until a heartbeat no longer
  reports any of them as owned; then it moves on at epoch + 1.
- A partition of the target still held (assigned or revoking) by another member is
  *unreleased*: it is given only once its holder has let it go.
- The member keeps what it has of the target; what it has outside the target is to be revoked
  first; only when nothing is to be revoked does it take new partitions and the target epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from coordinator.group.consumer_state import ConsumerMember, MemberState, Owned
from protocol.consumer_group_log import NO_PARTITIONS, TopicPartitions, partitions
from protocol.types import TopicId

OwnedReport = Sequence[tuple[TopicId, Sequence[int]]] | None  # the heartbeat's TopicPartitions
IsHeldElsewhere = Callable[[Owned], bool]


class FencedMember(Exception):
    """The member must give up all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def reports_any(report: OwnedReport, wanted: TopicPartitions) -> bool:
    """Whether the member still owns any of ``wanted``; no report counts as owning them."""
    if report is None:
        return True
    return any(p in wanted.get(t, ()) for t, ps in report for p in ps)


def next_member(
    member: ConsumerMember,
    target_epoch: int,
    target: TopicPartitions,
    held_elsewhere: IsHeldElsewhere,
    report: OwnedReport,
) -> ConsumerMember:
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _compute(member, member.member_epoch, target_epoch, target, held_elsewhere, report)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if reports_any(report, member.pending_revocation):
            return member
        return _compute(member, member.member_epoch + 1, target_epoch, target, held_elsewhere, report)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _compute(member, member.member_epoch, target_epoch, target, held_elsewhere, report)
    if report is None or report:
        raise FencedMember("the member is in an unknown state: it must give up its partitions and rejoin")
    return _compute(member, target_epoch, target_epoch, target, held_elsewhere, report)


def _compute(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: TopicPartitions,
    held_elsewhere: IsHeldElsewhere,
    report: OwnedReport,
) -> ConsumerMember:
    kept: dict[TopicId, set[int]] = {}
    revoking: dict[TopicId, set[int]] = {}
    adding: dict[TopicId, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept[topic_id] = set(current & wanted)
        revoking[topic_id] = set(current - wanted)
        new = {p for p in wanted - current if not held_elsewhere((topic_id, p))}
        unreleased = unreleased or len(new) < len(wanted - current)
        adding[topic_id] = new
    to_revoke = partitions(revoking)
    if to_revoke and reports_any(report, to_revoke):
        return _with(member, epoch, MemberState.UNREVOKED_PARTITIONS, partitions(kept), to_revoke)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    merged = {t: kept.get(t, set()) | adding.get(t, set()) for t in set(kept) | set(adding)}
    return _with(member, target_epoch, state, partitions(merged), NO_PARTITIONS)


def _with(
    member: ConsumerMember,
    epoch: int,
    state: MemberState,
    assigned: TopicPartitions,
    revoking: TopicPartitions,
) -> ConsumerMember:
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
        assignment_epochs=_epochs(member.assignment_epochs, assigned, epoch),
    )


def _epochs(old: Mapping[Owned, int], assigned: TopicPartitions, epoch: int) -> Mapping[Owned, int]:
    """KIP-1251: a partition kept keeps the epoch it was given at; a new one takes ``epoch``."""
    return MappingProxyType({(t, p): old.get((t, p), epoch) for t, ps in assigned.items() for p in ps})
