"""An ISR change proposed by a leader runs as a task, a loop turn later; if the broker became
a follower of the partition meanwhile, the proposal is dropped (chaos seed 99: an assertion
there ended such tasks with a traceback in the broker's log, four times)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cluster.roles import ClusterRoles
from broker.replication.replica_manager import ReplicaManager
from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import PartitionEpoch, PartitionState
from protocol.types import LeaderEpoch, NodeId
from storage.log_config import LogConfig
from storage.log_manager import LogManager

ME, OTHER = NodeId(1), NodeId(2)
CONFIG = LogConfig(min_insync_replicas=2)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    manager = LogManager([tmp_path], 1, "cluster")
    yield ReplicaManager(manager, ME)
    manager.shutdown()


def state(leader: NodeId, epoch: int) -> PartitionState:
    return PartitionState((ME, OTHER), (ME, OTHER), leader, LeaderEpoch(epoch), PartitionEpoch(epoch))


async def test_a_proposal_for_a_partition_no_longer_led_is_dropped(replicas: ReplicaManager) -> None:
    store = EtcdMetadataStore(EtcdAddress.parse("etcd://127.0.0.1:1/unused"))  # never opened
    roles = ClusterRoles(store, replicas, lambda _topic: CONFIG, lambda: 0, replica_lag_ms=1000,
                          fetch_max_wait_ms=500)
    part = replicas.become_leader("t", 0, CONFIG, state(ME, 1), 0)
    replicas.become_follower("t", 0, CONFIG, state(OTHER, 2))
    await roles._alter_isr(part, (ME,))  # before: AssertionError; the store is not reached either
    assert part.leader is None and part.log.high_watermark == 0
