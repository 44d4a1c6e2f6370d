"""Flink 2.2's exactly-once KafkaSource and KafkaSink (connector 5.0.0-2.2) under kill -9, on one
Gregor broker and on one Apache Kafka node, and on three of each (eos_targets.three_brokers) with
a broker killed too: the same job, the same faults, the same checks.

The job (tests/integration/java/FlinkEos.java, jars from `make flink-deps`) runs on a MiniCluster
inside its own JVM: KafkaSource reading `in` read_committed (between its records, aborted
transactions the job must not see), a running count per key in keyed state, KafkaSink with
DeliveryGuarantee.EXACTLY_ONCE writing "COUNT,SEQ" to `out`; a checkpoint every second,
retained. While input arrives, the JVM is killed with kill -9 at random points after a
checkpoint (twice, or EOS_KILLS times: `make flink-long`, `make eos-apps`) and started again, restoring
from the newest complete checkpoint: the connector fences the killed attempt's transactions (the
default naming strategy by probing, InitProducerId per possible transactional id; POOLING,
killed half as often, by DescribeProducers and ListTransactions of the output's open
transactions, then InitProducerId of those) and commits the restored checkpoint's transactions
again with the producer id and epoch it stored (EndTxn without InitProducerId). Then, read back
read_committed: per key the counts 1..N in order, each with its input record's sequence number,
every input record exactly once (none of the aborted ones); no transaction of the job's prefix
still open (ListTransactions); and the committer met no answer but PRODUCER_FENCED.

On three brokers (topics of three replicas, the default naming): once the job completed a
checkpoint, the broker leading the output's partition 0 is killed with kill -9 while the job
writes on, and restarted on a thread; the job completes a checkpoint more, and is killed as above.

That recovery commit step by step (FlinkResume.java, the connector's own producer class): a
commit with the stored id and epoch, its retry, and the same after an InitProducerId came between.

And the setting every Flink user meets first: the connector's default transaction.timeout.ms
(one hour) above the broker's transaction.max.timeout.ms (15 minutes by default) fails the job
with Kafka's INVALID_TRANSACTION_TIMEOUT on both brokers."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.eos_targets import (
    KAFKA_FAILOVER,
    NAMES,
    Target,
    kills,
    leader_of,
    tally,
    three_brokers,
)
from tests.integration.harness import JAVA_DIR, REPO_ROOT, java_classes, started_broker, wait_until
from tests.integration.kafka import require_kafka, started_kafka
from tests.integration.test_streams_eos import read_committed
from tests.integration.wire import WireClient

FLINK_DEPS = REPO_ROOT / ".deps" / "flink"  # scripts/kafka/flink-pom.xml
PARTITIONS = 2  # the job's parallelism too (FlinkEos.java's default)
KEYS = [f"k{i}" for i in range(6)]
RATE = 100  # input records a second, arriving while the job is killed
KILLS = kills(2)  # `make flink-long`, `make eos-apps`: more
# The sink's naming strategies: INCREMENTING (the default: a new transactional id per checkpoint,
# lingering ones fenced by probing) killed KILLS times, POOLING (ids reused, lingering ones found
# by DescribeProducers and ListTransactions) half as often, as it adds only that search.
NAMINGS = {"INCREMENTING": KILLS, "POOLING": max(1, KILLS // 2)}
SEED = 58
ABORT_EVERY_S = 0.5  # an aborted transaction of the input's (AbortedFeed)
# Kafka's message of INVALID_TRANSACTION_TIMEOUT (Errors.java), which the Java client's
# InitProducerId handler puts in the KafkaException it fails initTransactions with.
INVALID_TRANSACTION_TIMEOUT = ("The transaction timeout is larger than the maximum value allowed by the "
                               "broker (as configured by transaction.max.timeout.ms).")
OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort"}
# Both brokers: one partition per internal topic, no rebalance delay; transaction.max.timeout.ms
# stays at Kafka's default (15 minutes).
BROKER_CONFIG: dict[str, object] = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
}
# The sink's producers: transactions of a minute, within the broker's maximum.
SINK_CONFIG = {"transaction.timeout.ms": "60000"}
JVM = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
       "-Dorg.slf4j.simpleLogger.log.org.apache.flink.connector.kafka=warn"]

FAILURES: dict[str, list[str]] = {}  # broker -> the causes of the job's failure
RESUMES: dict[str, list[str]] = {}  # broker -> FlinkResume's outcomes
RECOMMITS: dict[tuple[str, str], set[str]] = {}  # (broker, naming) -> what recovery commits met
# The one answer a restore's commit may meet: the restored checkpoint's transactions were
# committed before the kill, and the restarted writer's InitProducerId of the same ids came
# between (FlinkResume's AFTER_INIT), so the stored epoch is fenced; the committer logs it and
# goes on.
FENCED = "org.apache.kafka.common.errors.ProducerFencedException"


@pytest.fixture(scope="module")
def gregor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with started_broker(tmp_path_factory.mktemp("flink-gregor"), BROKER_CONFIG) as broker:
        yield broker.bootstrap


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_kafka()
    with started_kafka(tmp_path_factory.mktemp("flink-kafka"), BROKER_CONFIG) as node:
        yield node.bootstrap


@pytest.fixture(params=["gregor", "kafka"])
def target(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(broker name, bootstrap), one module-wide broker of each kind."""
    return request.param, str(request.getfixturevalue(request.param))


