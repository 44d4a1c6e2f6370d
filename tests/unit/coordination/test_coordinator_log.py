"""The coordinators' writes count only once replicated, and loads act only on what a
failover cannot take back: CoordinatorLog over a real ReplicaManager and log, with one
follower whose fetches the test performs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.coordination.coordinator_log import CoordinatorLog
from broker.coordination.internal_topics import InternalRecord, record_batch
from broker.replication.replica_manager import Partition, ReplicaManager
from broker.store.image import PartitionEpoch, PartitionState
from protocol.errors import ErrorCode
from protocol.record_batch import ControlType
from protocol.types import (
    CoordinatorEpoch,
    LeaderEpoch,
    NodeId,
    ProducerEpoch,
    ProducerId,
    TransactionVersion,
)
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.producer_state import AppendOrigin
from tests.unit.storage.batches import make_batch

TOPIC = "__transaction_state"
NOW = 1_000_000
ME, FOLLOWER = NodeId(1), NodeId(2)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    manager = LogManager([tmp_path], 1, "cluster")
    yield ReplicaManager(manager, 1)
    manager.shutdown()


def state(epoch: int, leader: NodeId = ME) -> PartitionState:
    return PartitionState((ME, FOLLOWER), (ME, FOLLOWER), leader, LeaderEpoch(epoch), PartitionEpoch(epoch))


def lead(replicas: ReplicaManager, epoch: int = 1) -> Partition:
    return replicas.become_leader(TOPIC, 0, LogConfig(min_insync_replicas=2), state(epoch), NOW)


def batch(key: bytes) -> bytes:
    return record_batch([(key, b"v")], NOW)


async def test_a_write_answers_once_the_follower_has_it(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    log = CoordinatorLog(replicas, TOPIC, timeout_s=5)
    write = asyncio.ensure_future(log.write(0, batch(b"k"), NOW))
    await asyncio.sleep(0.01)
    assert not write.done(), "answered before the follower fetched"
    replicas.record_follower_fetch(part, FOLLOWER, part.log.log_end_offset, NOW)
    written = await asyncio.wait_for(write, 1)
    assert (written.error, written.base_offset, written.coordinator_epoch) == (ErrorCode.NONE, 0, 1)


async def test_a_write_whose_leadership_ends_fails(replicas: ReplicaManager) -> None:
    lead(replicas)
    log = CoordinatorLog(replicas, TOPIC, timeout_s=5)
    write = asyncio.ensure_future(log.write(0, batch(b"k"), NOW))
    await asyncio.sleep(0.01)
    replicas.become_follower(TOPIC, 0, LogConfig(), state(2, leader=FOLLOWER))
    written = await asyncio.wait_for(write, 1)
    assert written.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and written.coordinator_epoch == 1
    assert (await log.write(0, batch(b"k2"), NOW)).coordinator_epoch == -1, "not written as follower"


async def test_a_write_not_replicated_in_time_has_an_open_outcome(replicas: ReplicaManager) -> None:
    lead(replicas)
    written = await CoordinatorLog(replicas, TOPIC, timeout_s=0.05).write(0, batch(b"k"), NOW)
    assert written.error == ErrorCode.REQUEST_TIMED_OUT


async def test_a_registration_that_lapsed_writes_nothing(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    replicas.may_lead = lambda: False
    written = await CoordinatorLog(replicas, TOPIC, timeout_s=1).write(0, batch(b"k"), NOW)
    assert written.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and part.log.log_end_offset == 0


async def test_a_load_waits_until_what_it_found_is_replicated(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    for key in (b"a", b"b", b"c"):
        replicas.append(part, batch(key), NOW)
    part = lead(replicas, epoch=2)  # a new leader epoch, its log end not yet replicated
    seen: list[InternalRecord] = []
    load = asyncio.ensure_future(CoordinatorLog(replicas, TOPIC, 5).load(part, seen.append))
    await asyncio.sleep(0.01)
    assert not load.done() and not seen
    replicas.record_follower_fetch(part, FOLLOWER, part.log.log_end_offset, NOW)
    assert await asyncio.wait_for(load, 1)
    assert [r.key for r in seen] == [b"a", b"b", b"c"]


async def test_a_load_stops_when_the_leadership_ends(replicas: ReplicaManager) -> None:
    part = lead(replicas)
    replicas.append(part, batch(b"a"), NOW)
    load = asyncio.ensure_future(CoordinatorLog(replicas, TOPIC, 5).load(part, lambda r: None))
    await asyncio.sleep(0.01)
    replicas.become_follower(TOPIC, 0, LogConfig(), state(2, leader=FOLLOWER))
    assert await asyncio.wait_for(load, 1) is False


async def test_a_load_reads_every_kind_of_batch_the_log_can_hold(replicas: ReplicaManager) -> None:
    """Many records a batch, a compressed batch (Kafka's coordinators may compress) and a
    transaction's marker, in offset order; more than one read's (1 MiB) worth of them."""
    part = lead(replicas)
    big = b"x" * 300_000
    first = record_batch([(b"a", b"1"), (b"b", None), (b"c", big)], NOW)
    replicas.append(part, first, NOW, AppendOrigin.COORDINATOR)
    replicas.append(part, make_batch([b"z" * 1000] * 5, compression=1), NOW, AppendOrigin.COORDINATOR)
    pid, epoch = ProducerId(9), ProducerEpoch(0)
    replicas.append_txn_marker(part, pid, epoch, True, CoordinatorEpoch(1), NOW, TransactionVersion(0))
    for n in range(5):
        replicas.append(part, record_batch([(b"k%d" % n, big)], NOW), NOW, AppendOrigin.COORDINATOR)
    replicas.record_follower_fetch(part, FOLLOWER, part.log.log_end_offset, NOW)
    seen: list[InternalRecord] = []
    assert await CoordinatorLog(replicas, TOPIC, 5).load(part, seen.append)
    read = [(r.offset, r.key, r.value) for r in seen]
    assert read[:3] == [(0, b"a", b"1"), (1, b"b", None), (2, b"c", big)]
    assert read[3:8] == [(3 + i, None, b"z" * 1000) for i in range(5)]
    marker = seen[8]
    assert (marker.offset, marker.control, marker.producer_id) == (8, ControlType.COMMIT, 9)
    assert [r.key for r in seen[9:]] == [b"k%d" % n for n in range(5)]
