"""The transactional clients of a campaign (run by tests.chaos.workload on the clients' host):

- txn (confluent-kafka, process t1): transactions of 2-4 values on random partitions of `txn`,
  committed or (one in five) aborted;
- ctp (confluent-kafka, process x1): consume-transform-produce. A read_committed consumer of
  `txn` in its own group and a transactional producer: each polled batch (at most 10 records)
  becomes as many values on random partitions of `ctp`, and the consumed offsets are committed
  in the same transaction; one in five is aborted, after which (and after any failure) the
  consumer rewinds to the group's committed offsets. The transaction's reads are recorded with
  its writes, so the checker sees what it read (aborted and precommitted reads, G1c over
  write-read edges) and whether it consumed a value twice (exactly-once broken);
- java-txn / java-ctp (processes j1 / jx): the same two with the Java client 4.3
  (tests/chaos/java/ChaosTxn.java, one JVM), whose operations arrive as `OP <json>` lines
  and the calls it is in as `CALL` lines (`java_line`).

A commit that fails but whose abort then goes through is recorded as failed; one whose abort
fails too is unknown (info), and the producer is replaced (a new one fences the old). So is the
transformer's producer when its send_offsets_to_transaction still runs after SEND_OFFSETS_GIVE_UP_S
(its transaction failed: the producer left in that call never commits). What the
confluent-kafka clients see besides (an exception, an error a poll returned or a callback
reported, a rebalance, a poll of the transformer that returned nothing, a call still running
after BLOCKED_S) goes to the history's notes, counted per second, and each exception also to
the clients' log; of the Java clients, only their calls still running after BLOCKED_S.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tests.chaos.history import NO_OFFSET, Kind, Op, Outcome, ProcessId, Read, Write

PARTITIONS = 3
TXN, CTP = "txn", "ctp"
COMMON = {"socket.timeout.ms": 3000, "reconnect.backoff.max.ms": 500}
JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_DEPS = Path(__file__).resolve().parents[2] / ".deps" / "java4"
JAVA_WORKLOADS = ("java-txn", "java-ctp")
# a transformer that cannot read its group's offsets this long (to rewind, or to start fetching:
# librdkafka's consumer can wait for good on a coordinator it cached, librdkafka#5511) gets a new consumer
REWIND_GIVE_UP_S = 30.0
# librdkafka's send_offsets_to_transaction can wait far past its time-out for a group coordinator
# that went down or left the metadata (librdkafka#5456: the coordinator request's deadline is never
# checked; #5511): the transformer gives such a call up after this long, leaves it to its thread,
# and goes on with a new producer (which fences the old one) from the group's committed offsets
SEND_OFFSETS_GIVE_UP_S = 20.0


def java_missing() -> str | None:
    """Why the Java workloads cannot run here (None: they can)."""
    if shutil.which("java") is None:
        return "no `java` on PATH: the java-txn / java-ctp workloads need Java 17"
    if not (JAVA_DEPS / ".installed").exists():
        return f"Kafka Java client 4.3 not installed in {JAVA_DEPS} (run `make java-deps`)"
    return None


class Recorder(Protocol):
    """Where the clients' operations and notes go (tests.chaos.workload.Recorder)."""

    def add(self, op: Op) -> None: ...

    def note(self, process: str, what: str, name: str, detail: str) -> None: ...

    def calling(self, process: str, what: str) -> AbstractContextManager[None]: ...

    def call_began(self, process: str, what: str, since: float) -> None: ...

    def call_ended(self, process: str) -> None: ...


def now() -> float:
    return time.monotonic()


def log(rec: Recorder, name: str, what: str, exc: BaseException) -> None:
    """One line on the clients' log (the campaign's clients.log), with the monotonic time, and
    a note in the history."""
    print(f"{now():.3f} {name}: {what}: {exc}", file=sys.stderr, flush=True)
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    rec.note(name, what, error.name() if isinstance(error, KafkaError) else type(exc).__name__, str(exc))


def on_error(rec: Recorder, name: str, what: str) -> Any:
    """A librdkafka error_cb noting each error (a broker down, all brokers down, a time-out)."""
    return lambda err: rec.note(name, what, err.name(), err.str())


