"""The pure parts of the admin tools: reset-offsets arithmetic, option parsing, lag
rows, topic lines, and `gregor dump` on files it writes itself (no broker)."""

from __future__ import annotations

import io
import json
from argparse import Namespace
from pathlib import Path

import pytest
from kafka.structs import TopicPartition

from broker.tools import dump, groups, topics
from broker.tools.common import ToolError, key_values, matching, progress
from storage.index import OFFSET_ENTRY, TXN_ENTRY, AbortedTxn
from tests.integration import wire

# -- groups: reset-offsets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "current", "expected"),
    [
        (groups.ResetTarget("earliest"), 5, 2),
        (groups.ResetTarget("latest"), 5, 9),
        (groups.ResetTarget("current"), 5, 5),
        (groups.ResetTarget("current"), None, 9),
        (groups.ResetTarget("offset", 100), 5, 9),
        (groups.ResetTarget("offset", 0), 5, 2),
        (groups.ResetTarget("offset", 4), None, 4),
        (groups.ResetTarget("shift", 3), 5, 8),
        (groups.ResetTarget("shift", -10), 5, 2),
        (groups.ResetTarget("shift", 10), 5, 9),
    ],
)
def test_new_offset_is_clamped_to_the_log(
    target: groups.ResetTarget, current: int | None, expected: int
) -> None:
    assert groups.new_offset(target, current, earliest=2, latest=9) == expected


def test_datetime_reset_takes_the_offset_for_the_time_or_the_end() -> None:
    target = groups.ResetTarget("datetime", 0)
    assert groups.new_offset(target, 5, 2, 9, by_time=4) == 4
    assert groups.new_offset(target, 5, 2, 9, by_time=-1) == 9, "no record that late: the log end"
    assert groups.new_offset(target, 5, 2, 9, by_time=None) == 9


def test_shift_without_committed_offset_is_refused() -> None:
    with pytest.raises(ToolError, match="no current committed offset"):
        groups.new_offset(groups.ResetTarget("shift", 1), None, 0, 9, tp_text="t-0")


def test_parse_options() -> None:
    assert groups.parse_topic_spec("t") == ("t", None)
    assert groups.parse_topic_spec("t:0,2") == ("t", [0, 2])
    with pytest.raises(ToolError):
        groups.parse_topic_spec("t:x")
    assert groups.parse_datetime("1970-01-01T00:00:01.500Z") == 1500
    assert groups.parse_datetime("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(ToolError, match="--to-datetime"):
        groups.parse_datetime("yesterday")
    assert key_values(["a=1", "b = x=y"], "--config") == {"a": "1", "b": "x=y"}
    with pytest.raises(ToolError, match="key=value"):
        key_values(["a"], "--config")
    assert matching("t.*", ["t1", "t2", "xt"]) == ["t1", "t2"]
    assert matching("t[", ["t[", "t"]) == ["t["], "an invalid regex matches its own name"


def test_offset_rows_show_lag_and_owner() -> None:
    tp0, tp1, tp2 = (TopicPartition("t", p) for p in range(3))
    owner = groups.Member("m-1", "/127.0.0.1", "c")
    rows = groups.offset_rows("g", {tp0: 3, tp1: None}, {tp0: 10, tp1: 4, tp2: 7}, {tp2: owner})
    assert rows == [
        ["g", "t", "0", "3", "10", "7", "-", "-", "-"],
        ["g", "t", "1", "-", "4", "-", "-", "-", "-"],
        ["g", "t", "2", "-", "7", "-", "m-1", "/127.0.0.1", "c"],
    ]


# -- topics: lines ---------------------------------------------------------------------------


def test_topic_and_partition_lines() -> None:
    p = {"partition_index": 0, "leader_id": -1, "replica_nodes": [1, 2, 3], "isr_nodes": [2],
         "offline_replicas": [1]}
    topic = {"name": "t", "topic_id": "id", "partitions": [p]}
    assert topics.topic_line(topic, {"b": "2", "a": "1"}) == (
        "Topic: t\tTopicId: id\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: a=1,b=2")
    assert topics.partition_line("t", p) == (
        "\tTopic: t\tPartition: 0\tLeader: none\tReplicas: 1,2,3\tIsr: 2\tOffline: 1")
    assert topics.under_replicated(p) and topics.unavailable(p)


# -- dump: files made here ---------------------------------------------------------------------


def _run_dump(*paths: Path, print_data: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = Namespace(paths=list(paths), files=None, print_data=print_data, decode_internal=False, json=True)
    return dump.run(args, out, err), out.getvalue(), err.getvalue()


def test_dump_segment_index_and_txn_index(tmp_path: Path) -> None:
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    batch = wire.build_batch([b"a", b"b"], producer_id=7, producer_epoch=1, base_sequence=0,
                             keys=[b"k", None])
    (pdir / "00000000000000000000.log").write_bytes(batch)
    (pdir / "00000000000000000000.index").write_bytes(OFFSET_ENTRY.pack(1, 0))
    (pdir / "00000000000000000000.txnindex").write_bytes(AbortedTxn(7, 0, 1, 2).pack())
    rc, out, err = _run_dump(pdir, print_data=True)
    assert (rc, err) == (0, "")
    docs = {d["type"]: d["entries"] for d in json.loads(out)}
    head, *records = docs["log"]
    assert head == {"logStartingOffset": 0}
    b = records[0]
    fields = (b["baseOffset"], b["lastOffset"], b["producerId"], b["producerEpoch"], b["isvalid"])
    assert fields == (0, 1, 7, 1, True)
    assert [(r["record"]["offset"], r["record"]["key"], r["record"]["payload"], r["record"]["sequence"])
            for r in records[1:]] == [(0, "k", "a", 0), (1, None, "b", 1)]
    assert docs["index"] == [{"offset": 1, "position": 0}]
    assert docs["txnindex"][0]["producerId"] == 7 and TXN_ENTRY.size == 34


def test_dump_corrupt_batch_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    data = bytearray(wire.build_batch([b"payload"]))
    data[-1] ^= 0xFF  # the CRC no longer matches
    log.write_bytes(bytes(data))
    rc, out, err = _run_dump(log)
    assert rc == 1 and "fails its CRC check" in err
    assert json.loads(out)[0]["entries"][1]["isvalid"] is False


def test_progress_lines_only_for_long_operations() -> None:
    out = io.StringIO()
    for done in range(1, 6):
        progress(out, done, 5, "Deleted topics")
    assert out.getvalue() == "", "a short operation prints no progress"
    for done in range(1, 41):
        progress(out, done, 40, "Deleted topics")
    lines = out.getvalue().splitlines()
    assert lines[0] == "Deleted topics: 4/40" and lines[-1] == "Deleted topics: 40/40" and len(lines) == 10
