"""Kafka Streams 4.3.1 with processing.guarantee=exactly_once_v2 under kill -9, on Gregor's three
brokers and on Apache Kafka's three nodes: the same application, the same faults, the same checks.

The application (tests/integration/java/StreamsEos.java, jars from `make streams-deps`) repartitions
its input (`selectKey`), joins it with a KTable, keeps a count and sum per key in RocksDB (a
changelog topic) and counts per key in tumbling windows. Two instances run it with two stream
threads each and a standby replica per task; instance b (static membership, `group.instance.id`) is
killed with kill -9 at random points once it processed, while input arrives, and restarted on its
state directory (the last time wiped: a restore from the changelogs under a new process id); once,
the broker leading a partition of the aggregate's changelog is killed with kill -9 too and
restarted. Then, read back read_committed:

- `totals`: per key the counts 1, 2, ... N (the cache is off: one update per record) with the sums
  of the input so far, ending at the exact count and sum of the input: a record processed twice
  or lost shows as a count repeated, skipped or wrong at the end;
- `joined`: every input record once, its amount times the key's factor;
- `windows`: per key and window the counts 1..n, n the records of that window: none counted twice.

And what Streams asked of the broker: its internal topics created with Streams' configs
(DescribeConfigs: `cleanup.policy=compact` on changelogs, `segment.bytes` and
`message.timestamp.type` on repartition topics, the same set on both brokers), the repartition
topics purged after commits (DeleteRecords: their log start offsets moved), one transactional id
per stream thread (ListTransactions)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, OffsetSpec

from tests.integration.eos_targets import (
    KAFKA_FAILOVER,
    NAMES,
    Target,
    kills,
    leader_of,
    tally,
    three_brokers,
)
from tests.integration.harness import JAVA_DIR, REPO_ROOT, java_classes, wait_until
from tests.integration.wire import WireClient

STREAMS_DEPS = REPO_ROOT / ".deps" / "streams"  # scripts/kafka/streams-pom.xml
APP = "streams-eos"
PARTITIONS = 2
KEYS = [f"k{i}" for i in range(8)]
RATE = 80  # input records a second, arriving while instance b is killed
# The second kill also kills a broker, the last one wipes b's state directory; `make eos-apps`:
# EOS_KILLS.
KILLS = kills(3, least=2)
WINDOW_MS = 2000  # StreamsEos.WINDOW_MS
STEP_MS = 25  # event time between two input records
SEED = 58

# Both clusters: small internal topics, no rebalance delay, sessions of 2 s, a timed-out
# transaction aborted within a second.
BROKER_CONFIG: dict[str, object] = {
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}
KAFKA_CONFIG = {**BROKER_CONFIG, **KAFKA_FAILOVER}
# The application's settings beyond StreamsEos.java's own (exactly_once_v2, two threads).
STREAMS_CONFIG = {
    "statestore.cache.max.bytes": "0",  # every update downstream: counts rise by one
    "commit.interval.ms": "100",
    "repartition.purge.interval.ms": "500",
    "session.timeout.ms": "2000",
    "heartbeat.interval.ms": "500",
    # A wiped instance's open transactions end by this timeout. Not shorter: a transaction open
    # while the killed broker was its coordinator must outlive the coordinator's failover, or
    # Kafka aborts it and answers the commit INVALID_TXN_STATE, fatal to Streams (KAFKA-20785;
    # Gregor answers PRODUCER_FENCED, which Streams survives): Kafka 4.4.0's did at 5 s in CI
    "transaction.timeout.ms": "15000",
    "num.standby.replicas": "1",  # standby tasks restoring from the changelogs
    "retry.backoff.ms": "100",
}
# The Java client's partitioner (murmur2), as Streams partitions its repartition topics: the table
# `factors` is co-partitioned with the stream it joins.
PRODUCER: dict[str, object] = {"enable.idempotence": True, "partitioner": "murmur2_random"}
JVM = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


@dataclass(frozen=True)
class Outcome:
    """What a run leaves for the comparison of both brokers."""

    topic_configs: dict[str, dict[str, str]]  # internal topic -> the configs Streams set
    records: int


OUTCOMES: dict[str, Outcome] = {}


@pytest.fixture(params=NAMES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    with three_brokers(request.param, tmp_path, BROKER_CONFIG, KAFKA_CONFIG) as found:
        yield found


@pytest.fixture(scope="module")
def streams_classes() -> Path:
    """StreamsEos.java compiled against the Streams jars (fails, never skips, without them)."""
    if not (STREAMS_DEPS / ".installed").exists():
        pytest.fail(f"Kafka Streams not installed in {STREAMS_DEPS} (run `make streams-deps`)")
    return java_classes(JAVA_DIR / "StreamsEos.java", jars=STREAMS_DEPS)


class Instance:
    """One StreamsEos process: its state directory and its stdout (the STATE lines) under `workdir`."""

    def __init__(
        self, name: str, bootstrap: str, classes: Path, workdir: Path, extra: dict[str, str]
    ) -> None:
        self.name = name
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.out = workdir / "streams.out"
        config = {**STREAMS_CONFIG, **extra}
        self.command = [
            "java", *JVM, "-cp", f"{classes}{os.pathsep}{STREAMS_DEPS}/*", "StreamsEos",
            bootstrap, APP, str(workdir / "state"), *(f"{k}={v}" for k, v in config.items()),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.out, "ab") as out:
            out.write(f"===== start #{self.starts}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.workdir)

    def states(self) -> list[str]:
        """The STATE lines of the current start."""
        text = self.out.read_text(errors="replace").rsplit("===== start #", 1)[-1]
        return [line.split()[1] for line in text.splitlines() if line.startswith("STATE ")]

    def running(self) -> bool:
        states = self.states()
        assert "ERROR" not in states and self.proc is not None and self.proc.poll() is None, self.tail()
        return bool(states) and states[-1] == "RUNNING"

    def has_run(self) -> bool:
        """The current start reached RUNNING (it may be rebalancing again since)."""
        self.running()
        return "RUNNING" in self.states()

    def thread_names(self) -> set[str]:
        """The stream threads' names of every start (StreamsEos prints them once RUNNING)."""
        text = self.out.read_text(errors="replace")
        return {line.split()[1] for line in text.splitlines() if line.startswith("THREAD ")}

    def wipe(self) -> None:
        """Delete the state directory (the stores and the process id), as a lost disk."""
        shutil.rmtree(self.workdir / "state")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        """SIGTERM: Streams closes (commits, leaves the group); killed after 30 s."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def tail(self, lines: int = 40) -> str:
        text = self.out.read_text(errors="replace").splitlines()[-lines:]
        return f"--- instance {self.name} ({self.out}) ---\n" + "\n".join(text)


# -- input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    key: str
    amount: int
    seq: int
    ts: int


def factor(key: str) -> int:
    return int(key[1:]) % 3 + 1


class InputFeed:
    """Input records at RATE a second, idempotent and keyed, on a thread, until `stop()`; each
    one's event time STEP_MS after the one before, so the test knows every window."""

    def __init__(self, bootstrap: str, base_ts: int) -> None:
        self.producer = Producer({**PRODUCER, "bootstrap.servers": bootstrap, "linger.ms": 5})
        self.base_ts = base_ts
        self.sent: list[Input] = []
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="streams-input")
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(SEED)
        start = time.monotonic()
        while not self.done.is_set():
            seq = len(self.sent)
            if (delay := start + seq / RATE - time.monotonic()) > 0:
                time.sleep(delay)
            r = Input(rng.choice(KEYS), rng.randint(1, 100), seq, self.base_ts + seq * STEP_MS)
            self.producer.produce("in", f"{r.key},{r.amount},{r.seq}", key=r.key, timestamp=r.ts,
                                  on_delivery=lambda err, _m: err and self.errors.append(str(err)))
            self.producer.poll(0)
            self.sent.append(r)

    def stop(self) -> list[Input]:
        """Every record sent, once all are acknowledged."""
        self.done.set()
        self.thread.join()
        assert self.producer.flush(30) == 0, "input still queued after 30 s"
        assert not self.errors, self.errors
        return self.sent


