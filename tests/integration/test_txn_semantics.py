"""Transaction semantics against a real broker: LSO, order, read_committed fetch, timeouts, disk.

- The last stable offset holds back everything after an open transaction (also
  later non-transactional records); once the transactions end, read_committed
  sees the committed records in offset order: non-transactional ones in append
  order, each transaction's records in its own send order (seed 000 "Consumer
  processing order", as Kafka implements it: the LSO, not a reordering).
- Fetch read_committed at the byte level: last_stable_offset, no batch at or
  past the LSO, and abortedTransactions for the aborted transaction.
- A transactional producer process killed mid-transaction is aborted after
  transaction.timeout.ms; a read_committed consumer that is already polling
  moves on by itself; List/DescribeTransactions show CompleteAbort.
- On disk, one committed transaction is laid out as in seed 001's walk-through:
  the transactional batch then a COMMIT control batch in the data partition, and
  Empty -> Ongoing -> PrepareCommit -> CompleteCommit in the transactional id's
  __transaction_state partition. An aborted one leaves an ABORT marker and a
  .txnindex entry.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from coordinator.hashing import coordinator_partition
from protocol.transaction_log import decode_key, decode_value
from tests.integration.harness import BrokerFactory, BrokerProcess, segment_files, unique_topic
from tests.integration.test_txn_clients import (
    COMMITTED,
    TXN_BROKER_OVERRIDES,
    TXN_STATE_PARTITIONS,
    ConfluentTxn,
    Got,
    KafkaPythonKit,
    confluent_consume,
    create_topics,
    describe_transaction,
    list_offsets,
    list_transactions,
    tid,
    txn_broker,  # noqa: F401 - the module-scoped broker fixture
    values,
)
from tests.integration.wire import WireClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords

    from protocol.messages import REQUESTS

pytestmark = pytest.mark.integration

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 0, 1, 2, 3, 4, 5
CONTROL_BIT = 0x20
TRANSACTIONAL_BIT = 0x10


def plain_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})


def produce_plain(p: Producer, topic: str, partition: int, value: str) -> None:
    p.produce(topic, value=value.encode(), partition=partition)
    assert p.flush(10) == 0


# -- LSO and order ----------------------------------------------------------------------------


def test_lso_holds_back_later_records_and_order_after_commit(txn_broker: BrokerProcess) -> None:  # noqa: F811
    topic = unique_topic("txn-lso")
    create_topics(txn_broker, {topic: 2})
    parts = [0, 1]
    tps = [(topic, p) for p in parts]
    x1 = ConfluentTxn(txn_broker.bootstrap, tid("lso-x1"), 60000)
    x2 = ConfluentTxn(txn_broker.bootstrap, tid("lso-x2"), 60000)
    plain = plain_producer(txn_broker.bootstrap)
    kp = KafkaPythonKit(txn_broker)
    x1.init()
    x2.init()

    def txn_send(x: ConfluentTxn, tag: str) -> list[int]:
        return x.send_all([(topic, p, f"{tag}-p{p}") for p in parts])

    def plain_send(tag: str) -> None:
        for p in parts:
            produce_plain(plain, topic, p, f"{tag}-p{p}")

    # The time line of seed 000's picture, on both partitions.
    plain_send("n0")  # offset 0
    x1.begin()
    assert txn_send(x1, "x1a") == [1, 1]  # X1's first offset on each partition
    plain_send("n1")  # 2
    x2.begin()
    txn_send(x2, "x2a")  # 3
    txn_send(x1, "x1b")  # 4
    plain_send("n2")  # 5

    for p in parts:
        assert list_offsets(txn_broker, topic, p, 1) == 1, "read_committed end = X1's first offset"
        assert list_offsets(txn_broker, topic, p, 0) == 6
    assert kp.end_offsets(tps, COMMITTED) == {tp: 1 for tp in tps}
    assert kp.end_offsets(tps, "read_uncommitted") == {tp: 6 for tp in tps}
    assert sorted(values(confluent_consume(txn_broker.bootstrap, tps, COMMITTED))) == ["n0-p0", "n0-p1"]

    txn_send(x2, "x2b")  # 6
    x2.commit()  # COMMIT markers at 7: X2 is decided, but X1 (earlier) is still open
    for p in parts:
        assert list_offsets(txn_broker, topic, p, 1) == 1, "X2's commit must not move the LSO past open X1"
    assert sorted(values(confluent_consume(txn_broker.bootstrap, tps, COMMITTED))) == ["n0-p0", "n0-p1"]
    plain_send("n3")  # 8

    x1.commit()  # markers at 9
    for p in parts:
        assert list_offsets(txn_broker, topic, p, 1) == list_offsets(txn_broker, topic, p, 0) == 10

    got = confluent_consume(txn_broker.bootstrap, tps, COMMITTED)
    expected_order = ["n0", "x1a", "n1", "x2a", "x1b", "n2", "x2b", "n3"]
    expected_offsets = [0, 1, 2, 3, 4, 5, 6, 8]
    for p in parts:
        mine = [(o, v) for t, part, o, v in got if part == p]
        assert [v for _o, v in mine] == [f"{tag}-p{p}" for tag in expected_order], f"partition {p}: {mine}"
        assert [o for o, _v in mine] == expected_offsets, f"partition {p}: {mine}"
        vs = [v for _o, v in mine]
        assert [v for v in vs if v.startswith("n")] == [f"n{i}-p{p}" for i in range(4)]  # append order
        assert [v for v in vs if v.startswith("x1")] == [f"x1a-p{p}", f"x1b-p{p}"]
        assert [v for v in vs if v.startswith("x2")] == [f"x2a-p{p}", f"x2b-p{p}"]
    assert kp.end_offsets(tps, COMMITTED) == {tp: 10 for tp in tps}
    assert len(kp.consume(tps, COMMITTED)) == 16
    for x in (x1, x2):
        x.close()
    kp.close()


# -- Fetch read_committed at the byte level ---------------------------------------------------------


def fetch(broker: BrokerProcess, topic: str, partition: int, offset: int, isolation_level: int) -> Any:
    cls = REQUESTS[1]
    msg = cls(
        version=11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            cls.FetchTopic(
                topic=topic,
                partitions=[
                    cls.FetchTopic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    with WireClient(broker.port) as c:
        resp = c.call(msg, 11)
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0, p
    return p


def batches_of(records: bytes | None) -> list[Any]:
    out = []
    mr = MemoryRecords(bytes(records or b""))
    while (b := mr.next_batch()) is not None:
        out.append(b)
    return out


def test_fetch_read_committed_lso_and_aborted_transactions(txn_broker: BrokerProcess) -> None:  # noqa: F811
    topic = unique_topic("txn-fetch")
    create_topics(txn_broker, {topic: 1})
    transactional_id = tid("fetch")
    x = ConfluentTxn(txn_broker.bootstrap, transactional_id, 60000)
    x.init()
    x.begin()
    assert x.send_all([(topic, 0, f"c-{i}") for i in range(2)]) == [0, 1]
    x.commit()  # marker 2
    x.begin()
    assert x.send_all([(topic, 0, f"a-{i}") for i in range(3)]) == [3, 4, 5]
    x.abort()  # marker 6
    x.begin()
    assert x.send_all([(topic, 0, "open-0")]) == [7]  # left open

    committed = fetch(txn_broker, topic, 0, 0, 1)
    assert committed.high_watermark == 8
    assert committed.last_stable_offset == 7
    pid = describe_transaction(txn_broker, transactional_id).producer_id
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions or []] == [(pid, 3)]
    batches = batches_of(committed.records)
    assert batches, "read_committed fetch returned no data below the LSO"
    offsets = [r.offset for b in batches for r in b]
    assert max(offsets) < 7, f"read_committed fetch returned offsets at/after the LSO: {offsets}"
    assert offsets == list(range(7)), offsets

    uncommitted = fetch(txn_broker, topic, 0, 0, 0)
    assert uncommitted.last_stable_offset == 7
    assert [r.offset for b in batches_of(uncommitted.records) for r in b] == list(range(8))

    # From past the aborted transaction, it is no longer listed.
    later = fetch(txn_broker, topic, 0, 7, 1)
    assert not later.aborted_transactions
    assert not batches_of(later.records)
    x.abort()
    assert fetch(txn_broker, topic, 0, 7, 1).last_stable_offset == 9
    x.close()


# -- a killed producer process ----------------------------------------------------------------------

ZOMBIE_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from confluent_kafka import Producer
    bootstrap, tid, topic = sys.argv[1:4]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": 2000, "message.timeout.ms": 2000, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"zombie-%d" % i, partition=0)
    assert p.flush(20) == 0
    print("flushed", flush=True)
    sys.stdin.readline()  # wait to be killed
    os._exit(0)
    """
)


