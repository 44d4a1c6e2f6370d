"""Controller decisions: replica placement, manual assignments, leader election."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.cluster.image import NO_LEADER, LeaderEpoch, NodeId, PartitionEpoch, PartitionState
from broker.cluster.placement import (
    PREFERRED,
    UNCLEAN,
    PlacementError,
    Refused,
    after_broker_change,
    election,
    more_assignment,
    place_replicas,
    preferred_leader,
    topic_assignment,
)
from protocol.errors import ErrorCode

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
