"""Coordinators that fail over with their partitions (seed 003: "transaction coordinator
failure", "group coordinator failure"), on a real cluster: etcd + three brokers, internal
topics RF 3 with min.insync.replicas 2.

The broker that coordinates a transactional id (the leader of its `__transaction_state`
partition) is killed with kill -9 at chosen points -- while the transaction is Ongoing,
right after PrepareCommit is replicated, after some of the markers are written -- and
another broker takes over: every transaction ends in one state on every partition, the
LSO catches up with the high watermark, and the producer carries on. A coordinator
paused until it is replaced answers nothing with success when it wakes. The group
coordinator dies under a consume-transform-produce processor: exactly once still holds.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import EndTxnRequest

from broker.store.image import ClusterImage
from coordinator.hashing import coordinator_partition
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.cluster import Cluster, running_cluster, wait_until_served
from tests.integration.harness import gregor_command, require_java, wait_until
from tests.integration.shop import ProcessorRun, Shop, kill_processors
from tests.integration.test_cluster_admin import reassign_wire
from tests.integration.test_eos_zombie_wire import (
    COORDINATOR_ERRORS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    UNSTABLE_OFFSET_COMMIT,
    Member,
    Txn,
    offset_fetch,
    rebalance,
)
from tests.integration.wire import WireClient, encode_body

pytestmark = pytest.mark.integration

INTERNAL_PARTITIONS = 5
# Kafka's TransactionsTest copies 100,000 records; here 10,000 at first, then more keep coming
# while brokers (or copiers) are bounced, so the copier is never idle when a bounce waits on it.
RECORDS = 10_000
FEED_CHUNK, FEED_INTERVAL_S = 300, 0.3
TXN_STATE, OFFSETS = "__transaction_state", "__consumer_offsets"
DESCRIBE_TRANSACTIONS, WRITE_TXN_MARKERS, ADD_PARTITIONS = 65, 27, 24
OVERRIDES = {
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
    "transaction.completion.wait.ms": 8000,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("failover"), overrides=OVERRIDES, crash_points=True) as c:
        yield c


@pytest.fixture(autouse=True)
def whole_cluster(cluster: Cluster) -> Iterator[None]:
    """Every test starts with three running, registered brokers and no crash point armed."""
    cluster.restore()
    yield


def all_bootstrap(cluster: Cluster) -> str:
    """Every broker, running or not: clients find whichever is up."""
    return ",".join(b.bootstrap for b in cluster.brokers)


def transactional_producer(cluster: Cluster, tid: str, timeout_ms: int = 60000) -> Producer:
    p = Producer({
        "bootstrap.servers": all_bootstrap(cluster), "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms, "linger.ms": 2,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50,
    })
    p.init_transactions(60)
    return p


class OpenTransaction(NamedTuple):
    topic: str
    tid: str
    producer: Producer
    coordinator: int
    values: list[str]


def open_transaction(cluster: Cluster, tag: str, timeout_ms: int = 60000) -> OpenTransaction:
    """A new 3-partition topic and a transaction left open with records on every partition."""
    topic = cluster.create_topic(partitions=3)
    tid = f"{tag}-{uuid.uuid4().hex[:8]}"
    p = transactional_producer(cluster, tid, timeout_ms)
    coordinator = coordinator_of(cluster, TXN_STATE, tid)
    p.begin_transaction()
    return OpenTransaction(topic, tid, p, coordinator, produce_to_every_leader(p, topic, tag))


def coordinator_of(cluster: Cluster, topic: str, key: str) -> int:
    """The broker leading the key's internal partition, once it has one."""
    index = coordinator_partition(key, INTERNAL_PARTITIONS)
    key_tp = (topic, index)
    image = cluster.wait_for(lambda i: key_tp in i.partitions and i.partitions[key_tp].leader > 0)
    return image.partitions[key_tp].leader


def wait_for_new_coordinator(cluster: Cluster, topic: str, key: str, old: int) -> int:
    index = coordinator_partition(key, INTERNAL_PARTITIONS)
    image = cluster.wait_for(lambda i: i.partitions[(topic, index)].leader not in (old, -1), 30)
    return image.partitions[(topic, index)].leader


