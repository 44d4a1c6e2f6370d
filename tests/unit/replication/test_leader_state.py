"""The leader's view of its followers: high watermark and ISR proposals, on a fake clock."""

from __future__ import annotations

from broker.replication.leader import LeaderState
from broker.store.image import PartitionEpoch, PartitionState
from protocol.types import LeaderEpoch, NodeId

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
LAG_MS = 1000


def leader(isr: tuple[NodeId, ...] = (N1, N2, N3), min_isr: int = 2, epoch_start: int = 0) -> LeaderState:
    state = PartitionState((N1, N2, N3), isr, N1, LeaderEpoch(1), PartitionEpoch(1))
    return LeaderState(N1, state, epoch_start, min_isr, now_ms=0)


def test_hw_is_the_lowest_log_end_over_the_isr() -> None:
    lead = leader()
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=1)
    lead.record_fetch(N3, 7, leader_leo=10, now_ms=1)
    assert lead.high_watermark(leader_leo=10, current_hw=0) == 7


def test_hw_never_moves_back() -> None:
    lead = leader()
    lead.record_fetch(N2, 3, leader_leo=10, now_ms=1)
    lead.record_fetch(N3, 3, leader_leo=10, now_ms=1)
    assert lead.high_watermark(leader_leo=10, current_hw=5) == 5


def test_hw_stands_still_below_min_isr() -> None:
    lead = leader(isr=(N1,), min_isr=2)
    assert lead.high_watermark(leader_leo=10, current_hw=4) == 4


def test_a_follower_out_of_the_isr_does_not_hold_the_hw_back() -> None:
    lead = leader(isr=(N1, N2))
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=1)
    assert lead.high_watermark(leader_leo=10, current_hw=0) == 10


def test_a_lagging_follower_is_proposed_out_and_counts_until_the_store_agrees() -> None:
    lead = leader()
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=LAG_MS + 1)
    assert lead.proposal(hw=0, leader_leo=10, now_ms=LAG_MS + 1, lag_max_ms=LAG_MS) == (N1, N2)
    assert lead.high_watermark(leader_leo=10, current_hw=0) == 0, "N3 still counts while pending"
    assert lead.proposal(hw=0, leader_leo=10, now_ms=LAG_MS + 2, lag_max_ms=LAG_MS) is None, "one at a time"
    lead.committed(PartitionState((N1, N2, N3), (N1, N2), N1, LeaderEpoch(1), PartitionEpoch(2)))
    assert lead.high_watermark(leader_leo=10, current_hw=0) == 10


def test_a_follower_at_the_log_end_stays_however_long_ago_it_fetched() -> None:
    """Kafka's isCaughtUp: a leader that stalled past the lag time (paused, starved) keeps the
    followers that had everything; one that was behind when it stalled leaves."""
    lead = leader()
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=100)
    lead.record_fetch(N3, 8, leader_leo=10, now_ms=100)
    assert lead.proposal(hw=8, leader_leo=10, now_ms=100 + 5 * LAG_MS, lag_max_ms=LAG_MS) == (N1, N2)
    lead.committed(PartitionState((N1, N2, N3), (N1, N2), N1, LeaderEpoch(1), PartitionEpoch(2)))
    assert lead.proposal(hw=10, leader_leo=11, now_ms=100 + 5 * LAG_MS, lag_max_ms=LAG_MS) == (N1,), (
        "once the log grew past it, the follower's old catch-up counts"
    )


def test_a_fetch_behind_the_leader_counts_as_caught_up_if_it_reached_the_previous_end() -> None:
    lead = leader()
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=500)  # caught up at 500
    lead.record_fetch(N2, 10, leader_leo=20, now_ms=900)  # behind, but reached the end seen at 500
    lead.record_fetch(N2, 20, leader_leo=30, now_ms=1400)  # reached the end seen at 900
    lead.record_fetch(N3, 30, leader_leo=30, now_ms=1400)
    assert lead.proposal(hw=10, leader_leo=30, now_ms=1800, lag_max_ms=LAG_MS) is None


def test_a_follower_rejoins_once_it_reaches_the_hw_and_the_epoch_start() -> None:
    lead = leader(isr=(N1, N2), epoch_start=8)
    lead.record_fetch(N3, 5, leader_leo=10, now_ms=1)
    below_start = lead.proposal(hw=5, leader_leo=10, now_ms=1, lag_max_ms=LAG_MS, fetched_by=N3)
    assert below_start is None, "below the epoch start"
    lead.record_fetch(N3, 9, leader_leo=10, now_ms=2)
    assert lead.proposal(hw=9, leader_leo=10, now_ms=2, lag_max_ms=LAG_MS) is None, "only on its own fetch"
    assert lead.proposal(hw=9, leader_leo=10, now_ms=2, lag_max_ms=LAG_MS, fetched_by=N3) == (N1, N2, N3)


def test_a_rejected_proposal_can_be_made_again() -> None:
    lead = leader(isr=(N1, N2))
    lead.record_fetch(N3, 9, leader_leo=9, now_ms=1)
    assert lead.proposal(hw=9, leader_leo=9, now_ms=1, lag_max_ms=LAG_MS, fetched_by=N3) == (N1, N2, N3)
    lead.rejected()
    assert lead.proposal(hw=9, leader_leo=9, now_ms=1, lag_max_ms=LAG_MS, fetched_by=N3) == (N1, N2, N3)


def test_a_dead_follower_removed_by_the_controller_is_not_proposed_back() -> None:
    """Its last fetch had reached the log end; the controller took it out when it died."""
    lead = leader()
    lead.record_fetch(N3, 10, leader_leo=10, now_ms=1)
    lead.committed(PartitionState((N1, N2, N3), (N1, N2), N1, LeaderEpoch(1), PartitionEpoch(2)))
    lead.record_fetch(N2, 10, leader_leo=10, now_ms=2)
    assert lead.proposal(hw=10, leader_leo=10, now_ms=2, lag_max_ms=LAG_MS, fetched_by=N2) is None
    assert lead.proposal(hw=10, leader_leo=10, now_ms=3, lag_max_ms=LAG_MS) is None


def test_a_replica_added_by_a_reassignment_is_followed_and_may_join_the_isr() -> None:
    lead = leader(isr=(N1, N2))
    n4 = NodeId(4)
    lead.committed(PartitionState((n4, N1, N2, N3), (N1, N2), N1, LeaderEpoch(1), PartitionEpoch(2),
                                  adding=(n4,), removing=(N3,)))
    lead.record_fetch(n4, 10, leader_leo=10, now_ms=5)
    assert lead.proposal(hw=10, leader_leo=10, now_ms=5, lag_max_ms=LAG_MS, fetched_by=n4) == (n4, N1, N2)
    lead.committed(PartitionState((n4, N1, N2), (n4, N1, N2), N1, LeaderEpoch(1), PartitionEpoch(3)))
    assert set(lead.followers) == {n4, N2}  # the removed replica is no longer followed
