"""The internal topics stay small (issue 13): thousands of offset commits and transactions,
a deleted group, a deleted offset, an expired offset and an expired transactional id, each
removed by a tombstone; after cleaning the partitions shrink, and a restarted broker loads
the compacted partitions into the same coordinator state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.record.memory_records import MemoryRecords

from protocol.messages import REQUESTS
from protocol.transaction_log import decode_key
from tests.integration.clients import read_to_eof
from tests.integration.harness import BrokerFactory, BrokerProcess, segment_files, unique_topic, wait_until
from tests.integration.test_txn_clients import describe_transaction, list_transactions
from tests.integration.wire import WireClient, create_topic

pytestmark = pytest.mark.integration

SEGMENT = 16384
INTERNAL = {
    "log.cleaner.backoff.ms": 50,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "log.cleaner.delete.retention.ms": 0,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.segment.bytes": SEGMENT,
    "transaction.state.log.segment.bytes": SEGMENT,
    "offsets.retention.check.interval.ms": 100,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
}
COMMITS = 1500
TRANSACTIONS = 300
COMMIT, FETCH, OFFSET_DELETE = 8, 9, 47
LOAD_IN_PROGRESS = 14

TP = tuple[str, int]


def log_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def commit(c: WireClient, group: str, offsets: dict[TP, int], retention_ms: int = -1) -> None:
    """OffsetCommit v2 of a simple group (v2 still carries retention_time_ms)."""
    cls = REQUESTS[COMMIT]
    T = cls.OffsetCommitRequestTopic
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(T.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            commit_timestamp=-1, committed_metadata="",
        ))
    req = cls(version=2, group_id=group, generation_id_or_member_epoch=-1, member_id="",
              group_instance_id=None, retention_time_ms=retention_ms,
              topics=[T(name=t, partitions=p) for t, p in topics.items()])
    errors = wait_until(lambda: _not_loading(c.call(req, 2)), msg="__consumer_offsets loaded")
    assert errors == [0] * len(offsets), errors


def _not_loading(resp: Any) -> list[int] | None:
    errors = [p.error_code for t in resp.topics for p in t.partitions]
    return None if LOAD_IN_PROGRESS in errors else errors


def fetched(c: WireClient, group: str, partitions: list[TP]) -> dict[TP, int]:
    cls = REQUESTS[FETCH]
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    req = cls(version=5, group_id=group, topics=[
        cls.OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()
    ])
    resp = c.call(req, 5)
    assert resp.error_code == 0, resp
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions}


def offset_delete(c: WireClient, group: str, tp: TP) -> None:
    cls = REQUESTS[OFFSET_DELETE]
    T = cls.OffsetDeleteRequestTopic
    req = cls(version=0, group_id=group, topics=[
        T(name=tp[0], partitions=[T.OffsetDeleteRequestPartition(partition_index=tp[1])])
    ])
    resp = c.call(req, 0)
    assert resp.error_code == 0 and all(p.error_code == 0 for t in resp.topics for p in t.partitions), resp


def txn_state_keys(b: BrokerProcess) -> list[str]:
    """The transactional ids of every record in `__transaction_state`-0, tombstones included."""
    keys = []
    for f in segment_files(b.partition_dir("__transaction_state")):
        try:
            mr = MemoryRecords(f.read_bytes())
        except FileNotFoundError:  # replaced by the cleaner meanwhile
            continue
        while (batch := mr.next_batch()) is not None:
            keys.extend(str(decode_key(r.key)) for r in batch if r.key is not None)
    return keys


def transactions(bootstrap: str, tid: str, topic: str, count: int, group: str) -> Producer:
    """`count` committed transactions of one record each, each also committing its offset
    for `group` (TxnOffsetCommit: transactional writes and markers in `__consumer_offsets`)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    p.init_transactions(10)
    for i in range(count):
        p.begin_transaction()
        p.produce(topic, value=b"t%d" % i, partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, i + 1)], metadata, 10)
        p.commit_transaction(10)
    return p


def coordinator_state(b: BrokerProcess, topic: str) -> dict[str, Any]:
    tps = [(topic, 0), (topic, 1)]
    with WireClient(b.port) as c:
        state = {g: fetched(c, g, tps) for g in ("g-keep", "g-odel", "g-delete", "g-expire", "g-txn")}
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    state["groups"] = sorted(
        g.group_id for g in admin.list_consumer_groups().result(10).valid if g.group_id.startswith("g-")
    )
    txn = describe_transaction(b, "tx-keep")
    state["tx-keep"] = (txn.producer_id, txn.producer_epoch, txn.transaction_state)
    return state


