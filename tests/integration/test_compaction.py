"""Log compaction with real clients and a real broker (issue 13).

A confluent-kafka transactional producer writes keyed records to a compacted topic
with committed and aborted transactions and tombstones; small segments, a cleaner
that looks every 50 ms and no dirty-ratio threshold make cleaning happen within the
test. Waits poll the broker's own log line ("cleaned N segments"), never sleep.
kill -9 at each crash point of the swap, then restart: the log loads and holds the
right records."""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages import REQUESTS
from tests.integration.clients import read_to_eof
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    BrokerStartError,
    started_broker,
    unique_topic,
    wait_until,
)
from tests.integration.wire import WireClient, build_batch

pytestmark = pytest.mark.integration

CLEANER = {
    "log.cleaner.backoff.ms": 50,
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
}
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "600",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


@pytest.fixture(scope="module")
def compaction_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with started_broker(tmp_path_factory.mktemp("compaction"), CLEANER) as b:
        yield b


def create_compacted(bootstrap: str, topic: str, **extra: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIGS, **extra})])
    futures[topic].result(10)


def txn_producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cmp-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 0})
    p.init_transactions(10)
    return p


def send_txn(p: Producer, topic: str, pairs: list[tuple[bytes, bytes | None]], commit: bool) -> None:
    p.begin_transaction()
    for k, v in pairs:
        p.produce(topic, key=k, value=v, partition=0)
        p.flush(10)  # one batch per record: many small batches, segments roll often
    if commit:
        p.commit_transaction(10)
    else:
        p.abort_transaction(10)


def passes(b: BrokerProcess, topic: str) -> int:
    return b.log_text().count(f"{topic}-0: cleaned ")


def cleaned_up_to(b: BrokerProcess, topic: str) -> int:
    ends = re.findall(rf"{re.escape(topic)}-0: cleaned \d+ segments up to offset (\d+)", b.log_text())
    return max(map(int, ends), default=-1)


def wait_for_pass(b: BrokerProcess, topic: str, offset: int) -> None:
    """Until a pass has cleaned everything below ``offset``."""
    wait_until(lambda: cleaned_up_to(b, topic) >= offset, timeout=30, msg=f"{topic} cleaned up to {offset}")


def contents(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes | None, bytes | None]]:
    got = read_to_eof(bootstrap, [(topic, 0)], isolation, "cmp", 20, topic)
    return [(m.key(), m.value()) for _tp, m in got]


