"""The controller: one broker at a time, elected through etcd, keeps partitions led.

Every broker runs a `ClusterController`; it acts only while its broker holds
the controller key. It campaigns whenever the key is free, and while active it
reconciles after every change of the live brokers: each partition whose leader
died gets a new one from its ISR (placement.after_broker_change), a dead
follower leaves the ISR, an offline partition comes back when its last ISR
member returns. Every write is a compare-and-swap that also checks this
controller still holds the key, so a deposed controller changes nothing.
With `auto.leader.rebalance.enable`, it also gives each partition back to its
preferred replica every `leader.imbalance.check.interval.seconds`, as Kafka's
KRaft controller does (no per-broker percentage gate there either).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import aetcd.exceptions

from broker.base.caller import Caller
from broker.cluster.forwarding import ControllerChannel
from broker.cluster.placement import (
    Assignment,
    Refused,
    after_broker_change,
    check_replicas,
    completed,
    election,
    place_replicas,
    preferred_leader,
    reassigned,
    reverted,
)
from broker.security.client import ClientSecurity
from broker.store.etcd_store import REGISTERED, EtcdMetadataStore, lease_not_found
from broker.store.image import ClusterImage, ControllerRecord, PartitionState, TopicRecord
from coordinator.hashing import java_abs, java_string_hash
from protocol.errors import ErrorCode
from protocol.messages import Request, Response
from protocol.types import NodeId, TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_S = 0.5
SETTLE_ATTEMPTS = 5  # decisions per partition when other writes keep moving it
MAX_ELECTIONS_PER_PASS = 1000  # Kafka's maxElectionsPerImbalance


@dataclass(frozen=True, slots=True)
class LeaderBalancing:
    """`auto.leader.rebalance.enable` and `leader.imbalance.check.interval.seconds`."""

    enabled: bool = True
    interval_s: float = 300.0


KAFKA_BALANCING = LeaderBalancing()  # Kafka's defaults


class ClusterController:
    def __init__(
        self, store: EtcdMetadataStore, node_id: NodeId, balancing: LeaderBalancing = KAFKA_BALANCING,
        security: ClientSecurity | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.balancing = balancing
        self.channel = ControllerChannel(store, node_id, security)  # to whichever broker is the controller
        self.record: ControllerRecord | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._balancer: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """True while this broker's record is the controller key's value."""
        return self.record is not None and self.store.image.controller == self.record

    async def forward(self, request: Request, version: int, original: Caller | None = None) -> Response:
        """A request only the controller carries out, sent to it as it came (Kafka's
        forwarding), on behalf of `original`; raises BrokerUnreachable when no controller
        can be reached."""
        return await self.channel.call(request, version, original)

    def start(self) -> None:
        self.store.subscribe(self._on_change)
        self._task = asyncio.create_task(self._run(), name="controller")
        if self.balancing.enabled:
            self._balancer = asyncio.create_task(self._balance_forever(), name="leader-balancer")
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._balancer) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.channel.close()

    def _on_change(self, key: str) -> None:
        if key in ("", "controller", REGISTERED) or key.startswith(("brokers/", "partitions/")):
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._step()
            except (aetcd.exceptions.ClientError, OSError) as e:
                _log_step_failure(self.node_id, e)
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    async def _step(self) -> None:
        held = self.store.image.controller
        if held is None:
            await self._campaign()
        elif held.node_id == self.node_id and not self.active:
            await self._take_up(held)
        if self.active and not await self.reconcile():
            await asyncio.sleep(RETRY_S)  # a state moved under us: look again
            self._wake.set()

    async def _campaign(self) -> None:
        record = await self.store.campaign(self.node_id)
        if record is None:
            return
        self.record = record
        await self.store.wait_for(lambda image: image.controller == record, 5)
        log.info("broker %d is now the controller (epoch %d)", self.node_id, record.epoch)

    async def _take_up(self, record: ControllerRecord) -> None:
        """The record names this broker, which did not know it won: its campaign's answer was
        lost. Under this broker's current lease it is this broker's, and no other broker
        campaigns while it lives (before, nobody controlled the cluster until the lease
        ended, and a live broker's lease does not end)."""
        if await self.store.holds_controller(record):
            self.record = record
            log.warning("broker %d is the controller (epoch %d): its campaign won, its answer was lost",
                        self.node_id, record.epoch)

    async def reconcile(self) -> bool:
        """Bring every partition in line with the live brokers; False if a write lost a race."""
        image = self.store.image
        live = image.live_brokers()
        done = True
        for (topic, index), state in sorted(image.partitions.items()):
            new = after_broker_change(state, live)
            new = completed(new or state, live) or new  # a reassignment whose targets caught up
            if new is not None:
                done &= await self._write(topic, index, state, new)
        return done

    async def _balance_forever(self) -> None:
        while True:
            await asyncio.sleep(self.balancing.interval_s)
            try:
                while self.active and await self.balance_leaders():
                    pass  # stopped at the cap: the rest at once, as Kafka reschedules
            except (aetcd.exceptions.ClientError, OSError) as e:
                log.warning("leader rebalance failed (%s); trying at the next check", type(e).__name__)

    async def balance_leaders(self) -> bool:
        """Preferred elections for the partitions whose preferred replica is live, in the ISR
        and not leading (at most MAX_ELECTIONS_PER_PASS); True if more are left."""
        image = self.store.image
        live = image.live_brokers()
        moved = 0
        for (topic, index), state in sorted(image.partitions.items()):
            new = preferred_leader(state, live)
            if new is None:
                continue
            if moved == MAX_ELECTIONS_PER_PASS:
                return True
            moved += await self._write(topic, index, state, new)
        if moved:
            log.info("leader rebalance: %d partition(s) back on their preferred replica", moved)
        return False

    async def _write(self, topic: str, index: int, old: PartitionState, new: PartitionState) -> bool:
        ok = await self.store.alter_partition(topic, index, old, new, controller=self.record)
        if ok and old.leader != new.leader:
            log.info("partition %s-%d: leader %d -> %d (leader epoch %d, ISR %s)",
                     topic, index, old.leader, new.leader, new.leader_epoch, list(new.isr))
        return ok

    async def _settle(
        self, tp: TopicPartition,
        decide: Callable[[ClusterImage, PartitionState | None], tuple[T, PartitionState | None]],
        moved: T,
    ) -> tuple[T, PartitionState | None]:
        """Decide on the partition's current state and write the outcome. When another write
        (a leader's ISR change) moved the partition meanwhile, decide again on the new state,
        as Kafka's one-threaded controller would have; `moved` only if it keeps moving."""
        for _ in range(SETTLE_ATTEMPTS):
            image = self.store.image
            state = image.partitions.get(tp)
            outcome, new = decide(image, state)
            if state is None or new is None:
                return outcome, None
            if await self._write(tp[0], tp[1], state, new):
                return outcome, new
            await self.store.wait_for(lambda i: i.partitions.get(tp) != state, RETRY_S)  # noqa: B023
        return moved, None

    async def elect(
        self, election_type: int, wanted: list[TopicPartition] | None
    ) -> dict[TopicPartition, ErrorCode]:
        """ElectLeaders: per partition NONE (elected) or why not; all partitions when `wanted`
        is None (then, as Kafka, those that needed no election are left out)."""
        results: dict[TopicPartition, ErrorCode] = {}
        elected: list[tuple[TopicPartition, PartitionState]] = []
        for tp in wanted if wanted is not None else sorted(self.store.image.partitions):

            def decide(
                image: ClusterImage, state: PartitionState | None
            ) -> tuple[ErrorCode, PartitionState | None]:
                if state is None:
                    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
                new, error = election(state, image.live_brokers(), election_type)
                return error, new

            error, new = await self._settle(tp, decide, ErrorCode.NOT_CONTROLLER)
            if new is not None:
                elected.append((tp, new))
            if wanted is not None or error != ErrorCode.ELECTION_NOT_NEEDED:
                results[tp] = error
        # Answer once this controller's own image shows the elections, so that the next
        # request sees them (the image follows etcd's watch, a moment behind the write).
        await self.store.wait_for(lambda i: all(i.partitions.get(tp) == s for tp, s in elected), 5)
        return results

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
        manual: Assignment | None = None,
    ) -> bool:
        """Place replicas over the live brokers (or take the `manual` ones, already checked)
        and write topic and states at once."""
        image = self.store.image
        racks = {node: reg.rack for node, reg in image.brokers.items()}
        start = java_abs(java_string_hash(name))
        assignment = manual or place_replicas(partitions, replication_factor, racks, start=start)
        topic = TopicRecord(name, uuid.uuid4(), tuple(assignment), configs)
        states = [PartitionState.initial(replicas, image.live_brokers()) for replicas in assignment]
        return await self.store.create_topic(topic, states, controller=self.record)

    async def add_partitions(self, name: str, count: int, manual: Assignment | None = None) -> bool:
        """CreatePartitions: partitions up to `count`, placed as CreateTopics places them
        (or the `manual` ones, already checked); False if the topic changed meanwhile."""
        image = self.store.image
        old = image.topics.get(name)
        if old is None:
            return False
        racks = {node: reg.rack for node, reg in image.brokers.items()}
        start = java_abs(java_string_hash(name))
        added = manual or place_replicas(count - old.partitions, old.replication_factor, racks,
                                         start=start, first_partition=old.partitions)
        grown = replace(old, assignment=old.assignment + tuple(added))
        live = image.live_brokers()
        states = {old.partitions + i: PartitionState.initial(r, live) for i, r in enumerate(added)}
        return await self.store.add_partitions(old, grown, states, controller=self.record)

    async def reassign(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> dict[TopicPartition, Refused | None]:
        """AlterPartitionReassignments: per partition None (accepted) or why not; `None`
        replicas cancel the reassignment in progress."""
        results: dict[TopicPartition, Refused | None] = {}
        written: list[tuple[TopicPartition, PartitionState]] = []
        for topic, index, target in wanted:

            def decide(
                image: ClusterImage, state: PartitionState | None
            ) -> tuple[Refused | None, PartitionState | None]:
                exists = image.topics.get(topic) is not None  # noqa: B023 (called at once)
                return check_reassignment(exists, topic, index, state, target,  # noqa: B023
                                          image.live_brokers())

            refused, new = await self._settle((topic, index), decide, MOVED)
            if new is not None:
                written.append(((topic, index), new))
            results[(topic, index)] = refused
        await self.store.wait_for(lambda i: all(i.partitions.get(tp) == s for tp, s in written), 5)
        self._wake.set()  # a reassignment may be complete already
        return results

    def reassignments(
        self, wanted: list[tuple[str, list[int]]] | None
    ) -> dict[str, dict[int, PartitionState]]:
        """ListPartitionReassignments: the partitions with a reassignment in progress, by topic
        (all of them, or of the named topics and partitions; unknown ones are left out)."""
        image = self.store.image
        if wanted is None:
            pairs = [tp for tp, s in image.partitions.items() if s.reassigning]
        else:
            pairs = [(t, i) for t, indexes in wanted for i in indexes]
        found: dict[str, dict[int, PartitionState]] = {}
        for topic, index in pairs:
            state = image.partitions.get((topic, index))
            if state is not None and state.reassigning and topic in image.topics:
                found.setdefault(topic, {})[index] = state
        return found


def _log_step_failure(node_id: NodeId, error: Exception) -> None:
    """A campaign under a lease that ended is refused by etcd, as meant (`campaign`): the
    broker registers again meanwhile, so that is news, not a warning."""
    if isinstance(error, aetcd.exceptions.ClientError) and lease_not_found(error):
        log.info("broker %d: controller step refused, its lease ended (it registers again); retrying",
                 node_id)
    else:
        log.warning("controller step failed (%s: %s); retrying", type(error).__name__, error)


MOVED: Refused | None = Refused(ErrorCode.NOT_CONTROLLER, "The partition kept changing meanwhile; retry.")
NO_REASSIGNMENT = Refused(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")


def check_reassignment(
    topic_exists: bool, topic: str, index: int, state: PartitionState | None,
    target: list[int] | None, live: set[NodeId],
) -> tuple[Refused | None, PartitionState | None]:
    """Kafka's checks for one partition (ReplicationControlManager.alterPartitionReassignment)
    and the state to write (None: nothing changes)."""
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not topic_exists:
        return Refused(unknown, f"Unable to find a topic named {topic}."), None
    if state is None:
        return Refused(unknown, f"Unable to find partition {topic}:{index}."), None
    if target is None:
        if not state.reassigning:
            return NO_REASSIGNMENT, None
        back = reverted(state, live)
        if back is None:
            return Refused(ErrorCode.INVALID_REPLICATION_ASSIGNMENT, f"Unable to revert partition "
                           f"assignment for {topic}:{index} because it would require an unclean "
                           "leader election."), None
        return None, back
    refused = check_replicas(target, live, None)
    if refused is not None:
        return refused, None
    return None, reassigned(state, [NodeId(n) for n in target], live)
