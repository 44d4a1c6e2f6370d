"""Transaction version 2 (KIP-890 part 2) at the byte level, as the Java client 4.x sends it
(observed: InitProducerId v5, Produce v13 without AddPartitionsToTxn, TxnOffsetCommit v5
without AddOffsetsToTxn, EndTxn v5), and the older protocol next to it.

- ApiVersions carries the supported and finalized `transaction.version` as Kafka 4.x does;
  the broker setting `transaction.version` (2 by default, or 1) chooses the finalized level.
- Produce v12+ adds a partition to the transaction by itself; EndTxn v5 bumps the producer
  epoch at every end, so a delayed write of a finished transaction can never land in the next.
- TxnOffsetCommit v5 adds the group's `__consumer_offsets` partition to the transaction (it
  does AddOffsetsToTxn's work), so the COMMIT/ABORT marker reaches the pending offsets;
  v4 and older only verify that AddOffsetsToTxn added it, and refuse with the protocol's error.
- An epoch exhausted by the bumps moves the transactional id to a new producer id, with the
  previous/next producer ids in the transaction log records.
"""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest

from broker.coordination.internal_topics import record_batch
from coordinator.transaction import MAX_EPOCH, TxnMetadata, TxnState
from protocol.messages import REQUESTS
from protocol.transaction_log import decode_key, decode_value, encode_key, encode_value
from tests.integration.harness import (
    REPO_ROOT,
    BrokerFactory,
    BrokerProcess,
    iter_batches,
    java_command,
    require_java,
    segment_files,
    started_broker,
    unique_topic,
    wait_until,
    whole_batches,
)
from tests.integration.tcp_proxy import KafkaProxy
from tests.integration.wire import WireClient, build_batch, create_topic, encode_body, produce_request

FIND_COORDINATOR, LIST_OFFSETS, OFFSET_FETCH, ADD_OFFSETS, TXN_COMMIT, DESCRIBE_TXNS = 10, 2, 9, 25, 28, 65
NONE, NOT_ENOUGH_REPLICAS, OUT_OF_ORDER_SEQUENCE, CONCURRENT_TRANSACTIONS = 0, 19, 45, 51
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 47, 48
UNSTABLE_OFFSET_COMMIT, PRODUCER_FENCED, TRANSACTION_ABORTABLE = 88, 90, 120
OFFSETS_TOPIC, TXN_STATE = "__consumer_offsets", "__transaction_state"
OVERRIDES = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}


@pytest.fixture(scope="module")
def tv2_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("tv2-broker"), OVERRIDES) as b:
        yield b


@pytest.fixture(scope="module")
def tv1_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("tv1-broker"), {**OVERRIDES, "transaction.version": 1}) as b:
        yield b


