"""kill -9 the broker in the middle of a transaction's two-phase commit.

The broker SIGKILLs itself at a crash point (broker/base/faults.py, env
GREGOR_CRASH_POINTS) reached while a confluent-kafka transactional producer
ends a transaction that wrote to 2 topics x 2 partitions:

- before-txn-log-PrepareCommit: PrepareCommit never persisted -> after restart
  the coordinator still sees Ongoing and aborts it on timeout;
- after-txn-log-PrepareCommit: persisted, no marker yet -> completed as
  committed at start-up;
- after-marker:N: some markers written -> completed at start-up, exactly one
  marker per partition;
- the same for an abort (after-txn-log-PrepareAbort, after-marker).

Each test first fully commits an earlier transaction (so crash point counts
include its PrepareCommit and its 4 markers), then crashes the second one,
restarts without crash points and checks: nothing committed lost, nothing
aborted visible to read_committed, no duplicate, one marker per transaction per
partition, the LSO past the transaction, the state log ends in Complete*, and a
new producer with the same transactional.id commits afterwards.

The Java runs (client 3.9, and 4.3 at transaction.version 2 and 1) also commit an offset
of a group in each transaction (sendOffsetsToTransaction); after the restart the group's
stable offset must be the crashed transaction's iff it committed, so the marker reached
`__consumer_offsets` too (under transaction version 2 without any AddOffsetsToTxn).

When the client saw an error for the commit/abort, the outcome is decided by
what the coordinator persisted, which the test knows from the crash point; when
the client saw success, its records must be committed.
"""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka.record.default_records import DefaultRecordBatch

from protocol.transaction_log import decode_key, decode_value
from tests.integration.clients import read_to_eof
from tests.integration.harness import (
    REPO_ROOT,
    BrokerFactory,
    BrokerProcess,
    java_command,
    require_java,
    segment_files,
    unique_topic,
    wait_until,
    whole_batches,
)
from tests.integration.wire import WireClient

pytestmark = pytest.mark.integration

TXN_STATE = "__transaction_state"
TXN_STATE_PARTITIONS = 3
PER_PARTITION = 5  # records per partition per transaction
STATUS_NAMES = {
    0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
    4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence",
}
COMMIT, ABORT = "COMMIT", "ABORT"
UNSTABLE_OFFSET_COMMIT = 88


@dataclass(frozen=True)
class Case:
    crash_point: str   # GREGOR_CRASH_POINTS value
    commit: bool       # the crashed transaction ends with commit (else abort)
    committed: bool    # the outcome the coordinator's persisted state implies
    timeout_ms: int    # transaction.timeout.ms of the producer
    markers_before_crash: int = 0  # markers of the crashed transaction already on disk


CASES = {
    # PrepareCommit of the 2nd transaction (the 1st is the earlier committed one)
    # never reaches the log: Ongoing on restart, aborted by the coordinator's timeout.
    "a-before-PrepareCommit": Case("before-txn-log-PrepareCommit:2", True, False, 3000),
    "b-after-PrepareCommit": Case("after-txn-log-PrepareCommit:2", True, True, 10000),
    # the 1st transaction writes 4 markers: :6 is the 2nd marker of the crashed one
    "c-after-2-commit-markers": Case("after-marker:6", True, True, 10000, 2),
    "d-after-PrepareAbort": Case("after-txn-log-PrepareAbort", False, False, 10000),
    "d-after-2-abort-markers": Case("after-marker:6", False, False, 10000, 2),
    "a-before-PrepareAbort": Case("before-txn-log-PrepareAbort", False, False, 3000),
}


# -- clients -----------------------------------------------------------------------


def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=10)
    for f in futures.values():
        f.result(timeout=20)


def txn_producer(bootstrap: str, tid: str, timeout_ms: int) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms,
        "linger.ms": 5,
        "retry.backoff.ms": 50,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200,
    })


