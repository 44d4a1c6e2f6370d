"""The clients of a campaign, run on the clients' host until a stop file appears:
`python -m tests.chaos.workload BOOTSTRAP OUT STOP_FILE [--workload queue,txn,...|all] [--seed N]`.

- queue (Jepsen's): two idempotent acks=all producers append unique values round-robin to
  the partitions of `queue` (RF 3, min.insync.replicas 2); one consumer polls with assign,
  one with subscribe (its re-assignments are recorded: its order checks start over);
- txn, ctp, java-txn, java-ctp (tests.chaos.transactions): multi-partition transactional
  writes to `txn` and consume-transform-produce from `txn` to `ctp`, with random aborts, by
  confluent-kafka and by the Java client 4.3; a read_committed and a read_uncommitted
  consumer poll `txn` and `ctp` (a transformer alone gets txn's writer as its source).
Every operation is recorded with invocation and completion time (CLOCK_MONOTONIC, shared
with the campaign) and outcome; when the stop file appears, the clients stop and a fresh
read_committed consumer drains every partition. The history is written to OUT as JSON, with
the errors the consumers' polls returned (and what tests.chaos.transactions notes) counted per
second as its notes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos import transactions
from tests.chaos.checker import DRAIN
from tests.chaos.history import (
    NO_OFFSET,
    History,
    Key,
    Kind,
    NoteCounter,
    Op,
    Outcome,
    ProcessId,
    Read,
    Write,
)
from tests.chaos.transactions import COMMON, CTP, TXN

PARTITIONS = 3
QUEUE = "queue"
WORKLOADS = ("queue", "txn", "ctp", "java-txn", "java-ctp")
PACE_S = 0.02  # one send per producer every 20 ms at most: a bounded load
BLOCKED_S = 5.0  # a client call running longer than this is noted each second ("blocked")
# The queue producers' message.timeout.ms: librdkafka's default, far above the longest outage.
# A message that expires in flight is re-sent under a bumped epoch and new sequence numbers,
# so a short timeout makes duplicates that are the client's (seed 53: 6,569 with 8 s).
MESSAGE_TIMEOUT_MS = 300_000
# Their idempotence states (PID, epoch bumps, drains) go to clients.log: seed 53's p2 timed out
# every message for its last 38 minutes without another line there.
UNASSIGNED_GIVE_UP_S = 30.0  # a subscriber without partitions this long gets a new consumer
# An assigned reader that reads nothing this long gets a new consumer. librdkafka's consumer can
# deadlock for good when it decommissions a broker (one missing from a Metadata answer) that had
# an OffsetForLeaderEpoch request in flight: its main thread, failing that request, holds the
# partition's lock and waits for the handle's; the broker thread holds the handle's and waits
# for the partition's (confluentinc/librdkafka#5476, open). Seed 118's `tc`: its main thread's
# last line was that request failing ("Broker handle destroyed without termination"), then it
# never refreshed metadata again, its fetches fenced for good.
READER_GIVE_UP_S = 120.0
# The read_committed reader of the transactions' topics logs its fetching, partition leaders,
# metadata and broker connections (some 200 lines a second): seed 82's and seed 92's `tc`
# stopped reading for good (seed 92's after a Metadata answer that listed no broker, which
# made librdkafka drop every broker it knew), while a fresh reader read everything at the end.
# Not `broker`: a broker handle librdkafka decommissioned (a broker missing from a Metadata
# answer) that cannot end logs "Handle is terminating" in a loop; seed 99's clients' log
# grew to 41 GB in 2 hours so.
TC_DEBUG = "fetch,topic,metadata"
PRODUCER_GIVE_UP_S = 60.0  # a queue producer without a delivery this long gets replaced
# After the stop file: the client threads get this long, together, to stop; then the drain
# (at most DRAIN_LIMIT_S). Within the campaign's wait for the clients (DRAIN_WAIT_S).
STOP_S = 60.0
# The drain reads every value written (seed 92's 7,000 s left some 700,000; under load about
# 5,000 a second): its former 40 s read a third of the partitions, the rest looked lost.
DRAIN_LIMIT_S = 240.0
CLOSE_S = 30.0  # then the drain's consumer closes


# A note waits this long for the notes' lock. Seed 122's lock stayed taken, no live thread in
# a note: from then on every client thread waited in its next note, the clients stopped, and
# the history (waiting too) was never saved. Now a note that cannot get the lock is dropped
# (the lock's owner said, once), and the history is saved without the lock.
NOTE_WAIT_S = 10.0


class Recorder:
    """The one owner of the clients' history (appends are atomic; read once at the end)."""

    def __init__(self, note_wait_s: float = NOTE_WAIT_S) -> None:
        self.history = History()
        # Re-entrant: a client's callback may come while its own thread is in a note (a
        # client object collected there, whose destruction calls back).
        self._notes, self._lock, self._wait_s = NoteCounter(), threading.RLock(), note_wait_s
        self._lock_told = False
        self._calls: dict[str, tuple[str, float]] = {}  # process -> the call it is in, since

    def add(self, op: Op) -> None:
        self.history.ops.append(op)

    def note(self, process: str, what: str, name: str, detail: str) -> None:
        if not self._lock.acquire(timeout=self._wait_s):
            self._held(f"{process}'s note {what} {name} dropped")
            return
        try:
            self._notes.add(process, what, name, detail, now())
        finally:
            self._lock.release()

    def _held(self, what: str) -> None:
        """Once per run: the notes' lock was not free within the wait, and who holds it."""
        if not self._lock_told:
            self._lock_told = True
            _say(f"the notes' lock is held ({self._lock!r}; live threads "
                 f"{[(t.name, t.ident) for t in threading.enumerate()]}): {what}")

    @contextmanager
    def calling(self, process: str, what: str) -> Iterator[None]:
        """`process` is in the call `what` (which `watch` notes if it lasts)."""
        self.call_began(process, what, now())
        try:
            yield
        finally:
            self.call_ended(process)

    def call_began(self, process: str, what: str, since: float) -> None:
        """`process` entered the call `what` at `since` (its own clock: the Java clients'
        calls are told on their stdout)."""
        self._calls[process] = (what, since)

    def call_ended(self, process: str) -> None:
        self._calls.pop(process, None)

    def watch(self, stop: threading.Event, after_s: float = BLOCKED_S) -> None:
        """Until `stop`: each second, the calls running for longer than `after_s` noted."""
        while not stop.wait(1.0):
            self.note_blocked(after_s)

    def note_blocked(self, after_s: float = BLOCKED_S) -> None:
        """A note for each call running for longer than `after_s` (a client blocked in a call
        sees nothing else: its callbacks are not served)."""
        for process, (what, since) in list(self._calls.items()):
            if (took := now() - since) > after_s:
                self.note(process, "blocked", what, f"in it for {took:.0f} s")

    def save(self, out: Path) -> None:
        got = self._lock.acquire(timeout=self._wait_s)
        if not got:
            self._held("the notes are saved without it")
        try:
            self.history.notes = self._notes.notes()
        finally:
            if got:
                self._lock.release()
        self.history.save(out)


