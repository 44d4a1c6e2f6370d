"""Committed and pending-transactional offsets, changed only by replaying records and markers.

Kafka's OffsetMetadataManager: a non-transactional OffsetCommit record goes straight to the
committed store; one from a transactional batch is *pending* for its producer id until the
COMMIT marker (then it replaces the committed offset unless that one sits later in the log) or
the ABORT marker (dropped). A tombstone removes the committed offset and any pending ones.
Also here: ClassicGroup.validateOffsetCommit and the offset-expiration condition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from coordinator.group.state import ClassicGroup, GroupState
from coordinator.group.types import OffsetAndMetadata
from protocol.errors import ErrorCode
from protocol.group_log import OffsetCommitValue
from protocol.types import TopicPartition

NO_PRODUCER_ID = -1
GroupOffsets = dict[TopicPartition, OffsetAndMetadata]


class OffsetStore:
    def __init__(self) -> None:
        self.committed: dict[str, GroupOffsets] = {}
        self.pending: dict[int, dict[str, GroupOffsets]] = {}  # producer id -> group -> offsets
        self.open_txns: dict[str, set[int]] = {}  # group -> producer ids with pending offsets

    # ------------------------------------------------------------ replay

    def replay(
        self,
        group_id: str,
        tp: TopicPartition,
        value: OffsetCommitValue | None,
        record_offset: int,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        if value is None:
            self._remove(group_id, tp)
            return
        offset = OffsetAndMetadata(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            value.expire_timestamp,
            record_offset,
        )
        if producer_id == NO_PRODUCER_ID:
            self.committed.setdefault(group_id, {})[tp] = offset
        else:
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = offset
            self.open_txns.setdefault(group_id, set()).add(producer_id)

    def _remove(self, group_id: str, tp: TopicPartition) -> None:
        offsets = self.committed.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.committed[group_id]
        for producer_id in self.open_txns.get(group_id, ()):
            self.pending.get(producer_id, {}).get(group_id, {}).pop(tp, None)

    def complete(self, producer_id: int, commit: bool, owns: Callable[[str], bool]) -> int:
        """Apply a COMMIT/ABORT marker of ``producer_id`` to the groups ``owns`` accepts;
        returns how many pending offsets were materialised."""
        by_group = self.pending.get(producer_id)
        if by_group is None:
            return 0
        done = 0
        for group_id in [g for g in by_group if owns(g)]:
            offsets = by_group.pop(group_id)
            txns = self.open_txns.get(group_id)
            if txns is not None:
                txns.discard(producer_id)
                if not txns:
                    del self.open_txns[group_id]
            if commit:
                done += self._materialise(group_id, offsets)
        if not by_group:
            del self.pending[producer_id]
        return done

    def _materialise(self, group_id: str, offsets: GroupOffsets) -> int:
        committed = self.committed.setdefault(group_id, {})
        done = 0
        for tp, offset in offsets.items():
            existing = committed.get(tp)
            if existing is None or offset.record_offset > existing.record_offset:
                committed[tp] = offset
                done += 1
        return done

    def drop(self, owns: Callable[[str], bool]) -> None:
        for group_id in [g for g in self.committed if owns(g)]:
            del self.committed[group_id]
        for producer_id, by_group in list(self.pending.items()):
            for group_id in [g for g in by_group if owns(g)]:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]
        for group_id in [g for g in self.open_txns if owns(g)]:
            del self.open_txns[group_id]

    # ------------------------------------------------------------ queries

    def get(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self.committed.get(group_id, {}).get(tp)

    def offsets_of(self, group_id: str) -> GroupOffsets:
        return dict(self.committed.get(group_id, {}))

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in self.pending.get(p, {}).get(group_id, {}) for p in self.open_txns.get(group_id, ()))

    def has_open_transactions(self, group_id: str) -> bool:
        return bool(self.open_txns.get(group_id))

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {
            tp for p in self.open_txns.get(group_id, ()) for tp in self.pending.get(p, {}).get(group_id, {})
        }

    def groups(self) -> Iterator[str]:
        return iter(set(self.committed) | set(self.open_txns))


def validate_offset_commit(
    group: ClassicGroup, member_id: str, instance_id: str | None, generation: int, transactional: bool
) -> ErrorCode | None:
    """Kafka's ClassicGroup.validateOffsetCommit."""
    if group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.is_in(GroupState.EMPTY):
        return None  # a "simple" commit: admin client or manual assignment
    if generation >= 0 or member_id or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
    elif not transactional and not group.is_in(GroupState.EMPTY):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return None


def expiration_base(group: ClassicGroup) -> Callable[[OffsetAndMetadata], int] | None:
    """Kafka's ClassicGroup.offsetExpirationCondition: what retention counts from, or None when
    the group's offsets do not expire now."""
    if group.protocol_type is None:
        return lambda offset: offset.commit_timestamp_ms
    if group.is_in(GroupState.EMPTY):
        since = group.state_timestamp_ms
        return lambda offset: offset.commit_timestamp_ms if since is None else since
    return None


def is_expired(offset: OffsetAndMetadata, base_ms: int, now_ms: int, retention_ms: int) -> bool:
    if offset.expire_timestamp_ms != -1:
        return now_ms >= offset.expire_timestamp_ms
    return now_ms - base_ms >= retention_ms