@pytest.fixture(scope="module")
def client(tv2_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(tv2_broker.port) as c:
        yield c


# -- requests ----------------------------------------------------------------------------


class Txn:
    """One transactional id driven by hand: its producer id and current epoch."""

    def __init__(self, c: WireClient, prefix: str = "tv2-id") -> None:
        self.c = c
        self.tid = unique_topic(prefix)
        answer = c.call(REQUESTS[FIND_COORDINATOR](key_type=1, coordinator_keys=[self.tid]), 4)
        assert answer.coordinators[0].error_code == NONE, answer
        answer = c.call(InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=60000,
                                              producer_id=-1, producer_epoch=-1), 5)
        assert answer.error_code == NONE, answer
        self.pid, self.epoch = answer.producer_id, answer.producer_epoch
        self.seq: dict[str, int] = {}

    def produce(self, topic: str, value: bytes, version: int = 12, epoch: int | None = None) -> int:
        """Produce v12 (the Java client's v13 names the topic by id, otherwise the same),
        retried as clients do while the previous transaction's markers are being written
        (CONCURRENT_TRANSACTIONS, which Produce below v12 answers as NOT_ENOUGH_REPLICAS)."""
        epoch = self.epoch if epoch is None else epoch
        seq = self.seq.get(topic, 0)
        batch = build_batch([value], producer_id=self.pid, producer_epoch=epoch, base_sequence=seq,
                            transactional=True)
        request = produce_request(topic, [(0, batch)], acks=-1, version=version, transactional_id=self.tid)

        def attempt() -> tuple[int] | None:
            answer = self.c.call(request, version)
            error = int(answer.responses[0].partition_responses[0].error_code)
            return None if error in (NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS) else (error,)

        [error] = wait_until(attempt, timeout=10, msg=f"produce to {topic} past CONCURRENT_TRANSACTIONS")
        if error == NONE:
            self.seq[topic] = seq + 1
        return error

    def add_offsets(self, group: str) -> int:
        answer = self.c.call(REQUESTS[ADD_OFFSETS](transactional_id=self.tid, producer_id=self.pid,
                                                   producer_epoch=self.epoch, group_id=group), 4)
        return int(answer.error_code)

    def commit_offsets(self, group: str, topic: str, offset: int, version: int = 5,
                       epoch: int | None = None) -> int:
        cls = REQUESTS[TXN_COMMIT]
        t = cls.TxnOffsetCommitRequestTopic
        msg = cls(transactional_id=self.tid, group_id=group, producer_id=self.pid,
                  producer_epoch=self.epoch if epoch is None else epoch, generation_id=-1, member_id="",
                  group_instance_id=None, topics=[t(name=topic, partitions=[
                      t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                        committed_leader_epoch=-1, committed_metadata="")])])
        answer = self.c.call(msg, version)
        return int(answer.topics[0].partitions[0].error_code)

    def end(self, commit: bool, version: int = 5, epoch: int | None = None, pid: int | None = None) -> Any:
        request = EndTxnRequest(transactional_id=self.tid, producer_id=self.pid if pid is None else pid,
                                producer_epoch=self.epoch if epoch is None else epoch, committed=commit)
        answer = self.c.call(request, version)
        if answer.error_code == NONE and version >= 5:
            self.pid, self.epoch, self.seq = answer.producer_id, answer.producer_epoch, {}
        return answer

    def describe(self) -> Any:
        answer = self.c.call(REQUESTS[DESCRIBE_TXNS](transactional_ids=[self.tid]), 0)
        return answer.transaction_states[0]


def find_group_coordinator(c: WireClient, group: str) -> None:
    answer = c.call(REQUESTS[FIND_COORDINATOR](key_type=0, coordinator_keys=[group]), 4)
    assert answer.coordinators[0].error_code == NONE, answer


def new_topic(c: WireClient, prefix: str) -> str:
    topic = unique_topic(prefix)
    create_topic(c, topic, 1)
    return topic


def lso(c: WireClient, topic: str) -> int:
    cls = REQUESTS[LIST_OFFSETS]
    part = cls.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
    req = cls(replica_id=-1, isolation_level=1, topics=[cls.ListOffsetsTopic(name=topic, partitions=[part])])
    return int(c.call(req, 5).topics[0].partitions[0].offset)