def client_of(rec: Recorder, name: str, what: str) -> dict[str, Any]:
    """The settings every client of process `name` has: COMMON, its errors noted as `what`, and
    `chaos-NAME` as client.id, so that librdkafka's log lines (`chaos-tc#consumer-8`) and the
    brokers' (`new idempotent producer id 2001 for client chaos-p2`) say whose they are."""
    return {"client.id": f"chaos-{name}", "error_cb": on_error(rec, name, what), **COMMON}


def note_errors(rec: Recorder, name: str, messages: list[Message]) -> list[Message]:
    """The messages of a consume() that are records; the errors among them are noted."""
    for m in messages:
        if (err := m.error()) is not None:
            rec.note(name, "consume", err.name(), f"{m.topic()}-{m.partition()}: {err.str()}")
    return [m for m in messages if m.error() is None]


def delivered_offset(msg: Message) -> int:
    """A delivered message's offset; NO_OFFSET when librdkafka knows none (offset() is None
    for any offset below 0). librdkafka delivers a message without one (-1001) when a later
    batch of its partition succeeded while the message's own request had failed with an
    outcome it cannot know (a time-out, a lost connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND):
    the later success proves it stored, but no answer gave its offset (rd_kafka_dr_implicit_ack,
    "implicitly acked by subsequent batch success"); so does an answer DUPLICATE_SEQUENCE_NUMBER,
    which Gregor never gives (a duplicate batch is answered with its first offset)."""
    offset = msg.offset()
    return offset if offset is not None and offset >= 0 else NO_OFFSET


class Abandoned(Exception):
    """A client call given up on while it still runs (its thread is left to end it)."""


def bounded(call: Callable[[], object], give_up_s: float) -> None:
    """`call` in a thread of its own, waited for `give_up_s`: its exception is raised here;
    Abandoned if it is still running then."""
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # re-raised in the caller's thread
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(give_up_s):
        raise Abandoned(f"still running after {give_up_s:.0f} s")
    if failed:
        raise failed[0]


