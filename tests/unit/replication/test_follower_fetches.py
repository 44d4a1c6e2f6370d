"""What a follower's fetch does on the leader (ReplicaManager over a real log): the HW and
ISR it may move, and which changes wake a waiting fetch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.coordination.internal_topics import record_batch
from broker.replication.fetch_sessions import Cached, FetchSession
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.store.image import PartitionEpoch, PartitionState
from protocol.messages import REQUESTS
from protocol.types import LeaderEpoch, NodeId
from storage.log_config import LogConfig
from storage.log_manager import LogManager

Fetch = REQUESTS[1]
TOPIC = "t"
NOW = 1_000_000
ME, F2, F3 = NodeId(1), NodeId(2), NodeId(3)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    manager = LogManager([tmp_path], 1, "cluster")
    yield ReplicaManager(manager, 1)
    manager.shutdown()


def state(isr: tuple[NodeId, ...], partition_epoch: int = 1) -> PartitionState:
    return PartitionState((ME, F2, F3), isr, ME, LeaderEpoch(1), PartitionEpoch(partition_epoch))


def lead(replicas: ReplicaManager, isr: tuple[NodeId, ...] = (ME, F2, F3), epoch: int = 1) -> Partition:
    return replicas.become_leader(TOPIC, 0, LogConfig(min_insync_replicas=2), state(isr, epoch), NOW)


def write(replicas: ReplicaManager, part: Partition) -> None:
    replicas.append(part, record_batch([(b"k", b"v")], NOW), NOW)


def test_a_caught_up_follower_out_of_the_isr_rejoins_at_its_next_fetch_on_an_idle_partition(
    replicas: ReplicaManager,
) -> None:
    proposals: list[tuple[NodeId, ...]] = []
    replicas.isr_changes = lambda part, isr: proposals.append(isr)
    part = lead(replicas, isr=(ME, F2))
    write(replicas, part)
    replicas.record_follower_fetch(part, F2, 1, NOW)
    assert part.log.high_watermark == 1 and not proposals
    replicas.record_follower_fetch(part, F3, 1, NOW)  # at the log end and at the HW, but not in sync
    assert proposals == [(ME, F2, F3)]


def test_an_isr_the_store_shrank_lets_the_hw_move_without_another_fetch(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    write(replicas, part)
    replicas.record_follower_fetch(part, F2, 1, NOW)
    assert part.log.high_watermark == 0, "F3 holds it back"
    lead(replicas, isr=(ME, F2), epoch=2)  # the controller removed F3: same leader epoch
    assert part.log.high_watermark == 1


def test_a_settled_follower_fetching_again_changes_nothing_but_its_time(replicas: ReplicaManager) -> None:
    proposals: list[tuple[NodeId, ...]] = []
    replicas.isr_changes = lambda part, isr: proposals.append(isr)
    part = lead(replicas)
    write(replicas, part)
    for follower in (F2, F3):
        replicas.record_follower_fetch(part, follower, 1, NOW)
    assert part.leader is not None and part.log.high_watermark == 1
    replicas.record_follower_fetch(part, F2, 1, NOW + 5000)
    assert part.leader.followers[F2].last_caught_up_ms == NOW + 5000
    assert not proposals and part.log.high_watermark == 1


async def test_a_followers_fetch_waits_for_records_a_consumers_also_for_the_hw(
    replicas: ReplicaManager,
) -> None:
    part = lead(replicas, isr=(ME, F2))
    write(replicas, part)
    follower = replicas.waiter([part], follower=True)
    consumer = replicas.waiter([part])
    replicas.record_follower_fetch(part, F2, 1, NOW)  # the HW moves: records become visible
    assert part.log.high_watermark == 1 and consumer.done() and not follower.done()
    write(replicas, part)
    assert follower.done()
    replicas.forget(follower, [part])
    assert not part.follower_waiters and not part.waiters


def quiet_session(part: Partition, follower: NodeId, now_ms: int) -> FetchSession:
    """A follower's fetch session holding `part`, which its fetch at `now_ms` found quiet."""
    fetch = Fetch.FetchTopic.FetchPartition(partition=0, current_leader_epoch=1,
                                            fetch_offset=part.log.log_end_offset)
    session = FetchSession(7, follower)
    session.partitions[(TOPIC, 0)] = Cached(Fetch.FetchTopic(topic=TOPIC), fetch, part=part, resolved_at=0)
    session.active.add((TOPIC, 0))
    part.watchers[session] = (TOPIC, 0)
    session.begin(0, now_ms)
    session.settle([(TOPIC, 0)])
    return session


def test_an_append_brings_a_quiet_partition_back_and_keeps_its_follower_caught_up_as_of_its_last_fetch(
    replicas: ReplicaManager,
) -> None:
    proposals: list[tuple[NodeId, ...]] = []
    replicas.isr_changes = lambda part, isr: proposals.append(isr)
    replicas.replica_lag_ms = 1000
    part = lead(replicas)
    write(replicas, part)
    for follower in (F2, F3):
        replicas.record_follower_fetch(part, follower, 1, NOW)
    session = quiet_session(part, F2, NOW + 5000)  # F2's session skips it from here on
    assert session.begin(0, NOW + 5000) == []
    replicas.append(part, record_batch([(b"k", b"v")], NOW), NOW + 5500)
    assert session.woken == [(TOPIC, 0)] and (TOPIC, 0) in session.active
    replicas.check_isr(NOW + 5900)  # F2 fetched at 5000 from the log end; F3 last at 0
    assert proposals == [(ME, F2)]


def test_a_closed_session_is_dropped_by_the_partitions_it_watched(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    session = quiet_session(part, F2, NOW)
    session.closed = True
    write(replicas, part)
    assert session not in part.watchers and session.woken == []