@pytest.fixture(params=NAMES)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """Three brokers of each kind (eos_targets.three_brokers), one test at a time."""
    with three_brokers(request.param, tmp_path, BROKER_CONFIG, {**BROKER_CONFIG, **KAFKA_FAILOVER}) as found:
        yield found


@pytest.fixture(scope="module")
def flink_classes() -> Path:
    """FlinkEos.java compiled against the Flink jars (fails, never skips, without them)."""
    if not (FLINK_DEPS / ".installed").exists():
        pytest.fail(f"Flink not installed in {FLINK_DEPS} (run `make flink-deps`)")
    return java_classes(JAVA_DIR / "FlinkEos.java", jars=FLINK_DEPS)


class Job:
    """One FlinkEos process at a time over one checkpoint dir; its stdout in `job.out`."""

    def __init__(self, bootstrap: str, classes: Path, workdir: Path, settings: dict[str, str]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.out = workdir / "job.out"
        self.checkpoints = workdir / "checkpoints"
        self.command = [
            "java", *JVM, "-cp", f"{classes}{os.pathsep}{FLINK_DEPS}/*", "FlinkEos",
            bootstrap, str(self.checkpoints), *(f"{k}={v}" for k, v in settings.items()),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.out, "ab") as out:
            out.write(f"===== start #{self.starts}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.out.parent)

    def lines(self, prefix: str) -> list[str]:
        """The lines of the current start that begin with `prefix`, without it."""
        text = self.out.read_text(errors="replace").rsplit("===== start #", 1)[-1]
        return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]

    def running(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.tail()
        return "RUNNING" in self.lines("STATE ")

    def newest_checkpoint(self) -> int:
        """The highest checkpoint number with its metadata written, of any start (0: none)."""
        done = [int(p.parent.name[4:]) for p in self.checkpoints.glob("*/chk-*/_metadata")]
        return max(done, default=0)

    def commit_errors(self) -> set[str]:
        """The exceptions the connector's committer logged, over every start: the line after its
        "Unable to commit transaction" or "data has been potentially lost"."""
        lines = self.out.read_text(errors="replace").splitlines()
        return {after.split(":", 1)[0] for line, after in zip(lines, lines[1:], strict=False)
                if "KafkaCommitter" in line and "ERROR" in line}

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def tail(self, lines: int = 40) -> str:
        text = [line for line in self.out.read_text(errors="replace").splitlines()
                if "Name collision" not in line][-lines:]
        return f"--- {self.out} ---\n" + "\n".join(text)


# -- input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    key: str
    seq: int


class InputFeed:
    """Records "KEY,SEQ" at RATE a second, idempotent and keyed, on a thread until `stop()`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5})
        self.topic = topic
        self.sent: list[Input] = []
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flink-input", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(SEED)
        start = time.monotonic()
        while not self.done.is_set():
            seq = len(self.sent)
            if (delay := start + seq / RATE - time.monotonic()) > 0:
                time.sleep(delay)
            r = Input(rng.choice(KEYS), seq)
            self.producer.produce(self.topic, f"{r.key},{r.seq}", key=r.key,
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


class AbortedFeed:
    """Transactions of one record "KEY,-1" per key, each aborted, every ABORT_EVERY_S on a thread
    until `stop()`, between the input's records: the source reads read_committed, so none may
    reach the job (a count would rise for it, and "-1" is no input's sequence number)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"aborted-{uuid.uuid4().hex[:6]}"})
        self.producer.init_transactions(30)
        self.topic = topic
        self.aborted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flink-aborted", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(ABORT_EVERY_S):
            self.producer.begin_transaction()
            for key in KEYS:
                self.producer.produce(self.topic, f"{key},-1", key=key)
            self.producer.flush(30)
            self.producer.abort_transaction(30)
            self.aborted += 1

    def stop(self) -> int:
        """How many transactions were aborted."""
        self.done.set()
        self.thread.join(60)
        return self.aborted


def create_topics(bootstrap: str, *names: str, replicas: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, PARTITIONS, replicas) for t in names]
    for f in admin.create_topics(topics, operation_timeout=20).values():
        f.result(30)


# -- the checks ------------------------------------------------------------------------


def expected(records: list[Input]) -> dict[str, list[str]]:
    """Per key, "COUNT,SEQ" for each of its records in input order: counts 1..N."""
    out: dict[str, list[str]] = {}
    for r in records:
        values = out.setdefault(r.key, [])
        values.append(f"{len(values) + 1},{r.seq}")
    return out


def by_key(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


def output_done(bootstrap: str, topic: str, want: dict[str, list[str]]) -> bool:
    got = by_key(read_committed(bootstrap, topic))
    return all(len(got.get(k, [])) >= len(v) for k, v in want.items())


def open_transactions(bootstrap: str, prefix: str) -> dict[str, str]:
    """The job's transactional ids the coordinators list in an open state (ListTransactions v0 to
    every broker of `bootstrap`)."""
    from protocol.messages import REQUESTS

    found: dict[str, str] = {}
    for address in bootstrap.split(","):
        with WireClient(int(address.rsplit(":", 1)[1])) as c:
            resp = c.call(REQUESTS[66](version=0, state_filters=[], producer_id_filters=[]), 0)
        assert resp.error_code == 0, resp
        found.update((s.transactional_id, s.transaction_state) for s in resp.transaction_states
                     if s.transactional_id.startswith(f"{prefix}-") and s.transaction_state in OPEN_STATES)
    return found


def check_exactly_once(bootstrap: str, topic: str, want: dict[str, list[str]]) -> None:
    """Every input record once, per key in order, its count one more than the one before."""
    got = by_key(read_committed(bootstrap, topic))
    assert set(got) == set(want), (sorted(got), sorted(want))
    for key, values in want.items():
        assert got[key] == values, f"{key}: {first_difference(got[key], values)}"


def first_difference(got: list[str], want: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"record {i}: {a!r} where {b!r} was expected"
    return f"{len(got)} records where {len(want)} were expected"


# -- the tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One kill scenario: the broker (or cluster) it runs on, the sink's naming, the kills."""

    broker: str  # its name in the results: "gregor" or "kafka"
    bootstrap: str
    naming: str
    kills: int
    replicas: int = 1  # of the job's topics
    # A broker's kill -9 and restart on a thread (three_brokers' Target.bounce): at the first
    # kill, the leader of the output's partition 0 is killed while the job runs
    bounce: Callable[[int], threading.Thread] | None = None

    @property
    def application(self) -> str:
        return f"flink {self.naming}" + (", 3 brokers" if self.bounce else "")


@pytest.mark.parametrize("naming", list(NAMINGS))
def test_flink_exactly_once_under_kill9(
    target: tuple[str, str], naming: str, flink_classes: Path, tmp_path: Path
) -> None:
    name, bootstrap = target
    RECOMMITS[name, naming] = kill_scenario(Run(name, bootstrap, naming, NAMINGS[naming]),
                                            flink_classes, tmp_path)


def test_flink_exactly_once_under_kill9_three_brokers(
    cluster: Target, flink_classes: Path, tmp_path: Path
) -> None:
    """The same on three brokers (topics of three replicas), the leader of the output's partition
    0 killed with kill -9 while the job writes its transactions and restarted."""
    kill_scenario(Run(cluster.name, cluster.bootstrap, "INCREMENTING", KILLS, 3, cluster.bounce),
                  flink_classes, tmp_path)


def kill_scenario(run: Run, classes: Path, workdir: Path) -> set[str]:
    """The job killed `run.kills` times while input arrives, then the output checked; the
    exceptions the committer logged (at most PRODUCER_FENCED)."""
    bootstrap, tag = run.bootstrap, uuid.uuid4().hex[:6]
    source, sink, prefix = f"in-{tag}", f"out-{tag}", f"flink-{tag}"
    create_topics(bootstrap, source, sink, replicas=run.replicas)
    job = Job(bootstrap, classes, workdir / "job",
              {"in": source, "out": sink, "prefix": prefix, "naming": run.naming, **SINK_CONFIG})
    rng = random.Random(SEED)
    t0 = time.monotonic()
    restart: threading.Thread | None = None

    def lap(what: str) -> None:  # the timeline, in a failure's report (or with -s)
        print(f"{run.broker} {run.application} {time.monotonic() - t0:6.1f}s {what}")

    feed = InputFeed(bootstrap, source)
    aborted = AbortedFeed(bootstrap, source)
    try:
        for kill in range(run.kills + 1):
            before = job.newest_checkpoint()
            job.start()
            wait_until(job.running, 60, 0.1, f"the job RUNNING (start #{job.starts})")
            lap(f"start #{job.starts} RUNNING, restored from {job.lines('RESTORE ')}")
            if kill > 0:  # each restart restores the newest checkpoint, unless one was cut short
                restored = job.lines("RESTORE ")[0]
                assert restored.endswith(f"/chk-{before}") or job.lines("SKIP "), job.tail()
            if kill == run.kills:
                break
            # killed once it completed a checkpoint, at a random point after
            wait_for_checkpoint(job, before)
            if kill == 0 and run.bounce is not None:  # first a broker, the job writing on
                leader = leader_of(bootstrap, sink)
                restart = run.bounce(leader)
                lap(f"broker {leader} (leader of {sink}-0) killed")
                wait_for_checkpoint(job, job.newest_checkpoint())
            time.sleep(rng.uniform(0.0, 2.5))
            job.kill9()
            lap(f"kill {kill + 1}")
        if restart is not None:
            restart.join()
        records = feed.stop()
        want = expected(records)
        lap(f"input stopped: {len(records)} records, {aborted.stop()} transactions aborted")
        wait_until(lambda: job.running() and output_done(bootstrap, sink, want), 60, 0.5,
                   "every record in the output")
        lap("output complete")
        out = [v.split(",", 1)[1] for _k, v in read_committed(bootstrap, sink)]
        faults = (run.kills, 0 if run.bounce is None else 1)
        lap(f"{tally(run.application, run.broker, faults, (str(r.seq) for r in records), out)}")
        check_exactly_once(bootstrap, sink, want)
        assert open_transactions(bootstrap, prefix) == {}
        errors = job.commit_errors()
        assert errors <= {FENCED}, job.tail()
        return errors
    except BaseException:
        print(job.tail())
        raise
    finally:
        feed.done.set()
        aborted.done.set()
        job.kill9()


def wait_for_checkpoint(job: Job, after: int) -> None:
    """Until the running job completed a checkpoint numbered above `after`."""
    wait_until(lambda: job.running() and job.newest_checkpoint() > after, 60, 0.1,
               f"a checkpoint of start #{job.starts} after {after}")


def test_transaction_timeout_above_broker_max(
    target: tuple[str, str], flink_classes: Path, tmp_path: Path
) -> None:
    """No transaction.timeout.ms: the connector's hour against the broker's 15 minutes."""
    name, bootstrap = target
    run = uuid.uuid4().hex[:6]
    create_topics(bootstrap, f"in-{run}", f"out-{run}")
    job = Job(bootstrap, flink_classes, tmp_path / "job",
              {"in": f"in-{run}", "out": f"out-{run}", "prefix": f"flink-{run}"})
    try:
        job.start()
        wait_until(job.exited, 90, 0.2, "the job failing")
        assert job.proc is not None and job.proc.returncode == 1, job.tail()
        causes = job.lines("FAILED ")  # the Java client names INVALID_TRANSACTION_TIMEOUT by its message
        assert any(line.endswith(INVALID_TRANSACTION_TIMEOUT) for line in causes), job.tail()
        FAILURES[name] = causes
    finally:
        job.kill9()


def test_resumed_transaction_commit(target: tuple[str, str], tmp_path: Path) -> None:
    """The recovery commit of a checkpoint's transaction, by the connector's own producer class:
    committed with the stored producer id and epoch (EndTxn without InitProducerId), then refused
    as fenced when committed again, and again once an InitProducerId of its id came between (what a
    restore's committer meets when the transaction was committed before the kill). The Java
    client, learning of transaction version 2 at its commit, bumps the epoch after it: the second
    commit's stored epoch is already fenced (FlinkResume.java says why that is the same each run)."""
    name, bootstrap = target
    topic, tid = f"resume-{uuid.uuid4().hex[:6]}", f"flink-resume-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, topic)
    classes = java_classes(JAVA_DIR / "FlinkResume.java", jars=FLINK_DEPS)
    done = subprocess.run(["java", *JVM, "-cp", f"{classes}{os.pathsep}{FLINK_DEPS}/*", "FlinkResume",
                           bootstrap, topic, tid], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = [line for line in done.stdout.splitlines()
                if line.startswith(("COMMIT ", "RECOMMIT ", "AFTER_INIT "))]
    assert outcomes == ["COMMIT ok", f"RECOMMIT {FENCED}", f"AFTER_INIT {FENCED}"], done.stdout + done.stderr
    assert [v for _, v in read_committed(bootstrap, topic)] == ["resumed"]
    assert open_transactions(bootstrap, "flink-resume") == {}
    RESUMES[name] = outcomes


def test_both_brokers_alike() -> None:
    """The job failed the same way on both brokers, and recovery commits met the same answers."""
    for outcome in (FAILURES, RESUMES):
        assert set(outcome) == {"gregor", "kafka"}, f"a run did not finish: {sorted(outcome)}"
        assert outcome["gregor"] == outcome["kafka"]
    assert len(RECOMMITS) == 4, f"a run did not finish: {sorted(RECOMMITS)}"