def produce_to_every_leader(p: Producer, topic: str, tag: str, n: int = 30) -> list[str]:
    values = [f"{tag}-{i}" for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % 3)
    assert p.flush(30) == 0
    return values


def committed_values(cluster: Cluster, topic: str) -> list[str]:
    """What read_committed shows once every marker is in (EndTxn answers before they are, as in
    Kafka: a reader right after a commit may see only the partitions marked so far)."""
    assert_lso_caught_up(cluster, topic)
    tps = [(topic, i) for i in range(3)]
    return [m.value().decode() for _, m in read_to_eof(
        all_bootstrap(cluster), tps, "read_committed", "check", 60, f"read_committed {topic}")]


def assert_lso_caught_up(cluster: Cluster, topic: str, partitions: int = 3, timeout_s: float = 30) -> None:
    """No transaction left open: every partition's LSO reaches its high watermark (markers are
    written after EndTxn answers, so this takes a moment)."""
    deadline = time.monotonic() + timeout_s
    ends: dict[str, list[int]] | str = "no answer yet"
    while not isinstance(ends, dict) or ends["read_committed"] != ends["read_uncommitted"]:
        assert time.monotonic() < deadline, f"LSO stuck below the high watermark: {ends}"
        time.sleep(0.1)
        try:
            ends = end_offsets(cluster, topic, partitions)
        except KafkaException as exc:  # a partition between leaders
            ends = str(exc)


def end_offsets(cluster: Cluster, topic: str, partitions: int) -> dict[str, list[int]]:
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": all_bootstrap(cluster), "group.id": f"w-{uuid.uuid4().hex[:6]}",
                      "isolation.level": isolation})
        try:
            ends[isolation] = [
                c.get_watermark_offsets(TopicPartition(topic, i), timeout=20, cached=False)[1]
                for i in range(partitions)
            ]
        finally:
            c.close()
    return ends


def assert_all_or_nothing(values: list[str], committed: list[str]) -> bool:
    """A transaction's records are all committed or all absent; True when committed."""
    present = [v for v in values if v in committed]
    assert present in ([], values), f"half a transaction: {len(present)} of {len(values)} committed"
    return bool(present)


# -- the transaction coordinator killed at three points ------------------------------------


def test_coordinator_killed_while_the_transaction_is_ongoing(cluster: Cluster) -> None:
    topic, tid, p, old, first = open_transaction(cluster, "ongoing")
    cluster.broker(old).kill9()
    new = wait_for_new_coordinator(cluster, TXN_STATE, tid, old)
    try:
        p.commit_transaction(60)
        committed_ok = True
    except KafkaException as exc:
        assert exc.args[0].txn_requires_abort(), exc
        p.abort_transaction(60)
        committed_ok = False
    assert assert_all_or_nothing(first, committed_values(cluster, topic)) == committed_ok
    p.begin_transaction()
    second = produce_to_every_leader(p, topic, "a2")
    p.commit_transaction(60)
    assert assert_all_or_nothing(second, committed_values(cluster, topic))
    assert_lso_caught_up(cluster, topic)
    print(f"coordinator {old} -> {new}; first transaction committed: {committed_ok}")


@pytest.mark.parametrize("point", ["after-txn-log-PrepareCommit", "after-marker"])
def test_coordinator_killed_while_committing_commits_everywhere(cluster: Cluster, point: str) -> None:
    """Killed right after PrepareCommit is replicated, or after writing its own partition's
    marker (others may or may not have theirs): the successor finds PrepareCommit and
    completes the commit on every partition; commit_transaction succeeds after retrying."""
    topic, tid, p, old, values = open_transaction(cluster, "commit")
    assert {cluster.partition(topic, i).leader for i in range(3)} == {1, 2, 3}
    cluster.arm(old, point)
    p.commit_transaction(60)
    assert cluster.broker(old).proc is not None and cluster.broker(old).proc.wait(10) == -9
    assert "crash point " + point in cluster.broker(old).log_text()
    assert assert_all_or_nothing(values, committed_values(cluster, topic))
    assert_lso_caught_up(cluster, topic)
    p.begin_transaction()
    more = produce_to_every_leader(p, topic, "c2")
    p.commit_transaction(60)
    assert assert_all_or_nothing(more, committed_values(cluster, topic))
    cluster.broker(old).start()
    cluster.wait_for(lambda i: len(i.partitions[(topic, 0)].isr) == 3, 30)
    assert_lso_caught_up(cluster, topic)


