"""Controller decisions as pure functions: replica placement and leader election.

Kafka's rules, no I/O: the controller (broker/cluster/controller.py) reads the
image, asks these functions what the partitions should look like, and writes
the answers to the store by compare-and-swap.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.cluster.image import NO_LEADER, NodeId, PartitionState
from protocol.errors import ErrorCode


class PlacementError(ValueError):
    """A replication factor the live brokers cannot satisfy."""


def place_replicas(
    partitions: int, replication_factor: int, racks: Mapping[NodeId, str | None],
    start: int = 0, first_partition: int = 0,
) -> list[tuple[NodeId, ...]]:
    """Round-robin assignment (rack-aware when every broker has a rack), as Kafka's.

    Partition p's first replica is broker (start + p) of the ordered list, the
    others follow at a shift that grows every full round, so leaders and
    followers spread evenly; with racks, brokers are interleaved by rack and a
    replica skips to the next broker on a rack the partition does not use yet.
    """
    if replication_factor < 1:
        raise PlacementError("replication factor must be at least 1")
    if replication_factor > len(racks):
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the {len(racks)} available brokers"
        )
    racked = _all_racked(racks)
    brokers = _rack_interleaved(racks) if racked else sorted(racks)
    n = len(brokers)
    assignment = []
    for p in range(first_partition, first_partition + partitions):
        first = (start + p) % n
        shift = p // n
        replicas = [brokers[first]]
        for j in range(1, replication_factor):
            candidate = (first + 1 + (shift + j - 1) % max(1, n - 1)) % n
            replicas.append(_next_fit(brokers, candidate, replicas, racks if racked else None))
        assignment.append(tuple(replicas))
    return assignment


def _next_fit(
    brokers: list[NodeId], candidate: int, chosen: list[NodeId], racks: Mapping[NodeId, str | None] | None
) -> NodeId:
    """From `candidate` on, the first broker not chosen yet, on an unused rack while one is left."""
    order = [brokers[(candidate + i) % len(brokers)] for i in range(len(brokers))]
    free = [b for b in order if b not in chosen]
    if racks is not None:
        used = {racks[b] for b in chosen}
        fresh = [b for b in free if racks[b] not in used]
        if fresh:
            return fresh[0]
    return free[0]


def _all_racked(racks: Mapping[NodeId, str | None]) -> bool:
    return all(rack is not None for rack in racks.values())


def _rack_interleaved(racks: Mapping[NodeId, str | None]) -> list[NodeId]:
    by_rack: dict[str, list[NodeId]] = {}
    for node in sorted(racks):
        by_rack.setdefault(str(racks[node]), []).append(node)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]


def after_broker_change(state: PartitionState, live: set[NodeId]) -> PartitionState | None:
    """The state a partition should move to when the set of live brokers changes.

    A dead broker leaves the ISR, except that the ISR never becomes empty: its
    last member stays (no unclean election), so the partition goes offline
    until that broker returns and leads again. A leader that died is replaced
    by the first live ISR member in replica order. None when nothing changes.
    """
    last = (state.leader,) if state.leader in state.isr else state.isr[-1:]
    isr = tuple(n for n in state.isr if n in live) or last
    if state.leader in live and state.leader in isr:
        return state.with_isr(isr) if isr != state.isr else None
    leader = next((n for n in state.replicas if n in isr and n in live), NO_LEADER)
    if leader == state.leader and isr == state.isr:
        return None
    return state.with_leader(leader, isr)


def preferred_leader(state: PartitionState, live: set[NodeId]) -> PartitionState | None:
    """Move leadership to the first replica when it is live, in the ISR and not leading."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return state.with_leader(preferred, state.isr)


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


def election(
    state: PartitionState, live: set[NodeId], election_type: int
) -> tuple[PartitionState | None, ErrorCode]:
    """ElectLeaders for one partition: the new state and NONE, or None and Kafka's reason
    (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE).
    An unclean election takes a live replica outside the ISR only when no ISR member lives."""
    if election_type == PREFERRED:
        if state.leader == state.replicas[0]:
            return None, ErrorCode.ELECTION_NOT_NEEDED
        moved = preferred_leader(state, live)
        if moved is None:
            return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return moved, ErrorCode.NONE
    if state.leader in live:
        return None, ErrorCode.ELECTION_NOT_NEEDED
    clean = [n for n in state.replicas if n in live and n in state.isr]
    chosen = clean or [n for n in state.replicas if n in live]
    if not chosen:
        return None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return state.with_leader(chosen[0], state.isr if clean else (chosen[0],)), ErrorCode.NONE