def init_with_retries(p: Producer, deadline_s: float = 30.0) -> None:
    """init_transactions, retried while the coordinator finishes an earlier transaction."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            p.init_transactions(10)
            return
        except KafkaException as e:
            err: KafkaError = e.args[0]
            if time.monotonic() > deadline or not (err.retriable() or err.code() in (
                KafkaError._TIMED_OUT, KafkaError.CONCURRENT_TRANSACTIONS,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
            )):
                raise
            time.sleep(0.2)


def produce_all(p: Producer, tps: list[tuple[str, int]], tag: str) -> dict[tuple[str, int], list[bytes]]:
    """PER_PARTITION records to every partition; returns what was sent, flushed."""
    sent: dict[tuple[str, int], list[bytes]] = {}
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for topic, part in tps:
        values = [f"{tag}:{topic}:{part}:{i}".encode() for i in range(PER_PARTITION)]
        for v in values:
            p.produce(topic, v, key=v[-8:], partition=part, on_delivery=on_delivery)
        sent[(topic, part)] = values
    assert p.flush(15) == 0, "records still queued after flush"
    assert not errors, f"delivery errors: {errors}"
    return sent


def consume(bootstrap: str, tps: list[tuple[str, int]], isolation: str) -> dict[tuple[str, int], list[bytes]]:
    """Every record of `tps` up to the end (the LSO for read_committed), via partition EOF."""
    got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in tps}
    for tp, msg in read_to_eof(bootstrap, tps, isolation, "txn-crash", 20, f"{isolation} consumer"):
        got[tp].append(bytes(msg.value() or b""))
    return got


def end_offsets(bootstrap: str, tps: list[tuple[str, int]], committed: bool) -> dict[tuple[str, int], int]:
    """ListOffsets latest: the LSO (read_committed) or the high watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps},  # type: ignore[no-untyped-call]
        isolation_level=level,
        request_timeout=10,
    )
    return {(tp.topic, tp.partition): f.result(timeout=15).offset for tp, f in futures.items()}


# -- on disk -----------------------------------------------------------------------


def disk_batches(partition_dir: Path) -> list[DefaultRecordBatch]:
    out = []
    for seg in segment_files(partition_dir):
        out.extend(DefaultRecordBatch(batch) for batch in whole_batches(seg))
    return out


def markers_on_disk(b: BrokerProcess, topic: str, part: int, producer_id: int) -> list[tuple[int, str, int]]:
    """(offset, COMMIT|ABORT, epoch) of every control batch of `producer_id`."""
    out = []
    for batch in disk_batches(b.partition_dir(topic, part)):
        if not batch.is_control_batch or batch.producer_id != producer_id:
            continue
        for rec in batch:
            _version, ctype = struct.unpack(">hh", bytes(rec.key[:4]))
            out.append((rec.offset, COMMIT if ctype == 1 else ABORT, batch.producer_epoch))
    return out


def data_batches_on_disk(b: BrokerProcess, topic: str, part: int) -> list[tuple[int, int, int, int]]:
    """(baseOffset, producerId, epoch, baseSequence) of every data batch."""
    return [
        (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence)
        for batch in disk_batches(b.partition_dir(topic, part)) if not batch.is_control_batch
    ]


def txn_index_on_disk(b: BrokerProcess, topic: str, part: int) -> list[tuple[int, int, int]]:
    """(producerId, firstOffset, lastOffset) of every aborted transaction in the .txnindex files."""
    out = []
    for f in segment_files(b.partition_dir(topic, part), ".txnindex"):
        data = f.read_bytes()
        for i in range(0, len(data) - len(data) % 34, 34):
            _version, pid, first, last, _lso = struct.unpack_from(">hqqqq", data, i)
            out.append((pid, first, last))
    return out


def check_markers(
    b: BrokerProcess, tps: list[tuple[str, int]], pid: int, before: list[str], outcome: str,
    marked_before_crash: int, after: tuple[str, ...] | list[str] = (),
) -> dict[tuple[str, int], list[str]]:
    """Markers of `pid` per partition: `before`, then the crashed transaction's, then `after`.

    The crashed transaction must have one marker of its outcome on every partition; a
    second identical (empty) one is allowed only on the `marked_before_crash` partitions
    that got theirs before the crash. Returns the crashed transaction's part per partition.
    """
    crashed_part: dict[tuple[str, int], list[str]] = {}
    for t, part in tps:
        markers = markers_on_disk(b, t, part, pid)
        kinds = [k for _o, k, _e in markers]
        middle = kinds[len(before):len(kinds) - len(after)]
        assert kinds[:len(before)] == list(before) and kinds[len(kinds) - len(after):] == list(after), \
            f"{t}-{part}: markers {markers}"
        assert middle in ([outcome], [outcome, outcome]), f"{t}-{part}: markers {markers}"
        if len(middle) == 2:
            # the re-sent marker is empty: right after the first one
            first_at = markers[len(before)][0]
            assert markers[len(before) + 1][0] == first_at + 1, f"{t}-{part}: markers {markers}"
        crashed_part[(t, part)] = middle
    doubled = sum(1 for kinds in crashed_part.values() if len(kinds) == 2)
    assert doubled <= marked_before_crash, f"duplicate markers on partitions not marked first: {crashed_part}"
    return crashed_part