def fetched_offset(c: WireClient, group: str, topic: str, require_stable: bool = True) -> tuple[int, int]:
    """OffsetFetch v7 of partition 0: (committed offset, error)."""
    cls = REQUESTS[OFFSET_FETCH]
    req = cls(group_id=group, require_stable=require_stable,
              topics=[cls.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
    part = c.call(req, 7).topics[0].partitions[0]
    return int(part.committed_offset), int(part.error_code)


def stable_offset(c: WireClient, group: str, topic: str) -> int:
    """The committed offset once no transaction holds it pending (the marker may be in flight)."""
    found = wait_until(lambda: (f := fetched_offset(c, group, topic))[1] != UNSTABLE_OFFSET_COMMIT and f,
                       timeout=10, msg=f"stable offsets of {group}")
    assert found[1] == NONE, found
    return int(found[0])


def txn_partitions(txn: Txn) -> set[tuple[str, int]]:
    state = txn.describe()
    return {(t.topic, p) for t in state.topics for p in t.partitions}


# -- ApiVersions ----------------------------------------------------------------------------


Levels = dict[str, tuple[int, int]]


def _features(c: WireClient, version: int) -> tuple[Levels, Levels, int]:
    answer = c.api_versions(version)
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features}
    return supported, finalized, int(answer.finalized_features_epoch)


def test_api_versions_features_as_kafka_4(client: WireClient, tv1_broker: BrokerProcess) -> None:
    supported, finalized, epoch = _features(client, 4)
    assert supported["transaction.version"] == (0, 2)
    assert finalized == {"transaction.version": (2, 2)}  # min and max both at the level
    assert epoch > 0
    # below v4 a feature whose minimum is 0 is left out (KAFKA-17492), the finalized level stays
    supported_v3, finalized_v3, _ = _features(client, 3)
    assert "transaction.version" not in supported_v3 and finalized_v3 == finalized
    with WireClient(tv1_broker.port) as c1:
        supported1, finalized1, _ = _features(c1, 4)
    assert supported1["transaction.version"] == (0, 2) and finalized1 == {"transaction.version": (1, 1)}


def test_api_versions_match_kafka_4_3(client: WireClient) -> None:
    """The transaction APIs at the versions Kafka 4.3 advertises, except AddPartitionsToTxn:
    0-3, because v4+ is for brokers only (KAFKA-15757; Gregor's brokers still send and serve
    it); InitProducerId up to 5 (v6 is unstable)."""
    versions = {k.api_key: (k.min_version, k.max_version) for k in client.api_versions(4).api_keys}
    assert versions[0][1] == 13 and versions[26] == (0, 5) and versions[28] == (0, 5)
    assert versions[24] == (0, 3) and versions[25] == (0, 4) and versions[22] == (0, 5)


# -- what the Java client sends ------------------------------------------------------------------

PRODUCE, INIT_PID, ADD_PARTITIONS, END_TXN = 0, 22, 24, 26
TV2_REQUESTS = {INIT_PID: {5}, TXN_COMMIT: {5}, END_TXN: {5}}
TV1_REQUESTS = {INIT_PID: {5}, ADD_PARTITIONS: {3}, ADD_OFFSETS: {4}, TXN_COMMIT: {4}, END_TXN: {4}}


@pytest.mark.java
@pytest.mark.parametrize(("client", "level"), [("4.3", 2), ("4.3", 1), ("3.9", 2)])
def test_java_client_protocol_follows_the_finalized_level(
    broker_factory: BrokerFactory, client: str, level: int
) -> None:
    """Two transactions with output and group offsets (java/TxnCrash.java without a crash),
    recorded by a proxy: the 4.3 client uses transaction version 2 (no AddPartitionsToTxn, no
    AddOffsetsToTxn, Produce v12+, TxnOffsetCommit v5, EndTxn v5) exactly when the broker
    finalizes level 2; at level 1, like the 3.9 client, the older protocol. The offsets commit."""
    require_java(client)
    with KafkaProxy() as proxy:
        broker = broker_factory({**OVERRIDES, "transaction.version": level,
                                 "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target_port = broker.port
        topic, tid = unique_topic("tv-java"), unique_topic("tv-java-id")
        with WireClient(broker.port) as c:
            create_topic(c, topic, 2)  # TxnCrash.java writes partitions 0 and 1
        proc = subprocess.run(
            java_command("TxnCrash.java", proxy.address, tid, "10000", "commit", "3", topic, client=client),
            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
            env={**os.environ, "TXN_CRASH_GROUP": tid},
        )
        assert proc.returncode == 0 and "END ok" in proc.stdout, f"{proc.stdout}\n{proc.stderr[-3000:]}"
        seen = {k: v for k, v in proxy.stats.versions.items() if k in (*TV1_REQUESTS, *TV2_REQUESTS)}
        produce = proxy.stats.versions[PRODUCE]
    if client == "4.3" and level == 2:
        assert seen == TV2_REQUESTS and min(produce) >= 12, (seen, produce)
    else:
        assert seen == TV1_REQUESTS and max(produce) <= 11, (seen, produce)
    with WireClient(broker.port) as c:
        assert stable_offset(c, tid, topic) == 2  # the second transaction's offset


# -- Produce v12+ and EndTxn v5 ----------------------------------------------------------------


@pytest.mark.parametrize("level", [2, 1])
def test_produce_adds_partition_and_end_txn_bumps_epoch(
    level: int, client: WireClient, tv1_broker: BrokerProcess
) -> None:
    """At level 1 too: as in Kafka, the request version decides (a client that reads level 1
    never sends these versions, one that does gets them served, not a false success)."""
    with WireClient(tv1_broker.port) if level == 1 else contextlib.nullcontext(client) as c:
        topic = new_topic(c, f"tv2-l{level}")
        txn = Txn(c)
        pid, epoch = txn.pid, txn.epoch
        # No AddPartitionsToTxn: Produce v13 adds the partition itself.
        assert txn.produce(topic, b"first") == NONE
        assert txn_partitions(txn) == {(topic, 0)}
        assert lso(c, topic) == 0  # the transaction is open
        ended = txn.end(commit=True)
        assert ended.error_code == NONE, ended
        assert (ended.producer_id, ended.producer_epoch) == (pid, epoch + 1)
        assert lso(c, topic) == 2  # data + COMMIT marker
        # A delayed write of the finished transaction (old epoch) cannot join the next one.
        assert txn.produce(topic, b"late", epoch=epoch) in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED)
        assert lso(c, topic) == 2
        # A retried EndTxn (the epoch before the bump) gets the same answer, nothing new.
        retry = txn.end(commit=True, epoch=epoch)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (NONE, pid, epoch + 1)
        # The next transaction runs at the bumped epoch, sequences from 0.
        assert txn.produce(topic, b"second") == NONE
        aborted = txn.end(commit=False)
        assert aborted.error_code == NONE and aborted.producer_epoch == epoch + 2
        assert lso(c, topic) == 4


def test_a_commit_with_nothing_written_since_the_last_is_refused_and_logged(
    client: WireClient, tv2_broker: BrokerProcess
) -> None:
    """Kafka's table for transaction version 2 (KAFKA-14563): a commit at the current epoch
    of a transaction that is CompleteCommit is INVALID_TXN_STATE, fatal for a Java client. The
    coordinator logs what it found, so that such a refusal can be explained afterwards."""
    topic = new_topic(client, "tv2-its")
    txn = Txn(client)
    assert txn.produce(topic, b"only") == NONE
    assert txn.end(commit=True).error_code == NONE
    refused = txn.end(commit=True)  # the bumped epoch, nothing produced under it
    assert refused.error_code == INVALID_TXN_STATE, refused
    line = (f"transactional id {txn.tid}: EndTxn commit from producer id {txn.pid}, epoch {txn.epoch} "
            f"refused INVALID_TXN_STATE: the transaction is CompleteCommit")
    wait_until(lambda: line in tv2_broker.log_text(), timeout=10, msg=line)


def test_old_produce_version_still_needs_add_partitions(client: WireClient) -> None:
    topic = new_topic(client, "tv1")
    txn = Txn(client, "tv1-id")
    # Produce v11 without AddPartitionsToTxn: rejected (KIP-890 part 1 verification); v11 knows
    # TRANSACTION_ABORTABLE, which Kafka 4.3 answers (the generated differential suite found it).
    assert txn.produce(topic, b"x", version=11) == TRANSACTION_ABORTABLE
    assert client.log_end_offset(topic) == 0  # nothing appended


def test_pipelined_produce_appends_in_request_order(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka reads a connection's next request only after answering the last, so a producer's
    pipelined batches append in the order it sent them. Here requests are handled concurrently,
    and Produce v12 adding a partition waits on a transaction log write (slowed down here, as a
    replicated write is in a cluster): a later request that adds nothing must not append first,
    or its sequence jumps ahead and the earlier batch can never be appended."""
    monkeypatch.setenv("GREGOR_CRASH_POINTS", f"{TXN_STATE}-write@0.4")
    b = broker_factory(OVERRIDES)
    with WireClient(b.port) as c:
        p, q = new_topic(c, "order-p"), new_topic(c, "order-q")
        txn = Txn(c, "order-id")
        assert txn.produce(p, b"p0") == NONE  # p is in the transaction, sequence 0 appended

        def batch(value: bytes, seq: int) -> bytes:
            return build_batch([value], producer_id=txn.pid, producer_epoch=txn.epoch,
                               base_sequence=seq, transactional=True)

        cls = REQUESTS[0]
        data = cls.TopicProduceData
        first = cls(transactional_id=txn.tid, acks=-1, timeout_ms=5000, topic_data=[
            data(name=p, partition_data=[data.PartitionProduceData(index=0, records=batch(b"p1", 1))]),
            data(name=q, partition_data=[data.PartitionProduceData(index=0, records=batch(b"q0", 0))]),
        ])  # q joins the transaction: a (slow) transaction log write before appending
        second = produce_request(p, [(0, batch(b"p2", 2))], acks=-1, version=12, transactional_id=txn.tid)
        ids = [c.send_request(0, 12, encode_body(m, 12)) for m in (first, second)]
        answers = [c.recv_response(0, 12, cid) for cid in ids]
        errors = [(t.name, r.error_code) for a in answers for t in a.responses for r in t.partition_responses]
        assert errors == [(p, NONE), (q, NONE), (p, NONE)]
        assert txn.end(commit=True).error_code == NONE
    assert [v for _, v in _records(b.partition_dir(p, 0))] == [b"p0", b"p1", b"p2"]


def test_a_later_batch_cannot_overtake_one_whose_check_is_retried(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's VerificationStateEntry: the first batch for partition r gets a retriable error
    from its check (the coordinator is busy adding another partition); a later batch's check
    then passes, but it is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) until the first is appended.
    Otherwise the later sequence would open r's transaction and the first could never follow.
    (The coordinator would park r's check until q's write lands: a 1 ms wait makes it fail.)"""
    monkeypatch.setenv("GREGOR_CRASH_POINTS", f"{TXN_STATE}-write@0.4")
    b = broker_factory({**OVERRIDES, "transaction.completion.wait.ms": 1})
    with WireClient(b.port) as c:
        q, r = new_topic(c, "busy-q"), new_topic(c, "busy-r")
        txn = Txn(c, "busy-id")

        def request(topic: str, value: bytes, seq: int) -> Any:
            batch = build_batch([value], producer_id=txn.pid, producer_epoch=txn.epoch,
                                base_sequence=seq, transactional=True)
            return produce_request(topic, [(0, batch)], acks=-1, version=12, transactional_id=txn.tid)

        def error_of(answer: Any) -> int:
            return int(answer.responses[0].partition_responses[0].error_code)

        # q's add is a (slow) transaction log write; r's check meanwhile finds the id busy
        pipelined = (request(q, b"q0", 0), request(r, b"r0", 0))
        ids = [c.send_request(0, 12, encode_body(m, 12)) for m in pipelined]
        # Kafka 4.3's ReplicaManager: CONCURRENT_TRANSACTIONS as it is at Produce v12+ (a producer
        # of transaction version 2 retries it); NOT_ENOUGH_REPLICAS below
        assert [error_of(c.recv_response(0, 12, cid)) for cid in ids] == [NONE, CONCURRENT_TRANSACTIONS]
        assert error_of(c.call(request(r, b"r1", 1), 12)) == OUT_OF_ORDER_SEQUENCE  # r0 first
        assert error_of(c.call(request(r, b"r0", 0), 12)) == NONE  # the retry
        assert error_of(c.call(request(r, b"r1", 1), 12)) == NONE
        assert txn.end(commit=True).error_code == NONE
    assert [v for _, v in _records(b.partition_dir(r, 0))] == [b"r0", b"r1"]


# -- TxnOffsetCommit ------------------------------------------------------------------------------


@pytest.mark.parametrize("add_offsets_first", [False, True])
def test_txn_offset_commit_v5_joins_the_transaction(client: WireClient, add_offsets_first: bool) -> None:
    """TxnOffsetCommit v5 puts the group's __consumer_offsets partition into the transaction
    (after an AddOffsetsToTxn it is already there); the offsets stay pending until the COMMIT
    marker reaches that partition, then OffsetFetch shows them."""
    topic, group = new_topic(client, "tv2-in"), unique_topic("tv2-group")
    find_group_coordinator(client, group)
    txn = Txn(client)
    if add_offsets_first:
        assert txn.add_offsets(group) == NONE
    assert txn.commit_offsets(group, topic, 7) == NONE
    assert (OFFSETS_TOPIC, offsets_partition(client, txn, group)) in txn_partitions(txn)
    assert txn.describe().transaction_state == "Ongoing"
    assert fetched_offset(client, group, topic) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert fetched_offset(client, group, topic, require_stable=False) == (-1, NONE)
    assert txn.end(commit=True).error_code == NONE
    assert stable_offset(client, group, topic) == 7


def offsets_partition(client: WireClient, txn: Txn, group: str) -> int:
    """The __consumer_offsets partition of `group` as the transaction lists it."""
    found = [p for t, p in txn_partitions(txn) if t == OFFSETS_TOPIC]
    assert len(found) == 1, txn_partitions(txn)
    return found[0]


def test_txn_offset_commit_v5_aborted_offsets_are_dropped(client: WireClient) -> None:
    topic, group = new_topic(client, "tv2-in"), unique_topic("tv2-group")
    find_group_coordinator(client, group)
    txn = Txn(client)
    assert txn.commit_offsets(group, topic, 3) == NONE
    assert txn.end(commit=True).error_code == NONE
    assert stable_offset(client, group, topic) == 3
    # The next transaction commits 9, then aborts: the group stays at 3.
    assert txn.produce(topic, b"output") == NONE
    assert txn.commit_offsets(group, topic, 9) == NONE
    assert fetched_offset(client, group, topic) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert fetched_offset(client, group, topic, require_stable=False) == (3, NONE)
    assert txn.end(commit=False).error_code == NONE
    assert stable_offset(client, group, topic) == 3


@pytest.mark.parametrize(("version", "expected"), [(4, TRANSACTION_ABORTABLE), (3, INVALID_TXN_STATE)])
def test_txn_offset_commit_before_v5_needs_add_offsets(
    client: WireClient, version: int, expected: int
) -> None:
    """v4 and older do not add the partition: without AddOffsetsToTxn the marker would never
    reach the offsets, so they are refused (TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE for
    clients that predate it) and nothing is written; after AddOffsetsToTxn they are accepted."""
    topic, group = new_topic(client, "tv1-in"), unique_topic("tv1-group")
    find_group_coordinator(client, group)
    txn = Txn(client, "tv1-id")
    assert txn.produce(topic, b"output", version=11) == TRANSACTION_ABORTABLE  # nothing added either
    assert txn.commit_offsets(group, topic, 5, version=version) == expected
    assert fetched_offset(client, group, topic, require_stable=False) == (-1, NONE)
    assert txn.add_offsets(group) == NONE
    assert txn.commit_offsets(group, topic, 5, version=version) == NONE
    assert txn.end(commit=True, version=4).error_code == NONE
    assert stable_offset(client, group, topic) == 5


def test_txn_offset_commit_v5_of_a_fenced_epoch(client: WireClient) -> None:
    topic, group = new_topic(client, "tv2-in"), unique_topic("tv2-group")
    find_group_coordinator(client, group)
    txn = Txn(client)
    old_epoch = txn.epoch
    assert txn.produce(topic, b"output") == NONE
    assert txn.end(commit=True).error_code == NONE
    assert txn.commit_offsets(group, topic, 4, epoch=old_epoch) == INVALID_PRODUCER_EPOCH
    # no transaction was opened (the commit's markers may still be on their way)
    wait_until(lambda: txn.describe().transaction_state == "CompleteCommit", timeout=10, msg="CompleteCommit")
    assert txn.describe().transaction_state == "CompleteCommit"
    assert fetched_offset(client, group, topic, require_stable=False) == (-1, NONE)


# -- epoch exhaustion ----------------------------------------------------------------------------


def test_exhausted_epoch_moves_to_a_new_producer_id(broker_factory: BrokerFactory) -> None:
    """A transactional id whose epoch reached Short.MAX - 1: the EndTxn v5 that bumps it to
    Short.MAX allocates the next producer id (NextProducerId in PrepareCommit), answers with it,
    and CompleteCommit moves the id over (PreviousProducerId = the old one)."""
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.port) as c:
        topic = new_topic(c, "tv2-exhaust")
        txn = Txn(c)
        assert txn.end(commit=False).error_code == NONE  # a record at epoch 1 to copy
        wait_until(lambda: txn.describe().transaction_state == "CompleteAbort", 10, msg="CompleteAbort")
    state_partition, last = last_txn_record(broker, txn.tid)
    # The epoch is bumped once per transaction: 32766 transactions later (written directly).
    worn = replace(last, producer_epoch=MAX_EPOCH - 1, last_producer_epoch=-1)
    broker.kill9()
    append_txn_record(broker, state_partition, txn.tid, worn)
    broker.start()
    with WireClient(broker.port) as c:
        txn.c, txn.epoch = c, MAX_EPOCH - 1
        old_pid = txn.pid
        assert txn.produce(topic, b"last of the old id") == NONE
        ended = txn.end(commit=True)
        assert ended.error_code == NONE, ended
        new_pid = ended.producer_id
        assert new_pid != old_pid and ended.producer_epoch == 0
        wait_until(lambda: txn.describe().transaction_state == "CompleteCommit", 10, msg="CompleteCommit")
        # a retry of that EndTxn (old id, epoch before the bump) is answered with the new id
        retry = txn.end(commit=True, pid=old_pid, epoch=MAX_EPOCH - 1)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (NONE, new_pid, 0)
        assert txn.produce(topic, b"first of the new id") == NONE
        assert txn.end(commit=True).error_code == NONE
        assert lso(c, topic) == 4
    records = [(v.status, v.producer_id, v.producer_epoch, v.previous_producer_id, v.next_producer_id)
               for v in txn_records(broker, txn.tid)]
    # PreviousProducerId is the id before each transition (Kafka's TxnTransitMetadata)
    prepare, complete = 2, 4
    assert (prepare, old_pid, MAX_EPOCH, old_pid, new_pid) in records, records
    assert (complete, new_pid, 0, old_pid, -1) in records, records
    # the COMMIT marker of the last transaction of the old id carries the exhausted epoch
    assert marker_epochs(broker, topic, old_pid) == [MAX_EPOCH]


def txn_records(broker: BrokerProcess, tid: str) -> list[Any]:
    out = []
    for index in range(3):
        for key, value in _records(broker.partition_dir(TXN_STATE, index)):
            if key is not None and value is not None and decode_key(key) == tid:
                out.append(decode_value(value))
    return out


def last_txn_record(broker: BrokerProcess, tid: str) -> tuple[int, TxnMetadata]:
    for index in range(3):
        values = [decode_value(v) for k, v in _records(broker.partition_dir(TXN_STATE, index))
                  if k is not None and v is not None and decode_key(k) == tid]
        if values:
            return index, TxnMetadata.from_log_value(tid, values[-1])
    raise AssertionError(f"no {TXN_STATE} record of {tid}")


def append_txn_record(broker: BrokerProcess, index: int, tid: str, md: TxnMetadata) -> None:
    """Append one record to the end of the partition's last segment, as the coordinator would
    have written it (the broker is down; it re-validates the tail when it starts)."""
    assert md.state in (TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT, TxnState.EMPTY)
    segment = segment_files(broker.partition_dir(TXN_STATE, index))[-1]
    data = segment.read_bytes()
    batches = list(iter_batches(segment))
    _pos, base, delta = batches[-1]
    record = (encode_key(tid), encode_value(md.to_log_value(), 1))
    batch = bytearray(record_batch([record], md.last_update_ms))
    struct.pack_into(">q", batch, 0, base + delta + 1)
    segment.write_bytes(data[: _end(data, batches)] + bytes(batch))


def _end(data: bytes, batches: list[tuple[int, int, int]]) -> int:
    pos = batches[-1][0]
    return pos + 12 + int(struct.unpack_from(">i", data, pos + 8)[0])


def _records(partition_dir: Any) -> list[tuple[bytes | None, bytes | None]]:
    from kafka.record.default_records import DefaultRecordBatch

    out: list[tuple[bytes | None, bytes | None]] = []
    for segment in segment_files(partition_dir):
        for whole in whole_batches(segment):
            batch = DefaultRecordBatch(whole)
            if batch.is_control_batch:
                continue
            out.extend((None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                       for r in batch)
    return out


def marker_epochs(broker: BrokerProcess, topic: str, producer_id: int) -> list[int]:
    from kafka.record.default_records import DefaultRecordBatch

    out = []
    for segment in segment_files(broker.partition_dir(topic, 0)):
        for whole in whole_batches(segment):
            batch = DefaultRecordBatch(whole)
            if batch.is_control_batch and batch.producer_id == producer_id:
                out.append(batch.producer_epoch)
    return out
