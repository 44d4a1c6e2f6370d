"""A history is written as `asdict` would write it (without its deep copies, which took over two
minutes for a million operations), read back equal, and never left half-written."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tests.chaos.history import Fault, History, Kind, Note, Op, Outcome, ProcessId, Read, Write

OPS = [
    Op(ProcessId("p1"), Kind.SEND, 1.0, 2.0, Outcome.OK, (Write(("queue", 1), "p1-0", 7),)),
    Op(ProcessId("t1"), Kind.TXN, 1.5, 3.0, Outcome.INFO,
       (Write(("txn", 0), "t1-0"), Write(("txn", 2), "t1-1")), (Read(("ctp", 1), 4, "x"),), commit_s=2.5),
    Op(ProcessId("tu"), Kind.POLL, 2.0, 2.1, Outcome.OK, reads=(Read(("txn", 0), 0, "t1-0"),),
       committed_reader=False),
    Op(ProcessId("cs"), Kind.ASSIGN, 3.0, 3.0, Outcome.OK),
]


def test_an_operation_is_written_as_asdict_writes_it() -> None:
    for op in OPS:
        assert json.dumps(op.to_json()) == json.dumps(asdict(op))


def test_a_history_is_read_back_as_it_was_saved(tmp_path: Path) -> None:
    history = History(list(OPS), [Fault("pause", 1.0, 4.0, "n2")],
                      [Note(ProcessId("t1"), 2.0, "commit", "TIMED_OUT")])
    history.save(tmp_path / "history.json")
    assert History.load(tmp_path / "history.json") == history
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]  # the partial file was renamed
