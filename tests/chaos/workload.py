"""The clients of a campaign, run on the clients' host until a stop file appears:
`python -m tests.chaos.workload BOOTSTRAP OUT STOP_FILE [--workload queue,txn] [--seed N]`.

- queue (Jepsen's): two idempotent acks=all producers append unique values round-robin to
  the partitions of `queue` (RF 3, min.insync.replicas 2); one consumer polls with assign,
  one with subscribe (its re-assignments are recorded: its order checks start over);
- txn: a transactional producer writes 2-4 values to random partitions of `txn` and commits
  or (one in five) aborts; a read_committed and a read_uncommitted consumer poll them.
Every operation is recorded with invocation and completion time (CLOCK_MONOTONIC, shared
with the campaign) and outcome; when the stop file appears, the clients stop and a fresh
read_committed consumer drains every partition. The history is written to OUT as JSON.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.checker import DRAIN
from tests.chaos.history import NO_OFFSET, History, Kind, Op, Outcome, ProcessId, Read, Write

PARTITIONS = 3
QUEUE, TXN = "queue", "txn"
PACE_S = 0.02  # one send per producer every 20 ms at most: a bounded load
COMMON = {"socket.timeout.ms": 3000, "reconnect.backoff.max.ms": 500}


class Recorder:
    """The one owner of the clients' history (appends are atomic; read once at the end)."""

    def __init__(self) -> None:
        self.history = History()

    def add(self, op: Op) -> None:
        self.history.ops.append(op)


def now() -> float:
    return time.monotonic()


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **COMMON})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (QUEUE, TXN)])
    for future in futures.values():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


# -- queue -----------------------------------------------------------------------------------


def produce_queue(bootstrap: str, name: str, rec: Recorder, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 8000, **COMMON})
    n = 0
    while not stop.is_set():
        value = f"{name}-{n}"
        done = _on_send(rec, name, value, now())
        producer.produce(QUEUE, value.encode(), partition=n % PARTITIONS, on_delivery=done)
        producer.poll(0)
        n += 1
        time.sleep(PACE_S)
    producer.flush(15)


def _on_send(rec: Recorder, name: str, value: str, invoked: float) -> Callable[[Any, Any], None]:
    def done(err: Any, msg: Any) -> None:
        key = (msg.topic(), msg.partition())
        outcome = Outcome.OK if err is None else Outcome.INFO  # a time-out may have been written
        offset = msg.offset() if err is None else NO_OFFSET
        rec.add(Op(ProcessId(name), Kind.SEND, invoked, now(), outcome, (Write(key, value, offset),)))
    return done


def consumer(bootstrap: str, committed: bool, group: str | None = None) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group or f"chaos-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": group is not None, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, **COMMON,
    })


def poll_into(c: Consumer, rec: Recorder, name: str, committed: bool) -> int:
    invoked = now()
    messages = [m for m in c.consume(200, 0.5) if m.error() is None]
    if messages:
        reads = tuple(Read((m.topic(), m.partition()), m.offset(), (m.value() or b"").decode())
                      for m in messages)
        rec.add(Op(ProcessId(name), Kind.POLL, invoked, now(), Outcome.OK, reads=reads,
                   committed_reader=committed))
    return len(messages)


def poll_assigned(bootstrap: str, topic: str, name: str, committed: bool, rec: Recorder,
                  stop: threading.Event) -> None:
    c = consumer(bootstrap, committed)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            poll_into(c, rec, name, committed)
    finally:
        c.close()


def poll_subscribed(bootstrap: str, name: str, rec: Recorder, stop: threading.Event) -> None:
    c = consumer(bootstrap, True, group="chaos-queue")

    def assigned(_c: Any, parts: list[TopicPartition]) -> None:
        rec.add(Op(ProcessId(name), Kind.ASSIGN, now(), now(), Outcome.OK))

    c.subscribe([QUEUE], on_assign=assigned)
    try:
        while not stop.is_set():
            poll_into(c, rec, name, True)
    finally:
        c.close()


# -- transactions ------------------------------------------------------------------------------


