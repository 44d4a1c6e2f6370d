"""A topic deleted (and recreated) while a long-poll Fetch for it waits.

Requests are pipelined on one connection at the byte level: Fetch (waiting for
data), then DeleteTopics, then more. As in Kafka, the Fetch is answered with
UNKNOWN_TOPIC_OR_PARTITION for the deleted partitions (data for the others),
DeleteTopics is answered, and the connection stays open. A Fetch v13+ naming the
old topic id of a recreated topic gets UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.harness import BrokerProcess, unique_topic
from tests.integration.wire import (
    REQUESTS,
    WireClient,
    build_batch,
    create_topic,
    encode_body,
    partition_errors,
)

FETCH, DELETE_TOPICS, CREATE_TOPICS, API_VERSIONS = 1, 20, 19, 18
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 3, 100
LONG_WAIT_MS = 60_000  # the fetch must be answered by the delete, not by its timeout


def fetch_msg(
    wanted: list[tuple[str | uuid.UUID, list[tuple[int, int]]]], version: int, wait_ms: int = LONG_WAIT_MS
) -> Any:
    """Fetch of (topic name or id, [(partition, offset)]) waiting for one byte."""
    cls = REQUESTS[FETCH]
    part = cls.FetchTopic.FetchPartition
    topics = [
        cls.FetchTopic(
            topic=t if isinstance(t, str) else "",
            topic_id=t if isinstance(t, uuid.UUID) else uuid.UUID(int=0),
            partitions=[
                part(partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1,
                     partition_max_bytes=1 << 20)
                for p, o in parts
            ],
        )
        for t, parts in wanted
    ]
    return cls(
        version=version, replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, topics=topics,
        forgotten_topics_data=[], rack_id="",
    )


def send(c: WireClient, msg: Any, version: int) -> int:
    return c.send_request(msg.API_KEY, version, encode_body(msg, version))


def delete_msg(topic: str) -> Any:
    return REQUESTS[DELETE_TOPICS](version=4, topic_names=[topic], timeout_ms=30000)


def topic_id(c: WireClient, topic: str) -> uuid.UUID:
    t = c.metadata([topic], version=12).topics[0]
    assert t.error_code == 0, t
    return uuid.UUID(str(t.topic_id))


def errors_by_partition(resp: Any) -> dict[tuple[str, int], int]:
    return {
        (t.topic or str(t.topic_id), p.partition_index): p.error_code
        for t in resp.responses
        for p in t.partitions
    }


def no_traceback(b: BrokerProcess) -> None:
    text = b.log_text()
    assert "Traceback" not in text and "handler failed" not in text, b.log_tail()


def produce_one(c: WireClient, topic: str, partition: int, value: bytes) -> None:
    assert partition_errors(c.produce(topic, [(partition, build_batch([value]))], acks=-1)) == {partition: 0}


def test_delete_answers_a_waiting_fetch_on_the_same_connection(module_broker: BrokerProcess) -> None:
    doomed, kept = unique_topic("doomed"), unique_topic("kept")
    with WireClient(module_broker.port) as admin:
        create_topic(admin, doomed, 2)
        create_topic(admin, kept, 1)
        produce_one(admin, doomed, 0, b"before")
    with WireClient(module_broker.port) as c:
        fetch = send(c, fetch_msg([(doomed, [(0, 1), (1, 0)]), (kept, [(0, 0)])], 12), 12)
        delete = send(c, delete_msg(doomed), 4)
        versions = send(c, REQUESTS[API_VERSIONS](version=0), 0)
        fetched = c.recv_response(FETCH, 12, fetch)
        assert fetched.error_code == 0
        assert errors_by_partition(fetched) == {
            (doomed, 0): UNKNOWN_TOPIC_OR_PARTITION, (doomed, 1): UNKNOWN_TOPIC_OR_PARTITION, (kept, 0): 0,
        }
        deleted = c.recv_response(DELETE_TOPICS, 4, delete)
        assert [(r.name, r.error_code) for r in deleted.responses] == [(doomed, 0)]
        assert c.recv_response(API_VERSIONS, 0, versions).error_code == 0
        # the same connection still serves
        assert c.metadata([doomed], version=4).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    no_traceback(module_broker)


def test_delete_answers_a_waiting_fetch_by_topic_id(module_broker: BrokerProcess) -> None:
    topic = unique_topic("by-id")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic, 1)
        tid = topic_id(c, topic)
        fetch = send(c, fetch_msg([(tid, [(0, 0)])], 13), 13)
        delete = send(c, delete_msg(topic), 4)
        fetched = c.recv_response(FETCH, 13, fetch)
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in fetched.responses] == [
            (tid, [UNKNOWN_TOPIC_OR_PARTITION])
        ]
        assert c.recv_response(DELETE_TOPICS, 4, delete).responses[0].error_code == 0
        # a new fetch with the id of the deleted topic
        fetched = c.call(fetch_msg([(tid, [(0, 0)])], 13, wait_ms=0), 13)
        assert errors_by_partition(fetched) == {(str(tid), 0): UNKNOWN_TOPIC_ID}
    no_traceback(module_broker)


def test_topic_recreated_while_a_fetch_waits(module_broker: BrokerProcess) -> None:
    topic = unique_topic("again")
    with WireClient(module_broker.port) as c:
        create_topic(c, topic, 1)
        produce_one(c, topic, 0, b"old")
        old_id = topic_id(c, topic)
        by_id = send(c, fetch_msg([(old_id, [(0, 1)])], 13), 13)
        by_name = send(c, fetch_msg([(topic, [(0, 1)])], 12), 12)
        delete = send(c, delete_msg(topic), 4)
        create_msg = REQUESTS[CREATE_TOPICS](
            version=4, timeout_ms=30000, validate_only=False,
            topics=[REQUESTS[CREATE_TOPICS].CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        )
        create = send(c, create_msg, 4)
        # woken by the delete: the partition is gone (or, if the new topic already
        # exists when the fetch looks again, the old id is unknown)
        first = c.recv_response(FETCH, 13, by_id)
        assert errors_by_partition(first)[(str(old_id), 0)] in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID)
        second = c.recv_response(FETCH, 12, by_name)
        assert errors_by_partition(second) == {(topic, 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert c.recv_response(DELETE_TOPICS, 4, delete).responses[0].error_code == 0
        assert c.recv_response(CREATE_TOPICS, 4, create).topics[0].error_code == 0
        new_id = topic_id(c, topic)
        assert new_id != old_id
        # the old id is stale; the new one serves the new topic's data only
        stale = c.call(fetch_msg([(old_id, [(0, 0)])], 13, wait_ms=0), 13)
        assert errors_by_partition(stale) == {(str(old_id), 0): UNKNOWN_TOPIC_ID}
        waiting = send(c, fetch_msg([(new_id, [(0, 0)])], 13), 13)
        with WireClient(module_broker.port) as producer:
            produce_one(producer, topic, 0, b"new")
        fresh = c.recv_response(FETCH, 13, waiting)
        (part,) = fresh.responses[0].partitions
        assert part.error_code == 0 and b"new" in bytes(part.records) and b"old" not in bytes(part.records)
    no_traceback(module_broker)
