"""Topic creation limits, all-or-nothing creation, and thousands of partitions
under a low open-files limit (real broker processes, byte-level requests).

Kafka's rules: partition counts and replication factors must be positive or -1
(INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR with Kafka's messages); a request
that would write more than 10,000 metadata records fails whole with
POLICY_VIOLATION. Gregor adds `max.partitions` (POLICY_VIOLATION). A topic, or a
new partition count, is recorded only once every log exists, so a crash half-way
leaves a broker that starts and knows nothing of the half-made topic.
"""

from __future__ import annotations

import os
import resource
import select
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import BrokerFactory, BrokerProcess, started_broker, unique_topic
from tests.integration.wire import (
    REQUESTS,
    PeerClosed,
    WireClient,
    build_batch,
    create_topic,
    encode_body,
    partition_errors,
)

MAX_PARTITIONS = 40  # the module broker's max.partitions
TOO_LARGE = "Unable to perform excessively large batch operation."
NOFILE = 256  # RLIMIT_NOFILE of the many-partitions broker
MANY = 1000  # partitions it hosts: 3 files each, 3,000 files in all
SLOW_START_S = 90.0  # recovery after kill -9 fsyncs every segment: seconds for MANY


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("limits"), {"max.partitions": MAX_PARTITIONS}) as b:
        yield b


# -- requests ---------------------------------------------------------------------