def latest(pairs: list[tuple[bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return dict(pairs)


def test_transactions_and_tombstones_on_a_compacted_topic(compaction_broker: BrokerProcess) -> None:
    b = compaction_broker
    topic = unique_topic("compact-txn")
    create_compacted(b.bootstrap, topic)
    p = txn_producer(b.bootstrap)
    keys = [b"k%d" % i for i in range(8)]
    send_txn(p, topic, [(k, b"v1-" + k) for k in keys], commit=True)
    send_txn(p, topic, [(k, b"aborted-" + k) for k in keys[:4]], commit=False)
    send_txn(p, topic, [(k, b"v2-" + k) for k in keys[4:]], commit=True)
    send_txn(p, topic, [(keys[0], None), (keys[1], None)], commit=True)
    # offsets 0-21: 8 + 4 + 4 + 2 records, each transaction with its marker
    send_txn(p, topic, [(b"filler", b"f%d" % i) for i in range(12)], commit=True)  # roll past it all
    wait_for_pass(b, topic, 22)

    expected = {k: (b"v2-" + k if k in keys[4:] else b"v1-" + k) for k in keys}
    expected |= {keys[0]: None, keys[1]: None}
    for isolation in ("read_committed", "read_uncommitted"):
        got = contents(b.bootstrap, topic, isolation)
        assert not [v for _k, v in got if v and v.startswith(b"aborted")], isolation
        seen = latest(got)
        assert {k: seen.get(k, b"missing") for k in keys} == expected, isolation
        # the cleaned part holds one record per key (the filler key is partly in the active segment)
        assert len([k for k, _v in got if k in keys]) == len(keys), (isolation, got)

    # Tombstones were given a delete horizon (delete.retention.ms=0: it is now); the next
    # pass, which more dirty data triggers, removes them.
    send_txn(p, topic, [(b"filler", b"g%d" % i) for i in range(12)], commit=True)  # offsets 35-47
    wait_for_pass(b, topic, 36)
    for isolation in ("read_committed", "read_uncommitted"):
        got = contents(b.bootstrap, topic, isolation)
        seen = latest(got)
        assert keys[0] not in seen and keys[1] not in seen, isolation
        assert {k: seen[k] for k in keys[2:]} == {k: expected[k] for k in keys[2:]}
    p.flush(5)


CRASH_POINTS = ["cleaner.before_swap", "cleaner.after_swap_rename", "cleaner.after_delete_old",
                "cleaner.after_swap"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill9_during_cleaning(broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch,
                               point: str) -> None:
    monkeypatch.setenv("GREGOR_CRASH_POINTS", point)
    b = broker_factory(CLEANER, start=False)
    b.config["log.cleaner.enable"] = False  # the topic first gets its data, then cleaning starts
    b.start()
    topic = unique_topic("compact-crash")
    create_compacted(b.bootstrap, topic, **{"delete.retention.ms": "86400000"})
    producer = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    sent: list[tuple[bytes, bytes | None]] = []
    for i in range(60):
        pair = (b"k%d" % (i % 7), None if i % 13 == 12 else b"v%d" % i)
        producer.produce(topic, key=pair[0], value=pair[1], partition=0)
        producer.flush(10)
        sent.append(pair)
    b.stop()
    b.config["log.cleaner.enable"] = True
    with contextlib.suppress(BrokerStartError):  # it may die before it answers ApiVersions
        b.start()
    wait_until(lambda: not b.running, timeout=30, msg=f"the broker killing itself at {point}")
    assert f"crash point {point} reached" in b.log_text()
    b.proc = None
    monkeypatch.delenv("GREGOR_CRASH_POINTS")
    b.start()
    wait_until(lambda: passes(b, topic) >= 1, timeout=30, msg="cleaning after the restart")
    got = contents(b.bootstrap, topic, "read_uncommitted")
    assert latest(got) == latest(sent)  # the latest record of every key, tombstones kept
    assert len(got) < len(sent)
    assert "Traceback" not in b.log_text()


def test_an_idempotent_retry_from_before_a_cleaning_is_still_deduplicated(
    broker_factory: BrokerFactory,
) -> None:
    """Byte level: a producer's batch, then newer values of its key from others until the
    cleaner has passed it, then a restart (producer state rebuilt from what cleaning kept):
    resending the batch is answered with its first offset and writes nothing."""
    b = broker_factory(CLEANER)
    topic = unique_topic("compact-dedup")
    create_compacted(b.bootstrap, topic)
    with WireClient(b.port) as c:
        init = c.call(REQUESTS[22](version=1, transactional_id=None, transaction_timeout_ms=60000), 1)
        assert init.error_code == 0, init
        batch = build_batch([b"first"], keys=[b"k"], producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, base_sequence=0)
        first = produce_offsets(c, topic, batch)
        for i in range(12):
            produce_offsets(c, topic, build_batch([b"newer-%d" % i], keys=[b"k"]))
        wait_for_pass(b, topic, first + 1)
        assert produce_offsets(c, topic, batch) == first, "a retry of the cleaned-over batch"
    b.restart()
    with WireClient(b.port) as c:
        assert produce_offsets(c, topic, batch) == first, "the same retry after a restart"
    values = [v for _k, v in contents(b.bootstrap, topic, "read_uncommitted")]
    assert values.count(b"first") <= 1 and values[-1] == b"newer-11", values


def produce_offsets(c: WireClient, topic: str, batch: bytes) -> int:
    answer = c.produce(topic, [(0, batch)], acks=-1)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return int(part.base_offset)


def test_an_open_transaction_holds_the_cleaner_back(compaction_broker: BrokerProcess) -> None:
    """Nothing at or above an open transaction's first offset is cleaned, however much is
    written after it (the log says why); once it is aborted, cleaning goes on past it."""
    b = compaction_broker
    topic = unique_topic("compact-open")
    create_compacted(b.bootstrap, topic)
    plain = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(6):
        plain.produce(topic, key=b"k", value=b"before-%d" % i, partition=0)
        plain.flush(10)
    p = txn_producer(b.bootstrap)
    p.begin_transaction()
    p.produce(topic, key=b"open", value=b"pending", partition=0)
    p.flush(10)
    start = 6
    for i in range(20):
        plain.produce(topic, key=b"k", value=b"after-%d" % i, partition=0)
        plain.flush(10)
    wait_until(lambda: f"{topic}-0: cleaning held back at offset {start}" in b.log_text(), timeout=30,
               msg="the cleaner reporting the open transaction")
    assert cleaned_up_to(b, topic) <= start
    after = [v for _k, v in contents(b.bootstrap, topic, "read_uncommitted")]
    assert after.count(b"after-0") == 1, "nothing above the open transaction was cleaned"
    p.abort_transaction(10)
    plain.produce(topic, key=b"k", value=b"last", partition=0)
    plain.flush(10)
    wait_for_pass(b, topic, start + 2)
    got = latest(contents(b.bootstrap, topic, "read_committed"))
    assert b"open" not in got and got[b"k"] == b"last", got
