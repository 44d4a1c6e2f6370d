"""Idempotent producers at the byte level, against a real broker process.

Producer ids come from real InitProducerId requests; batches are built with
explicit producer id / epoch / base sequence (tests/integration/wire.py) and
sent with Produce acks=-1. "Nothing appended" is checked with the log end
offset (ListOffsets latest) and, where it matters, by reading the batch
headers straight out of the partition's .log files.

Covers: duplicate batch -> one copy and the same base offset; sequence gap ->
OUT_OF_ORDER_SEQUENCE_NUMBER; stale epoch -> INVALID_PRODUCER_EPOCH; epoch bump
resets the sequence; Int32.MAX wrap-around; durability of the dedup state
across kill -9, clean restart, deleted and corrupt .snapshot files; producer
ids never reissued across restarts; DescribeProducers (wire v0 and the Java
Admin client).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    iter_batches,
    prefixed_json,
    require_java,
    run_java,
    segment_files,
    unique_topic,
)
from tests.integration.wire import WireClient, build_batch, create_topic

pytestmark = pytest.mark.integration

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INT32_MAX = 2**31 - 1


# -- helpers (also used by test_idempotence_clients.py) ---------------------------------


@dataclass(frozen=True)
class LogBatch:
    base_offset: int
    count: int
    producer_id: int
    epoch: int
    base_sequence: int


def log_batches(partition_dir: Path) -> list[LogBatch]:
    """Every whole batch in the partition's .log files, read from disk."""
    out = []
    for f in segment_files(partition_dir):
        data = f.read_bytes()
        for pos, base, _delta in iter_batches(f):
            pid, epoch, seq, count = struct.unpack_from(">qhii", data, pos + 43)
            out.append(LogBatch(base, count, pid, epoch, seq))
    return out


def assert_no_duplicate_sequences(batches: list[LogBatch]) -> None:
    """Per (producer id, epoch) the sequences in the log are contiguous and never repeat."""
    next_seq: dict[tuple[int, int], int] = {}
    for b in batches:
        if b.producer_id < 0:
            continue
        key = (b.producer_id, b.epoch)
        if key in next_seq:
            assert b.base_sequence == next_seq[key], (
                f"batch at offset {b.base_offset}: producer {key} sequence {b.base_sequence}, "
                f"expected {next_seq[key]}; batches: {batches}"
            )
        next_seq[key] = (b.base_sequence + b.count) % (INT32_MAX + 1)


def init_producer_id(c: WireClient, version: int = 1) -> tuple[int, int]:
    req = REQUESTS[INIT_PRODUCER_ID](version=version, transactional_id=None, transaction_timeout_ms=60000)
    resp = c.call(req, version)
    assert resp.error_code == NONE, f"InitProducerId: {resp}"
    assert resp.producer_id >= 0 and resp.producer_epoch == 0, resp
    return int(resp.producer_id), int(resp.producer_epoch)


def send(
    c: WireClient,
    topic: str,
    pid: int,
    epoch: int,
    seq: int,
    n: int = 1,
    *,
    batch: bytes | None = None,
    version: int = 7,
    tag: str = "v",
    base_timestamp: int | None = None,
) -> tuple[int, int]:
    """Produce one batch of `n` records (acks=-1); (error code, base offset)."""
    if batch is None:
        batch = idem_batch(pid, epoch, seq, n, tag=tag, base_timestamp=base_timestamp)
    resp = c.produce(topic, [(0, batch)], acks=-1, version=version)
    p = resp.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


def idem_batch(
    pid: int, epoch: int, seq: int, n: int = 1, *, tag: str = "v", base_timestamp: int | None = None
) -> bytes:
    values = [f"{tag}-{pid}-{epoch}-{seq}-{i}".encode() * 4 for i in range(n)]
    return build_batch(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, base_timestamp=base_timestamp
    )


def describe_producers(c: WireClient, topic: str, partitions: list[int]) -> dict[int, Any]:
    cls = REQUESTS[DESCRIBE_PRODUCERS]
    req = cls(version=0, topics=[cls.TopicRequest(name=topic, partition_indexes=partitions)])
    resp = c.call(req, 0)
    assert [t.name for t in resp.topics] == [topic], resp
    return {p.partition_index: p for p in resp.topics[0].partitions}