def create_topics(bootstrap: str, base_ts: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = ["in", "factors", "joined", "totals", "windows"]
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in names], operation_timeout=20)
    for f in futures.values():
        f.result(30)
    p = Producer({**PRODUCER, "bootstrap.servers": bootstrap})
    for key in KEYS:  # older than every input record: the join finds its factor
        p.produce("factors", str(factor(key)), key=key, timestamp=base_ts - 1000)
    assert p.flush(30) == 0


# -- reading back ------------------------------------------------------------------


def read_committed(bootstrap: str, topic: str, timeout: float = 30) -> list[tuple[str, str]]:
    """(key, value) of every committed record of `topic`, each partition in offset order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list[tuple[str, str]] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {at_eof} within {timeout}s"
            msg = c.poll(0.2)
            if msg is None:
                continue
            if (err := msg.error()) is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_eof.add(int(msg.partition() or 0))
                continue
            at_eof.discard(int(msg.partition() or 0))
            got.append((bytes(msg.key() or b"").decode(), bytes(msg.value() or b"").decode()))
        return got
    finally:
        c.close()


def expected_totals(records: list[Input]) -> dict[str, list[str]]:
    """Per key, the "COUNT,SUM" after each of its records in input order."""
    out: dict[str, list[str]] = {}
    sums: dict[str, int] = {}
    for r in records:
        sums[r.key] = sums.get(r.key, 0) + r.amount * factor(r.key)
        out.setdefault(r.key, []).append(f"{len(out[r.key]) + 1},{sums[r.key]}")
    return out


def expected_windows(records: list[Input]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        name = f"{r.key}@{r.ts - r.ts % WINDOW_MS}"
        counts[name] = counts.get(name, 0) + 1
    return counts


def by_key(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


def totals_done(bootstrap: str, want: dict[str, list[str]]) -> bool:
    got = by_key(read_committed(bootstrap, "totals"))
    return all(got.get(k, [""])[-1] == v[-1] for k, v in want.items())


# -- what Streams asked of the broker --------------------------------------------------


def internal_topics(admin: AdminClient) -> list[str]:
    names = admin.list_topics(timeout=10).topics
    return sorted(t for t in names if t.startswith(f"{APP}-") and t.endswith(("-repartition", "-changelog")))


def dynamic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The configs set on each topic (DescribeConfigs, source DYNAMIC_TOPIC_CONFIG)."""
    futures = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    out = {}
    for resource, f in futures.items():
        entries = f.result(15).values()
        out[resource.name] = {e.name: str(e.value) for e in entries
                              if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def log_start_offsets(admin: AdminClient, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition (log start offset, high watermark)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps})  # type: ignore[no-untyped-call]
    latest = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})  # type: ignore[no-untyped-call]
    return {tp.partition: (earliest[tp].result(15).offset, latest[tp].result(15).offset) for tp in tps}