def test_killed_producer_process_is_aborted_after_timeout(txn_broker: BrokerProcess) -> None:  # noqa: F811
    topic = unique_topic("txn-killed")
    create_topics(txn_broker, {topic: 1})
    transactional_id = tid("killed")
    proc = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE_SCRIPT, txn_broker.bootstrap, transactional_id, topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "flushed"
        proc.kill()
        killed_at = time.monotonic()
    finally:
        proc.kill()
        proc.wait()
        for s in (proc.stdin, proc.stdout):
            if s is not None:
                s.close()

    state = describe_transaction(txn_broker, transactional_id)
    assert state.transaction_state == "Ongoing", state
    assert state.transaction_timeout_ms == 2000
    epoch = state.producer_epoch
    plain = plain_producer(txn_broker.bootstrap)
    produce_plain(plain, topic, 0, "after-zombie")  # offset 3
    assert list_offsets(txn_broker, topic, 0, 1) == 0

    # A read_committed consumer already polling: it gets "after-zombie" only once the
    # coordinator has aborted the dead producer's transaction, and never a zombie record.
    c = Consumer(
        {
            "bootstrap.servers": txn_broker.bootstrap,
            "group.id": "gregor-txn-unused",
            "enable.auto.commit": False,
            "isolation.level": COMMITTED,
            "fetch.wait.max.ms": 50,
        }
    )
    got: list[Got] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert m.error() is None, m.error()
            got.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
        seen_after = time.monotonic() - killed_at
    finally:
        c.close()
    assert got == [(topic, 0, 3, "after-zombie")], got
    assert seen_after >= 1.5, f"consumer saw past the open transaction {seen_after:.2f}s after the kill"

    assert list_offsets(txn_broker, topic, 0, 1) == 5  # zombie 0-2, after-zombie 3, ABORT marker 4
    state = describe_transaction(txn_broker, transactional_id)
    assert state.transaction_state == "CompleteAbort", state
    assert state.producer_epoch > epoch, "the timeout abort bumps the epoch to fence the zombie"
    assert list_transactions(txn_broker)[transactional_id] == "CompleteAbort"

    fresh = ConfluentTxn(txn_broker.bootstrap, transactional_id, 60000)
    fresh.init()
    fresh.begin()
    assert fresh.send_all([(topic, 0, "fresh")]) == [5]
    fresh.commit()
    fresh.close()
    got = confluent_consume(txn_broker.bootstrap, [(topic, 0)], COMMITTED)
    assert values(got) == ["after-zombie", "fresh"]


