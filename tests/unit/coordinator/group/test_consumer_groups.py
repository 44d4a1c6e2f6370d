"""The consumer-protocol group machine (KIP-848) with a fake clock and an in-memory log:
joins, incremental reconciliation (revoke before reassign), expiry, leaving, static members,
failover by replay, and the member-epoch checks of offset commits."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group import GroupConfig, OffsetCommitInput
from coordinator.group.assignors import TopicInfo, range_, uniform
from coordinator.group.consumer_state import MemberId
from coordinator.group.consumer_types import ConsumerConfig, HeartbeatRequest, HeartbeatResponse
from protocol.errors import ErrorCode
from protocol.types import TopicId
from tests.unit.coordinator.group.harness import GROUP, Harness

T = TopicId(uuid.UUID(int=1))
U = TopicId(uuid.UUID(int=2))
IMAGE = {"t": TopicInfo(T, 6), "u": TopicInfo(U, 2)}
SESSION_MS = 45_000


class Consumers(Harness):
    """No assignment batching unless asked for: each group epoch gets its target at once."""

    def __init__(self, assignment_interval_ms: int = 0) -> None:
        consumer = ConsumerConfig(assignment_interval_ms=assignment_interval_ms)
        super().__init__(GroupConfig(num_partitions=1, consumer=consumer))
        self.image = dict(IMAGE)

    def beat(
        self,
        member_id: str,
        epoch: int,
        owned: Mapping[TopicId, Sequence[int]] | None = None,
        *,
        topics: tuple[str, ...] | None = None,
        instance: str | None = None,
        rebalance_ms: int = -1,
    ) -> HeartbeatResponse:
        joining = epoch == 0
        req = HeartbeatRequest(
            GROUP,
            member_id,
            epoch,
            instance_id=instance,
            rebalance_timeout_ms=30_000 if joining else rebalance_ms,
            subscribed_topic_names=topics if topics is not None else (("t",) if joining else None),
            owned=[] if joining else (None if owned is None else list(owned.items())),
        )
        response = self.apply(self.machine.consumer_group_heartbeat(req, self.image, self.now))
        assert response is not None
        return response

    def join(self, member_id: str, **kw: object) -> HeartbeatResponse:  # type: ignore[override]
        response = self.beat(member_id, 0, **kw)  # type: ignore[arg-type]
        assert response.error is ErrorCode.NONE, response
        return response


def parts(response: HeartbeatResponse, topic: TopicId = T) -> set[int]:
    assert response.assignment is not None
    return set(response.assignment.get(topic, ()))


def test_a_first_member_gets_every_partition_at_epoch_one() -> None:
    h = Consumers()
    answer = h.join("a")
    # a new group is at epoch 1 with an empty assignment: the first computed one is epoch 2
    assert (answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == ("a", 2, 5_000)
    assert parts(answer) == set(range(6))
    assert h.machine.consumer_group_describe([GROUP])[0].state == "Stable"


def test_a_joining_member_gets_partitions_only_after_their_owner_revoked_them() -> None:
    h = Consumers()
    h.join("a")
    b = h.join("b")
    assert b.member_epoch == 3 and parts(b) == set()  # unreleased: still a's
    a = h.beat("a", 2, {T: range(6)})
    kept = parts(a)
    assert a.member_epoch == 2 and len(kept) == 3  # a must revoke three first
    assert h.beat("b", 3, {}).assignment is None  # nothing released yet
    a = h.beat("a", 2, {T: sorted(kept)})
    assert a.member_epoch == 3
    b = h.beat("b", 3, {})
    assert parts(b) == set(range(6)) - kept
    assert h.machine.consumer_group_describe([GROUP])[0].state == "Stable"


def test_an_expired_member_is_fenced_and_its_partitions_go_to_the_others() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    a = h.beat("a", 2, {T: range(6)})
    h.beat("a", 2, {T: sorted(parts(a))})
    h.beat("b", 3, {})
    h.now = 40_000
    h.beat("a", 3, {T: sorted(parts(a))})
    h.tick(SESSION_MS + 1)  # b's session lapsed
    described = h.machine.consumer_group_describe([GROUP])[0]
    assert [m.member_id for m in described.members] == ["a"]
    a = h.beat("a", 3, {T: sorted(parts(a))})
    assert a.member_epoch == 4 and parts(a) == set(range(6))


def test_a_member_that_leaves_hands_its_partitions_over() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    left = h.beat("b", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    a = h.beat("a", 2, {T: range(6)})
    assert a.member_epoch == 4 and a.assignment is None  # all six stay a's: nothing to tell


def test_a_static_member_rejoining_within_its_session_keeps_its_partitions() -> None:
    h = Consumers()
    h.join("a", instance="i-a")
    h.join("b", instance="i-b")
    a = h.beat("a", 2, {T: range(6)}, instance="i-a")
    h.beat("a", 2, {T: sorted(parts(a))}, instance="i-a")
    b = h.beat("b", 3, {}, instance="i-b")
    before = parts(b)
    assert h.beat("b", -2, instance="i-b").member_epoch == -2
    assert h.beat("c", 0, instance="i-a").error is ErrorCode.UNRELEASED_INSTANCE_ID
    again = h.join("b2", instance="i-b")
    assert parts(again) == before and again.member_epoch == 3


def test_a_failover_reloads_the_group_exactly() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    h.beat("a", 2, {T: range(6)})
    before = h.machine.consumer_group_describe([GROUP])
    h.failover()
    assert h.machine.consumer_group_describe([GROUP]) == before


def test_bad_heartbeats_get_the_protocol_errors() -> None:
    h = Consumers()
    assert h.beat("a", 5, {}).error is ErrorCode.GROUP_ID_NOT_FOUND
    h.join("a")
    assert h.beat("a", 7, {}).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert h.beat("x", 1, {}).error is ErrorCode.UNKNOWN_MEMBER_ID
    bad = HeartbeatRequest(GROUP, "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned=[],
                           server_assignor="nope")
    result = h.machine.consumer_group_heartbeat(bad, h.image, h.now)
    assert result.response is not None and result.response.error is ErrorCode.UNSUPPORTED_ASSIGNOR
    no_timeout = HeartbeatRequest(GROUP, "a", 0, subscribed_topic_names=("t",), owned=[])
    result = h.machine.consumer_group_heartbeat(no_timeout, h.image, h.now)
    assert result.response is not None and result.response.error is ErrorCode.INVALID_REQUEST
    assert not result.records


def test_offset_commits_are_fenced_by_member_epoch() -> None:
    h = Consumers()
    h.join("a")
    offsets = {("t", 0): OffsetCommitInput(5)}
    ok = h.apply(h.machine.offset_commit(GROUP, 2, "a", offsets, h.now))
    assert ok == {("t", 0): ErrorCode.NONE}
    stale = h.machine.offset_commit(GROUP, 3, "a", offsets, h.now).response
    assert stale == {("t", 0): ErrorCode.STALE_MEMBER_EPOCH}
    unknown = h.machine.offset_commit(GROUP, 2, "z", offsets, h.now).response
    assert unknown == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    txn = h.machine.txn_offset_commit("tx", GROUP, 7, 0, offsets, h.now, generation=3, member_id="a")
    assert txn.response == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert h.machine.offset_fetch(GROUP, [("t", 0)], member=("a", 3)).error is ErrorCode.STALE_MEMBER_EPOCH
    fetched = h.machine.offset_fetch(GROUP, [("t", 0)], member=("a", 2))
    assert fetched.error is ErrorCode.NONE and fetched.partitions[0].offset == 5


def test_uniform_is_balanced_and_sticky() -> None:
    first = uniform({MemberId("a"): frozenset({"t"}), MemberId("b"): frozenset({"t"})}, IMAGE, {})
    assert sorted(len(first[m][T]) for m in first) == [3, 3]
    subscriptions = {MemberId(m): frozenset({"t"}) for m in "abc"}
    second = uniform(subscriptions, IMAGE, first)
    assert sorted(len(second[m].get(T, ())) for m in second) == [2, 2, 2]
    for m in (MemberId("a"), MemberId("b")):
        assert second[m][T] <= first[m][T]  # nothing moved between the old members


def test_range_gives_contiguous_ranges() -> None:
    result = range_({MemberId("a"): frozenset({"t"}), MemberId("b"): frozenset({"t"})}, IMAGE, {})
    assert result[MemberId("a")][T] == {0, 1, 2} and result[MemberId("b")][T] == {3, 4, 5}


def test_targets_are_computed_at_most_once_per_assignment_interval() -> None:
    h = Consumers(assignment_interval_ms=1_000)
    h.join("a")
    b = h.join("b")
    assert b.member_epoch == 2 and parts(b) == set()  # the target of epoch 2 has nothing for b
    described = h.machine.consumer_group_describe([GROUP])[0]
    assert (described.state, described.group_epoch, described.assignment_epoch) == ("Assigning", 3, 2)
    h.now = 1_000
    a = h.beat("a", 2, {T: range(6)})
    assert a.member_epoch == 2 and len(parts(a)) == 3  # the new target: a revokes three


def test_an_empty_group_is_deleted_with_its_offsets_and_gives_way_to_a_classic_one() -> None:
    h = Consumers()
    h.join("a")
    h.apply(h.machine.offset_commit(GROUP, 2, "a", {("t", 0): OffsetCommitInput(5)}, h.now))
    assert h.apply(h.machine.delete_groups([GROUP])) == {GROUP: ErrorCode.NON_EMPTY_GROUP}
    h.beat("a", -1)
    assert h.apply(h.machine.delete_groups([GROUP])) == {GROUP: ErrorCode.NONE}
    assert h.machine.consumer_group_describe([GROUP])[0].error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.machine.offset_fetch(GROUP, [("t", 0)]).partitions[0].offset == -1
    h.failover()
    assert h.machine.consumer_group_describe([GROUP])[0].error is ErrorCode.GROUP_ID_NOT_FOUND


def test_offsets_of_an_empty_group_expire_and_then_the_group_goes() -> None:
    h = Consumers()
    h.join("a")
    h.apply(h.machine.offset_commit(GROUP, 2, "a", {("t", 0): OffsetCommitInput(5)}, h.now))
    assert h.apply(h.machine.expire_offsets(10_000, retention_ms=1_000)) == 0  # a member: kept
    h.beat("a", -1)
    assert h.apply(h.machine.expire_offsets(10_000, retention_ms=1_000)) == 1
    assert GROUP not in h.machine.consumer.groups


def test_a_classic_join_takes_over_an_empty_consumer_group_only() -> None:
    """A non-empty one takes the classic member in (test_group_migration.py)."""
    h = Consumers()
    h.join("a")
    first, _ = Harness.join(h)
    assert first is not None and first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert GROUP in h.machine.consumer.groups
    h.beat("a", -1)
    first, _ = Harness.join(h)
    assert first is not None and first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert GROUP not in h.machine.consumer.groups


def test_a_compacted_log_with_an_offset_before_the_groups_records_loads_the_group() -> None:
    h = Consumers()
    h.join("a")
    h.apply(h.machine.offset_commit(GROUP, 2, "a", {("t", 0): OffsetCommitInput(5)}, h.now))
    h.log.insert(0, h.log.pop())  # the offset commit first, as compaction may leave it
    h.failover()
    assert h.beat("a", 2, {T: range(6)}).error is ErrorCode.NONE
    assert h.machine.offset_fetch(GROUP, [("t", 0)], member=("a", 2)).partitions[0].offset == 5


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    a = h.beat("a", 2, {T: range(6)})  # asked to revoke three: its rebalance timeout (30 s) runs
    assert a.member_epoch == 2 and len(parts(a)) == 3
    for now in (10_000, 20_000, 29_000):  # heartbeats that still report all six
        h.now = now
        assert h.beat("a", 2, {T: range(6)}).error is ErrorCode.NONE
        h.beat("b", 3, {})
    h.tick(30_001)
    assert [m.member_id for m in h.machine.consumer_group_describe([GROUP])[0].members] == ["b"]
    assert h.beat("a", 2, {T: range(6)}).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_whose_answer_was_lost_may_come_back_with_its_previous_epoch() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    a = h.beat("a", 2, {T: range(6)})
    kept = sorted(parts(a))
    assert h.beat("a", 2, {T: kept}).member_epoch == 3  # this answer is lost
    again = h.beat("a", 2, {T: kept})  # previous epoch, owning no more than assigned: accepted
    assert again.error is ErrorCode.NONE and again.member_epoch == 3
    assert h.beat("a", 1, {T: kept}).error is ErrorCode.FENCED_MEMBER_EPOCH


def test_a_static_member_that_does_not_come_back_within_its_session_is_fenced() -> None:
    h = Consumers()
    h.join("a", instance="i-a")
    assert h.beat("a", -2, instance="i-a").member_epoch == -2
    assert h.machine.consumer_group_describe([GROUP])[0].members[0].member_epoch == -2
    h.tick(SESSION_MS + 1)
    assert h.machine.consumer_group_describe([GROUP])[0].members == ()


def test_a_failed_write_puts_the_group_back_as_it_was() -> None:
    h = Consumers()
    join_a = HeartbeatRequest(GROUP, "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned=[])
    failed = h.machine.consumer_group_heartbeat(join_a, h.image, h.now)
    h.machine.write_failed(failed.records, ErrorCode.NOT_ENOUGH_REPLICAS, h.now)
    assert GROUP not in h.machine.consumer.groups  # the group it made is gone
    h.join("a")
    before = h.machine.consumer_group_describe([GROUP])
    join_b = HeartbeatRequest(GROUP, "b", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned=[])
    failed = h.machine.consumer_group_heartbeat(join_b, h.image, h.now)
    assert failed.records
    h.machine.write_failed(failed.records, ErrorCode.NOT_ENOUGH_REPLICAS, h.now)
    assert h.machine.consumer_group_describe([GROUP]) == before
    assert h.join("b").member_epoch == 3  # and it joins when its write succeeds


@settings(max_examples=200, deadline=None)
@given(
    members=st.dictionaries(
        st.sampled_from([MemberId(f"m{i}") for i in range(6)]),
        st.frozensets(st.sampled_from(["t", "u"]), min_size=1),
        min_size=1,
    ),
    joining=st.sampled_from([MemberId(f"n{i}") for i in range(2)]),
)
def test_uniform_assigns_every_partition_once_balanced_and_sticky(
    members: dict[MemberId, frozenset[str]], joining: MemberId
) -> None:
    first = uniform(members, IMAGE, {})
    _check_assignment(members, first)
    grown = {**members, joining: frozenset({"t", "u"})}
    second = uniform(grown, IMAGE, first)
    _check_assignment(grown, second)
    if len(set(grown.values())) > 1:
        return  # different subscriptions: balancing may move partitions between the others too
    for member_id, old in first.items():  # a member joining only takes partitions away
        for topic_id, partitions in second[member_id].items():
            assert partitions <= old.get(topic_id, frozenset())


def _check_assignment(members: Mapping[MemberId, frozenset[str]], result: Mapping[MemberId, Any]) -> None:
    owners: dict[tuple[TopicId, int], MemberId] = {}
    for member_id, assigned in result.items():
        for topic_id, partitions in assigned.items():
            name = next(n for n, info in IMAGE.items() if info.topic_id == topic_id)
            assert name in members[member_id]  # only subscribed topics
            for p in partitions:
                assert (topic_id, p) not in owners  # at most once
                owners[(topic_id, p)] = member_id
    subscribed = {n for names in members.values() for n in names}
    wanted = {(IMAGE[n].topic_id, p) for n in subscribed for p in range(IMAGE[n].partitions)}
    assert set(owners) == wanted  # every subscribed partition
    if len(set(members.values())) == 1:  # the same subscription: counts differ by at most one
        counts = [sum(len(ps) for ps in result[m].values()) for m in members]
        assert max(counts) - min(counts) <= 1


def test_a_commit_at_an_older_epoch_is_accepted_for_partitions_held_since_then() -> None:
    """KIP-1251: a member's epoch may move on before it learns so; its commits of partitions it
    was given at or before the epoch it sends are still its own."""
    h = Consumers()
    h.join("a")
    h.join("b")
    a = h.beat("a", 2, {T: range(6)})
    kept = sorted(parts(a))
    assert h.beat("a", 2, {T: kept}).member_epoch == 3
    gone = min(set(range(6)) - set(kept))
    mine = h.machine.offset_commit(GROUP, 2, "a", {("t", kept[0]): OffsetCommitInput(1)}, h.now).response
    assert mine == {("t", kept[0]): ErrorCode.NONE}
    given_up = h.machine.offset_commit(GROUP, 2, "a", {("t", gone): OffsetCommitInput(1)}, h.now).response
    assert given_up == {("t", gone): ErrorCode.STALE_MEMBER_EPOCH}


def test_after_a_failover_a_member_still_revoking_keeps_its_rebalance_timeout() -> None:
    h = Consumers()
    h.join("a")
    h.join("b")
    h.beat("a", 2, {T: range(6)})  # asked to revoke
    h.failover()
    h.now = 20_000
    h.beat("b", 3, {})
    assert h.beat("a", 2, {T: range(6)}).error is ErrorCode.NONE  # still not revoking
    h.tick(30_001)
    assert [m.member_id for m in h.machine.consumer_group_describe([GROUP])[0].members] == ["b"]
