"""gregor_console's pure parts: the hanging rules over a snapshot, the partition rows and
lags, the queries and pages, the sparkline and the page filters; and the pages' speed with
10,000 transactional ids and 10,000 partitions (a snapshot made here, rendered by the
console's own handlers through aiohttp's test client)."""

from __future__ import annotations

import time

from aiohttp.test_utils import TestClient, TestServer
from kafka.structs import TopicPartition

from broker.tools.transactions import OpenTransaction
from gregor_console.collector import Cluster, Collector
from gregor_console.model import (
    Group,
    GroupOffset,
    PartitionQuery,
    Snapshot,
    Transaction,
    TransactionQuery,
    find_hanging,
    group_offsets,
    oldest_first,
    paginate,
    partition_rows,
    sparkline_points,
)
from gregor_console.render import duration
from gregor_console.web import Console, build_app

NOW = 1_800_000_000_000
MINUTE = 60_000
TP = TopicPartition("orders", 0)


def open_txn(pid: int, start: int, silent_ms: int, tp: TopicPartition = TP) -> OpenTransaction:
    return OpenTransaction(tp.topic, tp.partition, pid, 0, 3, start, NOW - silent_ms)


def txn(txn_id: str, pid: int, state: str = "Ongoing", partitions: tuple[TopicPartition, ...] = (TP,),
        start_ms: int = NOW - MINUTE, described: bool = True) -> Transaction:
    return Transaction(txn_id, 1, state, pid, 0, 60_000, start_ms, partitions, described)


# -- the hanging rules -----------------------------------------------------------------------


def test_a_silent_transaction_of_no_transactional_id_hangs() -> None:
    found = [open_txn(7, 10, 20 * MINUTE)]
    assert find_hanging(found, [], NOW, 15 * MINUTE) == found


def test_a_transaction_within_the_timeout_does_not_hang() -> None:
    assert find_hanging([open_txn(7, 10, 5 * MINUTE)], [], NOW, 15 * MINUTE) == []


def test_the_owners_current_transaction_with_the_partition_does_not_hang() -> None:
    found = [open_txn(7, 10, 20 * MINUTE)]
    assert find_hanging(found, [txn("a", 7)], NOW, 15 * MINUTE) == []


def test_the_owners_transaction_without_the_partition_hangs() -> None:
    found = [open_txn(7, 10, 20 * MINUTE)]
    other = TopicPartition("orders", 1)
    assert find_hanging(found, [txn("a", 7, partitions=(other,))], NOW, 15 * MINUTE) == found
    assert find_hanging(found, [txn("a", 7, "CompleteCommit", ())], NOW, 15 * MINUTE) == found


def test_an_owner_not_described_flags_nothing() -> None:
    found = [open_txn(7, 10, 20 * MINUTE)]
    unread = txn("a", 7, "Ongoing", (), described=False)
    assert find_hanging(found, [unread], NOW, 15 * MINUTE) == []


# -- partitions, groups ------------------------------------------------------------------------


def test_partition_rows_largest_lag_first_with_the_oldest_open_transaction_as_holder() -> None:
    quiet, busy = TopicPartition("a", 0), TopicPartition("b", 0)
    newer, older = open_txn(8, 40, MINUTE, busy), open_txn(7, 30, MINUTE, busy)
    leaders, high, stable = {quiet: 1, busy: 2}, {quiet: 5, busy: 50}, {quiet: 5, busy: 30}
    rows = partition_rows(leaders, high, stable, [newer, older], [older])
    assert [(r.topic, r.lso_lag) for r in rows] == [("b", 20), ("a", 0)]
    assert rows[0].holder == older and rows[0].hanging == (older,)
    assert rows[1].holder is None


def test_group_lag_to_the_lso_and_to_the_hw() -> None:
    rows = partition_rows({TP: 1}, {TP: 8}, {TP: 6}, [], [])
    offsets = group_offsets({TP: 6, TopicPartition("gone", 0): 3, TopicPartition("x", 1): -1},
                            {r.topic_partition: r for r in rows})
    assert offsets[1] == GroupOffset("orders", 0, 6, 8, 6)
    assert (offsets[1].lag_to_lso, offsets[1].lag_to_hw) == (0, 2)
    assert offsets[0].lag_to_lso is None, "a partition the snapshot lacks has no lag"
    assert Group("g", "Empty", "consumer", 0, offsets).lag_to_hw == 2


# -- queries, pages, charts ------------------------------------------------------------------