# -- on-disk layout ---------------------------------------------------------------------------------


def read_batches(partition_dir: Path) -> list[Any]:
    out = []
    for f in segment_files(partition_dir):
        out.extend(batches_of(f.read_bytes()))
    return out


def txn_state_records(broker: BrokerProcess, transactional_id: str) -> list[Any]:
    part = coordinator_partition(transactional_id, TXN_STATE_PARTITIONS)
    out = []
    for b in read_batches(broker.partition_dir("__transaction_state", part)):
        assert not b.is_transactional and not b.is_control_batch
        assert b.producer_id == -1, "__transaction_state records are written without a producer id"
        for r in b:
            if decode_key(r.key) == transactional_id:
                out.append(decode_value(r.value))
    return out


def control_record(batch: Any) -> tuple[int, int, int]:
    """(key version, marker type, coordinator epoch) of a control batch's one record."""
    (record,) = list(batch)
    version, kind = struct.unpack(">hh", record.key)
    value_version, coordinator_epoch = struct.unpack(">hi", record.value)
    assert value_version == 0
    return version, kind, coordinator_epoch


def test_on_disk_layout_of_one_committed_transaction(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(TXN_BROKER_OVERRIDES)
    topic = unique_topic("txn-disk")
    create_topics(broker, {topic: 1})
    transactional_id = tid("disk")
    x = ConfluentTxn(broker.bootstrap, transactional_id, 45000)
    x.init()
    x.begin()
    assert x.send_all([(topic, 0, f"v{i}") for i in range(3)]) == [0, 1, 2]
    x.commit()
    x.close()
    assert broker.stop() == 0

    batches = read_batches(broker.partition_dir(topic, 0))
    assert len(batches) == 2, [(b.base_offset, b.is_control_batch) for b in batches]
    data, marker = batches
    assert data.is_transactional and not data.is_control_batch
    assert data.attributes & TRANSACTIONAL_BIT and not data.attributes & CONTROL_BIT
    records = list(data)
    assert [r.offset for r in records] == [0, 1, 2] and [r.value for r in records] == [b"v0", b"v1", b"v2"]
    assert data.base_sequence == 0
    assert marker.base_offset == 3
    assert marker.is_control_batch and marker.is_transactional
    assert marker.attributes & CONTROL_BIT, f"attributes {marker.attributes:#x} lack the control bit (5)"
    assert (marker.producer_id, marker.producer_epoch) == (data.producer_id, data.producer_epoch)
    assert marker.base_sequence == -1
    version, kind, _coordinator_epoch = control_record(marker)
    assert (version, kind) == (0, 1), "COMMIT marker: key version 0, type 1"
    assert not any(
        f.stat().st_size for f in segment_files(broker.partition_dir(topic, 0), ".txnindex")
    ), "a commit writes no .txnindex entry"

    states = txn_state_records(broker, transactional_id)
    assert [s.status for s in states] == [EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT], states
    assert {(s.producer_id, s.producer_epoch) for s in states} == {(data.producer_id, data.producer_epoch)}
    assert all(s.timeout_ms == 45000 for s in states)
    empty, ongoing, prepare, complete = states
    assert not empty.partitions
    assert ongoing.partitions == ((topic, (0,)),)
    assert prepare.partitions == ((topic, (0,)),)
    assert not complete.partitions
    assert ongoing.start_ms > 0 and prepare.start_ms == ongoing.start_ms
    assert empty.last_update_ms <= ongoing.last_update_ms <= prepare.last_update_ms <= complete.last_update_ms


def test_on_disk_layout_of_an_aborted_transaction(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(TXN_BROKER_OVERRIDES)
    topic = unique_topic("txn-disk-abort")
    create_topics(broker, {topic: 1})
    plain = plain_producer(broker.bootstrap)
    produce_plain(plain, topic, 0, "before")  # offset 0
    transactional_id = tid("disk-abort")
    x = ConfluentTxn(broker.bootstrap, transactional_id, 60000)
    x.init()
    x.begin()
    assert x.send_all([(topic, 0, f"a{i}") for i in range(2)]) == [1, 2]
    x.abort()  # marker 3
    x.close()
    assert broker.stop() == 0

    batches = read_batches(broker.partition_dir(topic, 0))
    assert [b.base_offset for b in batches] == [0, 1, 3]
    marker = batches[2]
    assert marker.is_control_batch and marker.attributes & CONTROL_BIT
    assert control_record(marker)[:2] == (0, 0), "ABORT marker: key version 0, type 0"

    (txnindex,) = segment_files(broker.partition_dir(topic, 0), ".txnindex")
    raw = txnindex.read_bytes()
    assert len(raw) == 34, f".txnindex holds {len(raw)} bytes, expected one 34-byte entry"
    version, pid, first, last, lso = struct.unpack(">hqqqq", raw)
    assert (version, pid, first, last) == (0, marker.producer_id, 1, 3)
    assert lso == 4, "no other open transaction: Kafka records the marker offset + 1 as the LSO"

    states = txn_state_records(broker, transactional_id)
    assert [s.status for s in states] == [EMPTY, ONGOING, PREPARE_ABORT, COMPLETE_ABORT], states