def now() -> float:
    return time.monotonic()


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **COMMON})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (QUEUE, TXN, CTP)])
    for future in futures.values():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


# -- queue -----------------------------------------------------------------------------------


def produce_queue(bootstrap: str, name: str, rec: Recorder, stop: threading.Event) -> None:
    """One value every PACE_S, round-robin over the partitions. After PRODUCER_GIVE_UP_S without
    a delivery the producer is replaced: librdkafka's can stop sending for good after a
    re-bootstrap (seeds 53, 63, 64: silent for the last 38 to 54 minutes, idempotence state
    Assigned, messages still queued at the end). The old one is flushed aside, so that each of
    its messages still ends in an operation (a delivery, or unknown once timed out). A producer
    that raised a fatal error is replaced the same way: librdkafka gives up on its idempotence
    state after an OUT_OF_ORDER_SEQUENCE_NUMBER it cannot explain ("sequence desynchronization",
    seed 91: after a NOT_LEADER answer it took for "not persisted"), as it would with Kafka."""
    producer, delivered = _queue_producer(bootstrap, name, rec), [now()]
    n = 0
    while not stop.is_set():
        value = f"{name}-{n}"
        done = _on_send(rec, name, value, now(), delivered)
        n += 1
        try:
            producer.produce(QUEUE, value.encode(), partition=(n - 1) % PARTITIONS, on_delivery=done)
        except KafkaException as exc:  # never queued: no operation
            if not (exc.args[0].fatal() or exc.args[0].code() == KafkaError._FATAL):
                raise  # produce() raises _FATAL without the fatal flag once the producer is fatal
            rec.note(name, "produce", "fatal", f"{exc.args[0].str()}: a new producer")
            producer, delivered[0] = _replace_queue_producer(producer, bootstrap, name, rec), now()
            continue
        producer.poll(0)
        if now() - delivered[0] > PRODUCER_GIVE_UP_S:
            rec.note(name, "produce", "gave up", f"no delivery for {PRODUCER_GIVE_UP_S:.0f} s: "
                     "a new producer")
            producer, delivered[0] = _replace_queue_producer(producer, bootstrap, name, rec), now()
        time.sleep(PACE_S)
    producer.flush(15)


