"""Real clients with idempotence on (acks=all) against a real broker process.

Each client produces N records to partition 0; the topic is read back with
confluent-kafka (assign() from the earliest offset, no consumer group) and must
hold exactly those N records in order, and the batches on disk must carry a
producer id with contiguous, never repeated sequences.

The retry tests put tests/integration/tcp_proxy.py between client and broker
(the broker's advertised listener is the proxy, so the client never bypasses
it). The proxy forwards Produce requests to the broker but drops the
connection instead of relaying some responses (or holds a response past the
client's request timeout), so the client re-sends batches the broker already
appended; the broker must answer those from its dedup state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.integration.clients import aio_send_all, assign_consumer, kp_send_all, poll_records
from tests.integration.harness import (
    BrokerFactory,
    BrokerProcess,
    Rec,
    assert_same_records,
    make_records,
    norm_headers,
    prefixed_json,
    require_java,
    run_java,
    unique_topic,
)
from tests.integration.tcp_proxy import KafkaProxy
from tests.integration.test_idempotence_wire import (
    LogBatch,
    assert_no_duplicate_sequences,
    log_batches,
)
from tests.integration.wire import WireClient, create_topic

pytestmark = pytest.mark.integration

N = 200
CLIENTS = ["confluent", "kafka-python", "aiokafka", "java"]
PRODUCE_TIMEOUT_S = 60
# The settings kafka-python and aiokafka producers share here.
IDEMPOTENT_KWARGS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 5,
    "retry_backoff_ms": 50,
    "request_timeout_ms": 15000,
}


# -- producers: each returns the offset each record was acknowledged at -------------------


def produce_confluent(bootstrap: str, topic: str, recs: list[Rec], tag: str) -> list[int]:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 2048,
            "max.in.flight.requests.per.connection": 5,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "message.timeout.ms": PRODUCE_TIMEOUT_S * 1000,
        }
    )
    offsets: list[int | None] = [None] * len(recs)
    errors: list[str] = []

    def on_delivery(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                offsets[i] = msg.offset()

        return cb

    for i, r in enumerate(recs):
        p.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=0,
            timestamp=r.timestamp,
            headers=list(r.headers),
            on_delivery=on_delivery(i),
        )
        p.poll(0)
    left = p.flush(PRODUCE_TIMEOUT_S)
    assert left == 0, f"{left} records not delivered"
    assert not errors, errors[:10]
    return [o if o is not None else -1 for o in offsets]


def produce_kafka_python(bootstrap: str, topic: str, recs: list[Rec], tag: str) -> list[int]:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        **IDEMPOTENT_KWARGS,
        batch_size=2048,
        max_in_flight_requests_per_connection=5,
        reconnect_backoff_ms=20,
    )
    try:
        return kp_send_all(p, topic, recs, 0, PRODUCE_TIMEOUT_S)
    finally:
        p.close(timeout=10)


async def _produce_aiokafka(bootstrap: str, topic: str, recs: list[Rec]) -> list[int]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, **IDEMPOTENT_KWARGS, max_batch_size=2048)
    await p.start()
    try:
        metas = await aio_send_all(p, topic, recs, 0, PRODUCE_TIMEOUT_S)
        return [m.offset for m in metas]
    finally:
        await p.stop()


def produce_aiokafka(bootstrap: str, topic: str, recs: list[Rec], tag: str) -> list[int]:
    return asyncio.run(_produce_aiokafka(bootstrap, topic, recs))




def produce_java(
    bootstrap: str, topic: str, recs: list[Rec], tag: str, request_timeout_ms: int = 15000
) -> list[int]:
    base_ts = recs[0].timestamp
    proc = run_java(
        "IdempotentProduce.java",
        bootstrap,
        topic,
        str(len(recs)),
        str(base_ts),
        tag,
        str(request_timeout_ms),
        timeout=150,
    )
    out = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    results = prefixed_json(proc.stdout)
    assert proc.returncode == 0 and results, out
    assert results[0]["errors"] == [] and results[0]["acked"] == len(recs), out
    return list(range(len(recs)))  # the program checked offset == index for every record


PRODUCERS = {
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
    "java": produce_java,
}


def _require_client(client: str) -> None:
    if client == "java":
        require_java()


# -- checking ----------------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, n: int) -> list[tuple[int, Rec]]:
    """(offset, record) for everything in partition 0, read from the earliest offset."""
    c = assign_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = poll_records(c, n)
        # Anything beyond n is a duplicate; give it a moment to show up.
        extra_deadline = time.monotonic() + 0.5
        while time.monotonic() < extra_deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(
                    (m.offset() or 0, Rec(m.key(), m.value(), norm_headers(m.headers()), m.timestamp()[1]))
                )
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, n), f"watermarks ({low}, {high}) after producing {n} records"
    finally:
        c.close()
    return got


def check_topic(broker: BrokerProcess, topic: str, sent: list[Rec], acked: list[int]) -> list[LogBatch]:
    assert acked == list(range(len(sent))), f"acknowledged offsets {acked[:20]}..."
    got = consume_all(broker.bootstrap, topic, len(sent))
    assert [o for o, _ in got] == list(range(len(sent))), [o for o, _ in got][:50]
    assert_same_records(sent, [r for _, r in got])
    batches = log_batches(broker.partition_dir(topic))
    assert sum(b.count for b in batches) == len(sent)
    assert all(b.producer_id >= 0 and b.epoch >= 0 and b.base_sequence >= 0 for b in batches), (
        f"a batch without producer id / sequence: idempotence was not on: {batches[:5]}"
    )
    assert_no_duplicate_sequences(batches)
    return batches


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_idempotent_round_trip(module_broker: BrokerProcess, client: str) -> None:
    _require_client(client)
    topic = unique_topic(f"idem-{client}")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic)
    sent = make_records(N, tag=client[0])
    acked = PRODUCERS[client](module_broker.bootstrap, topic, sent, client[0])
    batches = check_topic(module_broker, topic, sent, acked)
    assert len(batches) > 5, "small batches expected, so that several requests were in flight"


@pytest.fixture
def proxied(broker_factory: BrokerFactory) -> Iterator[tuple[KafkaProxy, BrokerProcess]]:
    proxy = KafkaProxy().start()
    try:
        broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target_port = broker.port
        yield proxy, broker
    finally:
        proxy.close()


DROPS = 3


@pytest.mark.parametrize("client", CLIENTS)
def test_idempotent_retries_after_dropped_responses(
    proxied: tuple[KafkaProxy, BrokerProcess], client: str
) -> None:
    """The first few Produce responses after the second are never delivered: the proxy
    closes the connection once the broker has answered (so has appended)."""
    _require_client(client)
    proxy, broker = proxied
    topic = unique_topic(f"idem-retry-{client}")
    with WireClient(broker.port) as c:
        create_topic(c, topic)
    proxy.skip_produce_responses = 2
    proxy.drop_produce_responses = DROPS
    sent = make_records(N, tag=client[0])
    acked = PRODUCERS[client](proxy.address, topic, sent, client[0])
    stats = proxy.stats
    assert stats.dropped_responses == DROPS, stats
    assert stats.connections > DROPS, f"the client did not reconnect after the drops: {stats}"
    batches = check_topic(broker, topic, sent, acked)
    print(f"{client}: {stats}; {len(batches)} batches in the log")
    # Every Produce request carries one batch (one partition); more requests than
    # batches in the log means batches were re-sent and deduplicated.
    assert stats.produce_requests > len(batches), (
        f"no re-sent batch reached the broker: {stats.produce_requests} produce requests, "
        f"{len(batches)} batches in the log; {stats}"
    )


@pytest.mark.java
def test_java_idempotent_retries_after_request_timeout(proxied: tuple[KafkaProxy, BrokerProcess]) -> None:
    """A Produce response held past the Java client's request.timeout.ms: the client
    gives up on the request and re-sends the batch on a new connection."""
    _require_client("java")
    proxy, broker = proxied
    topic = unique_topic("idem-timeout-java")
    with WireClient(broker.port) as c:
        create_topic(c, topic)
    proxy.skip_produce_responses = 2
    proxy.delay_produce_responses = 1
    proxy.delay_produce_s = 3.0
    sent = make_records(N, tag="t")
    acked = produce_java(proxy.address, topic, sent, "t", request_timeout_ms=1500)
    assert proxy.stats.delayed_responses == 1, proxy.stats
    batches = check_topic(broker, topic, sent, acked)
    print(f"java: {proxy.stats}; {len(batches)} batches in the log")
    assert proxy.stats.produce_requests > len(batches), proxy.stats
