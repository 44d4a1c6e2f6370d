"""Restart durability: kill -9 mid-stream, clean SIGTERM restarts, torn log tails.

The producer is confluent-kafka with acks=all, no retries and no idempotence,
so an acknowledged record was written exactly once at the offset its delivery
report names, and an unacknowledged one at most once. After a restart every
acknowledged record must be there exactly once, at its acknowledged offset,
in order.
"""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages import REQUESTS
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    iter_batches,
    read_offset_index,
    segment_files,
    unique_topic,
    whole_batches_end,
)
from tests.integration.wire import PeerClosed, WireClient, encode_body

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 1048576  # Kafka's minimum; a few MB of data gives several segments
PAD = b"." * 300


def value_of(seq: int) -> bytes:
    return b"%08d:" % seq + PAD


def seq_of(value: bytes) -> int:
    return int(value[:8])


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)
    fs[topic].result(timeout=20)


class AckTracker:
    """Produces numbered records and records which were acknowledged, and where."""

    def __init__(self, bootstrap: str, topic: str, **extra: object) -> None:
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 2,
            "compression.type": "none",
            "batch.size": 16384,  # many batches, so many index entries
            "message.timeout.ms": 4000,
            "reconnect.backoff.max.ms": 200,
        }
        conf.update(extra)
        self.producer = Producer(conf)
        self.topic = topic
        self.next_seq = 0
        self.sent = 0
        self.acked: dict[int, int] = {}  # seq -> offset
        self.failed: list[tuple[int, KafkaError]] = []

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        seq = seq_of(msg.value())  # type: ignore[attr-defined]
        if err is None:
            self.acked[seq] = msg.offset()  # type: ignore[attr-defined]
        else:
            self.failed.append((seq, err))

    @property
    def outstanding(self) -> int:
        return self.sent - len(self.acked) - len(self.failed)

    def send(self, count: int = 1, window: int = 2000) -> None:
        for _ in range(count):
            deadline = time.monotonic() + 30
            while self.outstanding >= window:
                assert time.monotonic() < deadline, f"{self.outstanding} records stuck in flight"
                self.producer.poll(0.01)
            self.producer.produce(
                self.topic, value=value_of(self.next_seq), partition=0, on_delivery=self._on_delivery
            )
            self.next_seq += 1
            self.sent += 1
            self.producer.poll(0)

    def send_until_acked(self, n_acked: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n_acked:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acks in {timeout}s"
            self.send(50)

    def drain(self, timeout: float = 30.0) -> None:
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} records neither acknowledged nor failed"