def producer_rows(partition: Any) -> dict[int, tuple[int, int, int, int, int]]:
    """producer id -> (epoch, last sequence, last timestamp, coordinator epoch, txn start offset)."""
    return {
        p.producer_id: (
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in partition.active_producers
    }


@pytest.fixture(scope="module")
def client(module_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(module_broker.port) as c:
        yield c


@pytest.fixture
def topic(client: WireClient) -> str:
    t = unique_topic("idem")
    create_topic(client, t)
    return t


# -- byte level ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 7, 9])
def test_same_batch_twice_is_one_copy_with_same_offset(
    client: WireClient, topic: str, module_broker: BrokerProcess, version: int
) -> None:
    pid, epoch = init_producer_id(client)
    assert send(client, topic, -1, -1, -1, 2, batch=build_batch([b"plain", b"plain"]))[0] == NONE
    batch = idem_batch(pid, epoch, 0, 3)
    first = send(client, topic, pid, epoch, 0, batch=batch, version=version)
    second = send(client, topic, pid, epoch, 0, batch=batch, version=version)
    assert first == (NONE, 2), first
    assert second == first, f"re-sent batch answered {second}, first answer {first}"
    assert client.log_end_offset(topic) == 5
    # The next batch follows on; re-sending the first again is still a duplicate.
    assert send(client, topic, pid, epoch, 3, 2, version=version) == (NONE, 5)
    assert send(client, topic, pid, epoch, 0, batch=batch, version=version) == (NONE, 2)
    assert client.log_end_offset(topic) == 7
    batches = log_batches(module_broker.partition_dir(topic))
    assert [(b.base_offset, b.producer_id, b.base_sequence) for b in batches] == [
        (0, -1, -1),
        (2, pid, 0),
        (5, pid, 3),
    ]


def test_dedup_window_is_the_last_five_batches(client: WireClient, topic: str) -> None:
    pid, epoch = init_producer_id(client)
    batches = [idem_batch(pid, epoch, seq, 1) for seq in range(7)]
    for seq, b in enumerate(batches):
        assert send(client, topic, pid, epoch, seq, batch=b) == (NONE, seq)
    # Batches 2..6 are the last five: each re-send answers its original offset.
    for seq in range(2, 7):
        assert send(client, topic, pid, epoch, seq, batch=batches[seq]) == (NONE, seq), seq
    # Batch 1 fell out of the window: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER; never appended.
    err, _ = send(client, topic, pid, epoch, 1, batch=batches[1])
    assert err == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.log_end_offset(topic) == 7


def test_out_of_order_sequence_is_rejected_and_not_appended(client: WireClient, topic: str) -> None:
    pid, epoch = init_producer_id(client)
    assert send(client, topic, pid, epoch, 0, 2) == (NONE, 0)  # sequences 0, 1
    for gap_seq in (3, 10, INT32_MAX):
        err, offset = send(client, topic, pid, epoch, gap_seq)
        assert err == OUT_OF_ORDER_SEQUENCE_NUMBER, f"seq {gap_seq} after last seq 1: error {err}"
        assert offset == -1
    assert client.log_end_offset(topic) == 2
    # The expected sequence is still accepted afterwards.
    assert send(client, topic, pid, epoch, 2) == (NONE, 2)
    assert client.log_end_offset(topic) == 3


def test_stale_epoch_and_epoch_bump(client: WireClient, topic: str) -> None:
    pid, _ = init_producer_id(client)
    assert send(client, topic, pid, 0, 0, 3) == (NONE, 0)
    # An epoch bump resets the sequence: epoch 1 starts at 0 again.
    assert send(client, topic, pid, 1, 0, 2) == (NONE, 3)
    # The old epoch is fenced, whatever its sequence.
    for seq in (3, 0):
        err, offset = send(client, topic, pid, 0, seq)
        assert (err, offset) == (INVALID_PRODUCER_EPOCH, -1), f"epoch 0 seq {seq} after epoch 1: {err}"
    assert client.log_end_offset(topic) == 5
    # Epoch 1 goes on from its own sequence.
    assert send(client, topic, pid, 1, 2) == (NONE, 5)
    # A new epoch must start at sequence 0 (Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER otherwise).
    assert send(client, topic, pid, 2, 5)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.log_end_offset(topic) == 6
    assert send(client, topic, pid, 2, 0) == (NONE, 6)


def test_sequence_wraps_at_int32_max(client: WireClient, topic: str, module_broker: BrokerProcess) -> None:
    pid, epoch = init_producer_id(client)
    # A new producer's first batch may start at any sequence.
    assert send(client, topic, pid, epoch, INT32_MAX - 3, 3) == (NONE, 0)  # ..., 2147483646
    wrapped = idem_batch(pid, epoch, INT32_MAX, 2)  # 2147483647, 0
    assert send(client, topic, pid, epoch, INT32_MAX, batch=wrapped) == (NONE, 3)
    assert send(client, topic, pid, epoch, 1, 2) == (NONE, 5)  # 1, 2
    # A retry of the wrapped batch is a duplicate.
    assert send(client, topic, pid, epoch, INT32_MAX, batch=wrapped) == (NONE, 3)
    # Sequence 0 was used by the wrapped batch; restarting at 0 is out of order.
    assert send(client, topic, pid, epoch, 0)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(client, topic, pid, epoch, 3) == (NONE, 7)
    assert client.log_end_offset(topic) == 8
    rows = producer_rows(describe_producers(client, topic, [0])[0])
    assert rows[pid][:2] == (epoch, 3)
    assert_no_duplicate_sequences(log_batches(module_broker.partition_dir(topic)))


# -- DescribeProducers ------------------------------------------------------------------


def _two_producers(client: WireClient, topic: str) -> dict[int, tuple[int, int, int, int, int]]:
    """Producer A: epoch 0, sequences 0..4; producer B: epoch 0 then 1 (last seq 1).
    Returns the expected DescribeProducers rows."""
    ts = int(time.time() * 1000) - 50_000
    a, _ = init_producer_id(client)
    b, _ = init_producer_id(client)
    assert send(client, topic, a, 0, 0, 2, base_timestamp=ts)[0] == NONE
    assert send(client, topic, b, 0, 0, 1, base_timestamp=ts + 100)[0] == NONE
    assert send(client, topic, a, 0, 2, 3, base_timestamp=ts + 200)[0] == NONE  # last ts = ts + 202
    assert send(client, topic, b, 1, 0, 2, base_timestamp=ts + 300)[0] == NONE  # last ts = ts + 301
    # A non-idempotent batch adds no producer.
    assert send(client, topic, -1, -1, -1, 1, batch=build_batch([b"x"]))[0] == NONE
    return {a: (0, 4, ts + 202, -1, -1), b: (1, 1, ts + 301, -1, -1)}


def test_describe_producers_wire(client: WireClient, topic: str) -> None:
    expected = _two_producers(client, topic)
    parts = describe_producers(client, topic, [0, 7])
    assert parts[0].error_code == NONE
    assert producer_rows(parts[0]) == expected
    assert parts[7].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert parts[7].active_producers == []
    empty = unique_topic("idem-empty")
    create_topic(client, empty)
    assert describe_producers(client, empty, [0])[0].active_producers == []




@pytest.mark.java
def test_describe_producers_java_admin(client: WireClient, topic: str, module_broker: BrokerProcess) -> None:
    require_java()
    expected = _two_producers(client, topic)
    proc = run_java("DescribeProducers.java", module_broker.bootstrap, topic, "0", timeout=120)
    lines = prefixed_json(proc.stdout, "PARTITION ")
    out = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0 and len(lines) == 1, out
    assert "error" not in lines[0], out
    got = {
        p["producerId"]: (
            p["producerEpoch"],
            p["lastSequence"],
            p["lastTimestamp"],
            p["coordinatorEpoch"],
            p["currentTransactionStartOffset"],
        )
        for p in lines[0]["producers"]
    }
    assert got == expected, out


# -- durability of the dedup state ----------------------------------------------------------


@dataclass
class DurabilityRun:
    broker: BrokerProcess
    topic: str
    pid: int
    last_batch: bytes
    last_seq: int
    last_offset: int
    older_batch: bytes
    older_seq: int
    leo: int
    described: dict[int, tuple[int, int, int, int, int]]


def _fill(broker: BrokerProcess) -> DurabilityRun:
    """Two producers interleaved over several segments (log.segment.bytes is small,
    so rolls write snapshots); the last batch of producer A is the one to re-send."""
    topic = unique_topic("idem-dur")
    with WireClient(broker.port) as c:
        create_topic(c, topic)
        a, _ = init_producer_id(c)
        b, _ = init_producer_id(c)
        seq_a = seq_b = 0
        batches: list[tuple[int, bytes, int]] = []  # (seq, batch, offset) of producer A
        for i in range(12):
            batch = idem_batch(a, 0, seq_a, 3, tag="dur")
            err, off = send(c, topic, a, 0, seq_a, batch=batch)
            assert err == NONE
            batches.append((seq_a, batch, off))
            seq_a += 3
            if i % 3 == 0:
                assert send(c, topic, b, 0, seq_b, 2, tag="durb")[0] == NONE
                seq_b += 2
        leo = c.log_end_offset(topic)
        described = producer_rows(describe_producers(c, topic, [0])[0])
    assert len(segment_files(broker.partition_dir(topic))) >= 3, "expected several segments"
    last_seq, last_batch, last_offset = batches[-1]
    older_seq, older_batch, _ = batches[-3]
    return DurabilityRun(
        broker, topic, a, last_batch, last_seq, last_offset, older_batch, older_seq, leo, described
    )


def _check_after_restart(run: DurabilityRun) -> None:
    with WireClient(run.broker.port) as c:
        assert c.log_end_offset(run.topic) == run.leo, "log end offset changed across the restart"
        # The re-sent last batch is recognised: same offset, nothing appended.
        got = send(c, run.topic, run.pid, 0, run.last_seq, batch=run.last_batch)
        assert got == (NONE, run.last_offset), (
            f"re-sent last batch (seq {run.last_seq}) after restart answered {got}, "
            f"want (0, {run.last_offset})"
        )
        assert c.log_end_offset(run.topic) == run.leo
        # DescribeProducers shows the same state as before the restart.
        assert producer_rows(describe_producers(c, run.topic, [0])[0]) == run.described
        # An older batch is either recognised (its metadata survived) or rejected as
        # out of order (only the last batch is in a snapshot) -- never appended.
        err, _ = send(c, run.topic, run.pid, 0, run.older_seq, batch=run.older_batch)
        assert err in (NONE, OUT_OF_ORDER_SEQUENCE_NUMBER), err
        assert c.log_end_offset(run.topic) == run.leo
        # The state is really there: a gap is refused, the next sequence accepted.
        assert send(c, run.topic, run.pid, 0, run.last_seq + 4)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(c, run.topic, run.pid, 0, run.last_seq + 3) == (NONE, run.leo)
    batches = log_batches(run.broker.partition_dir(run.topic))
    assert_no_duplicate_sequences(batches)
    assert sum(b.count for b in batches) == run.leo + 1


def _snapshots(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted(broker.partition_dir(topic).glob("*.snapshot"))


SEGMENT_OVERRIDES = {"log.segment.bytes": 1200}


def test_dedup_state_survives_kill9(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SEGMENT_OVERRIDES)
    run = _fill(broker)
    snaps_before = [int(p.stem) for p in _snapshots(broker, run.topic)]
    assert snaps_before, "no .snapshot written at segment roll"
    assert max(snaps_before) <= run.last_offset, "the last batch must be in the log tail"
    broker.kill9()
    broker.start()
    _check_after_restart(run)


def test_dedup_state_survives_clean_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SEGMENT_OVERRIDES)
    run = _fill(broker)
    broker.stop()
    names = [p.name for p in _snapshots(broker, run.topic)]
    assert f"{run.leo:020d}.snapshot" in names, f"no shutdown snapshot at the log end {run.leo}: {names}"
    broker.start()
    _check_after_restart(run)


def test_dedup_state_rebuilt_from_log_when_snapshots_deleted(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SEGMENT_OVERRIDES)
    run = _fill(broker)
    broker.stop()
    snaps = _snapshots(broker, run.topic)
    assert snaps
    for p in snaps:
        p.unlink()
    broker.start()
    _check_after_restart(run)


def test_dedup_state_rebuilt_from_log_when_snapshots_corrupt(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(SEGMENT_OVERRIDES)
    run = _fill(broker)
    broker.stop()
    snaps = _snapshots(broker, run.topic)
    assert snaps
    corrupt: dict[Path, bytes] = {}
    for p in snaps:
        data = bytearray(p.read_bytes())
        assert len(data) > 10, f"{p.name}: {len(data)} bytes"
        data[-5] ^= 0x40  # inside the CRC-covered entries
        p.write_bytes(bytes(data))
        corrupt[p] = bytes(data)
    broker.start()
    _check_after_restart(run)
    for p, bad in corrupt.items():
        assert not p.exists() or p.read_bytes() != bad, f"corrupt {p.name} still there after start-up"


def test_producer_ids_never_reissued_across_restarts(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    seen: list[int] = []

    def take(n: int) -> None:
        with WireClient(broker.port) as c:
            for _ in range(n):
                seen.append(init_producer_id(c, version=4)[0])

    take(3)
    broker.kill9()
    broker.start()
    take(3)
    broker.stop()
    broker.start()
    take(3)
    broker.kill9()
    broker.start()
    take(1)
    assert len(set(seen)) == len(seen), f"producer id reissued: {seen}"
    assert (broker.data_dir / "gregor-metadata.json").exists()
