"""Controller decisions as pure functions: replica placement and leader election.

Kafka's rules, no I/O: the controller (broker/cluster/controller.py) reads the
image, asks these functions what the partitions should look like, and writes
the answers to the store by compare-and-swap.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from broker.store.image import NO_LEADER, PartitionEpoch, PartitionState
from protocol.errors import ErrorCode
from protocol.types import NodeId

Assignment = tuple[tuple[NodeId, ...], ...]


class PlacementError(ValueError):
    """A replication factor the live brokers cannot satisfy."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A manual replica assignment Kafka refuses: its error code and message."""

    error: ErrorCode
    message: str


def _invalid(message: str) -> Refused:
    return Refused(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, message)


def check_replicas(replicas: Sequence[int], registered: Collection[int], rf: int | None) -> Refused | None:
    """Kafka's validateManualPartitionAssignment: non-empty, registered brokers (in sorted
    order, so an unknown broker and a duplicate are reported as Kafka reports them), no
    broker twice, and `rf` replicas when earlier partitions fixed it."""
    if not replicas:
        return _invalid("The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            return _invalid(f"The manual partition assignment includes broker {broker}, "
                            "but no such broker is registered.")
        if broker == previous:
            return _invalid(f"The manual partition assignment includes the broker {broker} more than once.")
        previous = broker
    if rf is not None and len(replicas) != rf:
        return _invalid(f"The manual partition assignment includes a partition with {len(replicas)} "
                        "replica(s), but this is not consistent with previous partitions, "
                        f"which have {rf} replica(s).")
    return None


def topic_assignment(
    entries: Sequence[tuple[int, Sequence[int]]], partitions: int, replication_factor: int,
    registered: Collection[int],
) -> Assignment | Refused:
    """CreateTopics' `assignments` (partition index, broker ids), checked as Kafka's controller
    checks them; `partitions` and `replication_factor` must be -1 beside them."""
    if replication_factor != -1:
        return Refused(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                       "but replication factor was not set to -1.")
    if partitions != -1:
        return Refused(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                       "but numPartitions was not set to -1.")
    found: dict[int, tuple[NodeId, ...]] = {}
    rf: int | None = None
    for index, replicas in entries:
        if index in found:
            return _invalid(f"Found multiple manual partition assignments for partition {index}")
        refused = check_replicas(replicas, registered, rf)
        if refused is not None:
            return refused
        rf = len(replicas)
        found[index] = tuple(NodeId(b) for b in replicas)
    if set(found) != set(range(len(found))):
        return _invalid("partitions should be a consecutive 0-based integer sequence")
    return tuple(found[i] for i in range(len(found)))


def more_assignment(
    assignments: Sequence[Sequence[int]], additional: int, replication_factor: int,
    registered: Collection[int],
) -> Assignment | Refused:
    """CreatePartitions' `assignments` for the `additional` new partitions, as Kafka checks them."""
    if len(assignments) != additional:
        return _invalid(f"Attempted to add {additional} additional partition(s), but only "
                        f"{len(assignments)} assignment(s) were specified.")
    for replicas in assignments:
        refused = check_replicas(replicas, registered, replication_factor)
        if refused is not None:
            return refused
    return tuple(tuple(NodeId(b) for b in replicas) for replicas in assignments)


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


# -- partition reassignment (Kafka's KRaft controller) ----------------------------------------


def reassigned(state: PartitionState, target: Sequence[NodeId], live: set[NodeId]) -> PartitionState | None:
    """AlterPartitionReassignments for one partition: `target` (already checked) joins the
    replicas as `adding`, the replicas not in it become `removing`; completed at once when
    the ISR allows (a mere reordering). None when nothing changes."""
    wanted = tuple(target)
    adding = tuple(n for n in wanted if n not in state.replicas)
    removing = tuple(n for n in state.replicas if n not in wanted)
    started = replace(state, replicas=wanted + removing, adding=adding, removing=removing,
                      partition_epoch=PartitionEpoch(state.partition_epoch + 1))
    new = completed(started, live) or started
    if (new.replicas, new.isr, new.leader, new.adding, new.removing) == (
        state.replicas, state.isr, state.leader, state.adding, state.removing
    ):
        return None
    return new


def completed(state: PartitionState, live: set[NodeId]) -> PartitionState | None:
    """The end of a reassignment, once every adding replica is in the ISR and some replica
    that stays is: the removed ones are dropped, leadership moves to the first target replica
    in the ISR (and live) if the leader is leaving. None while it must wait."""
    if not state.reassigning:
        return None
    isr = tuple(n for n in state.isr if n not in state.removing)
    if not isr or not set(state.adding) <= set(isr):
        return None
    return _settled(state, state.target, isr, live)


def _settled(
    state: PartitionState, replicas: tuple[NodeId, ...], isr: tuple[NodeId, ...], live: set[NodeId]
) -> PartitionState:
    """No reassignment in progress any more; a leader outside `isr` hands over to the first
    replica in it that is live (a leader epoch later)."""
    if state.leader in isr:
        return replace(state, replicas=replicas, isr=isr, adding=(), removing=(),
                       partition_epoch=PartitionEpoch(state.partition_epoch + 1))
    leaderless = replace(state, replicas=replicas, isr=isr, leader=NO_LEADER, adding=(), removing=())
    return leaderless.with_leader(next((n for n in replicas if n in isr and n in live), NO_LEADER), isr)


def reverted(state: PartitionState, live: set[NodeId]) -> PartitionState | None:
    """Cancelling a reassignment in progress: the adding replicas go, the removing ones stay;
    None when no replica left would be in the ISR (it would take an unclean election)."""
    replicas = tuple(n for n in state.replicas if n not in state.adding)
    isr = tuple(n for n in state.isr if n not in state.adding)
    return _settled(state, replicas, isr, live) if isr else None
