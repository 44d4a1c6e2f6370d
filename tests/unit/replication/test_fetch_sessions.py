"""Incremental fetch sessions (KIP-227): the leader's cache and the follower's half."""

from __future__ import annotations

from typing import Any

from broker.replication.fetch_sessions import FetchSessionCache
from broker.replication.fetcher import FollowerSession
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from protocol.types import NodeId

Fetch = REQUESTS[1]


def request(named: dict[str, list[int]], forgotten: dict[str, list[int]] | None = None) -> Any:
    return Fetch(
        replica_id=2, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=0, rack_id="",
        topics=[Fetch.FetchTopic(topic=t, partitions=[
            Fetch.FetchTopic.FetchPartition(partition=i, current_leader_epoch=0, fetch_offset=7,
                                            last_fetched_epoch=-1, log_start_offset=0,
                                            partition_max_bytes=1 << 20) for i in parts
        ]) for t, parts in named.items()],
        forgotten_topics_data=[
            Fetch.ForgottenTopic(topic=t, partitions=p) for t, p in (forgotten or {}).items()
        ],
    )


def test_a_session_keeps_every_partition_and_forgets_on_request() -> None:
    cache = FetchSessionCache()
    session = cache.create(request({"a": [0, 1], "b": [0]}), NodeId(2), 0)
    assert session.session_id > 0 and session.epoch == 1
    assert set(session.partitions) == {("a", 0), ("a", 1), ("b", 0)}
    found, error = cache.lookup(session.session_id, 1)
    assert found is session and error == ErrorCode.NONE
    assert found.update(request({"a": [1]}, forgotten={"b": [0]})) == [("a", 1)]
    assert set(found.partitions) == {("a", 0), ("a", 1)}


def test_unknown_sessions_and_wrong_epochs_are_refused() -> None:
    cache = FetchSessionCache()
    session = cache.create(request({"a": [0]}), NodeId(2), 0)
    assert cache.lookup(session.session_id + 1, 1) == (None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert cache.lookup(session.session_id, 2) == (None, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    session.advance()
    assert cache.lookup(session.session_id, 2)[0] is session
    cache.close(session.session_id)
    assert cache.lookup(session.session_id, 2)[1] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_the_oldest_session_is_evicted_past_the_capacity() -> None:
    cache = FetchSessionCache(capacity=2)
    first, second, third = (cache.create(request({"a": [0]}), NodeId(2), 0) for _ in range(3))
    assert len(cache) == 2
    assert cache.lookup(first.session_id, 1)[1] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.lookup(third.session_id, 1)[0] is third


def test_the_follower_names_only_what_moved_and_starts_over_when_the_session_ends() -> None:
    s = FollowerSession()
    positions = {("a", 0): (0, 5, 0, 0), ("a", 1): (0, 3, 0, 0)}
    assert s.next_request(positions) == ([("a", 0), ("a", 1)], [])  # full: opens a session
    assert (s.session_id, s.epoch) == (0, 0)
    assert s.answered(ErrorCode.NONE, 42)
    assert (s.session_id, s.epoch) == (42, 1)
    moved = {("a", 0): (0, 9, 0, 0), ("a", 1): (0, 3, 0, 0)}
    assert s.next_request(moved) == ([("a", 0)], [])
    assert s.answered(ErrorCode.NONE, 42) and s.epoch == 2
    assert s.next_request({("a", 0): (0, 9, 0, 0)}) == ([], [("a", 1)])
    assert not s.answered(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert (s.session_id, s.epoch) == (0, 0)
    assert s.next_request({("a", 0): (0, 9, 0, 0)}) == ([("a", 0)], [])  # in full again


def test_the_follower_compares_only_what_may_have_moved_between_sweeps() -> None:
    s = FollowerSession()
    s.next_request({("a", 0): (0, 5, 0, 0), ("a", 1): (0, 3, 0, 0), ("a", 2): (0, 1, 0, 0)})
    s.answered(ErrorCode.NONE, 42)
    # ("a", 0) moved, ("a", 1) was answered without moving, ("a", 2) stalled on an error
    assert s.next_request({("a", 0): (0, 6, 0, 0), ("a", 1): (0, 3, 0, 0), ("a", 2): None},
                          complete=False) == ([("a", 0)], [("a", 2)])
    s.answered(ErrorCode.NONE, 42)
    assert s.next_request({}, complete=False) == ([], [])
    s.answered(ErrorCode.NONE, 42)
    # a sweep compares every position: a log start raised by retention is sent
    assert s.next_request({("a", 0): (0, 6, 0, 2), ("a", 1): (0, 3, 0, 0)}) == ([("a", 0)], [])


def test_a_session_unused_for_two_minutes_is_closed_when_another_is_made() -> None:
    cache = FetchSessionCache()
    old = cache.create(request({"a": [0]}), NodeId(2), 0)
    kept = cache.create(request({"a": [0]}), NodeId(3), 60_000)
    cache.create(request({"a": [0]}), NodeId(2), 120_000)  # node 2 started over
    assert old.closed and not kept.closed and len(cache) == 2


def test_a_session_looks_at_every_partition_once_a_second_and_after_a_clock_set_back() -> None:
    session = FetchSessionCache().create(request({"a": [0, 1]}), NodeId(2), 0)
    assert sorted(session.begin(1, 10_000)) == [("a", 0), ("a", 1)]
    session.settle([("a", 0), ("a", 1)])
    assert session.begin(1, 10_500) == []
    assert len(session.begin(1, 11_000)) == 2  # the sweep
    session.settle([("a", 0), ("a", 1)])
    assert len(session.begin(1, 5_000)) == 2  # the wall clock went back