# -- a deposed coordinator -------------------------------------------------------------------


def describe_transaction(port: int, tid: str) -> object:
    with WireClient(port) as c:
        answer = c.call(REQUESTS[DESCRIBE_TRANSACTIONS](transactional_ids=[tid]), 0)
    return answer.transaction_states[0]


def test_a_deposed_coordinator_answers_nothing_with_success(cluster: Cluster) -> None:
    """Paused until another broker coordinates the id, then resumed: the old coordinator's
    EndTxn answer is an error, the successor commits, and a marker carrying the old
    coordinator epoch is refused by the partitions (TRANSACTION_COORDINATOR_FENCED)."""
    topic, tid, p, old, values = open_transaction(cluster, "deposed")
    old_epoch = cluster.partition(TXN_STATE, coordinator_partition(tid, INTERNAL_PARTITIONS)).leader_epoch
    state = describe_transaction(cluster.broker(old).port, tid)
    assert state.error_code == ErrorCode.NONE and state.transaction_state == "Ongoing", state
    pid, epoch = state.producer_id, state.producer_epoch
    with WireClient(cluster.broker(old).port) as stale:
        stale.api_versions()
        cluster.broker(old).pause()
        try:
            wait_for_new_coordinator(cluster, TXN_STATE, tid, old)
        finally:
            cluster.broker(old).resume()
        answer = stale.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                          committed=True), 3)
    assert answer.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), answer
    p.commit_transaction(60)
    assert assert_all_or_nothing(values, committed_values(cluster, topic))
    assert_lso_caught_up(cluster, topic)

    # The successor's markers carry a newer coordinator epoch: a marker of the old one is fenced.
    leader = cluster.broker(cluster.partition(topic, 0).leader)
    cls = REQUESTS[WRITE_TXN_MARKERS]
    marker = cls.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=old_epoch,
        topics=[cls.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
    )
    with WireClient(leader.port) as c:
        answer = c.call(cls(markers=[marker]), 1)
    error = answer.markers[0].topics[0].partitions[0].error_code
    assert error in (ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH), answer
    assert assert_all_or_nothing(values, committed_values(cluster, topic))


# -- requests parked while a completion cannot finish --------------------------------------


class Stuck(NamedTuple):
    topic: str
    tid: str
    producer: Producer
    coordinator: int
    destination: int
    pid: int
    epoch: int


def stuck_completion(cluster: Cluster, tag: str) -> Stuck:
    """A committed transaction whose COMMIT marker cannot be written: its one partition's only
    replica is paused (left paused) on a broker other than the id's coordinator."""
    topic = f"{tag}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1, config={"min.insync.replicas": "1"})])[topic].result(30)
    for b in cluster.brokers:
        wait_until_served(b.bootstrap, topic, 3)
    destination = cluster.partition(topic, 0).leader
    transactional_producer(cluster, f"{tag}-first")  # __transaction_state exists from here on
    tid = next(t for t in (f"{tag}-{uuid.uuid4().hex[:8]}" for _ in range(100))
               if coordinator_of(cluster, TXN_STATE, t) != destination)
    p = transactional_producer(cluster, tid)
    coordinator = coordinator_of(cluster, TXN_STATE, tid)
    p.begin_transaction()
    p.produce(topic, b"first", partition=0)
    assert p.flush(30) == 0
    state = describe_transaction(cluster.broker(coordinator).port, tid)
    cluster.broker(destination).pause()
    p.commit_transaction(60)  # answered once PrepareCommit is replicated; the marker waits
    return Stuck(topic, tid, p, coordinator, destination, state.producer_id, state.producer_epoch)


def add_partitions_v3(s: Stuck) -> tuple[int, bytes]:
    """The id's next AddPartitionsToTxn as a client sends it (version 3): (version, body)."""
    cls = REQUESTS[ADD_PARTITIONS]
    request = cls(v3_and_below_transactional_id=s.tid, v3_and_below_producer_id=s.pid,
                  v3_and_below_producer_epoch=s.epoch,
                  v3_and_below_topics=[cls.AddPartitionsToTxnTopic(name=s.topic, partitions=[1])])
    return 3, encode_body(request, 3)