def txn_states(b: BrokerProcess, tid: str) -> list[tuple[str, int, int]]:
    """(state, producer id, epoch) of every `__transaction_state` record for `tid`, in order."""
    out = []
    for index in range(TXN_STATE_PARTITIONS):
        for batch in disk_batches(b.partition_dir(TXN_STATE, index)):
            for rec in batch:
                if rec.key is None or decode_key(bytes(rec.key)) != tid:
                    continue
                if rec.value is None:
                    out.append(("<tombstone>", -1, -1))
                    continue
                v = decode_value(bytes(rec.value))
                out.append((STATUS_NAMES.get(v.status, str(v.status)), v.producer_id, v.producer_epoch))
    return out


def compressed(states: list[tuple[str, int, int]]) -> list[str]:
    out: list[str] = []
    for s, _pid, _epoch in states:
        if not out or out[-1] != s:
            out.append(s)
    return out


# -- the producer side: confluent-kafka in this process, or the Java client --------------


@dataclass
class ProducerRun:
    first: dict[tuple[str, int], list[bytes]]    # the earlier, committed transaction
    crashed: dict[tuple[str, int], list[bytes]]  # the transaction the broker died in
    end_error: str | None                        # what the client saw ending it (None: success)


def expected_values(tps: list[tuple[str, int]], tag: str) -> dict[tuple[str, int], list[bytes]]:
    return {(t, p): [f"{tag}:{t}:{p}:{i}".encode() for i in range(PER_PARTITION)] for t, p in tps}


def run_confluent(b: BrokerProcess, tid: str, tps: list[tuple[str, int]], case: Case) -> ProducerRun:
    # 1. an earlier transaction, fully committed
    p1 = txn_producer(b.bootstrap, tid, case.timeout_ms)
    p1.init_transactions(15)
    p1.begin_transaction()
    first = produce_all(p1, tps, "first")
    p1.commit_transaction(15)
    wait_until(lambda: compressed(txn_states(b, tid))[-1:] == ["CompleteCommit"], 10,
               msg="first transaction CompleteCommit")
    assert b.running, "broker crashed during the first (earlier) transaction"

    # 2. the transaction the broker dies in (the crash is immediate: 3 s is plenty)
    p1.begin_transaction()
    crashed = produce_all(p1, tps, "crashed")
    end_error: str | None = None
    try:
        if case.commit:
            p1.commit_transaction(3)
        else:
            p1.abort_transaction(3)
    except KafkaException as e:
        end_error = str(e)
    _wait_crashed(b, case)
    # the old producer must not retry its EndTxn against the restarted broker. Not
    # close(): it aborts the transaction it believes open and, the broker being down,
    # can block for ever; dropping the last reference destroys the client handle.
    p1.purge()
    del p1
    gc.collect()
    return ProducerRun(first, crashed, end_error)


def java_driver(client: str) -> Driver:
    """TxnCrash.java with the Java client `client`; each transaction also commits an offset of
    the group named after the transactional id (sendOffsetsToTransaction)."""

    def run(b: BrokerProcess, tid: str, tps: list[tuple[str, int]], case: Case) -> ProducerRun:
        return run_java(b, tid, tps, case, client)

    return run


def run_java(b: BrokerProcess, tid: str, tps: list[tuple[str, int]], case: Case, client: str) -> ProducerRun:
    require_java(client)
    topics = sorted({t for t, _p in tps})
    outcome = "commit" if case.commit else "abort"
    proc = subprocess.run(
        java_command("TxnCrash.java", b.bootstrap, tid, str(case.timeout_ms), outcome, str(PER_PARTITION),
                     *topics, client=client),
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**os.environ, "TXN_CRASH_GROUP": tid},
    )
    out = proc.stdout
    assert proc.returncode == 0 and "FIRST committed" in out and "END " in out, (
        f"TxnCrash.java exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{proc.stderr[-3000:]}")
    _wait_crashed(b, case)
    end = next(line for line in out.splitlines() if line.startswith("END "))
    return ProducerRun(expected_values(tps, "first"), expected_values(tps, "crashed"),
                       None if end == "END ok" else end)


def _wait_crashed(b: BrokerProcess, case: Case) -> None:
    assert b.proc is not None
    try:
        code = b.proc.wait(15)
    except subprocess.TimeoutExpired:
        code = None
    assert code == -9, f"broker did not die at {case.crash_point} (exit code {code})"
    point = case.crash_point.partition(":")[0]
    assert f"crash point {point} reached" in b.log_text()


