"""A restarted broker's wait for its dead incarnation's partitions to fail over, and the
registration's data dir identity."""

from __future__ import annotations

from broker.cluster.membership import failed_over
from broker.store.image import NO_LEADER, BrokerRegistration, ClusterImage, PartitionEpoch, PartitionState
from protocol.types import LeaderEpoch, NodeId

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


def state(leader: NodeId, isr: tuple[NodeId, ...]) -> PartitionState:
    return PartitionState((N1, N2, N3), isr, leader, LeaderEpoch(1), PartitionEpoch(1))


def image(*states: PartitionState) -> ClusterImage:
    found = ClusterImage()
    found.partitions = {("t", i): s for i, s in enumerate(states)}
    return found


def test_failed_over_once_no_partition_is_led_or_kept_in_sync_by_the_node() -> None:
    assert failed_over(image(state(N2, (N2, N3))), N1)
    assert not failed_over(image(state(N1, (N1, N2))), N1)  # still its leader
    assert not failed_over(image(state(N2, (N1, N2))), N1)  # still in its ISR
    assert failed_over(image(state(NO_LEADER, (N1,))), N1)  # its last ISR member: offline, waits
    assert failed_over(image(), N1)


def test_the_data_dir_identity_round_trips_and_defaults_to_none() -> None:
    reg = BrokerRegistration(N1, "h", 1, None, "inc", (), "dir-a")
    assert BrokerRegistration.from_json(reg.to_json()) == reg
    old = {k: v for k, v in reg.to_json().items() if k != "data_dir_id"}
    assert BrokerRegistration.from_json(old).data_dir_id == ""