def partition_error(answer: object) -> ErrorCode:
    return ErrorCode(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)  # type: ignore[attr-defined]


def finish_and_check(cluster: Cluster, s: Stuck) -> None:
    """The paused broker resumes: the completion lands, the id works again, nothing twice."""
    cluster.broker(s.destination).resume()
    s.producer.begin_transaction()
    s.producer.produce(s.topic, b"second", partition=0)
    s.producer.commit_transaction(60)
    assert committed_values(cluster, s.topic) == ["first", "second"]


def test_a_request_parked_behind_an_unwritable_marker_is_answered_within_its_wait(cluster: Cluster) -> None:
    """The id's next request waits for the completion (transaction.completion.wait.ms here
    8 s), then gets CONCURRENT_TRANSACTIONS, as Kafka answers at once; it is still PrepareCommit;
    once the destination resumes, the producer's next transaction commits."""
    s = stuck_completion(cluster, "parked")
    try:
        with WireClient(cluster.broker(s.coordinator).port, timeout=30) as c:
            version, body = add_partitions_v3(s)
            answer = c.recv_response(ADD_PARTITIONS, version, c.send_request(ADD_PARTITIONS, version, body))
        assert partition_error(answer) == ErrorCode.CONCURRENT_TRANSACTIONS, answer
        state = describe_transaction(cluster.broker(s.coordinator).port, s.tid)
        assert state.transaction_state == "PrepareCommit", state  # type: ignore[attr-defined]
    finally:
        cluster.broker(s.destination).resume()
    finish_and_check(cluster, s)


def test_requests_parked_on_a_deposed_coordinator_get_not_coordinator(cluster: Cluster) -> None:
    """While the id's request waits, leadership of its `__transaction_state` partition moves to
    another live broker (reassigned, then a preferred election): the waiting request is
    answered NOT_COORDINATOR, the successor completes the transaction once the marker can be
    written, and the producer carries on with nothing committed twice."""
    s = stuck_completion(cluster, "deposed-parked")
    index = coordinator_partition(s.tid, INTERNAL_PARTITIONS)
    replicas = list(cluster.partition(TXN_STATE, index).replicas)
    successor = next(n for n in replicas if n not in (s.coordinator, s.destination))
    try:
        # The paused broker's registration lapses first: were it the controller, the reassignment
        # below would be forwarded to it and wait there (FORWARD_TIMEOUT_S) past the park.
        cluster.wait_for(lambda i: s.destination not in i.brokers and i.controller is not None
                         and i.controller.node_id != s.destination)
        with WireClient(cluster.broker(s.coordinator).port, timeout=30) as c:
            version, body = add_partitions_v3(s)
            cid = c.send_request(ADD_PARTITIONS, version, body)
            # the partition moves to the two live brokers while the request is parked
            move_leadership(cluster, (TXN_STATE, index), [successor, s.coordinator])
            answer = c.recv_response(ADD_PARTITIONS, version, cid)
        assert partition_error(answer) == ErrorCode.NOT_COORDINATOR, answer
    finally:
        cluster.broker(s.destination).resume()
    finish_and_check(cluster, s)
    cluster.restore()
    move_leadership(cluster, (TXN_STATE, index), replicas)  # as the module's other tests expect


def move_leadership(cluster: Cluster, tp: tuple[str, int], replicas: list[int]) -> None:
    """Reassign the partition to `replicas` and elect the first (the preferred) leader."""
    admin = AdminClient({"bootstrap.servers": cluster.broker(replicas[0]).bootstrap})
    topic, index = tp
    result = reassign_wire(cluster.broker(replicas[0]).port, topic, index, replicas)
    assert result.error_code == ErrorCode.NONE, result
    cluster.wait_for(lambda i: list(i.partitions[tp].replicas) == replicas)
    deadline = time.monotonic() + 30
    while cluster.partition(topic, index).leader != replicas[0]:
        assert time.monotonic() < deadline, cluster.partition(topic, index)
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, index)]).result(30)
        time.sleep(0.2)


