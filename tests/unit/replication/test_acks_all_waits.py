"""acks=all waits (`replicated`) whose request goes away: nothing left for the partition's
next leadership change to fail unseen."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from broker.replication.replica_manager import ReplicaManager, replicated
from broker.store.image import PartitionEpoch, PartitionState
from protocol.types import LeaderEpoch, NodeId
from storage.log_config import LogConfig
from storage.log_manager import LogManager

ME, OTHER = NodeId(1), NodeId(2)
NOW = 1_000_000


def state(epoch: int, leader: NodeId) -> PartitionState:
    return PartitionState((ME, OTHER), (ME, OTHER), leader, LeaderEpoch(epoch), PartitionEpoch(epoch))


async def test_a_wait_cancelled_with_its_request_is_not_failed_later_unseen(tmp_path: Path) -> None:
    """A produce waiting for acks=all is cancelled when its connection closes; its futures
    stayed on the partition, and losing the leadership then failed them with no one to
    read it: asyncio logged "Future exception was never retrieved" (NotLeader) as an ERROR
    in seed 100's brokers."""
    manager = LogManager([tmp_path], 1, "cluster")
    try:
        replicas = ReplicaManager(manager, 1)
        part = replicas.become_leader("t", 0, LogConfig(), state(1, ME), NOW)
        waiting = asyncio.ensure_future(replicated([(part, 1)], 30))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        del waiting  # its CancelledError's frames hold the futures
        unseen: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unseen.append(context))
        replicas.become_follower("t", 0, LogConfig(), state(2, OTHER))
        gc.collect()
        await asyncio.sleep(0)
        assert not unseen, unseen
    finally:
        manager.shutdown()
