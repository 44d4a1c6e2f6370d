"""`gregor dump` (kafka-dump-log.sh) on a data dir written by real clients, read while
the broker runs: committed and aborted transactions, control records, producer
fields, indexes, snapshots, checkpoints and the decoded internal topics; bad files
give one clear line on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.harness import BrokerProcess, gregor_command, started_broker, unique_topic, wait_until

GROUP = "dump-group"
TXN_ID = "dump-txn"
COMMITTED_OFFSET = 3


def gregor_dump(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*gregor_command(), "dump", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def dump_json(*args: str | Path) -> list[dict[str, Any]]:
    result = gregor_dump("--json", *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    docs: list[dict[str, Any]] = json.loads(result.stdout)
    return docs


@dataclass(frozen=True)
class Written:
    broker: BrokerProcess
    topic: str
    txn_producer_id: int


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Small segments: the log rolls, so `<offset>.snapshot` files are written.
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "300"})])
    futures[topic].result(30)


def _write(bootstrap: str, topic: str) -> None:
    """offsets 0-2 plain (idempotent) k0..k2; a committed transaction c0,c1; an aborted one a0."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):
        plain.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
        plain.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"ck", value=b"c0", partition=0)
    txn.produce(topic, key=b"ck", value=b"c1", partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"ak", value=b"a0", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[CTopicPartition(topic, 0, COMMITTED_OFFSET)], asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def dump_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker; it writes its checkpoint files every 200 ms."""
    with started_broker(tmp_path_factory.mktemp("dump-broker"),
                        {"log.flush.offset.checkpoint.interval.ms": 200}) as b:
        yield b


@pytest.fixture(scope="module")
def written(dump_broker: BrokerProcess) -> Written:
    topic = unique_topic("dump")
    _create_topic(dump_broker.bootstrap, topic)
    _write(dump_broker.bootstrap, topic)
    docs = dump_json(dump_broker.partition_dir(topic))
    pids = {e["producerId"] for d in docs if d["type"] == "log" for e in d["entries"]
            if e.get("isTransactional")}
    assert len(pids) == 1, pids
    return Written(dump_broker, topic, pids.pop())


def _log_entries(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for d in docs:
        if d["type"] == "log":
            yield from d["entries"]


def _records(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["record"] for e in _log_entries(docs) if "record" in e]


def _batches(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in _log_entries(docs) if "baseOffset" in e]


# -- .log segments ------------------------------------------------------------------------


def test_batches_records_and_control_records(written: Written) -> None:
    docs = dump_json("--print-data", written.broker.partition_dir(written.topic))
    data = [(r["offset"], r.get("key"), r.get("payload")) for r in _records(docs) if "endTxnMarker" not in r]
    assert data == [(0, "k0", "v0"), (1, "k1", "v1"), (2, "k2", "v2"),
                    (3, "ck", "c0"), (4, "ck", "c1"), (6, "ak", "a0")]
    markers = [(r["offset"], r["endTxnMarker"]) for r in _records(docs) if "endTxnMarker" in r]
    assert markers == [(5, "COMMIT"), (7, "ABORT")]
    batches = _batches(docs)
    assert all(b["isvalid"] and b["magic"] == 2 for b in batches)
    plain = [b for b in batches if b["lastOffset"] <= 2]
    assert all(not b["isTransactional"] and b["producerId"] >= 0 for b in plain), plain
    assert [b["baseSequence"] for b in plain] == [0, 1, 2]
    txn = [b for b in batches if b["baseOffset"] >= 3]
    assert all(b["isTransactional"] and b["producerId"] == written.txn_producer_id for b in txn), txn
    assert [b["isControl"] for b in txn] == [False, True, False, True]
    assert {d["file"].rsplit("/", 1)[1] for d in docs if d["type"] == "log"} > {"00000000000000000000.log"}, \
        "the small segment size must have rolled the log"


def test_text_output_is_shaped_like_kafka_dump_log(written: Written) -> None:
    result = gregor_dump("--print-data", written.broker.partition_dir(written.topic))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Dumping ") and lines[0].endswith("00000000000000000000.log")
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 "
                               "producerId: ")
    assert "isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0" \
        " CreateTime: " in lines[2]
    assert " compresscodec: none crc: " in lines[2] and lines[2].endswith("isvalid: true")
    assert any(line.startswith("| offset: 0 CreateTime: ") and line.endswith("key: k0 payload: v0")
               for line in lines)
    assert any(line.startswith("| offset: 5 CreateTime: ")
               and "endTxnMarker: COMMIT coordinatorEpoch: " in line for line in lines)
    # Without --print-data: batches and control records only.
    quiet = gregor_dump(written.broker.partition_dir(written.topic)).stdout
    assert "payload" not in quiet and "endTxnMarker: ABORT" in quiet


# -- indexes, snapshots, checkpoints ---------------------------------------------------------


def test_txn_index_snapshot_and_leader_epochs(written: Written) -> None:
    pdir = written.broker.partition_dir(written.topic)
    docs = dump_json(pdir)
    aborted = [e for d in docs if d["type"] == "txnindex" for e in d["entries"]]
    assert aborted == [{"version": 0, "producerId": written.txn_producer_id, "firstOffset": 6,
                        "lastOffset": 7, "lastStableOffset": 8}]
    indexes = [d for d in docs if d["type"] == "index"]
    assert indexes and all(e["position"] >= 0 for d in indexes for e in d["entries"])
    snapshots = [d for d in docs if d["type"] == "snapshot"]
    assert snapshots, "a roll writes a producer snapshot"
    last = snapshots[-1]["entries"]
    assert written.txn_producer_id in {e["producerId"] for e in last}
    epochs = [d for d in docs if d["type"] == "leader-epoch-checkpoint"]
    assert epochs and epochs[0]["entries"][0] == {"epoch": 0, "startOffset": 0}
    # A single file by name, and the --files form of kafka-dump-log.sh.
    txnindex = next(Path(d["file"]) for d in docs if d["type"] == "txnindex")
    assert dump_json("--files", str(txnindex))[0]["entries"] == aborted


def test_data_dir_with_checkpoints_and_internal_topics(written: Written) -> None:
    data_dir = written.broker.data_dir
    wait_until(lambda: (data_dir / "recovery-point-offset-checkpoint").exists(), timeout=30,
               msg="the broker writes its checkpoints")
    docs = dump_json("--decode-internal", data_dir)
    kinds = {d["type"] for d in docs}
    assert {"meta.properties", "offset-checkpoint", "log", "index", "leader-epoch-checkpoint"} <= kinds
    meta = {e["key"]: e["value"] for d in docs if d["type"] == "meta.properties" for e in d["entries"]}
    assert meta["node.id"] == "1"

    txn_states = [r["transaction"] for r in _records(docs) if "transaction" in r
                  and r["transaction"]["transactionalId"] == TXN_ID]
    states = [t["state"] for t in txn_states]
    assert "CompleteCommit" in states and "CompleteAbort" in states, states
    commit = next(t for t in txn_states if t["state"] == "PrepareCommit")
    assert commit["partitions"] == [f"{written.topic}-0"]
    assert commit["producerId"] == written.txn_producer_id

    commits = [r["payload"]["data"] for r in _records(docs) if isinstance(r.get("key"), dict)
               and r["key"]["data"] == {"group": GROUP, "topic": written.topic, "partition": 0}]
    assert [c["offset"] for c in commits] == [COMMITTED_OFFSET]


def test_decoded_internal_text_lines(written: Written) -> None:
    docs = dump_json(written.broker.data_dir)
    txn_dir = next(Path(d["file"]).parent for d in docs
                   if "__transaction_state-" in d["file"] and d["type"] == "log"
                   and any(e.get("count", 0) > 0 for e in d["entries"]))
    text = gregor_dump("--decode-internal", txn_dir).stdout
    assert f"key: transaction_metadata::transactionalId={TXN_ID} payload: producerId:" in text
    assert "state=CompleteCommit" in text


# -- beside a live broker; bad files -------------------------------------------------------------


def test_dump_while_the_broker_appends(written: Written) -> None:
    topic = unique_topic("dump-live")
    bootstrap = written.broker.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"first", partition=0)
    producer.flush(30)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.produce(topic, value=b"x" * 200, partition=0)
            producer.flush(30)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        for _ in range(3):
            result = gregor_dump(written.broker.partition_dir(topic))
            # A batch caught half-written shows up as invalid bytes at the end (rc 1), nothing worse.
            assert result.returncode in (0, 1), result.stderr
            assert "Traceback" not in result.stderr
            assert "baseOffset: 0 lastOffset: 0" in result.stdout
    finally:
        stop.set()
        thread.join()
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(30) == 0, "the broker keeps its data dir: dump takes no lock"
    assert gregor_dump(written.broker.partition_dir(topic)).returncode == 0


def _bad(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_bad_files_give_one_clear_line(written: Written, tmp_path: Path) -> None:
    segment = next(written.broker.partition_dir(written.topic).glob("*.log"))
    whole = segment.read_bytes()
    pdir = tmp_path / "t-0"
    truncated = _bad(pdir / segment.name, whole[:len(whole) - 7])
    cases = {
        truncated: "invalid bytes at the end (from position ",
        _bad(pdir / "00000000000000000000.index", b"\1\2\3"): "not a multiple of the entry size 8",
        _bad(pdir / "00000000000000000000.snapshot", b"garbage garbage"): "",
        _bad(pdir / "leader-epoch-checkpoint", b"zero\nnot a number\n"): "",
        _bad(pdir / "00000000000000000000.txnindex", b"\0" * 33): "not a multiple of the entry size 34",
        _bad(pdir / "notes.txt", b"hello"): "Ignoring unknown file",
        tmp_path / "missing.log": "no such file or directory",
    }
    result = gregor_dump(*cases)  # one run: each bad file is one line, the others still dumped
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(cases), result.stderr
    for line, (path, message) in zip(lines, cases.items(), strict=True):
        assert line.startswith(f"gregor dump: {path}: ") and message in line, line
    assert f"invalid bytes at the end of {segment.name}" in result.stdout
    assert "baseOffset: 0 lastOffset: 0" in result.stdout, "the whole batches before the cut are shown"
    assert gregor_dump().returncode == 2
