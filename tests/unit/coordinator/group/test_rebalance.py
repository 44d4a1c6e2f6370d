"""Classic group protocol: transitions, JoinGroup/SyncGroup/Heartbeat/LeaveGroup, timers."""

from __future__ import annotations

import itertools

import pytest

from coordinator.group import (
    VALID_PREVIOUS_STATES,
    GroupConfig,
    GroupState,
    IllegalStateTransition,
    LeaveMember,
)
from coordinator.group.state import ClassicGroup, check_transition
from protocol.errors import ErrorCode
from tests.unit.coordinator.group.harness import GROUP, Harness

S = GroupState


@pytest.mark.parametrize(("current", "target"), list(itertools.product(GroupState, GroupState)))
def test_every_transition_follows_the_table(current: GroupState, target: GroupState) -> None:
    group = ClassicGroup("g", state=current)
    if current in VALID_PREVIOUS_STATES[target]:
        group.transition(target, 5)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (target, current, 5)
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(current, target)


def test_kafka_table() -> None:
    assert VALID_PREVIOUS_STATES[S.STABLE] == {S.COMPLETING_REBALANCE}
    assert VALID_PREVIOUS_STATES[S.EMPTY] == {S.PREPARING_REBALANCE}
    assert VALID_PREVIOUS_STATES[S.DEAD] == set(GroupState)


def test_member_id_required_round_trip() -> None:
    h = Harness()
    first, parked = h.join()
    assert first is not None and first.error is ErrorCode.MEMBER_ID_REQUIRED and parked is None
    assert first.member_id.startswith("c-")
    assert h.machine.group(GROUP) is not None and h.machine.group(GROUP).state is S.EMPTY  # type: ignore[union-attr]
    second, parked = h.join(first.member_id)
    assert second is None and parked == first.member_id
    h.tick(0)
    answer = h.join_answer(first.member_id)
    assert answer.error is ErrorCode.NONE
    assert (answer.generation_id, answer.leader, answer.protocol_name) == (1, first.member_id, "range")
    assert [m.member_id for m in answer.members] == [first.member_id]


def test_join_v3_needs_no_round_trip() -> None:
    h = Harness()
    response, parked = h.join(version=3)
    assert response is None and parked is not None
    h.tick(0)
    assert h.join_answer(parked).generation_id == 1


def test_unknown_member_of_missing_group() -> None:
    h = Harness()
    response, _ = h.join("nobody")
    assert response is not None and response.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_three_members_one_leader_and_assignments() -> None:
    h = Harness(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=3000))
    ids = [h.new_member(client_id=f"c{i}", rebalance_ms=10_000) for i in range(3)]
    h.tick(3000)  # new members arrived during the delay: it is extended once more
    assert h.machine.group(GROUP).state is S.PREPARING_REBALANCE  # type: ignore[union-attr]
    h.tick(6000)
    answers = {m: h.join_answer(m) for m in ids}
    leaders = {a.leader for a in answers.values()}
    assert leaders == {ids[0]}
    assert [len(answers[m].members) for m in ids] == [3, 0, 0]
    assert {a.generation_id for a in answers.values()} == {1}
    assert h.sync(ids[1], 1) is None and h.sync(ids[2], 1) is None  # followers wait for the leader
    assert h.machine.group(GROUP).state is S.COMPLETING_REBALANCE  # type: ignore[union-attr]
    assert h.sync(ids[0], 1, {m: f"asg-{m}".encode() for m in ids}) is None
    for m in ids:
        assert h.sync_answer(m).assignment == f"asg-{m}".encode()
    assert h.machine.group(GROUP).state is S.STABLE  # type: ignore[union-attr]


def test_sync_errors() -> None:
    h = Harness()
    ids, gen = h.stable_group(1)
    assert h.sync(ids[0], gen + 1).error is ErrorCode.ILLEGAL_GENERATION  # type: ignore[union-attr]
    assert h.sync("who", gen).error is ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    stable = h.sync(ids[0], gen)
    assert stable is not None and stable.error is ErrorCode.NONE and stable.assignment == ids[0].encode()


