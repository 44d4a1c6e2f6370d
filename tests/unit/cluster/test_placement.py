"""Controller decisions: replica placement, manual assignments, leader election."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.cluster.placement import (
    PREFERRED,
    UNCLEAN,
    PlacementError,
    Refused,
    after_broker_change,
    completed,
    election,
    more_assignment,
    place_replicas,
    preferred_leader,
    reassigned,
    reverted,
    topic_assignment,
)
from broker.store.image import NO_LEADER, PartitionEpoch, PartitionState
from protocol.errors import ErrorCode
from protocol.types import LeaderEpoch, NodeId

N1, N2, N3, N4 = NodeId(1), NodeId(2), NodeId(3), NodeId(4)
THREE = {N1: None, N2: None, N3: None}


def test_round_robin_spreads_leaders_and_never_repeats_a_broker() -> None:
    assignment = place_replicas(6, 3, THREE)
    assert all(len(set(replicas)) == 3 for replicas in assignment)
    assert Counter(replicas[0] for replicas in assignment) == {N1: 2, N2: 2, N3: 2}


def test_rack_aware_placement_puts_replicas_on_distinct_racks() -> None:
    racks = {N1: "a", N2: "a", N3: "b", N4: "b"}
    for replicas in place_replicas(8, 2, racks):
        assert {racks[n] for n in replicas} == {"a", "b"}


def test_replication_factor_above_the_brokers_is_refused() -> None:
    with pytest.raises(PlacementError, match="larger than the 3 available brokers"):
        place_replicas(1, 4, THREE)


def state(leader: NodeId, isr: tuple[NodeId, ...]) -> PartitionState:
    return PartitionState((N1, N2, N3), isr, leader, LeaderEpoch(0), PartitionEpoch(0))


def test_a_dead_leader_is_replaced_from_the_isr_with_an_epoch_bump() -> None:
    new = after_broker_change(state(N1, (N1, N2, N3)), {N2, N3})
    assert new is not None and new.leader == N2 and new.isr == (N2, N3)
    assert new.leader_epoch == 1 and new.partition_epoch == 1


def test_a_dead_follower_leaves_the_isr_without_a_leader_epoch_bump() -> None:
    new = after_broker_change(state(N1, (N1, N2, N3)), {N1, N2})
    assert new is not None and new.leader == N1 and new.isr == (N1, N2)
    assert new.leader_epoch == 0 and new.partition_epoch == 1


def test_the_last_isr_member_stays_and_the_partition_goes_offline() -> None:
    offline = after_broker_change(state(N1, (N1,)), {N2, N3})
    assert offline is not None and offline.leader == NO_LEADER and offline.isr == (N1,)
    assert after_broker_change(offline, {N2, N3}) is None, "no unclean election"
    back = after_broker_change(offline, {N1, N2, N3})
    assert back is not None and back.leader == N1 and back.leader_epoch == offline.leader_epoch + 1


def test_nothing_changes_when_every_isr_member_lives() -> None:
    assert after_broker_change(state(N1, (N1, N2)), {N1, N2, N3}) is None


def test_preferred_leader_moves_back_when_it_is_in_sync() -> None:
    moved = preferred_leader(state(N2, (N1, N2)), {N1, N2, N3})
    assert moved is not None and moved.leader == N1
    assert preferred_leader(state(N2, (N2,)), {N1, N2, N3}) is None, "not in the ISR"


def test_preferred_election_outcomes() -> None:
    assert election(state(N1, (N1, N2)), {N1, N2}, PREFERRED) == (None, ErrorCode.ELECTION_NOT_NEEDED)
    assert election(state(N2, (N2,)), {N1, N2}, PREFERRED)[1] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    moved, error = election(state(N2, (N1, N2)), {N1, N2}, PREFERRED)
    assert error == ErrorCode.NONE and moved is not None and moved.leader == N1


def test_unclean_election_prefers_the_isr_and_otherwise_takes_any_live_replica() -> None:
    assert election(state(N1, (N1, N2)), {N1, N2}, UNCLEAN)[1] == ErrorCode.ELECTION_NOT_NEEDED
    offline = state(NO_LEADER, (N1,))
    moved, _ = election(offline, {N2, N3}, UNCLEAN)
    assert moved is not None and moved.leader == N2 and moved.isr == (N2,)
    assert election(offline, set(), UNCLEAN) == (None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)


# -- manual replica assignments (Kafka's controller checks and messages) ----------------------

BAD = ErrorCode.INVALID_REPLICATION_ASSIGNMENT
REGISTERED = {1, 2, 3}


@pytest.mark.parametrize(("entries", "partitions", "rf", "error", "message"), [
    ([(0, [1])], 1, -1, ErrorCode.INVALID_REQUEST,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ([(0, [1])], -1, 1, ErrorCode.INVALID_REQUEST,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ([(0, [1]), (0, [2])], -1, -1, BAD, "Found multiple manual partition assignments for partition 0"),
    ([(0, [])], -1, -1, BAD, "The manual partition assignment includes an empty replica list."),
    ([(0, [1, 7])], -1, -1, BAD,
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    ([(0, [2, 1, 2])], -1, -1, BAD, "The manual partition assignment includes the broker 2 more than once."),
    ([(0, [1, 2]), (1, [3])], -1, -1, BAD,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not "
     "consistent with previous partitions, which have 2 replica(s)."),
    ([(0, [1]), (2, [3])], -1, -1, BAD, "partitions should be a consecutive 0-based integer sequence"),
    ([(1, [1])], -1, -1, BAD, "partitions should be a consecutive 0-based integer sequence"),
])
def test_create_topics_assignments_are_refused_as_kafka_refuses_them(
    entries: list[tuple[int, list[int]]], partitions: int, rf: int, error: ErrorCode, message: str
) -> None:
    assert topic_assignment(entries, partitions, rf, REGISTERED) == Refused(error, message)


def test_a_valid_create_topics_assignment_is_taken_in_partition_order() -> None:
    assert topic_assignment([(1, [3, 1]), (0, [2, 3])], -1, -1, REGISTERED) == ((N2, N3), (N3, N1))


@pytest.mark.parametrize(("assignments", "message"), [
    ([[1, 2]], "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    ([[1, 2], [3]], "The manual partition assignment includes a partition with 1 replica(s), but this is "
     "not consistent with previous partitions, which have 2 replica(s)."),
    ([[1, 2], [9, 9]],
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([[1, 1], [2, 3]], "The manual partition assignment includes the broker 1 more than once."),
])
def test_create_partitions_assignments_are_refused_as_kafka_refuses_them(
    assignments: list[list[int]], message: str
) -> None:
    assert more_assignment(assignments, 2, 2, REGISTERED) == Refused(BAD, message)
    assert more_assignment([[3, 1], [2, 3]], 2, 2, REGISTERED) == ((N3, N1), (N2, N3))


# -- partition reassignment (Kafka's KRaft controller) ----------------------------------------

ALL = {N1, N2, N3, N4}


def settled(replicas: tuple[NodeId, ...], leader: NodeId = N1) -> PartitionState:
    return PartitionState(replicas, replicas, leader, LeaderEpoch(0), PartitionEpoch(0))


def test_a_reassignment_adds_the_targets_first_and_keeps_the_leader() -> None:
    moving = reassigned(settled((N1, N2, N3)), [N4, N2, N3], ALL)
    assert moving is not None
    assert (moving.replicas, moving.isr, moving.leader) == ((N4, N2, N3, N1), (N1, N2, N3), N1)
    assert (moving.adding, moving.removing, moving.target) == ((N4,), (N1,), (N4, N2, N3))
    assert completed(moving, ALL) is None  # N4 is not in the ISR yet


def test_a_reassignment_completes_once_the_targets_are_in_the_isr_and_a_leaving_leader_hands_over() -> None:
    moving = reassigned(settled((N1, N2, N3)), [N4, N2, N3], ALL)
    assert moving is not None
    done = completed(moving.with_isr((N1, N2, N3, N4)), ALL)
    assert done is not None and not done.reassigning
    assert (done.replicas, done.isr, done.leader) == ((N4, N2, N3), (N2, N3, N4), N4)
    assert done.leader_epoch == moving.leader_epoch + 1
    staying = reassigned(settled((N1, N2)), [N3, N1], ALL)
    assert staying is not None
    kept = completed(staying.with_isr((N1, N2, N3)), ALL)
    assert kept is not None and (kept.replicas, kept.isr, kept.leader, kept.leader_epoch) == (
        (N3, N1), (N1, N3), N1, 0)


def test_reordering_or_shrinking_completes_at_once_and_the_same_replicas_change_nothing() -> None:
    assert reassigned(settled((N1, N2, N3)), [N1, N2, N3], ALL) is None
    reordered = reassigned(settled((N1, N2, N3)), [N3, N1, N2], ALL)
    assert reordered is not None and (reordered.replicas, reordered.leader) == ((N3, N1, N2), N1)
    assert not reordered.reassigning
    shrunk = reassigned(settled((N1, N2, N3)), [N2, N3], ALL)
    assert shrunk is not None and (shrunk.replicas, shrunk.isr, shrunk.leader) == ((N2, N3), (N2, N3), N2)


def test_cancelling_drops_the_adding_replicas_and_keeps_the_removing_ones() -> None:
    moving = reassigned(settled((N1, N2)), [N3, N4], ALL)
    assert moving is not None and (moving.replicas, moving.adding, moving.removing) == (
        (N3, N4, N1, N2), (N3, N4), (N1, N2))
    back = reverted(moving.with_isr((N1, N2, N3)), ALL)
    assert back is not None and (back.replicas, back.isr, back.leader) == ((N1, N2), (N1, N2), N1)
    assert not back.reassigning
    stranded = PartitionState((N3, N1), (N3,), N3, LeaderEpoch(1), PartitionEpoch(1),
                              adding=(N3,), removing=(N1,))
    assert reverted(stranded, ALL) is None  # only an unclean election could lead it


def test_a_state_refuses_adding_or_removing_outside_its_replicas() -> None:
    with pytest.raises(ValueError, match="not disjoint"):
        PartitionState((N1, N2), (N1,), N1, LeaderEpoch(0), PartitionEpoch(0), adding=(N3,))
    with pytest.raises(ValueError, match="not disjoint"):
        PartitionState((N1, N2), (N1,), N1, LeaderEpoch(0), PartitionEpoch(0), adding=(N2,), removing=(N2,))
