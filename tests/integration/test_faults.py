"""The faults issue 22 fixed, with real processes: a broker restarted at once after kill -9
(a supervisor's behaviour) takes over its own etcd registration and its partitions fail
over as after a lease expiry; a broker whose data dir is full answers KAFKA_STORAGE_ERROR
per partition (one log line per partition and change, no traceback, connection kept),
serves reads, hands leadership to an in-sync follower, and writes again once space returns;
one that cannot recover its log at start-up on a full disk stops with one line, and
recovers at the next start once space is back;
a producer's sequence gap that a refused write left is a storage error, not its own;
a leader paused past replica.lag.time.max.ms keeps the followers that had all its records;
a full disk holds the log cleaner back (one line) until space returns, then it cleans.

One etcd and three brokers for the module; broker 3's data dir is a small tmpfs.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.cluster import Cluster, running_cluster, wait_until_served
from tests.integration.disks import fill, free, small_tmpfs
from tests.integration.harness import BrokerStartError, wait_until
from tests.integration.test_cluster_replication import COMPACTED
from tests.integration.test_idempotence_wire import init_producer_id
from tests.integration.wire import WireClient, build_batch, partition_errors

SESSION_MS = 10_000  # a restart must come back well within it
CLEANER_BACKOFF_MS = 200  # the cleaner tries a log again soon after a full disk
FULL = 3  # the broker whose data dir is a small tmpfs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("faults")
    overrides = {"broker.session.timeout.ms": SESSION_MS, "log.cleaner.backoff.ms": CLEANER_BACKOFF_MS}
    with small_tmpfs(base / "small-disk", 48) as disk, running_cluster(
        base, show_logs_on_error=True, overrides=overrides,
        per_broker=lambda n: {"log.dirs": str(disk / "data")} if n == FULL else {},
    ) as c:
        yield c


def placed_topic(cluster: Cluster, assignment: list[list[int]], min_isr: int = 2,
                 config: dict[str, str] | None = None) -> str:
    """A topic whose partition i has the replicas assignment[i] (the first one leads)."""
    name = f"f-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(
        name, len(assignment), replication_factor=-1, replica_assignment=assignment,
        config={"min.insync.replicas": str(min_isr), **(config or {})},
    )])[name].result(30)
    cluster.wait_for(lambda i: all(
        (name, p) in i.partitions and len(i.partitions[(name, p)].isr) == len(r)
        and i.partitions[(name, p)].leader == r[0] for p, r in enumerate(assignment)
    ))
    for b in cluster.brokers:
        wait_until_served(b.bootstrap, name, len(assignment))
    return name


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "message.timeout.ms": 30000})
    failed: list[object] = []
    for v in values:
        producer.produce(topic, v, partition=partition,
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(40) == 0 and not failed, failed


def consume(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, got) >= count, timeout=30, msg=f"{count} records")
    finally:
        consumer.close()
    return got


def _poll_into(consumer: Consumer, got: list[bytes]) -> int:
    for m in consumer.consume(500, 0.5):
        if m.error() is None:
            got.append(bytes(m.value() or b""))
    return len(got)


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_a_broker_restarted_at_once_after_kill9_comes_back_as_a_follower(cluster: Cluster) -> None:
    topic = placed_topic(cluster, [[1, 2, 3]])
    produce(cluster.bootstrap, topic, values("before", 200))
    before = cluster.partition(topic)
    cluster.broker(1).kill9()
    cluster.broker(1).start()  # within the session: the dead incarnation's lease still lives
    moved = cluster.wait_for(lambda i: i.partitions[(topic, 0)].leader not in (1, -1))
    assert moved.partitions[(topic, 0)].leader_epoch > before.leader_epoch
    cluster.wait_for(lambda i: set(i.partitions[(topic, 0)].isr) == {1, 2, 3} and 1 in i.brokers)
    produce(cluster.bootstrap, topic, values("after", 200))
    assert consume(cluster.bootstrap, topic, 0, 400) == values("before", 200) + values("after", 200)
    log = cluster.broker(1).log_text()
    assert "ended the session of its previous incarnation" in log and "Traceback" not in log


def test_a_leader_paused_past_the_lag_time_keeps_its_caught_up_followers(cluster: Cluster) -> None:
    """Kafka's isCaughtUp: a follower at the leader's log end is in sync however long ago it
    fetched. Gregor's leader dropped every follower of every partition it led when it came back
    from a stall (a pause, or starvation) longer than the lag time, as its ISR check ran before
    the followers' waiting fetches: acks=all writes then got NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
    and librdkafka's handling of those made the long runs' duplicates. The pause (3 s) is past
    the lag time (2 s), within the session (10 s)."""
    topic = placed_topic(cluster, [[1, 2, 3]])
    produce(cluster.bootstrap, topic, values("before", 20))
    before = cluster.wait_for(lambda i: len(i.partitions[(topic, 0)].isr) == 3).partitions[(topic, 0)]
    changes = cluster.broker(1).log_text().count(f"partition {topic}-0: ISR")
    cluster.broker(1).pause()
    time.sleep(3.0)
    cluster.broker(1).resume()
    produce(cluster.bootstrap, topic, values("after", 20))  # its ISR check was due first: it has run
    produce(cluster.bootstrap, topic, values("later", 20))
    after = cluster.partition(topic)
    assert (after.isr, after.partition_epoch) == (before.isr, before.partition_epoch)
    assert cluster.broker(1).log_text().count(f"partition {topic}-0: ISR") == changes


def test_a_full_disk_answers_storage_error_serves_reads_and_hands_over(cluster: Cluster) -> None:
    shared = placed_topic(cluster, [[FULL, 1, 2], [FULL, 2, 1]])  # in-sync followers take over
    alone = placed_topic(cluster, [[FULL]], min_isr=1)  # stays leader: no one else
    produce(cluster.bootstrap, shared, values("s", 50))
    produce(cluster.bootstrap, alone, values("a", 50))
    broker = cluster.broker(FULL)
    disk = Path(broker.config["log.dirs"]).parent
    filler = fill(disk)
    try:
        with WireClient(broker.port) as wire:
            batch = build_batch([b"x" * 65536])  # more than the free end of a page
            answer = wire.produce(shared, [(0, batch), (1, batch)], acks=-1)
            assert set(partition_errors(answer).values()) <= {
                ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER}, answer
            for _ in range(50):  # a client retrying: one log line, not fifty
                answer = wire.produce(alone, [(0, batch)], acks=-1)
                assert partition_errors(answer) == {0: ErrorCode.KAFKA_STORAGE_ERROR}
            assert wire.metadata([alone]).topics[0].error_code == 0  # the connection is kept
        assert consume(broker.bootstrap, alone, 0, 50) == values("a", 50)  # reads served
        # (a caught-up follower may rejoin the ISR: it leaves again once it lags)
        handed = cluster.wait_for(lambda i: all(i.partitions[(shared, p)].leader != FULL for p in (0, 1)))
        assert handed.partitions[(alone, 0)].leader == FULL
        produce(cluster.bootstrap, shared, values("s2", 50))  # the new leaders take writes
    finally:
        free(filler)
    produce(cluster.bootstrap, alone, values("a2", 50))  # space is back: writes resume
    cluster.wait_for(lambda i: all(FULL in i.partitions[(shared, p)].isr for p in (0, 1)))
    assert consume(cluster.bootstrap, shared, 0, 100) == values("s", 50) + values("s2", 50)
    log = broker.log_text()
    assert "Traceback" not in log
    for tp in (f"{shared}-0", f"{shared}-1", f"{alone}-0"):
        assert len(re.findall(rf"partition {tp}: cannot write its log", log)) == 1, log
    for tp in (f"{shared}-0", f"{alone}-0"):  # written since (partition 1 was not)
        assert len(re.findall(rf"partition {tp}: its log is writable again", log)) == 1, log
    for tp in (f"{shared}-0", f"{shared}-1"):
        assert len(re.findall(rf"partition {tp}: leadership handed to broker", log)) == 1, log


def test_a_sequence_gap_left_by_a_failed_write_is_a_storage_error(cluster: Cluster) -> None:
    """An idempotent producer pipelines: its batch after one the full disk refused arrives with a
    sequence gap. The gap is the broker's failed write, not the producer's: it is answered
    KAFKA_STORAGE_ERROR (retriable; Kafka, its log dir offline, answers so), never
    OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch and sends again records the
    log may hold already (issue 22's "duplicate"). Once space returns the batches go in, in order."""
    topic = placed_topic(cluster, [[FULL]], min_isr=1)
    broker = cluster.broker(FULL)
    disk = Path(broker.config["log.dirs"]).parent
    with WireClient(broker.port) as wire:
        pid, epoch = init_producer_id(wire)

        def batch(seq: int, size: int = 100) -> bytes:
            return build_batch([bytes([48 + seq]) * size], producer_id=pid, producer_epoch=epoch,
                               base_sequence=seq)

        def error(seq: int, size: int = 100) -> int:
            return partition_errors(wire.produce(topic, [(0, batch(seq, size))], acks=-1))[0]

        assert error(0) == ErrorCode.NONE
        filler = fill(disk)
        try:
            assert error(1, 65536) == ErrorCode.KAFKA_STORAGE_ERROR  # more than the free end of a page
            assert error(2) == ErrorCode.KAFKA_STORAGE_ERROR  # not OUT_OF_ORDER_SEQUENCE_NUMBER
            assert error(2) == ErrorCode.KAFKA_STORAGE_ERROR  # and still not, on a retry
        finally:
            free(filler)
        assert [error(1, 65536), error(2)] == [ErrorCode.NONE, ErrorCode.NONE]
    stored = consume(broker.bootstrap, topic, 0, 3)
    assert [v[:1] for v in stored] == [b"0", b"1", b"2"]


COMPACTED_HELD = {**COMPACTED, "min.compaction.lag.ms": str(86_400_000)}  # nothing cleanable yet


def test_a_full_disk_holds_the_cleaner_back_until_space_returns(cluster: Cluster) -> None:
    """Seed 109: a full disk left five compacted partitions uncleaned until their broker
    restarted. The cleaner now logs one line, leaves no half-written file (it checks so itself
    after each failed pass, and says so in an ERROR line if not), tries the log again every
    log.cleaner.backoff.ms, and cleans it once space is back.

    The records become cleanable only once the disk is full (min.compaction.lag.ms lowered
    then), so no pass can run before; and the directory is looked at only once the cleaner is
    done with it: a look while a pass is writing sees its files (a fresh clone's CI did)."""
    topic = placed_topic(cluster, [[FULL]], min_isr=1, config=COMPACTED_HELD)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(300):
        producer.produce(topic, key=b"k%d" % (i % 4), value=b"v%04d" % i * 20, partition=0)
        if i % 10 == 9:  # a batch of 10, about 1 KB: segments of two batches
            assert producer.flush(30) == 0
    broker = cluster.broker(FULL)
    data = Path(broker.config["log.dirs"]) / f"{topic}-0"
    failing = f"{topic}-0: cannot clean (trying again every {CLEANER_BACKOFF_MS} ms)"
    filler = fill(data.parent.parent)
    try:
        alter_topic(cluster, topic, {"min.compaction.lag.ms": "0"})  # cleanable from now on
        wait_until(lambda: failing in broker.log_text(), timeout=30, msg="the cleaner meeting the full disk")
        time.sleep(5 * CLEANER_BACKOFF_MS / 1000)  # it tries again meanwhile
        assert f"{topic}-0: cleaned" not in broker.log_text()
    finally:
        free(filler)
    wait_until(lambda: f"{topic}-0: cleaned again after an I/O error" in broker.log_text(), timeout=30,
               msg="the cleaner cleaning once space is back")
    log = broker.log_text()
    assert log.count(failing) == 1 and "Traceback" not in log
    assert f"{topic}-0: a failed cleaning pass left" not in log
    assert not [f.name for f in data.iterdir() if f.suffix in (".cleaned", ".swap", ".swapend", ".tmp")]
    got = read_to_eof(cluster.bootstrap, [(topic, 0)], "read_committed", "clean", 30, "compacted")
    assert {m.key(): m.value() for _, m in got} == {b"k%d" % k: b"v%04d" % (296 + k) * 20 for k in range(4)}
    assert len(got) < 300


def alter_topic(cluster: Cluster, topic: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)


def test_a_broker_that_cannot_recover_on_a_full_disk_stops_with_one_line(cluster: Cluster) -> None:
    """Recovery after kill -9 writes (indexes, producer snapshots): on a full disk the broker
    exits with one line, as Kafka's stops once all its log dirs failed; a chaos campaign's
    broker printed a traceback. Its next start, with space back, recovers everything."""
    topic = placed_topic(cluster, [[FULL, 1, 2]])
    produce(cluster.bootstrap, topic, values("r", 300))
    broker = cluster.broker(FULL)
    broker.kill9()
    filler = fill(Path(broker.config["log.dirs"]).parent)
    try:
        with pytest.raises(BrokerStartError, match="exited with code"):
            broker.start()
    finally:
        free(filler)
    log = broker.log_text()
    assert "gregor: cannot start:" in log and "No space left on device" in log, log[-3000:]
    assert "Traceback" not in log
    broker.start()
    cluster.wait_for(lambda i: FULL in i.brokers and FULL in i.partitions[(topic, 0)].isr)
    produce(cluster.bootstrap, topic, values("r2", 50))
    assert consume(cluster.bootstrap, topic, 0, 350) == values("r", 300) + values("r2", 50)


def test_a_leadership_taken_on_a_full_disk_is_handed_on_without_a_traceback(cluster: Cluster) -> None:
    """Becoming leader writes the new epoch's entry of the leader-epoch checkpoint. On a full
    disk that write failed inside the broker's apply of the metadata image: a traceback, and
    every partition after it in that apply kept its old role (chaos seed 7). Now the partition
    is led from memory and handed to an in-sync follower, as a failed append hands it (Kafka:
    its log dir goes offline), and the rest of the image is applied."""
    other, third = 2, 1
    topic = placed_topic(cluster, [[other, FULL, third]])
    produce(cluster.bootstrap, topic, values("before", 20))  # the log is not empty: written at once
    broker = cluster.broker(FULL)
    filler = fill(Path(broker.config["log.dirs"]).parent)
    try:
        with WireClient(cluster.broker(other).port) as wire:  # FULL first: the preferred leader
            reorder = REQUESTS[45]
            part = reorder.ReassignableTopic.ReassignablePartition(partition_index=0,
                                                                   replicas=[FULL, other, third])
            answer = wire.call(reorder(version=0, timeout_ms=20000,
                                       topics=[reorder.ReassignableTopic(name=topic, partitions=[part])]), 0)
            assert answer.error_code == ErrorCode.NONE, answer
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
        cluster.wait_for(lambda i: i.partitions[(topic, 0)].leader not in (FULL, -1)
                         and f"partition {topic}-0: leadership handed to broker" in broker.log_text())
        produce(cluster.bootstrap, topic, values("after", 20))  # the successor takes writes
    finally:
        free(filler)
    assert consume(cluster.bootstrap, topic, 0, 40) == values("before", 20) + values("after", 20)
    log = broker.log_text()
    assert "Traceback" not in log
    assert len(re.findall(rf"partition {topic}-0: cannot write its log", log)) == 1, log
