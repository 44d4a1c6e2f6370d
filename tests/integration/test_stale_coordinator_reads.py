"""A coordinator whose etcd registration may have lapsed must not answer its reads (OffsetFetch,
DescribeGroups, ListGroups, DescribeTransactions, ListTransactions) from memory (issue 22's
"reprocessed"): by then another broker may lead the group's
`__consumer_offsets` partition and hold newer commits, and a consume-transform-produce
process that rewinds to the stale offset commits the same input twice. Etcd is paused for
real (SIGSTOP) beyond the session timeout: every broker's lease may have lapsed; OffsetFetch
is NOT_COORDINATOR (the client looks the coordinator up again and retries), as are the other
keyed reads, the lists COORDINATOR_NOT_AVAILABLE; the committed offset comes back once the
registrations are renewed. While etcd is away a broker hands out the idempotent producer ids
it reserved ahead; past them InitProducerId is COORDINATOR_LOAD_IN_PROGRESS (Kafka's answer
while no producer-id block is there), and a producer that started meanwhile gets its id once
etcd is back."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from coordinator.hashing import coordinator_partition
from coordinator.producer_ids import BLOCK_SIZE
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.cluster import SESSION_MS, Cluster, running_cluster
from tests.integration.harness import wait_until
from tests.integration.test_eos_zombie_wire import offset_fetch
from tests.integration.wire import WireClient, encode_body

PARTITIONS = 3
OVERRIDES = {"offsets.topic.num.partitions": PARTITIONS, "transaction.state.log.num.partitions": PARTITIONS,
             "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("stale-fetch"), overrides=OVERRIDES) as c:
        yield c


def committed(cluster: Cluster, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def coordinator_node(cluster: Cluster, group: str) -> int:
    tp = ("__consumer_offsets", coordinator_partition(group, PARTITIONS))
    image = cluster.wait_for(lambda i: tp in i.partitions and i.partitions[tp].leader > 0)
    return image.partitions[tp].leader


def coordinator_port(cluster: Cluster, group: str) -> int:
    return cluster.broker(coordinator_node(cluster, group)).port


def transactional_id_on(c: WireClient, node: int, prefix: str) -> str:
    """A transactional id whose transaction coordinator is broker `node`."""
    for i in range(200):
        request = REQUESTS[10](version=3, key=f"{prefix}-{i}", key_type=1)
        found = wait_until(lambda: (r := c.call(request, 3)).error_code == 0 and r, timeout=30)  # noqa: B023
        if found.node_id == node:
            return str(request.key)
    raise AssertionError(f"no transactional id of 200 is coordinated by broker {node}")


def fetched_by_coordinator(
    cluster: Cluster, group: str, topic: str
) -> tuple[int, dict[int, tuple[int, int]]]:
    with WireClient(coordinator_port(cluster, group)) as c:
        return offset_fetch(c, group, topic, [0], True)


def other_reads(c: WireClient, group: str, tid: str) -> list[int]:
    """The error codes of DescribeGroups, ListGroups, DescribeTransactions, ListTransactions."""
    described = c.call(REQUESTS[15](version=5, groups=[group]), 5).groups[0].error_code
    listed = c.call(REQUESTS[16](version=4, states_filter=[]), 4).error_code
    txn = c.call(REQUESTS[65](version=0, transactional_ids=[tid]), 0).transaction_states[0].error_code
    txns = c.call(REQUESTS[66](version=0, state_filters=[], producer_id_filters=[]), 0).error_code
    return [described, listed, txn, txns]


def test_a_coordinator_without_a_live_registration_answers_no_read_from_memory(
    cluster: Cluster,
) -> None:
    topic, group = cluster.create_topic(partitions=1), f"stale-{uuid.uuid4().hex[:8]}"
    committed(cluster, group, topic, 42)
    stored = (ErrorCode.NONE, {0: (42, ErrorCode.NONE)})
    with WireClient(coordinator_port(cluster, group)) as c:
        tid = transactional_id_on(c, coordinator_node(cluster, group), group)
        assert offset_fetch(c, group, topic, [0], True) == stored
        assert other_reads(c, group, tid) == [ErrorCode.NONE, ErrorCode.NONE,
                                              ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, ErrorCode.NONE]
        cluster.etcd.pause()
        try:
            time.sleep(SESSION_MS / 1000 * 1.5)
            error, _ = offset_fetch(c, group, topic, [0], True)
            assert error == ErrorCode.NOT_COORDINATOR
            unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert other_reads(c, group, tid) == [ErrorCode.NOT_COORDINATOR, unavailable,
                                                  ErrorCode.NOT_COORDINATOR, unavailable]
        finally:
            cluster.etcd.resume()
    # registrations renewed: the group's coordinator (the same broker or a successor) answers
    wait_until(lambda: fetched_by_coordinator(cluster, group, topic) == stored, timeout=30)


def init_errors(c: WireClient, count: int) -> list[int]:
    """The error codes of `count` idempotent InitProducerId requests, pipelined."""
    init = REQUESTS[ApiKey.INIT_PRODUCER_ID]
    body = encode_body(init(version=1, transactional_id=None, transaction_timeout_ms=60000), 1)
    sent = [c.send_request(ApiKey.INIT_PRODUCER_ID, 1, body) for _ in range(count)]
    return [c.recv_response(ApiKey.INIT_PRODUCER_ID, 1, cid).error_code for cid in sent]


def test_producer_ids_run_out_while_etcd_is_away_then_come_back(cluster: Cluster) -> None:
    topic, broker = cluster.create_topic(partitions=1), cluster.broker(1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all"})
    with WireClient(broker.port) as c:
        assert init_errors(c, 1) == [ErrorCode.NONE]  # its blocks are reserved by now
        cluster.etcd.pause()
        try:
            errors = Counter(init_errors(c, 3 * BLOCK_SIZE + 10))  # its block and two ahead at most
            assert set(errors) == {ErrorCode.NONE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}, errors
            producer.produce(topic, b"started while no id was to be had", partition=0)
            producer.poll(1.0)
        finally:
            cluster.etcd.resume()
        assert producer.flush(30) == 0
        wait_until(lambda: init_errors(c, 1) == [ErrorCode.NONE], timeout=30)
    assert "Traceback" not in broker.log_text()