Driver = Callable[[BrokerProcess, str, list[tuple[str, int]], Case], ProducerRun]
DRIVERS: dict[str, Driver] = {
    "confluent": run_confluent, "java-3.9": java_driver("3.9"), "java-4.3": java_driver("4.3"),
}
JAVA_CASES = ["b-after-PrepareCommit", "c-after-2-commit-markers",
              "d-after-PrepareAbort"]
# (client, broker transaction.version): the Java 4.3 client takes the transaction version 2
# path at level 2 and the older protocol at level 1, as the 3.9 client always does.
JAVA_RUNS = [("java-3.9", 2), ("java-4.3", 2), ("java-4.3", 1)]
PARAMS = [pytest.param("confluent", 2, name, id=name) for name in CASES] + [
    pytest.param(client, level, name, id=f"{client}-tv{level}-{name}", marks=pytest.mark.java)
    for client, level in JAVA_RUNS for name in JAVA_CASES
]


# -- the test -----------------------------------------------------------------------


@pytest.mark.parametrize(("client", "level", "name"), PARAMS)
def test_kill9_during_end_txn(
    client: str, level: int, name: str, broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    with_offsets = client.startswith("java")
    if with_offsets and case.crash_point.startswith("after-marker:"):
        # each transaction also has a marker for its __consumer_offsets partition
        count = int(case.crash_point.partition(":")[2])
        case = replace(case, crash_point=f"after-marker:{count + 1}")
    monkeypatch.setenv("GREGOR_CRASH_POINTS", case.crash_point)
    b = broker_factory({
        "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
        "offsets.topic.num.partitions": 3,
        "transaction.version": level,
    })
    # the broker copies os.environ at start(): later starts run without crash points
    monkeypatch.delenv("GREGOR_CRASH_POINTS")
    topics = [unique_topic("txcrash-a"), unique_topic("txcrash-b")]
    create_topics(b.bootstrap, topics, 2)
    tps = [(t, p) for t in topics for p in (0, 1)]
    tid = f"txn-crash-{uuid.uuid4().hex[:8]}"

    # 1-2. commit one transaction, then die ending the next one
    run = DRIVERS[client](b, tid, tps, case)
    first, crashed = run.first, run.crashed
    print(f"{client} {name}: the client saw {run.end_error or 'success'} ending the crashed transaction")
    if point_before_reply(case.crash_point):
        assert run.end_error is not None, "the client saw success from a broker that died before answering"
    # what the producer believes: only a successful commit call means "committed"
    if case.commit and run.end_error is None:
        assert case.committed, f"client saw {case.crash_point} commit succeed, but nothing was persisted"

    # 3. restart without crash points: load __transaction_state, finish Prepare*
    b.start()
    expected_final = "CompleteCommit" if case.committed else "CompleteAbort"
    # (a) waits for the coordinator's timeout; the others complete at load
    wait_until(lambda: compressed(txn_states(b, tid))[-1:] == [expected_final], 20,
               msg=f"{tid} reaching {expected_final}; states {compressed(txn_states(b, tid))}")
    states = txn_states(b, tid)
    steps = compressed(states)
    outcome = "Commit" if case.committed else "Abort"
    assert steps == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit",
                     "Ongoing", f"Prepare{outcome}", f"Complete{outcome}"], states
    if point_before_reply(case.crash_point) and case.crash_point.startswith("before-"):
        # aborted by the coordinator's timeout: the epoch was bumped to fence the producer
        assert states[-1][2] > states[3][2], states

    # the LSO moves past the transaction
    hw = end_offsets(b.bootstrap, tps, committed=False)
    lso = wait_until(lambda: (o := end_offsets(b.bootstrap, tps, committed=True)) == hw and o, 10,
                     msg=f"LSO == high watermark {hw}")
    for tp in tps:
        assert lso[tp] == hw[tp]

    # every partition: the crashed transaction ends with exactly one marker of its
    # outcome, except that partitions marked before the crash may get the same marker
    # again when the restarted coordinator re-sends them all (as Kafka does: a marker
    # for a producer with no open transaction is appended, empty and harmless)
    pid = states[0][1]
    want_marker = COMMIT if case.committed else ABORT
    marker_kinds = check_markers(b, tps, pid, [COMMIT], want_marker, case.markers_before_crash)
    for tp in tps:
        # first transaction + its marker, crashed transaction + its marker(s)
        assert hw[tp] == 2 * PER_PARTITION + 1 + len(marker_kinds[tp]), (tp, hw)
    if not case.committed:
        for t, part in tps:
            aborted = [e for e in txn_index_on_disk(b, t, part) if e[0] == pid]
            assert len(aborted) == 1, f"{t}-{part}: .txnindex entries {aborted}"

    # read_committed: the earlier commit, plus the crashed one iff committed; no duplicate
    expected = {tp: first[tp] + (crashed[tp] if case.committed else []) for tp in tps}
    assert consume(b.bootstrap, tps, "read_committed") == expected
    assert consume(b.bootstrap, tps, "read_uncommitted") == {tp: first[tp] + crashed[tp] for tp in tps}
    if with_offsets:  # the group's offset followed the transaction: 2 if committed, else still 1
        assert committed_offset(b, tid, tps[0]) == (2 if case.committed else 1)

    # 4. the broker keeps serving transactions: a new producer with the same id commits
    p2 = txn_producer(b.bootstrap, tid, 10000)
    init_with_retries(p2)
    p2.begin_transaction()
    after = produce_all(p2, tps, "after")
    p2.commit_transaction(15)
    p2.close()
    expected = {tp: expected[tp] + after[tp] for tp in tps}
    wait_until(lambda: end_offsets(b.bootstrap, tps, committed=True)
               == end_offsets(b.bootstrap, tps, committed=False), 10, msg="LSO after new commit")
    assert consume(b.bootstrap, tps, "read_committed") == expected
    final = txn_states(b, tid)
    assert final[-1][0] == "CompleteCommit" and final[-1][1] == pid, final[-3:]

    # 5. and after a clean restart everything is still as it was
    b.restart()
    assert consume(b.bootstrap, tps, "read_committed") == expected
    if with_offsets:
        assert committed_offset(b, tid, tps[0]) == (2 if case.committed else 1)
    b.stop()
    assert check_markers(b, tps, pid, [COMMIT], want_marker, case.markers_before_crash, [COMMIT]) \
        == marker_kinds
    for t, part in tps:
        # no batch appended twice (a producer retry is deduplicated by sequence)
        ids = [(pid_, epoch, seq) for _base, pid_, epoch, seq in data_batches_on_disk(b, t, part)]
        assert len(ids) == len(set(ids)), f"{t}-{part}: duplicate data batches {ids}"


