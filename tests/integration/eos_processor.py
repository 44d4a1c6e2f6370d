"""The online-shop consume-transform-produce processor of seed 003, exactly once.

Run as a subprocess by tests/integration/test_eos_*.py (confluent-kafka):

    python eos_processor.py --bootstrap HOST:PORT --group G --txn-id T \
        --purchases P --invoices I --shipments S [--batch 20] [--idle-exit 3]

A consumer in group G (read_committed, no auto commit) subscribes to the
purchases topic; a transactional producer (one fixed transactional.id per
processor slot, so a restarted instance fences its predecessor) turns every
purchase `purchase-<id>` into one `invoice-<id>` and one `shipment-<id>`, and
commits the consumed positions with sendOffsetsToTransaction in the same
transaction, one transaction per polled batch.

Fault hooks (environment):

- CRASH_AT=POINT:N  SIGKILL itself at POINT of the N-th transaction (1-based),
  POINT one of: mid_sends (half the batch produced, unflushed), after_sends
  (all produced and flushed), after_send_offsets, before_commit (offsets sent,
  flushed, a short pause), after_commit (committed, before the next poll).
- PAUSE_AT=POINT:N  SIGSTOP itself there instead (the test SIGCONTs it): a
  process frozen like a long GC pause, which the group gives up on -- the zombie.

Every step is reported as one JSON line on stdout (flushed), e.g.
{"event": "committed", "txn": 3, "records": 20, "offsets": {"0": 41}} or
{"event": "txn_error", "where": "send_offsets", "code": 25, ...}.

Exit codes: 0 when caught up and idle for --idle-exit seconds (only when every
partition of the purchases topic is assigned to it and its position is at the
end), 3 on a fatal producer error (e.g. fenced), 4 when --max-seconds passed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

POINTS = ("mid_sends", "after_sends", "after_send_offsets", "before_commit", "after_commit")


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n")
    sys.stdout.flush()


def parse_hook(name: str) -> tuple[str, int] | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    point, _, n = raw.partition(":")
    if point not in POINTS:
        raise SystemExit(f"{name}: unknown point {point!r} (one of {POINTS})")
    return point, int(n or "1")


def error_fields(exc: KafkaException) -> dict[str, Any]:
    err = exc.args[0]
    if not isinstance(err, KafkaError):
        return {"code": None, "name": type(exc).__name__, "str": str(exc)}
    return {
        "code": err.code(),
        "name": err.name(),
        "str": err.str(),
        "fatal": err.fatal(),
        "retriable": err.retriable(),
        "requires_abort": err.txn_requires_abort(),
    }


class Processor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.crash = parse_hook("CRASH_AT")
        self.pause = parse_hook("PAUSE_AT")
        self.txn = 0  # transactions begun by this process
        self.assigned: list[TopicPartition] = []
        self.consumer = Consumer({
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": f"eos-{args.txn_id}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": max(100, args.session_timeout_ms // 5),
            "max.poll.interval.ms": max(args.session_timeout_ms, 30000),
            "partition.assignment.strategy": "range",
            "fetch.wait.max.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50,
            "metadata.recovery.strategy": "none",  # see the producer's
        })
        self.producer = Producer({
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.txn_id,
            "transaction.timeout.ms": args.txn_timeout_ms,
            "client.id": f"eos-{args.txn_id}",
            "linger.ms": 2,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50,
            # No KIP-1102 re-bootstrap when the (single) broker is down: it decommissions the
            # cached group coordinator, and send_offsets_to_transaction then hangs
            # (librdkafka issue #5511).
            "metadata.recovery.strategy": "none",
            **({"debug": os.environ["EOS_DEBUG"]} if os.environ.get("EOS_DEBUG") else {}),
        })

    # -- fault hooks --------------------------------------------------------------

    def hook(self, point: str) -> None:
        if self.crash == (point, self.txn):
            emit("crash", point=point, txn=self.txn)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.pause == (point, self.txn):
            emit("paused", point=point, txn=self.txn)
            os.kill(os.getpid(), signal.SIGSTOP)
            emit("resumed", point=point, txn=self.txn)

    # -- group callbacks --------------------------------------------------------------

    def on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = list(parts)
        emit("assigned", partitions=sorted(p.partition for p in parts))

    def on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = []
        emit("revoked", partitions=sorted(p.partition for p in parts))

    # -- the loop ----------------------------------------------------------------------

    def init(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                self.producer.init_transactions(10)
                break
            except KafkaException as e:
                err = e.args[0]
                if err.fatal() or time.monotonic() > deadline:
                    raise
                emit("init_retry", **error_fields(e))
                time.sleep(0.2)
        emit("initialized")
        self.consumer.subscribe([self.args.purchases], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def caught_up(self) -> bool:
        """Every purchases partition is ours and our position is at its end."""
        md = self.consumer.list_topics(self.args.purchases, timeout=5)
        nparts = len(md.topics[self.args.purchases].partitions)
        if len(self.assigned) != nparts:
            return False
        positions = self.consumer.position(self.assigned)
        unread = [tp for tp in positions if tp.offset == OFFSET_INVALID]  # nothing consumed here yet
        committed = {
            (tp.topic, tp.partition): tp.offset for tp in self.consumer.committed(unread, timeout=10)
        }
        for tp in positions:
            offset = committed.get((tp.topic, tp.partition), tp.offset)
            _low, high = self.consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            if offset < 0 and high > 0 or offset < high:
                return False
        return True

    def rewind(self) -> None:
        """After an abort: back to the group's committed offsets (the last committed transaction)."""
        if not self.assigned:
            return
        committed = self.consumer.committed(self.assigned, timeout=10)
        for tp in committed:
            off = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, off))
        emit("rewound", offsets={str(tp.partition): tp.offset for tp in committed})

    def process_batch(self, msgs: list[Any]) -> None:
        meta = self.consumer.consumer_group_metadata()  # the generation that handed us these records
        self.txn += 1
        self.producer.begin_transaction()
        half = len(msgs) // 2
        for i, m in enumerate(msgs):
            pid = m.value().decode().removeprefix("purchase-")
            self.producer.produce(self.args.invoices, f"invoice-{pid}".encode(), key=pid.encode())
            self.producer.produce(self.args.shipments, f"shipment-{pid}".encode(), key=pid.encode())
            if i + 1 == half:
                self.hook("mid_sends")
        self.producer.flush(self.args.api_timeout)
        self.hook("after_sends")
        if self.args.txn_sleep_ms:
            time.sleep(self.args.txn_sleep_ms / 1000)
        positions: dict[tuple[str, int], int] = {}
        for m in msgs:
            positions[(m.topic(), m.partition())] = m.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())]
        where = "send_offsets"
        try:
            self.producer.send_offsets_to_transaction(offsets, meta, self.args.api_timeout)
            self.hook("after_send_offsets")
            self.producer.flush(self.args.api_timeout)
            self.hook("before_commit")
            where = "commit"
            self.producer.commit_transaction(self.args.api_timeout)
        except KafkaException as e:
            fields = error_fields(e)
            emit("txn_error", where=where, txn=self.txn, **fields)
            if fields.get("fatal"):
                raise
            self.producer.abort_transaction(self.args.api_timeout)  # may raise: exit, be restarted
            emit("aborted", txn=self.txn)
            self.rewind()
            return
        emit("committed", txn=self.txn, records=len(msgs),
             offsets={str(p): o for (_t, p), o in sorted(positions.items())},
             first=msgs[0].value().decode(), last=msgs[-1].value().decode())
        self.hook("after_commit")

    def run(self) -> int:
        self.init()
        idle_since = time.monotonic()
        started = time.monotonic()
        while True:
            if time.monotonic() - started > self.args.max_seconds:
                emit("max_seconds")
                return 4
            msgs = self.consumer.consume(num_messages=self.args.batch, timeout=0.3)
            errors = [m for m in msgs if m.error() is not None]
            msgs = [m for m in msgs if m.error() is None]
            for m in errors:
                emit("consume_error", code=m.error().code(), name=m.error().name(), str=m.error().str())
            if not msgs:
                if time.monotonic() - idle_since >= self.args.idle_exit and self.caught_up():
                    emit("done", txns=self.txn)
                    return 0
                continue
            idle_since = time.monotonic()
            try:
                self.process_batch(msgs)
            except KafkaException as e:
                fields = error_fields(e)
                emit("fatal", **fields)
                return 3 if fields.get("fatal") else 5

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        self.producer.flush(5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--purchases", required=True)
    ap.add_argument("--invoices", required=True)
    ap.add_argument("--shipments", required=True)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--idle-exit", type=float, default=2.0)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--session-timeout-ms", type=int, default=2000)
    ap.add_argument("--txn-timeout-ms", type=int, default=10000)
    ap.add_argument("--api-timeout", type=float, default=15.0, help="timeout of each transactional call (s)")
    ap.add_argument("--txn-sleep-ms", type=int, default=0, help="pause in each transaction, after the sends")
    args = ap.parse_args()
    proc = Processor(args)
    try:
        code = proc.run()
    except KafkaException as e:
        emit("fatal", **error_fields(e))
        code = 3
    proc.close()
    emit("exit", code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