def txn_producer(bootstrap: str, name: str, rec: Recorder, stop: threading.Event) -> Producer | None:
    """A producer whose InitProducerId went through (None if the run stopped first)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"chaos-{name}",
                         "transaction.timeout.ms": 10000, "message.timeout.ms": 8000,
                         **client_of(rec, name, "producer error")})
    while not stop.is_set():
        try:
            with rec.calling(name, "init_transactions"):
                producer.init_transactions(5)
            return producer
        except KafkaException as exc:
            log(rec, name, "init_transactions", exc)
    return None


class _Txn:
    """One transaction of a confluent-kafka producer: what it sent, where it landed, its end."""

    def __init__(self, name: str) -> None:
        self.name, self.invoked = ProcessId(name), now()
        self.keys: dict[str, tuple[str, int]] = {}
        self.offsets: dict[str, int] = {}
        self.reads: tuple[Read, ...] = ()

    def send(self, producer: Producer, topic: str, partition: int, value: str) -> None:
        self.keys[value] = (topic, partition)
        producer.produce(topic, value.encode(), partition=partition, on_delivery=self._delivered)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.offsets[msg.value().decode()] = delivered_offset(msg)

    def op(self, outcome: Outcome, commit_s: float) -> Op:
        writes = tuple(Write(key, v, self.offsets.get(v, NO_OFFSET) if outcome == Outcome.OK else NO_OFFSET)
                       for v, key in self.keys.items())
        return Op(self.name, Kind.TXN, self.invoked, now(), outcome, writes, self.reads, commit_s=commit_s)


def finish(producer: Producer, name: str, rec: Recorder, abort: bool) -> tuple[Outcome, float]:
    """Commit or abort; a failed commit is tried as an abort (raises on a fatal error)."""
    commit_s = now()
    try:
        if abort:
            with rec.calling(name, "abort_transaction"):
                producer.abort_transaction(10)
            return Outcome.FAIL, commit_s
        with rec.calling(name, "flush"):
            producer.flush(10)
        commit_s = now()
        with rec.calling(name, "commit_transaction"):
            producer.commit_transaction(10)
        return Outcome.OK, commit_s
    except KafkaException as exc:
        log(rec, name, "abort" if abort else "commit", exc)
        if exc.args[0].fatal():
            raise
        try:  # an abort that goes through means the commit never took effect
            with rec.calling(name, "abort_transaction"):
                producer.abort_transaction(10)
            return Outcome.FAIL, commit_s
        except KafkaException as again:
            log(rec, name, "abort", again)
            return (Outcome.FAIL if abort else Outcome.INFO), commit_s


def produce_txns(bootstrap: str, name: str, rec: Recorder, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    producer = txn_producer(bootstrap, name, rec, stop)
    n = 0
    while producer is not None and not stop.is_set():
        txn = _Txn(name)
        try:
            producer.begin_transaction()
            for i in range(rng.randint(2, 4)):
                txn.send(producer, TXN, rng.randrange(PARTITIONS), f"{name}-{n}-{i}")
            rec.add(txn.op(*finish(producer, name, rec, abort=rng.random() < 0.2)))
        except Exception as exc:  # fatal (confluent-kafka may raise SystemError from a callback then)
            log(rec, name, "transaction (fatal)", exc)
            rec.add(txn.op(Outcome.INFO, txn.invoked))
            producer = txn_producer(bootstrap, name, rec, stop)  # fatal: a new producer fences the old
        n += 1


def transform(bootstrap: str, name: str, rec: Recorder, stop: threading.Event, seed: int) -> None:
    """Consume-transform-produce from `txn` to `ctp`, offsets committed in each transaction."""
    rng = random.Random(seed + 1)
    c, placed = _transform_consumer(bootstrap, name, rec), now()
    producer = txn_producer(bootstrap, name, rec, stop)
    n = 0
    try:
        while producer is not None and not stop.is_set():
            messages = note_errors(rec, name, c.consume(10, 0.3))
            if not messages:
                c, placed = _idle(c, placed, bootstrap, name, rec)
                continue
            placed = now()
            txn = _Txn(name)
            try:
                outcome, commit_s = _transform_one(producer, c, txn, messages, n, rng, rec)
            except Abandoned as exc:  # it can never commit: the producer is left in the call
                rec.note(name, "send_offsets_to_transaction", "gave up", f"{exc}: a new producer")
                outcome, commit_s = Outcome.FAIL, txn.invoked
                producer = txn_producer(bootstrap, name, rec, stop)
            except Exception as exc:  # fatal, as in produce_txns
                log(rec, name, "transaction (fatal)", exc)
                outcome, commit_s = Outcome.INFO, txn.invoked
                producer = txn_producer(bootstrap, name, rec, stop)
            rec.add(txn.op(outcome, commit_s))
            if outcome != Outcome.OK and not _rewind(c, name, rec, stop):
                rec.note(name, "rewind", "gave up", f"after {REWIND_GIVE_UP_S:.0f} s: a new consumer")
                c, placed = _replace(c, bootstrap, name, rec), now()
            n += 1
    except Exception as exc:  # the thread ends and the clients fail: noted where it happened
        log(rec, name, "transform (ended)", exc)
        raise
    finally:
        c.close()


def _idle(c: Consumer, placed: float, bootstrap: str, name: str, rec: Recorder) -> tuple[Consumer, float]:
    """A consume() that returned nothing: the consumer, and since when it had a position. One
    without a position for REWIND_GIVE_UP_S is replaced (its committed offsets never came)."""
    positions = c.position(c.assignment())
    rec.note(name, "consume", "nothing", f"positions {tps(positions)}")
    if any(tp.offset >= 0 for tp in positions):
        return c, now()
    if now() - placed <= REWIND_GIVE_UP_S:
        return c, placed
    rec.note(name, "consume", "gave up", f"no position for {REWIND_GIVE_UP_S:.0f} s: a new consumer")
    return _replace(c, bootstrap, name, rec), now()


def _replace(c: Consumer, bootstrap: str, name: str, rec: Recorder) -> Consumer:
    """A new consumer for the transformer (it starts at the group's committed offsets); the
    old one is closed aside, as its close may wait on the group coordinator it lost."""
    threading.Thread(target=c.close, daemon=True).start()
    return _transform_consumer(bootstrap, name, rec)


def _transform_consumer(bootstrap: str, name: str, rec: Recorder) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{name}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                  **client_of(rec, name, "consumer error")})
    c.subscribe([TXN], **rebalances(rec, name))
    return c


def rebalances(rec: Recorder, name: str) -> dict[str, Any]:
    def noted(event: str) -> Any:
        return lambda _c, parts: rec.note(name, "rebalance", event, tps(parts))
    return {"on_assign": noted("assigned"), "on_revoke": noted("revoked"), "on_lost": noted("lost")}


def tps(parts: list[TopicPartition]) -> str:
    """The partitions, with their offsets where set: `txn-0@12 txn-2`."""
    return " ".join(f"{tp.topic}-{tp.partition}" + (f"@{tp.offset}" if tp.offset >= 0 else "")
                    for tp in parts) or "none"


def _transform_one(producer: Producer, c: Consumer, txn: _Txn, messages: list[Message], n: int,
                   rng: random.Random, rec: Recorder) -> tuple[Outcome, float]:
    txn.reads = tuple(Read((m.topic(), m.partition()), m.offset(), (m.value() or b"").decode())
                      for m in messages)
    producer.begin_transaction()
    for i, _m in enumerate(messages):
        txn.send(producer, CTP, rng.randrange(PARTITIONS), f"{txn.name}-{n}-{i}")
    positions = {(m.topic(), m.partition()): m.offset() + 1 for m in messages}
    try:
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        group = c.consumer_group_metadata()
        with rec.calling(txn.name, "send_offsets_to_transaction"):
            bounded(lambda: producer.send_offsets_to_transaction(offsets, group, 10), SEND_OFFSETS_GIVE_UP_S)
    except KafkaException as exc:
        log(rec, txn.name, "send_offsets_to_transaction", exc)
        if exc.args[0].fatal():
            raise
        return finish(producer, txn.name, rec, abort=True)
    return finish(producer, txn.name, rec, abort=rng.random() < 0.2)


def _rewind(c: Consumer, name: str, rec: Recorder, stop: threading.Event) -> bool:
    """Back to the group's committed offsets (the start where none is committed). Between
    failed attempts the consumer is polled, so that it serves a rebalance (what it returns is
    dropped: the rewind goes back before it). False if the offsets could not be read for
    REWIND_GIVE_UP_S: librdkafka's consumer can lose its group coordinator for good (its
    `committed()` timing out for minutes while a new client finds the coordinator at once)."""
    deadline = now() + REWIND_GIVE_UP_S
    while not stop.is_set():
        if _rewound(c, name, rec):
            return True
        if now() > deadline:
            return False
        note_errors(rec, name, c.consume(10, 0.5))
    return True


def _rewound(c: Consumer, name: str, rec: Recorder) -> bool:
    """One attempt: every assigned partition sought to its committed offset (none if one failed)."""
    try:
        with rec.calling(name, "committed"):
            committed = c.committed(c.assignment(), 10)
        failed = [tp for tp in committed if tp.error is not None]
        for tp in failed:  # its offset is not the committed one: no seek
            rec.note(name, "rewind", tp.error.name(), f"{tp.topic}-{tp.partition}: {tp.error.str()}")
        for tp in committed if not failed else ():
            start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            c.seek(TopicPartition(tp.topic, tp.partition, start))
        return not failed
    except KafkaException as exc:
        log(rec, name, "rewind", exc)
        return False


def run_java(bootstrap: str, stop_file: Path, seed: int, roles: list[str], rec: Recorder) -> None:
    """The Java clients until the stop file appears (their lines read as they come); raises
    if the JVM failed."""
    proc = subprocess.Popen(
        ["java", "-cp", f"{JAVA_DEPS}/*", str(JAVA_DIR / "ChaosTxn.java"), bootstrap, str(stop_file),
         str(seed), ",".join(roles)], stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        java_line(rec, line)
    code = proc.wait()
    if code != 0:
        raise RuntimeError(f"the Java clients exited with {code}")


def java_line(rec: Recorder, line: str) -> None:
    """One line of the Java clients: `OP <json>` an operation; `CALL <process> <call> <since>`
    as a process enters a call that may block, `CALL <process>` as it returns (so that a
    call still running after BLOCKED_S is noted, as the confluent-kafka clients' are)."""
    kind, _, rest = line.rstrip("\n").partition(" ")
    if kind == "OP":
        rec.add(Op.from_json(json.loads(rest)))
    elif kind == "CALL":
        process, *call = rest.split(" ")
        if call:
            rec.call_began(process, call[0], float(call[1]))
        else:
            rec.call_ended(process)