def test_heartbeat_during_rebalance() -> None:
    h = Harness()
    ids, gen = h.stable_group(2)
    assert h.heartbeat(ids[0], gen) is ErrorCode.NONE
    h.new_member(client_id="late")
    assert h.machine.group(GROUP).state is S.PREPARING_REBALANCE  # type: ignore[union-attr]
    assert h.heartbeat(ids[0], gen) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat(ids[0], gen - 1) is ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", gen) is ErrorCode.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_member_and_rebalances() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.now = 6000
    assert h.heartbeat(a, gen) is ErrorCode.NONE
    assert h.machine.next_deadline_ms() == 10_000  # b's session
    h.tick(10_000)
    group = h.machine.group(GROUP)
    assert group is not None and b not in group.members and group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(a, gen) is ErrorCode.REBALANCE_IN_PROGRESS
    response, parked = h.join(a)
    assert parked is None and response is not None  # all members rejoined: answered at once
    assert response.generation_id == gen + 1 and response.leader == a


def test_rebalance_timeout_completes_with_present_members() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.now = 1000
    h.heartbeat(a, gen)
    h.heartbeat(b, gen)
    response, _ = h.join(a)  # the leader rejoins: a rebalance starts, b must rejoin
    assert response is None
    h.tick(1000 + 8000)
    assert h.heartbeat(b, gen) is ErrorCode.REBALANCE_IN_PROGRESS  # b keeps its session alive, never rejoins
    h.tick(1000 + 30_000)  # rebalance timeout
    answer = h.join_answer(a)
    assert answer.generation_id == gen + 1 and [m.member_id for m in answer.members] == [a]
    assert b not in h.machine.group(GROUP).members  # type: ignore[union-attr]


def test_static_member_rejoin_keeps_assignment_and_fences_old_id() -> None:
    h = Harness()
    first, parked = h.join(instance="i1")
    assert first is None and parked == "i1-1"
    h.tick(0)
    gen = h.join_answer("i1-1").generation_id
    h.sync("i1-1", gen, {"i1-1": b"p0"}, instance="i1")
    assert h.sync_answer("i1-1").assignment == b"p0"
    # the same instance restarts without its member id: new id, same assignment, no rebalance
    rejoin, parked = h.join(instance="i1")
    assert rejoin is None and parked == "i1-2"
    answer = h.join_answer("i1-2")  # released once the GroupMetadata record is durable
    assert answer.error is ErrorCode.NONE and answer.generation_id == gen and answer.skip_assignment
    group = h.machine.group(GROUP)
    assert group is not None and group.state is S.STABLE and group.members["i1-2"].assignment == b"p0"
    stable = h.sync("i1-2", gen, instance="i1")
    assert stable is not None and stable.assignment == b"p0"
    # the old incarnation is fenced
    assert h.heartbeat("i1-1", gen, instance="i1") is ErrorCode.FENCED_INSTANCE_ID
    old_sync = h.sync("i1-1", gen, instance="i1")
    assert old_sync is not None and old_sync.error is ErrorCode.FENCED_INSTANCE_ID
    old_join, _ = h.join("i1-1", instance="i1")
    assert old_join is not None and old_join.error is ErrorCode.FENCED_INSTANCE_ID


def test_static_member_parked_join_is_fenced_by_new_incarnation() -> None:
    h = Harness(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=3000))
    _, parked = h.join(instance="i1")
    assert parked == "i1-1"
    _, parked2 = h.join(instance="i1")
    assert parked2 == "i1-2"
    assert h.join_answer("i1-1").error is ErrorCode.FENCED_INSTANCE_ID


def test_leave_group_batched() -> None:
    h = Harness()
    (a, b, c), gen = h.stable_group(3)
    result = h.machine.leave_group(GROUP, [LeaveMember(b), LeaveMember(c), LeaveMember("ghost")], h.now)
    response = h.apply(result)
    assert response is not None and response.error is ErrorCode.NONE
    assert [e for _, _, e in response.members] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    group = h.machine.group(GROUP)
    assert group is not None and set(group.members) == {a} and group.state is S.PREPARING_REBALANCE
    response2, _ = h.join(a)
    assert response2 is not None and response2.generation_id == gen + 1


def test_last_member_leaving_empties_the_group() -> None:
    h = Harness()
    (a,), gen = h.stable_group(1)
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(a)], h.now))
    group = h.machine.group(GROUP)
    assert group is not None and group.state is S.EMPTY and group.generation == gen + 1
    assert group.protocol_type == "consumer" and group.protocol_name is None


def test_leave_static_member_by_instance_id() -> None:
    h = Harness()
    _, parked = h.join(instance="i1")
    h.tick(0)
    h.join_answer(parked)  # type: ignore[arg-type]
    response = h.apply(h.machine.leave_group(GROUP, [LeaveMember("", "i1"), LeaveMember("", "i9")], h.now))
    assert response is not None
    assert [e for _, _, e in response.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]