def _replace_queue_producer(old: Producer, bootstrap: str, name: str, rec: Recorder) -> Producer:
    """A new producer; the old one is flushed aside, so its messages still get their reports."""
    threading.Thread(target=old.flush, args=(MESSAGE_TIMEOUT_MS / 1000,), daemon=True).start()
    return _queue_producer(bootstrap, name, rec)


def _queue_producer(bootstrap: str, name: str, rec: Recorder) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS, "debug": "eos",
                     **transactions.client_of(rec, name, "producer error")})


def _on_send(rec: Recorder, name: str, value: str, invoked: float,
             delivered: list[float]) -> Callable[[Any, Any], None]:
    """The delivery callback of one value: its operation; a success's time in `delivered[0]`."""
    def done(err: Any, msg: Any) -> None:
        key = (msg.topic(), msg.partition())
        if err is not None:  # counted per second in the notes: which error, and how often
            rec.note(name, "delivery", err.name(), f"{key[0]}-{key[1]}: {err.str()}")
        else:
            delivered[0] = now()
        outcome = Outcome.OK if err is None else Outcome.INFO  # a time-out may have been written
        offset = transactions.delivered_offset(msg) if err is None else NO_OFFSET
        rec.add(Op(ProcessId(name), Kind.SEND, invoked, now(), outcome, (Write(key, value, offset),)))
    return done


def consumer(bootstrap: str, committed: bool, group: str | None = None, rec: Recorder | None = None,
             name: str = "", debug: str = "") -> Consumer:
    """A consumer; with `rec`, the errors librdkafka reports go to its notes as `name`'s;
    `debug`: librdkafka's debug contexts, logged to the clients' log."""
    noted = transactions.client_of(rec, name, "consumer error") if rec is not None else COMMON
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group or f"chaos-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": group is not None, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, **noted,
        **({"debug": debug} if debug else {}),
    })


def poll_into(c: Consumer, rec: Recorder, name: str, committed: bool) -> tuple[Read, ...]:
    """One consume(), its records added to the history as one poll; the reads."""
    invoked = now()
    messages = transactions.note_errors(rec, name, c.consume(200, 0.5))
    reads = tuple(Read((m.topic(), m.partition()), m.offset(), (m.value() or b"").decode())
                  for m in messages)
    if reads:
        rec.add(Op(ProcessId(name), Kind.POLL, invoked, now(), Outcome.OK, reads=reads,
                   committed_reader=committed))
    return reads


def poll_assigned(bootstrap: str, topics: list[str], name: str, committed: bool, rec: Recorder,
                  stop: threading.Event, debug: str = "") -> None:
    """A reader of every partition of `topics` from the start. One that reads nothing for
    READER_GIVE_UP_S is replaced by a consumer assigned the offsets after those it read (the
    checker's poll order runs on across the two)."""
    start = {(t, p): OFFSET_BEGINNING for t in topics for p in range(PARTITIONS)}
    c, read_s = _assigned(bootstrap, start, name, committed, rec, debug), now()
    try:
        while not stop.is_set():
            if reads := poll_into(c, rec, name, committed):
                start |= {r.key: r.offset + 1 for r in reads}
                read_s = now()
            elif now() - read_s > READER_GIVE_UP_S:
                rec.note(name, "poll", "gave up", f"nothing for {READER_GIVE_UP_S:.0f} s: a new consumer")
                threading.Thread(target=c.close, daemon=True).start()  # a deadlocked one never closes
                c, read_s = _assigned(bootstrap, start, name, committed, rec, debug), now()
    finally:
        c.close()


