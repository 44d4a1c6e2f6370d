"""Client scenarios that need a connection to fail: the same program against Kafka and against
Gregor, each broker behind a `KafkaProxy` of its own (its advertised listener is the proxy),
the results compared.

librdkafka's abort after a lost Produce answer (chaos seed 117). The proxy closes the
connection once the broker has appended a transaction's batch, before its answer reaches the
client. librdkafka puts the batch back in the partition's queue to wait out its retry backoff,
and `abort_transaction` purges it from there. Purging advances the partition's base message id
by the purged count, so the next transaction's messages take the purged batch's sequences again
under the same producer epoch (`rd_kafka_toppar_purge_queues`, "advancing epoch base msgid").
Both brokers answer that batch as a duplicate of the aborted one, with the aborted batch's
offsets, as Kafka's `ProducerStateEntry.findDuplicateBatch` matches a batch: same epoch, same
sequence range. So the committed transaction's delivery reports point at aborted records, and
read_committed never sees its values. The client's fault, and the same on both brokers: what
this test holds Gregor to.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.differential.conftest import SHARED
from tests.differential.test_clients import Outcome, assert_same
from tests.integration.harness import started_broker
from tests.integration.kafka import require_kafka, started_kafka
from tests.integration.tcp_proxy import KafkaProxy

RECORDS = 4
ADVBASE = "advancing epoch base msgid"  # librdkafka's debug line when a purge skips sequences


@dataclass(frozen=True)
class Proxied:
    name: str
    proxy: KafkaProxy

    @property
    def bootstrap(self) -> str:
        return self.proxy.address


def _behind(proxy: KafkaProxy) -> dict[str, object]:
    return {**SHARED, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proxied, Proxied]]:
    require_kafka()
    with KafkaProxy() as to_kafka, KafkaProxy() as to_gregor:
        with (
            started_kafka(tmp_path_factory.mktemp("kafka"), _behind(to_kafka)) as kafka,
            started_broker(tmp_path_factory.mktemp("gregor"), _behind(to_gregor)) as gregor,
        ):
            to_kafka.target_port, to_gregor.target_port = kafka.port, gregor.port
            yield Proxied("kafka", to_kafka), Proxied("gregor", to_gregor)


class _Log:
    """librdkafka's log lines (served by `poll`), and an event set by the first line that
    says a Produce request failed with its records possibly persisted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed = threading.Event()
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:  # as a logging.Logger's
        fac, message = str(args[0]), str(args[-1])  # librdkafka passes "%s [%s] %s", fac, name, line
        self.lines.append(f"{fac} {message}")
        if fac == "MSGSET" and "MsgPossiblyPersisted" in message:
            self.failed.set()

    def write(self) -> None:
        self.path.write_text("\n".join(self.lines) + "\n")


def abort_after_lost_answer(side: Proxied, topic: str, log: _Log) -> Outcome:
    """One committed record, then a transaction whose batch's answer the proxy drops and which
    the program aborts, then a committed transaction of as many records on the same partition.
    Returns the delivery reports and what read_committed and read_uncommitted read."""
    from confluent_kafka import Producer

    side.proxy.drop_produce_responses_from_now(1, after=1)  # the first transaction's answer goes through
    reports: list[tuple[str, str | None, int]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((msg.value().decode(), err.name() if err else None, msg.offset()))

    p = Producer(
        {
            "bootstrap.servers": side.bootstrap,
            "transactional.id": topic,
            "linger.ms": 0,
            "retry.backoff.ms": 5000,
            "retry.backoff.max.ms": 5000,  # held in the queue
            "debug": "eos,msg",
            "logger": log,
        }
    )
    p.init_transactions(30)
    _transaction(p, topic, ["first"], report)
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(topic, f"aborted-{i}".encode(), partition=0, on_delivery=report)
    deadline = time.monotonic() + 30
    while not log.failed.is_set():  # the client saw the connection close under its request
        assert time.monotonic() < deadline, f"{side.name}: the Produce request never failed"
        p.poll(0.05)
    p.abort_transaction(30)
    _transaction(p, topic, [f"committed-{i}" for i in range(RECORDS)], report)
    assert p.flush(30) == 0
    return {
        "reports": reports,
        "sequences skipped by a purge": sum(ADVBASE in line for line in log.lines),
        "read_committed": _read(side, topic, "read_committed"),
        "read_uncommitted": _read(side, topic, "read_uncommitted"),
    }


def _transaction(p: Any, topic: str, values: list[str], report: Any) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v.encode(), partition=0, on_delivery=report)
    p.commit_transaction(30)


def _read(side: Proxied, topic: str, isolation: str) -> list[str]:
    """value@offset of every record up to the partition's end, for one isolation level."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": side.bootstrap,
            "group.id": f"{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        tp = TopicPartition(topic, 0, 0)
        end = c.get_watermark_offsets(tp, timeout=30)[1]
        c.assign([tp])
        found: list[str] = []
        deadline = time.monotonic() + 30
        while c.position([tp])[0].offset < end:
            assert time.monotonic() < deadline, f"{side.name}: {isolation} stopped before {end}: {found}"
            if (m := c.poll(0.2)) is not None and m.error() is None:
                found.append(f"{(m.value() or b'').decode()}@{m.offset()}")
        return found
    finally:
        c.close()


def test_librdkafka_abort_after_lost_answer_same_on_both(
    proxied: tuple[Proxied, Proxied], tmp_path: Path
) -> None:
    topic = f"lost-answer-{uuid.uuid4().hex[:8]}"
    outcomes = {}
    for side in proxied:
        log = _Log(tmp_path / f"librdkafka-{side.name}.log")
        try:
            outcomes[side.name] = abort_after_lost_answer(side, topic, log)
        finally:
            log.write()
    kafka, gregor = outcomes["kafka"], outcomes["gregor"]
    assert kafka["sequences skipped by a purge"] == 1, f"the scenario did not happen on Kafka: {kafka}"
    assert_same(kafka, gregor)
