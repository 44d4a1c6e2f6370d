"""Controller decisions: replica placement, manual assignments, leader election."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.cluster.image import NO_LEADER, LeaderEpoch, NodeId, PartitionEpoch, PartitionState
from broker.cluster.placement import (
    PREFERRED,
    UNCLEAN,
    PlacementError,
    after_broker_change,
    election,
    place_replicas,
    preferred_leader,
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
