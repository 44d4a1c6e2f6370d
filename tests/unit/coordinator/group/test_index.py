"""The group index behind ListGroups-by-state and the timer re-arm: it must follow every state
change and never lose a group's deadline, while simple (offsets-only) groups stay out of the
timer scan."""

from __future__ import annotations

from coordinator.group import ClassicGroup, GroupState, LeaveMember, OffsetCommitInput
from coordinator.group.index import GroupIndex
from tests.unit.coordinator.group.harness import GROUP, Harness

S = GroupState


def listed(h: Harness, *states: str) -> list[str]:
    return sorted(g.group_id for g in h.machine.list_groups(states)[1])


def commit_simple(h: Harness, group: str) -> None:
    h.apply(h.machine.offset_commit(group, -1, "", {("t", 0): OffsetCommitInput(1, -1, "")}, h.now))


def test_list_by_state_follows_transitions_deletes_and_failover() -> None:
    h = Harness()
    commit_simple(h, "simple")
    (a, b), _ = h.stable_group(2)
    assert listed(h, "Stable") == [GROUP]
    assert listed(h, "empty") == ["simple"]
    assert listed(h) == [GROUP, "simple"]
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(b)], h.now))
    assert listed(h, "Stable") == []
    assert listed(h, "PreparingRebalance", "CompletingRebalance") == [GROUP]
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(a)], h.now))
    assert listed(h, "Empty") == [GROUP, "simple"]
    h.apply(h.machine.delete_groups(["simple"]))
    assert listed(h, "Empty") == [GROUP]
    assert listed(h, "Dead") == []
    h.failover()
    assert listed(h, "Empty") == [GROUP]
    assert listed(h, "NoSuchState") == []


def test_timers_skip_simple_groups_but_never_lose_a_deadline() -> None:
    h = Harness()
    for i in range(20):
        commit_simple(h, f"simple-{i}")
    assert h.machine.next_deadline_ms() is None
    (a,), gen = h.stable_group(1)
    assert h.machine.next_deadline_ms() == h.now + 10_000  # a's session
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(a)], h.now))
    assert h.machine.next_deadline_ms() is None  # the group dropped out of the timer scan
    h.now = 5_000
    member = h.new_member()  # a join brings it back
    assert member and h.machine.next_deadline_ms() is not None
    h.tick(h.now)
    (answer,) = [h.join_answer(member)]
    h.sync(member, answer.generation_id, {member: b"x"})
    assert h.machine.next_deadline_ms() == 15_000
    h.tick(15_000)  # no heartbeat: the session expires through the timer
    group = h.machine.group(GROUP)
    assert group is not None and not group.members


def test_failover_counts_loaded_members_deadlines() -> None:
    h = Harness()
    h.stable_group(2)
    h.now = 1_000
    machine = h.failover()
    assert machine.next_deadline_ms() == 11_000


def test_index_replace_and_pop() -> None:
    index = GroupIndex()
    first = index.add(ClassicGroup("g"))
    second = index.add(ClassicGroup("g", state=S.STABLE))
    assert list(index.in_states([S.EMPTY])) == [] and list(index.in_states([S.STABLE])) == [second]
    first.transition(S.PREPARING_REBALANCE, 0)  # a replaced group no longer moves the index
    assert list(index.in_states([S.PREPARING_REBALANCE])) == []
    second.transition(S.PREPARING_REBALANCE, 0)
    assert list(index.in_states([S.PREPARING_REBALANCE])) == [second]
    assert index.pop("g") is second and len(index) == 0
    assert list(index.in_states(list(S))) == []
