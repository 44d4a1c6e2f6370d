"""A replica fetcher pulling from a real broker into a follower log: the follower
ends byte for byte equal to the leader, with the same producer state and aborted
transactions, and follows new appends as they come."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from broker.net.client import BrokerClient
from broker.replication.fetcher import FollowedPartition, ReplicaFetcher
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from storage.log import Log
from storage.log_config import LogConfig
from tests.integration.harness import BrokerProcess
from tests.integration.wire import WireClient, create_topic


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


class RecordingClient(BrokerClient):
    """The real inter-broker client, keeping each Fetch it sends: (session id, epoch, the
    partitions it names, the partitions it forgets)."""

    def __init__(self, port: int) -> None:
        super().__init__("127.0.0.1", port, "replica-3")
        self.sent: list[tuple[int, int, list[tuple[str, int]], list[tuple[str, int]]]] = []

    async def call(
        self, message: Any, version: int, timeout_s: float | None = None, client_id: str | None = None
    ) -> Any:
        self.sent.append((
            message.session_id, message.session_epoch,
            [(t.topic, p.partition) for t in message.topics for p in t.partitions],
            [(t.topic, i) for t in message.forgotten_topics_data for i in t.partitions],
        ))
        return await super().call(message, version, timeout_s, client_id)


def open_follower(tmp_path: Path, topic: str, index: int) -> Log:
    return Log.open(tmp_path / "follower" / f"{topic}-{index}", LogConfig(), 0, None, True, now_ms())


async def until(predicate: Any, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.05)


async def test_a_follower_fetches_incrementally_in_a_session(broker: BrokerProcess, tmp_path: Path) -> None:
    """KIP-227 between brokers: a full first Fetch opens a session; later Fetches carry its id
    and growing epochs and name only the partitions whose position moved; a forgotten
    partition leaves the session; a leader restarted (the session unknown) is fetched from
    in full again, and every partition keeps following."""
    topic = f"session-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.port) as c:
        create_topic(c, topic, partitions=3)
    logs = [open_follower(tmp_path, topic, i) for i in range(3)]
    client = RecordingClient(broker.port)
    fetcher = ReplicaFetcher(3, client, now_ms, max_wait_ms=100)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def append(index: int, n: int) -> None:
        for i in range(n):
            plain.produce(topic, value=f"{index}-{i}".encode(), partition=index)
        assert plain.flush(30) == 0

    try:
        for i, log in enumerate(logs):
            fetcher.follow(FollowedPartition(topic, i, log, -1, log.update_high_watermark))
        await until(lambda: len(client.sent) >= 3)
        first_id, first_epoch, named, _ = client.sent[0]
        assert (first_id, first_epoch) == (0, 0) and len(named) == 3
        session_id = client.sent[1][0]
        assert session_id != 0 and client.sent[1][1] == 1

        mark = len(client.sent)
        append(1, 5)
        await until(lambda: logs[1].log_end_offset == 5)
        later = client.sent[mark:]
        assert all(s == session_id for s, _, _, _ in later), later
        assert all(named in ([], [(topic, 1)]) for _, _, named, _ in later), later
        epochs = [e for _, e, _, _ in client.sent[1:]]
        assert epochs == list(range(1, len(epochs) + 1))

        fetcher.unfollow(topic, 2)
        append(0, 2)
        await until(lambda: any((topic, 2) in gone for _, _, _, gone in client.sent[mark:]))
        await until(lambda: logs[0].log_end_offset == 2)

        broker.stop()
        broker.start()  # the session is gone with the process
        mark = len(client.sent)
        append(1, 3)
        await until(lambda: logs[1].log_end_offset == 8)
        assert any(s == 0 and e == 0 and len(named) == 2 for s, e, named, _ in client.sent[mark:])
        assert logs[2].log_end_offset == 0  # forgotten, never fetched again
    finally:
        await fetcher.close()
        for log in logs:
            log.close()


def session_fetch(topic: str, session_id: int, epoch: int, named: dict[int, int], wait_ms: int = 100) -> Any:
    """A follower's Fetch v12 (replica 3) in a session, naming partitions at the given offsets."""
    cls = REQUESTS[1]
    return cls(
        replica_id=3, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="",
        topics=[cls.FetchTopic(topic=topic, partitions=[
            cls.FetchTopic.FetchPartition(
                partition=i, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=0, partition_max_bytes=1 << 20,
            ) for i, offset in named.items()
        ])] if named else [],
    )


def answered(response: Any) -> dict[int, tuple[int, int]]:
    """Partition -> (high watermark, bytes of records) of a Fetch answer."""
    return {p.partition_index: (p.high_watermark, len(p.records or b""))
            for t in response.responses for p in t.partitions}


async def test_the_leader_answers_a_session_only_with_news(broker: BrokerProcess) -> None:
    """KIP-227 on the leader's side: the session's first answer holds every partition; later
    ones only those with records or new offsets; a session with nothing new waits its
    max_wait and answers no partition; a wrong epoch is INVALID_FETCH_SESSION_EPOCH."""
    topic = f"news-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.port) as c:
        create_topic(c, topic, partitions=3)
    client = BrokerClient("127.0.0.1", broker.port, "replica-3")
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        first = await client.call(session_fetch(topic, 0, 0, {0: 0, 1: 0, 2: 0}), 12)
        assert first.session_id != 0 and answered(first) == {0: (0, 0), 1: (0, 0), 2: (0, 0)}
        session = first.session_id
        for i in range(5):
            plain.produce(topic, value=b"v%d" % i, partition=1)
        assert plain.flush(30) == 0
        news = await client.call(session_fetch(topic, session, 1, {}), 12)
        assert news.session_id == session
        assert set(answered(news)) == {1} and answered(news)[1][0] == 5 and answered(news)[1][1] > 0
        quiet = await client.call(session_fetch(topic, session, 2, {1: 5}), 12)
        assert answered(quiet) == {}
        wrong = await client.call(session_fetch(topic, session, 7, {}), 12)
        assert wrong.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    finally:
        await client.close()