def test_an_abandoned_transaction_is_aborted_by_the_successor(cluster: Cluster) -> None:
    """The producer goes away mid-transaction and its coordinator dies: the new coordinator
    aborts the transaction when its timeout passes, so the LSO catches up."""
    topic, tid, _p, old, values = open_transaction(cluster, "abandoned", timeout_ms=3000)
    cluster.broker(old).kill9()
    wait_for_new_coordinator(cluster, TXN_STATE, tid, old)
    assert_lso_caught_up(cluster, topic)  # the successor aborted the abandoned transaction
    assert not assert_all_or_nothing(values, committed_values(cluster, topic))


def test_a_coordinator_slow_to_load_answers_load_in_progress_and_clients_retry(cluster: Cluster) -> None:
    """The successor takes 3 s to load the partition (a slow point standing in for a large
    one): meanwhile it answers COORDINATOR_LOAD_IN_PROGRESS; a client's InitProducerId
    retries through it and fences the transaction the dead coordinator left open."""
    topic, tid, _p, old, values = open_transaction(cluster, "slow")
    others = [b.node_id for b in cluster.brokers if b.node_id != old]
    for node in others:
        cluster.arm(node, "__transaction_state-load@3")
    try:
        cluster.broker(old).kill9()
        new = wait_for_new_coordinator(cluster, TXN_STATE, tid, old)
        init = REQUESTS[22](version=3, transactional_id=tid, transaction_timeout_ms=60000,
                            producer_id=-1, producer_epoch=-1)
        seen = []
        with WireClient(cluster.broker(new).port) as c:
            deadline = time.monotonic() + 3
            while not seen or seen[-1] not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NONE):
                assert time.monotonic() < deadline, seen
                seen.append(ErrorCode(c.call(init, 3).error_code))
        assert seen[-1] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, seen
        again = transactional_producer(cluster, tid)  # retries until the load is done
        again.begin_transaction()
        more = produce_to_every_leader(again, topic, "s2")
        again.commit_transaction(60)
    finally:
        for node in others:
            cluster.arm(node, "")
    committed = committed_values(cluster, topic)
    assert not assert_all_or_nothing(values, committed), "the fenced transaction was aborted"
    assert assert_all_or_nothing(more, committed)


def test_the_transactions_tool_spans_every_coordinator(cluster: Cluster) -> None:
    """`gregor transactions list` through one broker shows the open transactions of all three
    coordinators; `describe` finds each one's coordinator."""
    topic = cluster.create_topic(partitions=3)
    transactional_producer(cluster, "tool-first")  # creates __transaction_state
    image = elect_preferred_leaders(cluster, TXN_STATE, INTERNAL_PARTITIONS)
    by_coordinator: dict[int, str] = {}
    for k in range(100):
        tid = f"tool-{k}-{uuid.uuid4().hex[:6]}"
        leader = image.partitions[(TXN_STATE, coordinator_partition(tid, INTERNAL_PARTITIONS))].leader
        by_coordinator.setdefault(leader, tid)
    assert set(by_coordinator) == {1, 2, 3}, by_coordinator
    producers = []
    for tid in by_coordinator.values():
        p = transactional_producer(cluster, tid)
        p.begin_transaction()
        produce_to_every_leader(p, topic, tid, n=3)
        producers.append(p)
    listed = gregor_transactions(cluster.brokers[0].bootstrap, "list")
    for tid in by_coordinator.values():
        assert tid in listed, listed
        described = gregor_transactions(cluster.brokers[1].bootstrap, "describe", "--transactional-id", tid)
        assert "Ongoing" in described, described
    pids = {line.split()[2] for line in listed.splitlines()[1:] if line.split()[0] in by_coordinator.values()}
    assert len(pids) == 3, listed
    for partition in range(3):  # each partition's leader, reached through broker 3
        shown = gregor_transactions(cluster.brokers[2].bootstrap, "describe-producers", "--topic", topic,
                                    "--partition", str(partition))
        assert pids <= {line.split()[0] for line in shown.splitlines()[1:]}, (pids, shown)
    # Open for seconds, past a zero maximum timeout, but every coordinator knows them: none hang.
    hanging = gregor_transactions(cluster.brokers[0].bootstrap, "find-hanging", "--topic", topic,
                                  "--max-transaction-timeout", "0")
    assert hanging.splitlines()[1:] == [], hanging
    for p in producers:
        p.abort_transaction(30)
    assert_lso_caught_up(cluster, topic)