def test_internal_topics_shrink_and_reload(broker_factory: BrokerFactory) -> None:
    b = broker_factory(INTERNAL)
    topic = unique_topic("internal-src")
    with WireClient(b.port) as c:
        create_topic(c, topic, partitions=2)
        for i in range(COMMITS):
            commit(c, "g-keep", {(topic, 0): i})
        commit(c, "g-odel", {(topic, 0): 5, (topic, 1): 6})
        offset_delete(c, "g-odel", (topic, 1))
        commit(c, "g-delete", {(topic, 0): 7})
        commit(c, "g-expire", {(topic, 0): 8}, retention_ms=1)
        wait_until(lambda: fetched(c, "g-expire", [(topic, 0)])[(topic, 0)] == -1,
                   msg="the offset committed with a retention of 1 ms expired")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_consumer_groups(["g-delete"])["g-delete"].result(10)
    transactions(b.bootstrap, "tx-keep", topic, TRANSACTIONS, "g-txn")

    offsets_dir, txn_dir = b.partition_dir("__consumer_offsets"), b.partition_dir("__transaction_state")
    # Uncompacted, every commit and every state change stays: far more than three segments.
    wait_until(lambda: log_bytes(offsets_dir) < 3 * SEGMENT, timeout=60,
               msg=f"__consumer_offsets-0 compacted (now {log_bytes(offsets_dir)} bytes)")
    wait_until(lambda: log_bytes(txn_dir) < 3 * SEGMENT, timeout=60,
               msg=f"__transaction_state-0 compacted (now {log_bytes(txn_dir)} bytes)")
    assert "__consumer_offsets-0: cleaned" in b.log_text()
    assert "__transaction_state-0: cleaned" in b.log_text()

    before = coordinator_state(b, topic)
    assert before["g-keep"] == {(topic, 0): COMMITS - 1, (topic, 1): -1}
    assert before["g-odel"] == {(topic, 0): 5, (topic, 1): -1}
    assert before["g-delete"] == before["g-expire"] == {(topic, 0): -1, (topic, 1): -1}
    assert before["g-txn"] == {(topic, 0): TRANSACTIONS, (topic, 1): -1}
    assert "g-delete" not in before["groups"] and "g-keep" in before["groups"]
    assert before["tx-keep"][2] == "CompleteCommit"

    b.restart()
    wait_until(lambda: "tx-keep" in list_transactions(b), msg="tx-keep reloaded")
    assert coordinator_state(b, topic) == before

    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-keep", "linger.ms": 0})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, value=b"after-restart", partition=0)
    p.commit_transaction(10)
    got = read_to_eof(b.bootstrap, [(topic, 0)], "read_committed", "internal", 20, topic)
    assert [m.value() for _tp, m in got] == [b"t%d" % i for i in range(TRANSACTIONS)] + [b"after-restart"]


def test_expired_transactional_id_leaves_the_log(broker_factory: BrokerFactory) -> None:
    """transactional.id.expiration.ms writes a tombstone; cleaning removes the id's records
    and, past delete.retention.ms, the tombstone; a broker restarted with the default
    expiration does not bring the id back."""
    b = broker_factory(INTERNAL)
    topic = unique_topic("expire-src")
    with WireClient(b.port) as c:
        create_topic(c, topic)
    transactions(b.bootstrap, "tx-gone", topic, 20, "g-gone")
    b.stop()
    b.config["transactional.id.expiration.ms"] = 500
    b.start()
    wait_until(lambda: list_transactions(b) == {}, msg="tx-gone expired")
    # Other ids' transactions fill segments until the one with tx-gone's records and its
    # tombstone is closed and cleaned (delete horizon 0: the tombstone goes on the next pass).
    other = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-other", "linger.ms": 0})
    other.init_transactions(10)

    def one_more_transaction_then_gone() -> bool:
        other.begin_transaction()
        other.produce(topic, value=b"x", partition=0)
        other.commit_transaction(10)
        return "tx-gone" not in txn_state_keys(b)

    wait_until(one_more_transaction_then_gone, timeout=60, msg="tx-gone's records and tombstone cleaned away")
    b.stop()
    del b.config["transactional.id.expiration.ms"]
    b.start()
    wait_until(lambda: "tx-other" in list_transactions(b), msg="tx-other reloaded")
    assert "tx-gone" not in list_transactions(b)