def list_transactions(bootstrap: str) -> set[str]:
    """The transactional ids every broker's coordinator lists (ListTransactions v0, no filters)."""
    from protocol.messages import REQUESTS

    found: set[str] = set()
    for address in bootstrap.split(","):
        with WireClient(int(address.rsplit(":", 1)[1])) as c:
            resp = c.call(REQUESTS[66](version=0, state_filters=[], producer_id_filters=[]), 0)
        assert resp.error_code == 0, resp
        found.update(s.transactional_id for s in resp.transaction_states)
    return found


def progress(bootstrap: str) -> str:
    """For a failure's report: the group's committed offsets beside each input's end offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = ["in", *(t for t in internal_topics(admin) if t.endswith("-repartition")),
                  "totals", "joined", "windows"]
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(APP, tps)])
        got = {(tp.topic, tp.partition): tp.offset for tp in committed[APP].result(15).topic_partitions}
        lines = ["topic-partition: committed / LSO / HW"]
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps},  # type: ignore[no-untyped-call]
                                      isolation_level=level)
            for tp, f in ends.items():
                got.setdefault((tp.topic, tp.partition, level.value), f.result(15).offset)  # type: ignore[arg-type]
        for tp in tps:
            key = (tp.topic, tp.partition)
            lines.append(f"{tp.topic}-{tp.partition}: {got.get(key)} / "
                         f"{got.get((*key, IsolationLevel.READ_COMMITTED.value))} / "
                         f"{got.get((*key, IsolationLevel.READ_UNCOMMITTED.value))}")
        return "\n".join(lines)
    except Exception as e:  # a report, not a check
        return f"progress: {e!r}"


# -- the test --------------------------------------------------------------------------


def test_streams_exactly_once_under_kill9(target: Target, streams_classes: Path, tmp_path: Path) -> None:
    bootstrap = target.bootstrap
    base_ts = (int(time.time() * 1000) // WINDOW_MS) * WINDOW_MS
    create_topics(bootstrap, base_ts)
    a = Instance("a", bootstrap, streams_classes, tmp_path / "a", {})
    b = Instance("b", bootstrap, streams_classes, tmp_path / "b", {"group.instance.id": "b"})
    rng = random.Random(SEED)
    t0 = time.monotonic()

    def lap(what: str) -> None:  # the timeline, in a failure's report (or with -s)
        print(f"{target.name} {time.monotonic() - t0:6.1f}s {what}")

    try:
        a.start()
        b.start()
        wait_until(lambda: a.running() and b.running(), 60, 0.2, "both instances RUNNING")
        lap("both RUNNING")
        feed = InputFeed(bootstrap, base_ts)
        for kill in range(1, KILLS + 1):
            wait_until(b.has_run, 60, 0.1, f"instance b RUNNING (start #{b.starts})")
            time.sleep(rng.uniform(0.2, 2.5))
            lap(f"kill {kill}")
            b.kill9()
            if kill == 2:  # and the broker leading a changelog partition, while a commits
                leader = leader_of(bootstrap, f"{APP}-totals-changelog")
                broker_restart = target.bounce(leader)
                lap(f"broker {leader} (leader of {APP}-totals-changelog-0) killed")
            if kill == KILLS:
                b.wipe()  # restored from the changelogs, under a new process id
            time.sleep(rng.uniform(0.1, 1.0))
            b.start()
        wait_until(b.has_run, 60, 0.1, f"instance b RUNNING (start #{b.starts})")
        broker_restart.join()
        records = feed.stop()
        lap("input stopped")
        want = expected_totals(records)
        wait_until(lambda: a.running() and b.running() and totals_done(bootstrap, want), 60, 0.5,
                   "every key's total in the output")
        lap("output complete")
        a.stop()
        b.stop()
        lap("stopped")
        joined = [v.split(",", 1)[0] for _k, v in read_committed(bootstrap, "joined")]
        lap(f"{tally('streams', target.name, (KILLS, 1), (str(r.seq) for r in records), joined)}")
        check_output(bootstrap, records, want)
        configs = check_broker_side(bootstrap, a.thread_names() | b.thread_names())
        OUTCOMES[target.name] = Outcome(configs, len(records))
        lap("checked")
    except BaseException:
        print(a.tail(), b.tail(), target.log_tails(), progress(bootstrap), sep="\n")
        raise
    finally:
        a.stop()
        b.stop()


def check_output(bootstrap: str, records: list[Input], want: dict[str, list[str]]) -> None:
    totals = by_key(read_committed(bootstrap, "totals"))
    for key, values in want.items():
        assert totals.get(key) == values, f"totals of {key}: {totals.get(key)} != {values}"
    joined = by_key(read_committed(bootstrap, "joined"))
    want_joined = by_key([(r.key, f"{r.seq},{r.amount * factor(r.key)}") for r in records])
    assert joined == want_joined
    windows = by_key(read_committed(bootstrap, "windows"))
    for name, n in expected_windows(records).items():
        assert windows.get(name) == [str(i) for i in range(1, n + 1)], f"window {name}: {windows.get(name)}"


def check_broker_side(bootstrap: str, threads: set[str]) -> dict[str, dict[str, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = internal_topics(admin)
    configs = dynamic_configs(admin, topics)
    repartitions = [t for t in topics if t.endswith("-repartition")]
    changelogs = [t for t in topics if t.endswith("-changelog")]
    assert len(repartitions) == 2 and len(changelogs) == 3, topics
    for t in repartitions:
        assert configs[t].get("cleanup.policy") == "delete", (t, configs[t])
        assert configs[t].get("segment.bytes") == "52428800", (t, configs[t])
        assert configs[t].get("message.timestamp.type") == "CreateTime", (t, configs[t])
        offsets = log_start_offsets(admin, t)
        assert all(start > 0 for start, end in offsets.values() if end > 0), f"{t} never purged: {offsets}"
    for t in changelogs:
        assert configs[t].get("cleanup.policy", "").startswith("compact"), (t, configs[t])
        assert configs[t].get("message.timestamp.type") == "CreateTime", (t, configs[t])
    # EOS v2: one producer per stream thread, transactional id APPLICATION-PROCESS_ID-THREAD_INDEX
    # (the thread's name APPLICATION-PROCESS_ID-StreamThread-THREAD_INDEX); b's process id changed
    # with its wiped state directory.
    tids = {t for t in list_transactions(bootstrap) if t.startswith(f"{APP}-")}
    assert len(threads) == 6 and tids == {t.replace("-StreamThread-", "-") for t in threads}, (tids, threads)
    return configs


def test_both_brokers_alike() -> None:
    """Streams asked Gregor and Kafka for the same internal topics with the same configs."""
    assert set(OUTCOMES) == {"gregor", "kafka"}, f"a run did not finish: {sorted(OUTCOMES)}"
    assert OUTCOMES["gregor"].topic_configs == OUTCOMES["kafka"].topic_configs