def test_pending_member_expires() -> None:
    h = Harness()
    first, _ = h.join(session_ms=10_000)
    assert first is not None
    h.tick(10_000)
    assert first.member_id not in h.machine.group(GROUP).pending_members  # type: ignore[union-attr]
    late, _ = h.join(first.member_id)
    assert late is not None and late.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_invalid_requests_and_ownership() -> None:
    h = Harness()
    bad, _ = h.join(session_ms=1000)
    assert bad is not None and bad.error is ErrorCode.INVALID_SESSION_TIMEOUT
    bad, _ = h.join(session_ms=1_800_001)
    assert bad is not None and bad.error is ErrorCode.INVALID_SESSION_TIMEOUT
    h.machine.begin_load(0, 3)
    loading, _ = h.join()
    assert loading is not None and loading.error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    h.machine.unload(0)
    gone, _ = h.join()
    assert gone is not None and gone.error is ErrorCode.NOT_COORDINATOR


def test_inconsistent_protocol() -> None:
    h = Harness()
    h.stable_group(1)
    other, _ = h.join(protocols=(("sticky", b""),))
    assert other is not None and other.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_group_rebalancing_without_members_accepts_a_joiner() -> None:
    """The only member leaves while a new one is between its two JoinGroups (member id
    required): the group is PreparingRebalance with no member. Kafka's supportsProtocols then
    accepts any protocol (0 supporters == 0 members), so the new member joins and leads the
    next generation. Gregor refused it INCONSISTENT_GROUP_PROTOCOL until the rebalance timed
    out (seed 87's transformer `x1`, refused for up to 140 s)."""
    h = Harness()
    [leaving], generation = h.stable_group(1)
    first, _ = h.join()
    assert first is not None and first.error is ErrorCode.MEMBER_ID_REQUIRED
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(leaving)], h.now))
    group = h.machine.group(GROUP)
    assert group is not None and group.is_in(S.PREPARING_REBALANCE) and not group.members
    joined, _ = h.join(first.member_id)
    assert joined is not None and joined.error is ErrorCode.NONE, joined
    assert joined.leader == first.member_id and joined.generation_id == generation + 1
    newcomer, _ = h.join(client_id="other")  # an unknown member is let in too, not refused
    assert newcomer is not None and newcomer.error is ErrorCode.MEMBER_ID_REQUIRED


def test_pending_sync_expiration_removes_silent_members() -> None:
    h = Harness()
    a = h.new_member(client_id="a")
    b = h.new_member(client_id="b")
    h.tick(0)
    h.join_answer(a)
    h.join_answer(b)
    assert h.sync(b, 1) is None  # b syncs, the leader a never does
    h.tick(30_000)
    assert h.sync_answer(b).error is ErrorCode.REBALANCE_IN_PROGRESS
    group = h.machine.group(GROUP)
    assert group is not None and set(group.members) == {b} and group.state is S.PREPARING_REBALANCE


def test_unload_answers_parked_requests() -> None:
    h = Harness(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=3000))
    member = h.new_member()
    completions = h.machine.unload(0)
    assert [(c.member_id, c.response.error) for c in completions] == [(member, ErrorCode.NOT_COORDINATOR)]


def test_describe_and_list() -> None:
    h = Harness()
    (a, b), _ = h.stable_group(2)
    [described] = h.machine.describe_groups([GROUP])
    assert (described.state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert {m.member_id: m.assignment for m in described.members} == {a: a.encode(), b: b.encode()}
    [unknown] = h.machine.describe_groups(["nope"])
    assert (unknown.error, unknown.state) == (ErrorCode.NONE, "Dead")
    error, listed = h.machine.list_groups(["stable"])
    assert error is ErrorCode.NONE and [g.group_id for g in listed] == [GROUP]
    assert h.machine.list_groups(["Empty"])[1] == []


def test_delete_groups() -> None:
    h = Harness()
    h.stable_group(1)
    result = h.machine.delete_groups([GROUP, "missing"])
    assert result.response == {GROUP: ErrorCode.NON_EMPTY_GROUP, "missing": ErrorCode.GROUP_ID_NOT_FOUND}
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(next(iter(h.machine.group(GROUP).members)))], h.now))  # type: ignore[union-attr]
    deleted = h.machine.delete_groups([GROUP])
    assert deleted.response == {GROUP: ErrorCode.NONE}
    assert deleted.records[-1][1] is None
    h.apply(deleted)
    assert h.machine.group(GROUP) is None