def _assigned(bootstrap: str, start: dict[Key, int], name: str, committed: bool, rec: Recorder,
              debug: str) -> Consumer:
    c = consumer(bootstrap, committed, rec=rec, name=name, debug=debug)
    c.assign([TopicPartition(t, p, offset) for (t, p), offset in start.items()])
    return c


def poll_subscribed(bootstrap: str, name: str, rec: Recorder, stop: threading.Event) -> None:
    """The group `chaos-queue`'s only member. After UNASSIGNED_GIVE_UP_S without partitions
    it is replaced: librdkafka's consumer can keep its group coordinator cached after the
    broker left the metadata and wait for it for good (confluentinc/librdkafka#5511; seed 53's
    `cs` had no partitions for its last 63 minutes after its session timed out)."""
    c, unassigned_since = _subscriber(bootstrap, name, rec), now()
    try:
        while not stop.is_set():
            poll_into(c, rec, name, True)
            if c.assignment():
                unassigned_since = now()
            elif now() - unassigned_since > UNASSIGNED_GIVE_UP_S:
                rec.note(name, "subscribe", "gave up", f"no partitions for {UNASSIGNED_GIVE_UP_S:.0f} s: "
                         "a new consumer")
                threading.Thread(target=c.close, daemon=True).start()  # may wait on its lost group
                c, unassigned_since = _subscriber(bootstrap, name, rec), now()
    finally:
        c.close()


def _subscriber(bootstrap: str, name: str, rec: Recorder) -> Consumer:
    c = consumer(bootstrap, True, group="chaos-queue", rec=rec, name=name)

    def assigned(_c: Any, parts: list[TopicPartition]) -> None:
        rec.add(Op(ProcessId(name), Kind.ASSIGN, now(), now(), Outcome.OK))

    c.subscribe([QUEUE], **{**transactions.rebalances(rec, name), "on_assign": assigned})
    return c


# -- the end: drain ----------------------------------------------------------------------------


def drain(
    bootstrap: str, topics: list[str], rec: Recorder, quiet_s: float = 4.0, limit_s: float = DRAIN_LIMIT_S
) -> int:
    """Read every partition from the start until nothing new came for `quiet_s`; how many
    records it read."""
    c = consumer(bootstrap, True)
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(PARTITIONS)])
    deadline, last_new, read = now() + limit_s, now(), 0
    try:
        while now() < deadline and now() - last_new < quiet_s:
            if got := poll_into(c, rec, DRAIN, True):
                read, last_new = read + len(got), now()
    finally:
        c.close()
    return read


def jobs_of(bootstrap: str, stop_file: Path, workloads: list[str], seed: int, rec: Recorder,
            stop: threading.Event) -> tuple[list[Callable[[], None]], list[str]]:
    """The client threads of the chosen workloads, and the topics they write."""
    jobs: list[Callable[[], None]] = []
    if "queue" in workloads:
        jobs += [lambda n=n: produce_queue(bootstrap, n, rec, stop) for n in ("p1", "p2")]
        jobs += [lambda: poll_assigned(bootstrap, [QUEUE], "ca", True, rec, stop),
                 lambda: poll_subscribed(bootstrap, "cs", rec, stop)]
    transformers, writers = {"ctp", "java-ctp"} & set(workloads), {"txn", "java-txn"} & set(workloads)
    if "txn" in workloads or (transformers and not writers):
        jobs.append(lambda: transactions.produce_txns(bootstrap, "t1", rec, stop, seed))
    if "ctp" in workloads:
        jobs.append(lambda: transactions.transform(bootstrap, "x1", rec, stop, seed))
    java = [w for w in workloads if w in transactions.JAVA_WORKLOADS]
    if java:
        jobs.append(lambda: transactions.run_java(bootstrap, stop_file, seed, java, rec))
    topics = [QUEUE] if "queue" in workloads else []
    topics += [TXN] if set(workloads) - {"queue"} else []
    topics += [CTP] if {"ctp", "java-ctp"} & set(workloads) else []
    if set(topics) & {TXN, CTP}:
        readable = [t for t in topics if t != QUEUE]
        jobs += [lambda: poll_assigned(bootstrap, readable, "tc", True, rec, stop, TC_DEBUG),
                 lambda: poll_assigned(bootstrap, readable, "tu", False, rec, stop)]
    return jobs, topics


