"""What a partition's leader knows of its followers, and the high watermark it owns.

Pure: no I/O, time injected. The leader records every follower fetch (the
fetch offset is the follower's log end offset); from those it computes

- the high watermark: the lowest log end offset over the ISR, moving only
  forward and only while the ISR has at least `min.insync.replicas` members
  (KIP-966); while an ISR change is in flight the larger of the two sets
  counts (Kafka's "maximal ISR"), so the HW never passes a replica that may
  still be in the ISR;
- ISR changes to propose: a follower joins once its log end offset reaches
  the HW and the start of the leader's epoch; it leaves once it is behind the
  leader's log end and has not been caught up for `replica.lag.time.max.ms`
  (Kafka's `isCaughtUp`: a follower at the log end stays however long ago it
  fetched, so a leader that stalled does not drop followers for the fetches it
  did not serve meanwhile).

A proposal becomes the ISR only when the metadata store accepted it
(`committed`), as Kafka's AlterPartition.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.store.image import PartitionState
from protocol.types import NodeId

NOT_FETCHED = -1


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = NOT_FETCHED
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = NOT_FETCHED


class LeaderState:
    def __init__(
        self, me: NodeId, state: PartitionState, epoch_start_offset: int, min_isr: int, now_ms: int
    ) -> None:
        self.me = me
        self.state = state
        self.epoch_start_offset = epoch_start_offset
        self.min_isr = min_isr
        self.pending: tuple[NodeId, ...] | None = None
        # A new leader gives every follower a full lag period to catch up, as Kafka does.
        self.followers = {
            n: FollowerState(last_caught_up_ms=now_ms) for n in state.replicas if n != me
        }

    @property
    def isr(self) -> tuple[NodeId, ...]:
        return self.state.isr

    @property
    def maximal_isr(self) -> set[NodeId]:
        return set(self.state.isr) | set(self.pending or ())

    def record_fetch(self, node: NodeId, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A follower fetched from `fetch_offset` while the leader's log ended at `leader_leo`."""
        follower = self.followers.get(node)
        if follower is None:
            return
        if fetch_offset >= leader_leo:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        follower.last_fetch_leader_leo = leader_leo

    def caught_up(self, node: NodeId, at_ms: int) -> None:
        """`node` fetched at `at_ms` from the log end, unrecorded: its fetch session skipped the
        partition as quiet (nothing appended since it was last recorded there), and records
        were appended only now (Kafka's lastCaughtUpTime: the fetch before the append)."""
        follower = self.followers.get(node)
        if follower is not None and at_ms > follower.last_fetch_ms:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, at_ms)
            follower.last_fetch_ms = at_ms

    def settled(self, node: NodeId) -> bool:
        """`node` is in the ISR and no ISR change is in flight: its fetch can neither bring it
        into the ISR nor, with the HW at the log end, move the HW. (Other followers' lag is
        the periodic check's business, as Kafka's maybeShrinkIsr.)"""
        return self.pending is None and node in self.state.isr

    def high_watermark(self, leader_leo: int, current_hw: int) -> int:
        """The HW the leader may expose now (never below `current_hw`)."""
        members = self.maximal_isr
        if len(self.state.isr) < self.min_isr:
            return current_hw
        ends = [leader_leo] + [self._leo(n) for n in members if n != self.me]
        return max(current_hw, min(ends))

    def _leo(self, node: NodeId) -> int:
        follower = self.followers.get(node)
        return follower.log_end_offset if follower is not None else NOT_FETCHED

    def proposal(
        self, hw: int, leader_leo: int, now_ms: int, lag_max_ms: int, fetched_by: NodeId | None = None
    ) -> tuple[NodeId, ...] | None:
        """The ISR to propose to the store, or None (also while a proposal is in flight).

        Lagging followers leave; only `fetched_by`, the follower whose fetch this answers,
        may join (Kafka's maybeExpandIsr): what the leader last heard from a broker that has
        since died must not bring it back."""
        if self.pending is not None:
            return None
        isr = [n for n in self.state.isr if not self._lagging(n, leader_leo, now_ms, lag_max_ms)]
        if fetched_by is not None and fetched_by not in isr and self._may_join(fetched_by, hw):
            isr.append(fetched_by)
        proposed = tuple(n for n in self.state.replicas if n in isr)
        if set(proposed) == set(self.state.isr):
            return None
        self.pending = proposed
        return proposed

    def _lagging(self, node: NodeId, leader_leo: int, now_ms: int, lag_max_ms: int) -> bool:
        follower = self.followers.get(node)
        return (follower is not None and follower.log_end_offset != leader_leo
                and now_ms - follower.last_caught_up_ms > lag_max_ms)

    def _may_join(self, node: NodeId, hw: int) -> bool:
        follower = self.followers.get(node)
        if follower is None:
            return False
        leo = follower.log_end_offset
        return leo >= hw and leo >= self.epoch_start_offset

    def committed(self, state: PartitionState) -> None:
        """The store holds `state` now (our proposal or anybody's change); a reassignment
        may have added replicas (followed from now on) or removed them."""
        self.state = state
        self.pending = None
        for node in state.replicas:
            if node != self.me:
                self.followers.setdefault(node, FollowerState())
        for node in set(self.followers) - set(state.replicas):
            del self.followers[node]

    def rejected(self) -> None:
        """Our proposal lost a compare-and-swap: wait for the store's state, then retry."""
        self.pending = None