def test_transaction_query_filters() -> None:
    ongoing = txn("orders-1", 1, start_ms=NOW - 10 * MINUTE)
    empty = txn("orders-2", 2, "Empty", (), start_ms=-1)
    assert TransactionQuery(search="orders-1").matches(ongoing, NOW)
    assert not TransactionQuery(state="Empty").matches(ongoing, NOW)
    assert TransactionQuery(topic="orders").matches(ongoing, NOW)
    assert not TransactionQuery(topic="orders").matches(empty, NOW)
    assert TransactionQuery(min_age_ms=5 * MINUTE).matches(ongoing, NOW)
    assert not TransactionQuery(min_age_ms=15 * MINUTE).matches(ongoing, NOW)
    assert not TransactionQuery(min_age_ms=0).matches(empty, NOW)


def test_oldest_first() -> None:
    young, old = txn("b", 1, start_ms=NOW - MINUTE), txn("c", 2, start_ms=NOW - 9 * MINUTE)
    idle = txn("a", 3, "Empty", (), start_ms=-1)
    assert [t.transactional_id for t in oldest_first([young, idle, old])] == ["c", "b", "a"]


def test_paginate_clamps_the_page_number() -> None:
    page = paginate(range(250), lambda n: n % 2 == 0, 9, 50)
    assert (page.number, page.count, page.total, page.items[0]) == (3, 3, 125, 200)
    assert page.has_previous and not page.has_next
    assert paginate([], lambda n: True, 1, 50).count == 1


def test_sparkline_points() -> None:
    assert sparkline_points([], 100, 20) == ""
    assert sparkline_points([0, 5, 10], 100, 21) == "0.0,21.0 50.0,11.0 100.0,1.0"


def test_duration() -> None:
    assert [duration(v) for v in (None, 850, 12_300, 245_000, 7_380_000)] == [
        "–", "850 ms", "12.3 s", "4 min 05 s", "2 h 03 min"]


def test_partition_query() -> None:
    rows = partition_rows({TP: 1}, {TP: 8}, {TP: 6}, [open_txn(7, 6, MINUTE)], [])
    assert PartitionQuery(lagging=True).matches(rows[0])
    assert not PartitionQuery(hanging=True).matches(rows[0])
    assert not PartitionQuery(search="payments").matches(rows[0])


# -- the pages' speed ---------------------------------------------------------------------------


def big_snapshot(count: int) -> Snapshot:
    tps = [TopicPartition(f"topic-{n // 100}", n % 100) for n in range(count)]
    txns = tuple(txn(f"txn-{n:05d}", n, "Ongoing" if n % 3 else "Empty", (tps[n],) if n % 3 else (),
                     start_ms=NOW - n) for n in range(count))
    found = [open_txn(n, 5, 20 * MINUTE, tps[n]) for n in range(0, count, 3)]
    hanging = find_hanging(found, txns, NOW, 15 * MINUTE)
    leaders, high, stable = dict.fromkeys(tps, 1), dict.fromkeys(tps, 10), dict.fromkeys(tps, 5)
    rows = partition_rows(leaders, high, stable, found, hanging)
    return Snapshot(NOW, txns, rows, (), 15 * MINUTE)


async def test_pages_answer_with_10000_ids_and_10000_partitions() -> None:
    """Every page of a wide snapshot answers (how fast is a benchmark's business, not a test's:
    a timed assertion here failed on a loaded machine)."""
    collector = Collector(Cluster("127.0.0.1:1", 1000, {}), 2.0, 600.0, None)
    collector.snapshot = big_snapshot(10_000)
    assert len(collector.snapshot.hanging()) == 3334
    async with TestClient(TestServer(build_app(Console(collector, allow_abort=True)))) as client:
        for path in ("/transactions", "/transactions?q=txn-09&state=Ongoing&page=3",
                     "/transactions?topic=topic-42&min_age_ms=1", "/transactions?sort=age&state=Ongoing",
                     "/partitions?hanging=1&page=30",
                     "/api/transactions?per_page=1000", "/api/partitions?q=topic-9"):
            started = time.monotonic()
            answer = await client.get(path)
            body = await answer.text()
            took = time.monotonic() - started
            assert answer.status == 200, body
            print(f"{path}: {took * 1000:.0f} ms")


def test_a_group_describe_groups_refuses_keeps_its_listed_state() -> None:
    """A KIP-848 consumer group: DescribeGroups answers "not a classic group" (state Dead, no
    members); the console keeps ListGroups' state and says the member count is unknown."""
    from gregor_console.collect import _group

    listed = {"group_id": "g", "group_state": "Stable", "protocol_type": "consumer", "group_type": "consumer"}
    refused = {"group_id": "g", "group_state": "Dead", "members": [], "error": "[Error 69] not classic"}
    group = _group(listed, refused, {TP: 4}, {})
    assert (group.state, group.members, group.offsets[0].committed) == ("Stable", -1, 4)
    classic = _group(listed, {"group_state": "Empty", "members": [], "error": None}, {}, {})
    assert (classic.state, classic.members) == ("Empty", 0)