def create_topics_msg(
    topics: list[tuple[str, int, int]], validate_only: bool = False, configs: dict[str, str] | None = None
) -> Any:
    cls = REQUESTS[19]
    cfg = [cls.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    return cls(
        version=5,
        topics=[
            cls.CreatableTopic(
                name=n, num_partitions=p, replication_factor=rf, assignments=[], configs=cfg
            )
            for n, p, rf in topics
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )


def create_topics(c: WireClient, topics: list[tuple[str, int, int]], **kw: Any) -> dict[str, tuple[int, str]]:
    resp = c.call(create_topics_msg(topics, **kw), 5)
    return {t.name: (t.error_code, t.error_message) for t in resp.topics}


def create_partitions(
    c: WireClient, wanted: list[tuple[str, int]], validate_only: bool = False
) -> list[tuple[str, int, str]]:
    cls = REQUESTS[37]
    msg = cls(
        version=1,
        topics=[cls.CreatePartitionsTopic(name=n, count=k, assignments=None) for n, k in wanted],
        timeout_ms=30000,
        validate_only=validate_only,
    )
    resp = c.call(msg, 1)
    return [(r.name, r.error_code, r.error_message) for r in resp.results]


def partition_count(c: WireClient, topic: str) -> int | None:
    """Partitions Metadata lists for the topic; None when it does not exist."""
    t = c.metadata([topic], version=4).topics[0]
    if t.error_code == 3:
        return None
    assert t.error_code == 0, t
    return len(t.partitions)


def dirs_of(b: BrokerProcess, topic: str) -> list[Path]:
    return sorted(b.data_dir.glob(f"{topic}-*"))


def fetch_records(c: WireClient, topic: str, partitions: list[int]) -> dict[int, bytes]:
    cls = REQUESTS[1]
    part = cls.FetchTopic.FetchPartition
    msg = cls(
        version=12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[cls.FetchTopic(topic=topic, partitions=[
            part(partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                 partition_max_bytes=1 << 20)
            for p in partitions
        ])],
        forgotten_topics_data=[], rack_id="",
    )
    resp = c.call(msg, 12)
    out = {}
    for p in resp.responses[0].partitions:
        assert p.error_code == 0, p
        out[p.partition_index] = bytes(p.records or b"")
    return out


# -- Kafka's validation -------------------------------------------------------------


def test_create_topics_validation_messages(limited: BrokerProcess) -> None:
    names = [unique_topic("bad") for _ in range(5)]
    with WireClient(limited.port) as c:
        got = create_topics(c, [(names[0], 0, 1), (names[1], -2, 1), (names[2], 1, 0),
                                (names[3], 1, -2), (names[4], 1, 3)])
        for n in names:
            assert partition_count(c, n) is None
    assert got[names[0]] == (37, "Number of partitions was set to an invalid non-positive value.")
    assert got[names[1]] == got[names[0]]
    rf_message = "Replication factor must be larger than 0, or -1 to use the default value."
    assert got[names[2]] == (38, rf_message) and got[names[3]] == (38, rf_message)
    assert got[names[4]] == (
        38,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 1 broker(s) are registered.",
    )
    assert not any(dirs_of(limited, n) for n in names)


def test_request_over_kafkas_record_limit_fails_whole(limited: BrokerProcess) -> None:
    small, big1, big2 = (unique_topic("rec") for _ in range(3))
    with WireClient(limited.port) as c:
        got = create_topics(c, [(small, 1, 1), (big1, 5000, 1), (big2, 5000, -1)])
        assert got == {n: (44, TOO_LARGE) for n in (small, big1, big2)}
        assert partition_count(c, small) is None
        got = create_topics(c, [(big1, 2**31 - 1, 1)], validate_only=True)
        assert got == {big1: (44, TOO_LARGE)}
    assert not dirs_of(limited, small) and not dirs_of(limited, big1)


def test_max_partitions_guard_and_validate_only(limited: BrokerProcess) -> None:
    a, b, c_, d = (unique_topic("cap") for _ in range(4))
    with WireClient(limited.port) as c:
        total = sum(len(t.partitions) for t in c.metadata(None, version=4).topics)
        room = MAX_PARTITIONS - total
        assert room > 4
        got = create_topics(c, [(a, room + 1, 1)])
        assert got[a][0] == 44 and f"max.partitions={MAX_PARTITIONS}" in got[a][1], got
        got = create_topics(c, [(b, room - 2, 1)], validate_only=True)
        assert got == {b: (0, None)}
        assert partition_count(c, b) is None and not dirs_of(limited, b)
        # cumulative within one request: the first fits, the second would not
        got = create_topics(c, [(c_, room - 2, 1), (d, 3, 1)])
        assert got[c_] == (0, None) and got[d][0] == 44
        assert partition_count(c, c_) == room - 2 and partition_count(c, d) is None
        assert len(dirs_of(limited, c_)) == room - 2 and not dirs_of(limited, d)
        assert create_topics(c, [(d, 2, 1)]) == {d: (0, None)}
        # the module's budget is now used up: delete to give it back
        resp = c.call(REQUESTS[20](version=4, topic_names=[c_, d], timeout_ms=30000), 4)
        assert [r.error_code for r in resp.responses] == [0, 0]
        assert not dirs_of(limited, c_) and not dirs_of(limited, d)


def test_duplicate_names_are_not_created(limited: BrokerProcess) -> None:
    dup, other = unique_topic("dup"), unique_topic("ok")
    with WireClient(limited.port) as c:
        resp = c.call(create_topics_msg([(dup, 1, 1), (other, 1, 1), (dup, 2, 1)]), 5)
        got = [(t.name, t.error_code, t.error_message) for t in resp.topics]
        assert got == [(other, 0, None), (dup, 42, "Duplicate topic name.")]
        assert partition_count(c, dup) is None and partition_count(c, other) == 1


def test_create_partitions_with_a_huge_count_changes_nothing(limited: BrokerProcess) -> None:
    topic = unique_topic("grow")
    with WireClient(limited.port) as c:
        create_topic(c, topic, 3)
        assert create_partitions(c, [(topic, 2**31 - 1)]) == [(topic, 44, TOO_LARGE)]
        name, code, message = create_partitions(c, [(topic, 8194)])[0]
        assert code == 44 and f"max.partitions={MAX_PARTITIONS}" in message
        assert create_partitions(c, [(topic, 3)]) == [(topic, 37, "Topic already has 3 partition(s).")]
        assert create_partitions(c, [(topic, 2)]) == [
            (topic, 37, f"The topic {topic} currently has 3 partition(s); 2 would not be an increase.")
        ]
        assert create_partitions(c, [(topic, 5), (topic, 6)]) == [(topic, 42, "Duplicate topic name.")]
        assert create_partitions(c, [(topic, 5)], validate_only=True) == [(topic, 0, None)]
        assert partition_count(c, topic) == 3 and len(dirs_of(limited, topic)) == 3
        missing = unique_topic("missing")
        assert create_partitions(c, [(missing, 5)])[0][:2] == (missing, 3)
        assert create_partitions(c, [(topic, 5)]) == [(topic, 0, None)]
        assert partition_count(c, topic) == 5 and len(dirs_of(limited, topic)) == 5
        resp = c.produce(topic, [(4, build_batch([b"new partition"]))], acks=-1)
        assert partition_errors(resp) == {4: 0}


# -- crash half-way -----------------------------------------------------------------


@pytest.mark.parametrize(
    "point", ["topic-create-chunk:3", "topic-create-recorded:2", "topic-partitions-recorded",
              "topic-delete-recorded"]
)
def test_crash_half_way_leaves_a_broker_that_starts(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    monkeypatch.setenv("GREGOR_CRASH_POINTS", point)
    b = broker_factory()
    keep, topic = unique_topic("keep"), unique_topic("half")
    with WireClient(b.port) as c:
        create_topics(c, [(keep, 2, 1)])
        assert partition_errors(c.produce(keep, [(1, build_batch([b"kept"]))], acks=-1)) == {1: 0}
        if point.startswith("topic-delete"):
            create_topics(c, [(topic, 50, 1)])
            with pytest.raises(PeerClosed):
                c.call(REQUESTS[20](version=4, topic_names=[topic], timeout_ms=30000), 4)
        elif point.startswith("topic-partitions"):
            create_topics(c, [(topic, 2, 1)])
            with pytest.raises(PeerClosed):
                create_partitions(c, [(topic, 50)])
        else:
            with pytest.raises(PeerClosed):
                create_topics(c, [(topic, 100, 1)])
    monkeypatch.delenv("GREGOR_CRASH_POINTS")
    b.kill9()  # reap the process that killed itself
    b.start()
    expected = {"topic-create-chunk:3": None, "topic-create-recorded:2": 100,
                "topic-partitions-recorded": 50, "topic-delete-recorded": None}[point]
    with WireClient(b.port) as c:
        assert partition_count(c, topic) == expected
        assert len(dirs_of(b, topic)) == (expected or 0)
        assert b"kept" in fetch_records(c, keep, [1])[1]
        if expected is None:
            assert create_topics(c, [(topic, 20, 1)]) == {topic: (0, None)}
            assert partition_count(c, topic) == 20
        resp = c.produce(topic, [(19, build_batch([b"after"]))], acks=-1)
        assert partition_errors(resp) == {19: 0}


# -- thousands of partitions, few descriptors -----------------------------------------------


def open_fds(b: BrokerProcess) -> int:
    assert b.proc is not None
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_thousands_of_partitions_under_a_low_open_files_limit(broker_factory: BrokerFactory) -> None:
    b = broker_factory(start=False)
    b.preexec_fn = _limit_open_files
    b.start()
    topic = unique_topic("many")
    written = list(range(0, MANY, 97))
    with WireClient(b.port, timeout=120) as c, WireClient(b.port) as other:
        cid = c.send_request(19, 5, encode_body(create_topics_msg([(topic, MANY, 1)]), 5))
        # the event loop keeps serving while the partitions are created
        assert other.api_versions().error_code == 0
        assert select.select([c.sock], [], [], 0)[0] == [], "creation finished before ApiVersions"
        resp = c.recv_response(19, 5, cid)
        assert [(t.error_code, t.num_partitions) for t in resp.topics] == [(0, MANY)]
        resp = c.produce(topic, [(p, build_batch([f"v{p}".encode()])) for p in written], acks=-1)
        assert set(partition_errors(resp).values()) == {0}
        assert open_fds(b) < NOFILE
    for clean in (True, False):
        b.stop() if clean else b.kill9()
        b.start(timeout=SLOW_START_S)
        assert open_fds(b) < NOFILE
        with WireClient(b.port) as c:
            assert partition_count(c, topic) == MANY
            got = fetch_records(c, topic, written)
            assert all(f"v{p}".encode() in got[p] for p in written), "a record is missing after restart"
            resp = c.produce(topic, [(MANY - 1, build_batch([b"last"]))], acks=-1)
            assert partition_errors(resp) == {MANY - 1: 0}