def committed_offset(b: BrokerProcess, group: str, tp: tuple[str, int]) -> int:
    """The group's stable committed offset of `tp` (OffsetFetch v7 require_stable, retried while
    a transaction's offsets are still pending)."""
    from protocol.messages import REQUESTS

    req = REQUESTS[9](group_id=group, require_stable=True, topics=[
        REQUESTS[9].OffsetFetchRequestTopic(name=tp[0], partition_indexes=[tp[1]])])

    def fetch() -> int | None:
        with WireClient(b.port) as c:
            part = c.call(req, 7).topics[0].partitions[0]
        return None if part.error_code == UNSTABLE_OFFSET_COMMIT else int(part.committed_offset)

    return int(wait_until(lambda: (o := fetch()) is not None and o, 10, msg=f"stable offset of {group}"))


def point_before_reply(crash_point: str) -> bool:
    """Crash points on the EndTxn path before its answer: the client must see an error."""
    return crash_point.startswith(("before-txn-log-Prepare", "after-txn-log-Prepare"))


def test_a_torn_txnindex_after_kill9_is_rebuilt_and_aborted_data_stays_hidden(
    broker_factory: BrokerFactory,
) -> None:
    """A broker killed with an aborted-transaction index entry cut short (as a write on a
    full disk leaves it; seed 87's n3 then crashed at every start) starts, rebuilds the index
    from the segment's markers, and read_committed consumers still never see the aborted
    records."""
    b = broker_factory({"transaction.state.log.num.partitions": TXN_STATE_PARTITIONS})
    topic = unique_topic("torn-txnindex")
    tps = [(topic, 0)]
    create_topics(b.bootstrap, [topic], 1)
    p = txn_producer(b.bootstrap, unique_topic("torn-tid"), 60000)
    init_with_retries(p)
    p.begin_transaction()
    produce_all(p, tps, "aborted")
    p.abort_transaction(15)
    p.begin_transaction()
    committed = produce_all(p, tps, "committed")
    p.commit_transaction(15)
    index = txn_index_on_disk(b, topic, 0)
    assert len(index) == 1, index
    b.kill9()
    [txnindex] = segment_files(b.partition_dir(topic, 0), ".txnindex")
    with open(txnindex, "ab") as f:
        f.write(b"\x00" * 8)  # part of a second entry
    b.start()
    assert consume(b.bootstrap, tps, "read_committed") == committed
    assert txn_index_on_disk(b, topic, 0) == index and txnindex.stat().st_size == 34
    assert "Traceback" not in b.log_text()
