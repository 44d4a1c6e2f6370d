"""An assigned reader that reads nothing for READER_GIVE_UP_S is replaced by a consumer that
starts after the offsets it read (seed 118's `tc`: librdkafka's consumer deadlocked,
confluentinc/librdkafka#5476, and read nothing for its last 36 minutes)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING

from tests.chaos import workload
from tests.chaos.history import Kind


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._at = (topic, partition, offset)

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def value(self) -> bytes:
        return f"v{self._at[2]}".encode()

    def error(self) -> None:
        return None


class FakeConsumer:
    """Returns its batches one consume() each, then nothing (as a deadlocked consumer does)."""

    def __init__(self, batches: list[list[FakeMessage]], stop: threading.Event | None = None) -> None:
        self.batches, self.stop = batches, stop
        self.assigned: list[tuple[str, int, int]] = []
        self.closed = threading.Event()

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, _count: int, _timeout: float) -> list[FakeMessage]:
        if self.batches:
            return self.batches.pop(0)
        if self.stop is not None:
            self.stop.set()
        time.sleep(0.01)
        return []

    def close(self) -> None:
        self.closed.set()


def test_a_reader_that_reads_nothing_for_long_is_replaced_after_what_it_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stop = threading.Event()
    stuck = FakeConsumer([[FakeMessage("txn", 0, 0), FakeMessage("txn", 2, 5), FakeMessage("txn", 0, 1)]])
    fresh = FakeConsumer([[FakeMessage("txn", 0, 2)]], stop)
    made = [stuck, fresh]
    monkeypatch.setattr(workload, "consumer", lambda *_a, **_k: made.pop(0))
    monkeypatch.setattr(workload, "READER_GIVE_UP_S", 0.2)
    rec = workload.Recorder()
    workload.poll_assigned("unused:9092", ["txn"], "tc", True, rec, stop)
    assert not made, "no second consumer was made"
    assert stuck.assigned == [("txn", p, OFFSET_BEGINNING) for p in range(3)]
    assert fresh.assigned == [("txn", 0, 2), ("txn", 1, OFFSET_BEGINNING), ("txn", 2, 6)]
    assert stuck.closed.wait(5) and fresh.closed.is_set()
    polls = [[(r.key, r.offset) for r in op.reads] for op in rec.history.ops if op.kind == Kind.POLL]
    assert polls == [[(("txn", 0), 0), (("txn", 2), 5), (("txn", 0), 1)], [(("txn", 0), 2)]]
    rec.save(tmp_path / "history.json")
    assert [(n.process, n.what, n.name) for n in rec.history.notes] == [("tc", "poll", "gave up")]