def produce_txns(bootstrap: str, name: str, rec: Recorder, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    producer = _txn_producer(bootstrap, name, stop)
    n = 0
    while producer is not None and not stop.is_set():
        values = [f"{name}-{n}-{i}" for i in range(rng.randint(2, 4))]
        n += 1
        try:
            rec.add(_one_txn(producer, name, values, rng))
        except KafkaException:
            producer = _txn_producer(bootstrap, name, stop)  # fatal: a new producer fences the old


def _txn_producer(bootstrap: str, name: str, stop: threading.Event) -> Producer | None:
    """A producer whose InitProducerId went through (None if the run stopped first)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"chaos-{name}",
                         "transaction.timeout.ms": 10000, "message.timeout.ms": 8000, **COMMON})
    while not stop.is_set():
        try:
            producer.init_transactions(5)
            return producer
        except KafkaException:
            continue
    return None


def _one_txn(producer: Producer, name: str, values: list[str], rng: random.Random) -> Op:
    invoked = now()
    offsets: dict[str, tuple[tuple[str, int], int]] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            offsets[msg.value().decode()] = ((msg.topic(), msg.partition()), msg.offset())

    producer.begin_transaction()
    keys = {v: (TXN, rng.randrange(PARTITIONS)) for v in values}
    for v in values:
        producer.produce(TXN, v.encode(), partition=keys[v][1], on_delivery=delivered)
    outcome, commit_s = _finish(producer, abort=rng.random() < 0.2)
    writes = tuple(Write(offsets.get(v, (keys[v], NO_OFFSET))[0], v, offsets.get(v, (keys[v], NO_OFFSET))[1])
                   for v in values)
    return Op(ProcessId(name), Kind.TXN, invoked, now(), outcome, writes, commit_s=commit_s)


def _finish(producer: Producer, abort: bool) -> tuple[Outcome, float]:
    commit_s = now()
    try:
        if abort:
            producer.abort_transaction(10)
            return Outcome.FAIL, commit_s
        producer.flush(10)
        commit_s = now()
        producer.commit_transaction(10)
        return Outcome.OK, commit_s
    except KafkaException as exc:
        error = exc.args[0]
        if error.fatal():
            raise
        try:  # an abort that goes through means the commit never took effect
            producer.abort_transaction(10)
            return Outcome.FAIL, commit_s
        except KafkaException:
            return Outcome.INFO, commit_s


# -- the end: drain ----------------------------------------------------------------------------


def drain(
    bootstrap: str, topics: list[str], rec: Recorder, quiet_s: float = 4.0, limit_s: float = 40.0
) -> None:
    """Read every partition from the start until nothing new came for `quiet_s`."""
    c = consumer(bootstrap, True)
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(PARTITIONS)])
    deadline, last_new = now() + limit_s, now()
    try:
        while now() < deadline and now() - last_new < quiet_s:
            if poll_into(c, rec, DRAIN, True):
                last_new = now()
    finally:
        c.close()


def run(bootstrap: str, out: Path, stop_file: Path, workloads: list[str], seed: int) -> None:
    create_topics(bootstrap)
    rec, stop = Recorder(), threading.Event()
    jobs: list[Callable[[], None]] = []
    if "queue" in workloads:
        jobs += [lambda n=n: produce_queue(bootstrap, n, rec, stop) for n in ("p1", "p2")]
        jobs += [lambda: poll_assigned(bootstrap, QUEUE, "ca", True, rec, stop),
                 lambda: poll_subscribed(bootstrap, "cs", rec, stop)]
    if "txn" in workloads:
        jobs += [lambda: produce_txns(bootstrap, "t1", rec, stop, seed),
                 lambda: poll_assigned(bootstrap, TXN, "tc", True, rec, stop),
                 lambda: poll_assigned(bootstrap, TXN, "tu", False, rec, stop)]
    threads = [threading.Thread(target=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    while not stop_file.exists():
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(60)
    drain(bootstrap, [t for t, w in ((QUEUE, "queue"), (TXN, "txn")) if w in workloads], rec)
    rec.history.save(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("out", type=Path)
    parser.add_argument("stop_file", type=Path)
    parser.add_argument("--workload", default="queue,txn")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    run(args.bootstrap, args.out, args.stop_file, args.workload.split(","), args.seed)


if __name__ == "__main__":
    main()
