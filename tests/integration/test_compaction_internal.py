"""The internal topics stay small: thousands of offset commits and transactions, a
deleted group, then cleaning; the partitions shrink, and a restarted broker loads the
compacted partitions into the same coordinator state (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

try:
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # older confluent-kafka keeps it in admin
    from confluent_kafka.admin import ConsumerGroupTopicPartitions  # type: ignore[no-redef,attr-defined]

from confluent_kafka import Producer

from tests.integration.clients import read_to_eof
from tests.integration.harness import BrokerFactory, unique_topic, wait_until

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
}
COMMITS = 1500
TRANSACTIONS = 300


def log_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def commit(admin: AdminClient, group: str, topic: str, offset: int) -> None:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])
    result = admin.alter_consumer_group_offsets([req])[group].result(10)
    assert result.topic_partitions[0].error is None


def committed(admin: AdminClient, group: str, topic: str) -> int:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    return int(admin.list_consumer_group_offsets([req])[group].result(10).topic_partitions[0].offset)


def test_internal_topics_shrink_and_reload(broker_factory: BrokerFactory) -> None:
    b = broker_factory(INTERNAL)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = unique_topic("internal-src")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)

    for i in range(COMMITS):
        commit(admin, "g-keep", topic, i)
    for i in range(3):
        commit(admin, "g-delete", topic, i)
    admin.delete_consumer_groups(["g-delete"])["g-delete"].result(10)

    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-keep", "linger.ms": 0})
    p.init_transactions(10)
    for i in range(TRANSACTIONS):
        p.begin_transaction()
        p.produce(topic, value=b"t%d" % i, partition=0)
        p.commit_transaction(10)

    offsets_dir, txn_dir = b.partition_dir("__consumer_offsets"), b.partition_dir("__transaction_state")
    # Uncompacted: every commit and every state change stays (far more than three segments).
    wait_until(lambda: log_bytes(offsets_dir) < 3 * SEGMENT, timeout=60,
               msg=f"__consumer_offsets-0 compacted (now {log_bytes(offsets_dir)} bytes)")
    wait_until(lambda: log_bytes(txn_dir) < 3 * SEGMENT, timeout=60,
               msg=f"__transaction_state-0 compacted (now {log_bytes(txn_dir)} bytes)")
    assert "__consumer_offsets-0: cleaned" in b.log_text()
    assert "__transaction_state-0: cleaned" in b.log_text()

    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert committed(admin, "g-keep", topic) == COMMITS - 1
    assert committed(admin, "g-delete", topic) < 0  # deleted: its tombstones survived cleaning
    listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert "g-keep" in listed and "g-delete" not in listed
    restarted = b.log_text().rpartition("===== harness: start #2")[2]
    assert "loaded 1 transactional ids" in restarted

    p2 = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-keep", "linger.ms": 0})
    p2.init_transactions(10)
    p2.begin_transaction()
    p2.produce(topic, value=b"after-restart", partition=0)
    p2.commit_transaction(10)
    got = read_to_eof(b.bootstrap, [(topic, 0)], "read_committed", "internal", 20, topic)
    assert [m.value() for _tp, m in got] == [b"t%d" % i for i in range(TRANSACTIONS)] + [b"after-restart"]
