"""The clusters the console's tests run it against, Gregor and Apache Kafka 4.4.0 (one broker
each, `transaction.partition.verification.enable: false` as the clusters on which hanging
transactions happened ran, and a quick scan for timed-out transactions), and what the tests
do to them: topics, a transactional producer, a hanging transaction crafted at the byte
level (as in test_txn_tools: a producer id no transactional id owns appends a transactional
batch stamped an hour ago, older than the 15-minute transaction.max.timeout.ms, and no
marker ever comes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from protocol.messages import REQUESTS
from tests.integration import wire
from tests.integration.harness import started_broker, wait_until
from tests.integration.kafka import require_kafka, started_kafka

# No KIP-890 verification (it refuses the write that would hang); a quick scan for timed-out
# transactions (a killed producer's is aborted by its coordinator within a second of its timeout).
SETTINGS: dict[str, object] = {
    "transaction.partition.verification.enable": False,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Target:
    """The cluster under the console: Gregor or Apache Kafka, one broker."""

    name: str
    bootstrap: str
    port: int


def started_target(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A module fixture's body: the named cluster, started, stopped at the end."""
    if name == "gregor":
        with started_broker(tmp_path_factory.mktemp("gregor"), SETTINGS) as b:
            yield Target("gregor", b.bootstrap, b.port)
        return
    require_kafka()
    with started_kafka(tmp_path_factory.mktemp("kafka"), SETTINGS) as k:
        yield Target("kafka", k.bootstrap, k.port)


def create_topic(target: Target, topic: str) -> None:
    with wire.WireClient(target.port) as c:
        wire.create_topic(c, topic)
    wait_until(lambda: _leader_known(target, topic), timeout=20, msg=f"a leader for {topic}")


def _leader_known(target: Target, topic: str) -> bool:
    with wire.WireClient(target.port) as c:
        t = c.metadata([topic]).topics[0]
        return t.error_code == 0 and bool(t.partitions) and t.partitions[0].leader_id >= 0


def txn_producer(target: Target, txn_id: str) -> Producer:
    p = Producer({
        "bootstrap.servers": target.bootstrap, "transactional.id": txn_id, "linger.ms": 0,
        "transaction.timeout.ms": 60000, "message.timeout.ms": 20000,
    })
    p.init_transactions(30)
    return p


def produce(p: Producer, topic: str, count: int) -> None:
    for i in range(count):
        p.produce(topic, b"value-%d" % i, partition=0)
    assert p.flush(20) == 0


def craft_hanging(target: Target, topic: str) -> int:
    """Offset 0 plain, 1 transactional from a producer id no transactional id owns, stamped
    an hour ago (never marked), 2 plain. Its producer id."""
    create_topic(target, topic)
    with wire.WireClient(target.port) as c:
        init = wait_until(lambda: _init_producer_id(c), timeout=20, msg="a producer id")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        hour_ago = int(time.time() * 1000) - HOUR_MS
        stuck = wire.build_batch([b"stuck"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                 transactional=True, base_timestamp=hour_ago)
        for batch, txn_id in ((wire.build_batch([b"before"]), None), (stuck, "console-ghost"),
                              (wire.build_batch([b"after"]), None)):
            answer = c.produce(topic, [(0, batch)], version=7, transactional_id=txn_id)
            assert wire.partition_errors(answer) == {0: 0}, f"produce to {topic}-0"
    return pid


def _init_producer_id(c: wire.WireClient) -> Any:
    """An idempotent producer's id (InitProducerId without a transactional id), or None while
    the cluster cannot give one yet (a fresh Kafka's producer id manager)."""
    init = c.call(REQUESTS[22](version=1, transactional_id=None, transaction_timeout_ms=60000), 1)
    return init if init.error_code == 0 else None


def last_stable_offset(target: Target, topic: str) -> int:
    """Partition 0's LSO (ListOffsets v2, latest, read_committed)."""
    cls = REQUESTS[2]
    part = cls.ListOffsetsTopic.ListOffsetsPartition
    request = cls(version=2, replica_id=-1, isolation_level=1, topics=[
        cls.ListOffsetsTopic(name=topic, partitions=[part(partition_index=0, timestamp=-1)])
    ])
    with wire.WireClient(target.port) as c:
        p = c.call(request, 2).topics[0].partitions[0]
    assert p.error_code == 0, f"ListOffsets {topic}-0: error {p.error_code}"
    return int(p.offset)