def read_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[tuple[int, int]]:
    """(offset, seq) of every record from the log start to the high watermark."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "gregor-it-unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        low, high = c.get_watermark_offsets(tp, timeout=15, cached=False)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + timeout
        while (not got or got[-1][0] < high - 1) and high > low:
            assert time.monotonic() < deadline, (
                f"read {len(got)} records up to offset {got[-1][0] if got else None}, high watermark {high}"
            )
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), seq_of(m.value())))
        return got
    finally:
        c.close()


def assert_acked_exactly_once(tracker: AckTracker, got: list[tuple[int, int]]) -> None:
    offsets = [o for o, _ in got]
    seqs = [s for _, s in got]
    assert offsets == list(range(len(got))), "offsets are not contiguous from 0"
    dupes = sorted({s for s in seqs if seqs.count(s) > 1}) if len(set(seqs)) != len(seqs) else []
    assert not dupes, f"duplicated records: {dupes[:20]}"
    assert seqs == sorted(seqs), "records out of order"
    at = dict(got)
    lost = sorted(s for s, off in tracker.acked.items() if at.get(off) != s)
    assert not lost, (
        f"{len(lost)} acknowledged records missing or moved, e.g. seq {lost[0]} acked at offset "
        f"{tracker.acked[lost[0]]}, found there: {at.get(tracker.acked[lost[0]])}"
    )


def check_indexes(pdir: Path) -> int:
    """Every `.index` entry points at a batch start in its segment's `.log` and names an
    offset within that batch (Kafka indexes the batch's last offset). Returns entry count."""
    total = 0
    logs = segment_files(pdir)
    assert logs, f"no segments in {pdir}"
    for log in logs:
        base = int(log.stem)
        batches = list(iter_batches(log))
        size = log.stat().st_size
        end = whole_batches_end(log)
        assert end == size, f"{log.name}: {size - end} trailing bytes after the last whole batch"
        by_pos = {pos: (bo, bo_last) for pos, bo, bo_last in ((p, b, b + d) for p, b, d in batches)}
        index = log.with_suffix(".index")
        if size > 4 * 4096:
            assert index.exists(), f"{log.name} is {size} bytes but has no .index"
        if not index.exists():
            continue
        entries = read_offset_index(index)
        if not batches:
            assert entries in ([], [(0, 0)]), f"{index.name}: entries for an empty segment"
            continue
        if size > 4 * 4096:
            assert entries, f"{index.name}: no entries for a {size}-byte segment"
        prev = (-1, -1)
        for rel, pos in entries:
            assert rel > prev[0] and pos > prev[1], f"{index.name}: entries not increasing at {(rel, pos)}"
            assert pos in by_pos, f"{index.name}: entry {(rel, pos)} is not at a batch start"
            first, last = by_pos[pos]
            assert first <= base + rel <= last, (
                f"{index.name}: entry {(rel, pos)} names offset {base + rel}, "
                f"but the batch there holds {first}..{last}"
            )
            prev = (rel, pos)
        total += len(entries)
    # Batches chain across segments without gaps or overlaps.
    expected = None
    for log in logs:
        for _pos, bo, delta in iter_batches(log):
            assert expected is None or bo == expected, f"{log.name}: batch at {bo}, expected {expected}"
            expected = bo + delta + 1
    return total


# -- tests ----------------------------------------------------------------------


def test_kill9_mid_stream_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    topic = unique_topic("dur-kill")
    create_topic(broker.bootstrap, topic)
    t = AckTracker(broker.bootstrap, topic)
    t.send_until_acked(3000)
    t.send(500, window=5000)  # keep requests in flight while the broker dies
    broker.kill9()
    t.send(200, window=5000)
    t.drain()
    assert len(t.acked) >= 3000

    broker.start()
    got = read_all(broker.bootstrap, topic)
    print(f"sent {t.sent}, acked {len(t.acked)}, failed {len(t.failed)}, recovered {len(got)}")
    assert_acked_exactly_once(t, got)

    # The restarted broker keeps appending after what survived.
    t2 = AckTracker(broker.bootstrap, topic)
    t2.next_seq = t.next_seq + 1000
    t2.send_until_acked(100)
    t2.drain()
    assert not t2.failed
    assert min(t2.acked.values()) == len(got)
    got2 = read_all(broker.bootstrap, topic)
    assert got2[: len(got)] == got
    assert_acked_exactly_once(t2, got2)
    assert broker.stop() == 0
    check_indexes(broker.partition_dir(topic))


def test_repeated_kill9_restarts(broker: BrokerProcess) -> None:
    topic = unique_topic("dur-rekill")
    create_topic(broker.bootstrap, topic)
    trackers = []
    for _round in range(3):
        t = AckTracker(broker.bootstrap, topic)
        t.next_seq = 1_000_000 * _round
        t.send_until_acked(1000)
        t.send(300, window=5000)
        broker.kill9()
        t.drain()
        trackers.append(t)
        broker.start()
    got = read_all(broker.bootstrap, topic)
    for t in trackers:
        assert_acked_exactly_once(t, got)


def test_sigterm_restart_keeps_everything(broker_factory: BrokerFactory) -> None:
    broker = broker_factory({"log.segment.bytes": SEGMENT_BYTES})
    topic = unique_topic("dur-term")
    create_topic(broker.bootstrap, topic)
    t = AckTracker(broker.bootstrap, topic)
    t.send_until_acked(8000)
    t.drain()
    assert not t.failed
    before = read_all(broker.bootstrap, topic)
    assert len(before) == t.next_seq

    assert broker.stop() == 0, "broker did not exit 0 on SIGTERM"
    assert len(segment_files(broker.partition_dir(topic))) >= 2, "expected several segments"
    check_indexes(broker.partition_dir(topic))
    broker.start()
    after = read_all(broker.bootstrap, topic)
    assert after == before
    assert_acked_exactly_once(t, after)


def test_sigterm_does_not_wait_for_requests_in_flight(broker_factory: BrokerFactory) -> None:
    """A fetch long-polling for 60 s (and its pipelined successor) does not hold a clean
    shutdown back: the broker closes the connection unanswered and exits 0, logs closed."""
    broker = broker_factory()
    topic = unique_topic("dur-inflight")
    create_topic(broker.bootstrap, topic)
    cls = REQUESTS[1]
    fetch = cls(
        version=12, replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[cls.FetchTopic(topic=topic, partitions=[cls.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="",
    )
    with WireClient(broker.port) as c:
        for _ in range(2):
            c.send_request(1, 12, encode_body(fetch, 12))
        time.sleep(0.3)  # both requests are in the broker
        assert broker.stop(timeout=10) == 0
        with pytest.raises(PeerClosed):
            c.recv_frame()
    assert "stopped cleanly" in broker.log_text()
    assert "did not stop within" not in broker.log_text()


def _partial_batch(next_offset: int, last_batch: bytes) -> bytes:
    # A batch header that promises far more bytes than follow (a torn write).
    return struct.pack(">qi", next_offset, len(last_batch) + 5000) + last_batch[12:40]


def _bad_crc_batch(next_offset: int, last_batch: bytes) -> bytes:
    # A whole, well-framed batch whose CRC does not match its contents.
    b = bytearray(last_batch)
    struct.pack_into(">q", b, 0, next_offset)
    b[-1] ^= 0xFF
    return bytes(b)


def _random_bytes(next_offset: int, last_batch: bytes) -> bytes:
    return random.Random(4752).randbytes(37)


TAILS = {"partial-batch": _partial_batch, "bad-crc": _bad_crc_batch, "random-bytes": _random_bytes}


@pytest.mark.parametrize("tail", list(TAILS))
def test_torn_tail_is_truncated_on_recovery(broker_factory: BrokerFactory, tail: str) -> None:
    broker = broker_factory({"log.segment.bytes": SEGMENT_BYTES})
    topic = unique_topic(f"dur-torn-{tail}")
    create_topic(broker.bootstrap, topic)
    t = AckTracker(broker.bootstrap, topic)
    t.send_until_acked(4000)
    t.drain()
    assert not t.failed
    broker.kill9()

    pdir = broker.partition_dir(topic)
    last_log = segment_files(pdir)[-1]
    batches = list(iter_batches(last_log))
    assert batches, f"last segment {last_log.name} has no whole batch"
    data = last_log.read_bytes()
    pos, base_offset, delta = batches[-1]
    assert base_offset + delta + 1 == t.next_seq, "log end does not match what was acknowledged"
    last_batch = data[pos:]
    with open(last_log, "ab") as f:
        f.write(TAILS[tail](base_offset + delta + 1, last_batch))

    broker.start()
    got = read_all(broker.bootstrap, topic)
    assert len(got) == t.next_seq, f"expected {t.next_seq} records after recovery, got {len(got)}"
    assert_acked_exactly_once(t, got)

    # Still serving: new records land right after the recovered ones.
    t2 = AckTracker(broker.bootstrap, topic)
    t2.next_seq = t.next_seq
    t2.send_until_acked(200)
    t2.drain()
    assert not t2.failed
    assert sorted(t2.acked.values()) == list(range(t.next_seq, t.next_seq + len(t2.acked)))
    got2 = read_all(broker.bootstrap, topic)
    assert len(got2) == t.next_seq + len(t2.acked)
    assert_acked_exactly_once(t2, got2)

    assert broker.stop() == 0
    entries = check_indexes(pdir)
    print(f"{len(segment_files(pdir))} segments, {entries} index entries checked")
    assert entries > 0