def elect_preferred_leaders(cluster: Cluster, topic: str, partitions: int) -> ClusterImage:
    """Leadership back on each partition's first replica (after the kills of earlier tests)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]

    def preferred(i: ClusterImage) -> bool:
        return all(i.partitions[(topic, p)].leader == i.partitions[(topic, p)].replicas[0]
                   for p in range(partitions))

    deadline = time.monotonic() + 30
    while not preferred(cluster.image()):
        assert time.monotonic() < deadline, cluster.image()
        admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
        time.sleep(0.3)
    return cluster.image()


def gregor_transactions(bootstrap: str, *args: str) -> str:
    done = subprocess.run([*gregor_command(), "transactions", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the group coordinator under consume-transform-produce ----------------------------------


def test_group_coordinator_killed_during_consume_transform_produce(cluster: Cluster) -> None:
    """The broker leading the group's offsets partition dies between transactions: the
    processor finds the new group coordinator and carries on, exactly once. Java's client:
    librdkafka's send_offsets_to_transaction waits forever on a coordinator removed from
    metadata (confluentinc/librdkafka#5511, #5456; open), as it would against Kafka."""
    require_java("4.3")
    shop = Shop(all_bootstrap(cluster), purchases=400, partitions=(3, 3), replication=3)
    txn_id = f"shop-{uuid.uuid4().hex[:8]}"
    try:
        run = shop.processor(txn_id, java="4.3", batch=10, max_seconds=150, session_timeout_ms=6000)
        run.wait_event("committed", 5, timeout=60)
        victim = coordinator_of(cluster, OFFSETS, shop.group)
        cluster.broker(victim).kill9()
        wait_for_new_coordinator(cluster, OFFSETS, shop.group, victim)
        progress = len(run.of("committed"))
        deadline = time.monotonic() + 60
        while len(run.of("committed")) <= progress + 3 and run.proc.poll() is None:
            assert time.monotonic() < deadline, run.transcript()
            time.sleep(0.05)
        cluster.broker(victim).start()
        runs = [run]
        for _ in range(4):
            if runs[-1].wait(150) == 0:
                break
            runs.append(shop.processor(txn_id, batch=20, max_seconds=150, api_timeout=20))
        assert runs[-1].proc.returncode == 0 and runs[-1].of("done"), runs[-1].transcript()
        shop.assert_exactly_once(expect_aborted=False)
    finally:
        kill_processors()


def find_coordinator(cluster: Cluster, key: str, key_type: int) -> int:
    """FindCoordinator (0 group, 1 transaction) until answered: the coordinator's node id."""
    find = REQUESTS[10](version=3, key=key, key_type=key_type)
    with WireClient(next(b for b in cluster.brokers if b.running).port) as c:
        return int(wait_until(lambda: (r := c.call(find, 3)).error_code == 0 and r,
                              timeout=20, msg=f"coordinator of {key}").node_id)


def test_group_state_and_pending_offsets_survive_the_group_coordinator(cluster: Cluster) -> None:
    """Byte level, with the transaction coordinator elsewhere: after the group coordinator's
    kill -9, its successor knows the static member and its generation (KIP-447 fencing:
    ILLEGAL_GENERATION, FENCED_INSTANCE_ID), keeps a committed transactional offset, answers
    UNSTABLE_OFFSET_COMMIT for a pending one until the COMMIT marker lands, and lets the
    static member rejoin at its generation."""
    topic = cluster.create_topic(partitions=3)
    group = f"g447-{uuid.uuid4().hex[:8]}"
    gc = find_coordinator(cluster, group, 0)
    find_coordinator(cluster, "any", 1)  # __transaction_state exists: choose a tid led elsewhere
    image = cluster.image()
    tid = next(t for k in range(200) if image.partitions[
        (TXN_STATE, coordinator_partition(t := f"g447-{k}-{uuid.uuid4().hex[:6]}", INTERNAL_PARTITIONS))
    ].leader not in (gc, -1))
    tc = find_coordinator(cluster, tid, 1)
    member = Member(cluster.broker(gc).port, group, topic, instance_id="static-1")
    try:
        rebalance([member], {0: [0, 1, 2]})
    finally:
        member.close()
    gen, mid = member.generation, member.member_id
    with WireClient(cluster.broker(tc).port) as tcc:
        txn = Txn(tcc, tid, tc)
        with WireClient(cluster.broker(gc).port) as gcc:
            txn.add_offsets(group)
            assert txn.commit_offsets(group, topic, {1: 5}, gen, mid, "static-1", via=gcc) == {1: 0}
            txn.end(commit=True)
            wait_until(lambda: stable_offsets(gcc, group, topic) == {0: -1, 1: 5, 2: -1}, timeout=20,
                       msg="the first transaction's offsets")
            txn.add_offsets(group)
            assert txn.commit_offsets(group, topic, {0: 10}, gen, mid, "static-1", via=gcc) == {0: 0}
        cluster.broker(gc).kill9()
        new_gc = wait_for_new_coordinator(cluster, OFFSETS, group, gc)
        with WireClient(cluster.broker(new_gc).port) as g2:
            err, got = wait_until(lambda: (r := offset_fetch(g2, group, topic, [0, 1], True))[0]
                                  not in COORDINATOR_ERRORS and r, timeout=20, msg="the group loaded")
            assert UNSTABLE_OFFSET_COMMIT in (err, got[0][1]), (err, got)
            assert offset_fetch(g2, group, topic, [0, 1], False)[1] == {0: (-1, 0), 1: (5, 0)}
            zombie = txn.commit_offsets(group, topic, {2: 99}, gen - 1, mid, "static-1", via=g2)
            assert zombie == {2: ILLEGAL_GENERATION}, zombie
            other = txn.commit_offsets(group, topic, {2: 98}, gen, "other-" + mid, "static-1", via=g2)
            assert other == {2: FENCED_INSTANCE_ID}, other
            assert txn.commit_offsets(group, topic, {2: 7}, gen, mid, "static-1", via=g2) == {2: 0}
            txn.end(commit=True)
            wait_until(lambda: stable_offsets(g2, group, topic) == {0: 10, 1: 5, 2: 7}, timeout=20,
                       msg="the pending offsets after the COMMIT marker")
    rejoined = Member(cluster.broker(new_gc).port, group, topic, instance_id="static-1")
    try:
        rejoined.send_join()
        assert rejoined.finish_join().generation_id == gen, "a static member's return is no rebalance"
    finally:
        rejoined.close()


def stable_offsets(c: WireClient, group: str, topic: str) -> dict[int, int] | None:
    err, got = offset_fetch(c, group, topic, [0, 1, 2], True)
    if err or any(e for _o, e in got.values()):
        return None
    return {p: o for p, (o, _e) in got.items()}


# -- Apache Kafka's transactions system test, reproduced ---------------------------------------


class ConcurrentReader:
    """A read_committed consumer of `topic` running throughout: what it saw, in order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.seen: list[tuple[int, int, str]] = []
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
        })
        self._consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(500, 0.2):
                if m.error() is None:
                    self.seen.append((m.partition(), m.offset(), m.value().decode()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def bounce_brokers(cluster: Cluster, run_alive: Callable[[], int], hard: bool) -> list[str]:
    """Each broker in turn: kill -9 (hard) or SIGTERM (clean) it while the copier commits,
    wait until another broker leads its partitions, start it again, wait for a full ISR."""
    done = []
    for b in cluster.brokers:
        before = run_alive()
        deadline = time.monotonic() + 60
        while run_alive() < before + 2:
            assert time.monotonic() < deadline, "the copier made no progress"
            time.sleep(0.05)
        if hard:
            b.kill9()
        else:
            b.stop()
        cluster.wait_for(lambda i, n=b.node_id: n not in i.brokers, 30)
        time.sleep(0.5)
        b.start()
        cluster.wait_for(lambda i: len(i.brokers) == 3 and all(
            len(s.isr) == len(s.replicas) for s in i.partitions.values()), 60)
        done.append(f"{'kill -9' if hard else 'stop'} {b.node_id}")
    return done


@pytest.mark.parametrize(("client", "bounce"), [
    ("4.3", "hard"), ("3.9", "clean"), ("confluent", "copier"),
])
def test_transactions_system_test(cluster: Cluster, client: str, bounce: str) -> None:
    """Kafka's TransactionsTest: a 2-partition input copied by a transactional copier
    (consume -> produce -> sendOffsetsToTransaction -> commit, 500-750 records per
    transaction) into 3-partition outputs while brokers are bounced (kill -9 or clean) or
    the copier is, the input growing meanwhile; a read_committed reader runs throughout.
    No duplicates, output == input, the reader never saw a record the final output lacks,
    per-partition order, the group's offsets at the input's end, LSO == HW."""
    java = None if client == "confluent" else client
    if java:
        require_java(java)
    n = RECORDS
    shop = Shop(all_bootstrap(cluster), purchases=n, partitions=(2, 3), replication=3)
    reader = ConcurrentReader(all_bootstrap(cluster), shop.invoices, 3)
    txn_id = f"copier-{uuid.uuid4().hex[:8]}"
    rng = random.Random(n)

    def copier() -> ProcessorRun:
        # idle_exit: longer than the feeder may pause while a bounce moves its partitions
        return shop.processor(txn_id, java=java, batch=rng.randint(500, 750), max_seconds=240,
                              api_timeout=30, session_timeout_ms=6000, txn_timeout_ms=20000,
                              idle_exit=8.0)

    runs = [copier()]

    def committed() -> int:
        return sum(len(r.of("committed")) for r in runs)

    def progress() -> int:
        assert runs[-1].proc.poll() is None, f"the copier ended\n{runs[-1].transcript()}"
        return committed()

    feeding = threading.Event()

    def feed() -> None:
        while not feeding.is_set():
            shop.add_purchases(FEED_CHUNK)
            feeding.wait(FEED_INTERVAL_S)

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        runs[-1].wait_event("committed", 2, timeout=90)
        feeder.start()
        if bounce == "copier":
            for _ in range(3):
                before = committed()
                while committed() < before + 2:
                    assert runs[-1].proc.poll() is None, runs[-1].transcript()
                    time.sleep(0.05)
                time.sleep(rng.uniform(0, 0.3))
                runs[-1].kill()
                runs.append(copier())
            events = ["copier killed 3 times"]
        else:
            events = bounce_brokers(cluster, progress, hard=bounce == "hard")
        feeding.set()
        feeder.join(30)
        for _ in range(5):
            if runs[-1].wait(240) == 0:
                break
            runs.append(copier())
        assert runs[-1].proc.returncode == 0 and runs[-1].of("done"), runs[-1].transcript()
    finally:
        feeding.set()
        reader.stop()
        kill_processors()
    print(f"{client}/{bounce}: {events}; {shop.n} records; copier runs {len(runs)}, "
          f"transactions {committed()}, errors {[e.get('name') for r in runs for e in r.of('txn_error')]}")

    shop.assert_exactly_once(expect_aborted=False)
    final = shop.read(shop.invoices, "read_committed")
    missing = {v for _, _, v in reader.seen} - set(final)
    assert not missing, f"the reader saw records missing from the final output: {sorted(missing)[:10]}"
    assert len(reader.seen) == len({v for _, _, v in reader.seen}), "the reader saw a record twice"
    assert_input_order_kept(final_by_partition(shop))
    for topic in (shop.invoices, shop.shipments):
        assert_lso_caught_up(cluster, topic)


def final_by_partition(shop: Shop) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = {}
    for (_, partition), m in read_to_eof(shop.bootstrap, [(shop.invoices, i) for i in range(3)],
                                         "read_committed", "order", 60, "invoices"):
        by_partition.setdefault(partition, []).append(int(m.value().decode().split("-")[1]))
    return by_partition


def assert_input_order_kept(by_partition: dict[int, list[int]]) -> None:
    """Within an output partition, the records of one input partition (purchase i is in
    input partition i % 2) keep their input order."""
    for partition, ids in by_partition.items():
        for source in (0, 1):
            of_source = [i for i in ids if i % 2 == source]
            assert of_source == sorted(of_source), f"output partition {partition}: input order broken"
