"""KIP-664 admin tooling: `gregor transactions list|describe|describe-producers|find-hanging|abort`.

A hanging transaction is crafted at the byte level: a producer id no
coordinator knows appends a *transactional* batch, so no marker will ever come.
Its first offset pins the LSO until `abort` writes one. KIP-890's verification
refuses such a write (a test below shows it), so the brokers of these tests run
with `transaction.partition.verification.enable: false`, as the brokers on which
hanging transactions happened did.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from protocol.messages import REQUESTS
from tests.integration import wire
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    gregor_command,
    require_java,
    run_java,
    unique_topic,
    wait_until,
)

pytestmark = pytest.mark.integration
UNVERIFIED = {"transaction.partition.verification.enable": False}

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                  "StartOffset", "LastTimestamp", "Duration(min)"]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(UNVERIFIED)


# -- helpers -------------------------------------------------------------------------


def gregor_txn(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*gregor_command(), "transactions", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True, text=True, timeout=60,
    )


def ok(broker: BrokerProcess, *args: str) -> list[list[str]]:
    """Run a `gregor transactions` command that must succeed; its table as rows of cells."""
    result = gregor_txn(broker, *args)
    assert result.returncode == 0, f"gregor transactions {args}: rc {result.returncode}\n{result.stderr}"
    return [line.split() for line in result.stdout.splitlines()]


def list_offset(c: wire.WireClient, topic: str, isolation: int, partition: int = 0) -> int:
    """ListOffsets v2 latest: the LSO for read_committed, the log end offset otherwise."""
    cls = REQUESTS[2]
    part = cls.ListOffsetsTopic.ListOffsetsPartition
    req = cls(version=2, replica_id=-1, isolation_level=isolation, topics=[
        cls.ListOffsetsTopic(name=topic, partitions=[part(partition_index=partition, timestamp=-1)])
    ])
    p = c.call(req, 2).topics[0].partitions[0]
    assert p.error_code == 0, f"ListOffsets {topic}-{partition}: error {p.error_code}"
    return int(p.offset)


def init_idempotent_producer(c: wire.WireClient) -> tuple[int, int]:
    resp = c.call(REQUESTS[22](version=1, transactional_id=None, transaction_timeout_ms=60000), 1)
    assert resp.error_code == 0
    return int(resp.producer_id), int(resp.producer_epoch)


def produce_one(c: wire.WireClient, topic: str, batch: bytes) -> None:
    errors = wire.partition_errors(c.produce(topic, [(0, batch)], version=7))
    assert errors == {0: 0}, f"produce to {topic}-0: {errors}"


def read_values(bootstrap: str, topic: str, isolation: str, settle: float = 2.0) -> list[tuple[int, bytes]]:
    """(offset, value) of everything a fresh consumer gets from partition 0 within `settle` s
    of the last message."""
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "gregor-txn-tools-unused",
        "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 100,
    })
    try:
        c.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value()))
            deadline = time.monotonic() + settle
        return got
    finally:
        c.close()


def hanging_rows(broker: BrokerProcess, *args: str) -> list[list[str]]:
    table = ok(broker, "find-hanging", *args)
    assert table[0] == HANGING_HEADER
    return table[1:]


def craft_hanging(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """offset 0 plain, 1-2 transactional from an unknown producer (never marked), 3 plain.
    Returns (producer id, producer epoch)."""
    with wire.WireClient(broker.port) as c:
        c.metadata([topic], auto_create=True)
        pid, epoch = init_idempotent_producer(c)
        produce_one(c, topic, wire.build_batch([b"before"]))
        produce_one(c, topic, wire.build_batch(
            [b"hanging-1", b"hanging-2"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
            transactional=True,
        ))
        produce_one(c, topic, wire.build_batch([b"after"]))
    return pid, epoch


# -- 1. a hanging transaction: found, pins the LSO, aborted ------------------------------


def test_verification_refuses_the_write_that_would_hang(broker_factory: BrokerFactory) -> None:
    """With KIP-890 verification (the default) no coordinator-unknown transactional batch
    is appended: Produce without a transactional id gets INVALID_TXN_STATE, as in Kafka
    (a transactional id whose transaction lacks the partition: test_txn_v2), and the LSO
    stays at the log end."""
    b = broker_factory()
    topic = unique_topic("verified")
    with wire.WireClient(b.port) as c:
        c.metadata([topic], auto_create=True)
        pid, epoch = init_idempotent_producer(c)
        batch = wire.build_batch([b"x"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                 transactional=True)
        answer = c.produce(topic, [(0, batch)], version=9)
        assert wire.partition_errors(answer) == {0: 48}  # INVALID_TXN_STATE
        assert list_offset(c, topic, READ_COMMITTED) == list_offset(c, topic, READ_UNCOMMITTED) == 0


def test_hanging_transaction_found_and_aborted(broker: BrokerProcess) -> None:
    topic = unique_topic("hanging")
    pid, epoch = craft_hanging(broker, topic)
    with wire.WireClient(broker.port) as c:
        assert list_offset(c, topic, READ_UNCOMMITTED) == 4
        assert list_offset(c, topic, READ_COMMITTED) == 1, "the open transaction must pin the LSO"

    assert read_values(broker.bootstrap, topic, "read_committed") == [(0, b"before")]
    assert [v for _, v in read_values(broker.bootstrap, topic, "read_uncommitted")] == [
        b"before", b"hanging-1", b"hanging-2", b"after"]

    producers = ok(broker, "describe-producers", "--topic", topic, "--partition", "0")
    assert producers[0][-1] == "CurrentTransactionStartOffset"
    assert [r[0] for r in producers[1:]] == [str(pid)]
    assert producers[1][-1] == "1"

    # Fresh: not older than the default 15-minute maximum timeout, so not (yet) hanging.
    assert hanging_rows(broker, "--topic", topic) == []
    rows = hanging_rows(broker, "--topic", topic, "--max-transaction-timeout", "0")
    assert len(rows) == 1, rows
    t, part, r_pid, r_epoch, coord_epoch, start, last_ts, minutes = rows[0]
    assert (t, part, r_pid, r_epoch, start) == (topic, "0", str(pid), str(epoch), "1")
    assert coord_epoch == "-1" and int(minutes) == 0
    assert abs(int(last_ts) - time.time() * 1000) < 60_000
    # The same through the broker-wide search and a partition-scoped one.
    assert rows[0] in hanging_rows(broker, "--broker-id", "1", "--max-transaction-timeout", "0")
    scoped = hanging_rows(broker, "--topic", topic, "--partition", "0", "--max-transaction-timeout", "0")
    assert scoped == rows

    result = gregor_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1")
    assert result.returncode == 0, result.stderr
    assert f"producer {pid}" in result.stdout

    with wire.WireClient(broker.port) as c:
        leo = list_offset(c, topic, READ_UNCOMMITTED)
        assert leo == 5, "the ABORT marker takes offset 4"
        assert list_offset(c, topic, READ_COMMITTED) == leo, "after the abort the LSO is the log end"
    assert read_values(broker.bootstrap, topic, "read_committed") == [(0, b"before"), (3, b"after")]
    assert hanging_rows(broker, "--topic", topic, "--max-transaction-timeout", "0") == []
    after = ok(broker, "describe-producers", "--topic", topic, "--partition", "0")
    assert after[1][-1] == "None"


def test_old_hanging_transaction_found_with_default_timeout(broker: BrokerProcess) -> None:
    """A transaction silent for an hour is beyond the default 15-minute maximum timeout."""
    topic = unique_topic("hanging-old")
    with wire.WireClient(broker.port) as c:
        c.metadata([topic], auto_create=True)
        pid, epoch = init_idempotent_producer(c)
        hour_ago = int(time.time() * 1000) - 3_600_000
        produce_one(c, topic, wire.build_batch(
            [b"old"], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True,
            base_timestamp=hour_ago,
        ))
    rows = hanging_rows(broker, "--topic", topic)
    assert [(r[2], r[5], r[7]) for r in rows] == [(str(pid), "0", "60")]


def test_abort_errors_are_clear(broker: BrokerProcess) -> None:
    topic = unique_topic("hanging-err")
    craft_hanging(broker, topic)
    wrong = gregor_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert wrong.returncode == 1
    assert "Could not find any open transactions starting at offset 2" in wrong.stderr
    missing = gregor_txn(broker, "abort", "--topic", topic, "--partition", "0")
    assert missing.returncode == 1 and "--start-offset" in missing.stderr
    unscoped = gregor_txn(broker, "find-hanging")
    assert unscoped.returncode == 1 and "--topic or --broker-id" in unscoped.stderr
    unknown = gregor_txn(broker, "describe", "--transactional-id", "no-such-id")
    assert unknown.returncode == 1 and "no-such-id" in unknown.stderr
    with wire.WireClient(broker.port) as c:
        assert list_offset(c, topic, READ_COMMITTED) == 1, "a failed abort leaves the transaction open"


def test_unreachable_broker_fails_fast() -> None:
    result = subprocess.run(
        [*gregor_command(), "transactions", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "2000",
         "list"], capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "cannot connect to 127.0.0.1:1" in result.stderr


# -- data after the marker: a real producer's transaction, then a stray batch -----------


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
        "transaction.timeout.ms": 60000, "message.timeout.ms": 20000,
    })
    p.init_transactions(20)
    return p


def test_data_after_the_marker_is_hanging(broker: BrokerProcess) -> None:
    """A transactional batch that lands after its transaction's COMMIT marker (a delayed
    request, KIP-890): the coordinator thinks the transaction is complete, the partition
    has an open one."""
    topic = unique_topic("after-marker")
    txn_id = unique_topic("tx-after")
    p = txn_producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"committed-{i}".encode(), partition=0)
    p.commit_transaction(20)  # offsets 0-2, COMMIT marker at 3
    described = ok(broker, "describe", "--transactional-id", txn_id)
    _coord, _id, pid, epoch, state = described[1][:5]
    assert state == "CompleteCommit"

    with wire.WireClient(broker.port) as c:
        produce_one(c, topic, wire.build_batch(
            [b"stray"], producer_id=int(pid), producer_epoch=int(epoch), base_sequence=3, transactional=True,
        ))  # offset 4
        assert list_offset(c, topic, READ_COMMITTED) == 4

    rows = hanging_rows(broker, "--topic", topic, "--max-transaction-timeout", "0")
    assert [(r[2], r[3], r[5]) for r in rows] == [(pid, epoch, "4")]
    aborted = gregor_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "4")
    assert aborted.returncode == 0, aborted.stderr
    with wire.WireClient(broker.port) as c:
        assert list_offset(c, topic, READ_COMMITTED) == list_offset(c, topic, READ_UNCOMMITTED) == 6
    values = [v for _, v in read_values(broker.bootstrap, topic, "read_committed")]
    assert values == [b"committed-0", b"committed-1", b"committed-2"]
    # The transactional id stays usable: a new producer instance (epoch bump) commits.
    # (The old instance would see its next batch as a duplicate of the stray sequence 3.)
    p2 = txn_producer(broker.bootstrap, txn_id)
    p2.begin_transaction()
    p2.produce(topic, value=b"next", partition=0)
    p2.commit_transaction(20)
    values = [v for _, v in read_values(broker.bootstrap, topic, "read_committed")]
    assert values == [b"committed-0", b"committed-1", b"committed-2", b"next"]


# -- 2. list / describe against a real transactional producer -----------------------------


def test_list_and_describe_a_live_transaction(broker: BrokerProcess) -> None:
    topic = unique_topic("tools-live")
    txn_id = unique_topic("tx-live")
    p = txn_producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(20) == 0

    listed = ok(broker, "list")
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [r for r in listed[1:] if r[0] == txn_id]
    assert len(mine) == 1 and mine[0][1] == "1" and mine[0][3] == "Ongoing", listed
    pid = mine[0][2]

    described = ok(broker, "describe", "--transactional-id", txn_id)
    assert described[0] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                            "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                            "TransactionDurationMs", "TopicPartitions"]
    coord, tid, d_pid, _epoch, state, timeout, started, duration, partitions = described[1]
    assert (coord, tid, d_pid, state, timeout) == ("1", txn_id, pid, "Ongoing", "60000")
    assert abs(int(started) - time.time() * 1000) < 60_000 and int(duration) >= 0
    assert partitions == f"{topic}-0"

    # A live transaction is open on the partition but its coordinator includes the
    # partition: not hanging, however small the timeout.
    producers = ok(broker, "describe-producers", "--topic", topic, "--partition", "0")
    assert producers[1][0] == pid and producers[1][-1] == "0"
    assert hanging_rows(broker, "--topic", topic, "--max-transaction-timeout", "0") == []

    p.commit_transaction(20)
    wait_until(lambda: _state_of(broker, txn_id) == "CompleteCommit", msg="CompleteCommit")
    described = ok(broker, "describe", "--transactional-id", txn_id)
    assert described[1][4] == "CompleteCommit"
    assert described[1][6] == "None" or int(described[1][6]) > 0
    assert [r[3] for r in ok(broker, "list")[1:] if r[0] == txn_id] == ["CompleteCommit"]


def _state_of(broker: BrokerProcess, txn_id: str) -> str | None:
    rows = [r for r in ok(broker, "list")[1:] if r[0] == txn_id]
    return rows[0][3] if rows else None


# -- 3. the Java Admin client: listTransactions, describeProducers, abortTransaction ----------


@pytest.mark.java
@pytest.mark.parametrize("client", ["3.9", "4.3"])
def test_java_admin_lists_and_aborts(broker: BrokerProcess, client: str) -> None:
    require_java(client)
    topic = unique_topic("java-hanging")
    pid, epoch = craft_hanging(broker, topic)
    txn_id = unique_topic("tx-java")
    p = txn_producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic + "-other", value=b"open", partition=0)
    assert p.flush(20) == 0

    result = run_java("TxnTools.java", broker.bootstrap, topic, "0", "1", client=client)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    lines = result.stdout.splitlines()
    assert f"listing {txn_id} Ongoing" in lines, lines
    assert f"producer {pid} epoch {epoch} start 1" in lines, lines
    assert f"aborted {pid}" in lines, lines
    with wire.WireClient(broker.port) as c:
        assert list_offset(c, topic, READ_COMMITTED) == list_offset(c, topic, READ_UNCOMMITTED) == 5
    p.abort_transaction(20)
