"""A replica fetcher pulling from a real broker into a follower log: the follower
ends byte for byte equal to the leader, with the same producer state and aborted
transactions, and follows new appends as they come."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from broker.net.client import BrokerClient
from broker.replication.fetcher import FollowedPartition, ReplicaFetcher
from storage.log import Log
from storage.log_config import LogConfig
from tests.integration.harness import BrokerProcess


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(bootstrap: str, topic: str, txn_id: str) -> None:
    """Plain, idempotent and transactional data: one committed and one aborted transaction."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions()
    for commit in (True, False):
        p.begin_transaction()
        for i in range(20):
            p.produce(topic, value=f"{commit}-{i}".encode(), partition=0)
        assert p.flush(30) == 0  # an abort would purge unsent records
        (p.commit_transaction if commit else p.abort_transaction)()
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(50):
        plain.produce(topic, value=f"plain-{i}".encode(), partition=0)
    assert plain.flush(30) == 0


async def until_caught_up(follower: Log, leader_log: Log, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while follower.log_end_offset < leader_log.log_end_offset and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def test_a_follower_log_ends_equal_to_its_leader(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = f"repl-{uuid.uuid4().hex[:6]}"
    produce(broker.bootstrap, topic, f"txn-{topic}")
    follower = Log.open(tmp_path / "follower" / f"{topic}-0", LogConfig(), 0, None, True, now_ms())
    fetcher = ReplicaFetcher(2, BrokerClient("127.0.0.1", broker.port, "replica-2"), now_ms, max_wait_ms=100)
    try:
        fetcher.follow(FollowedPartition(topic, 0, follower, -1, follower.update_high_watermark))
        broker.stop()  # the leader's files are final: compare against them
        leader_log = Log.open(broker.partition_dir(topic), LogConfig(), 0, None, True, now_ms())
        broker.start()
        await until_caught_up(follower, leader_log)
        assert follower.log_end_offset == leader_log.log_end_offset == 20 + 1 + 20 + 1 + 50
        end = leader_log.log_end_offset
        assert follower.read(0, 10**7, end, True).records == leader_log.read(0, 10**7, end, True).records
        assert follower.active_producers() == leader_log.active_producers()
        assert follower.aborted_transactions(0, end) == leader_log.aborted_transactions(0, end)
        assert follower.high_watermark == end
        leader_log.close()

        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, value=b"later", partition=0)
        assert plain.flush(30) == 0
        deadline = time.monotonic() + 20
        while follower.log_end_offset < end + 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert follower.log_end_offset == end + 1, "the fetcher follows new appends"
    finally:
        await fetcher.close()
        follower.close()