def run(bootstrap: str, out: Path, stop_file: Path, workloads: list[str], seed: int) -> None:
    create_topics(bootstrap)
    rec, stop, failed = Recorder(), threading.Event(), []
    jobs, topics = jobs_of(bootstrap, stop_file, workloads, seed, rec, stop)

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:
            failed.append(exc)
            raise

    threads = [threading.Thread(target=guarded, args=(job,), daemon=True) for job in jobs]
    threads.append(threading.Thread(target=rec.watch, args=(stop,), daemon=True))
    for t in threads:
        t.start()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        while not stop_file.exists():
            time.sleep(0.1)
        stop.set()
        # Aside, waited for in Python (where SIGTERM reaches this thread): a client call in the
        # end may never return (seeds 97, 99, 101 never ended and left no history).
        within_s = STOP_S + DRAIN_LIMIT_S + CLOSE_S
        try:
            transactions.bounded(lambda: _end(threads, bootstrap, topics, rec), within_s)
        except transactions.Abandoned:
            _say(f"the clients' end (stop, drain) did not finish within {within_s:.0f} s; "
                 "the history so far is saved")
        except Exception as exc:  # a drain that failed fails the clients
            failed.append(exc)
    finally:  # also when terminated: the history so far. A SIGTERM while it is written must not
        # cut it short: seed 99's came 50 s or more into writing a history of 900 faults; none was left.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _save(rec, out)
    if failed:
        raise SystemExit(f"a client failed: {failed[0]!r}")


def _end(threads: list[threading.Thread], bootstrap: str, topics: list[str], rec: Recorder) -> None:
    _join(threads, STOP_S)
    began = now()
    read = drain(bootstrap, topics, rec)
    _say(f"the drain read {read} records in {now() - began:.0f} s")


def _save(rec: Recorder, out: Path) -> None:
    began = now()
    _say(f"saving the history ({len(rec.history.ops)} operations)")
    rec.save(out)
    _say(f"the history was saved in {now() - began:.0f} s")


def _say(what: str) -> None:
    print(f"{now():.1f} {what}", file=sys.stderr, flush=True)


def _join(threads: list[threading.Thread], within_s: float) -> None:
    """The client threads joined within one deadline (a client blocked in a call on a dead
    broker is left behind, a daemon, so the drain and the history do not wait for it)."""
    deadline = now() + within_s
    for t in threads:
        t.join(max(0.0, deadline - now()))
    if left := sum(t.is_alive() for t in threads):
        _say(f"{left} client threads did not stop within {within_s:.0f} s; the drain goes on")


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(f"terminated by signal {signum} before the clients ended; the history so far is saved")


def yield_cpu() -> None:
    """The clients stand for machines of their own (Jepsen's control node): on the campaign's
    one machine they take CPU only when the brokers and etcd leave it. Their session is a
    scheduler autogroup of its own (the campaign starts them with a new session), which Linux
    weighs like the brokers' whole group whatever a thread's nice is; so the group's nice too.
    Without this, seed 102's hundreds of librdkafka threads kept a process of the brokers'
    group from running for up to 7.4 s at a time, and leases of 2 s lapsed with no fault."""
    os.nice(19)  # before any thread starts: they, and the JVM, inherit it
    with suppress(OSError):  # a kernel without autogroups: the nice alone
        Path("/proc/self/autogroup").write_text("19")


def main() -> None:
    yield_cpu()
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("out", type=Path)
    parser.add_argument("stop_file", type=Path)
    parser.add_argument("--workload", default="queue,txn", help=f"comma-separated of {WORKLOADS}, or all")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    workloads = list(WORKLOADS) if args.workload == "all" else args.workload.split(",")
    try:
        run(args.bootstrap, args.out, args.stop_file, workloads, args.seed)
        code = 0
    except SystemExit as exc:
        _say(str(exc))
        code = 1
    # Not the interpreter's exit: it may wait on client objects left in a call that never
    # returned (a consumer's destructor closes it), after the history is already saved.
    os._exit(code)


if __name__ == "__main__":
    main()
