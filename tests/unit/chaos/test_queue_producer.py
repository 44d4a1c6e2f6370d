"""A queue producer that librdkafka declared fatal is replaced, as one that stopped delivering
is (seed 91: p1's "sequence desynchronization" ended the thread and failed the run)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.chaos import workload
from tests.chaos.history import Kind, Outcome


class FakeProducer:
    """Delivers every value at once, or raises librdkafka's fatal error from its `fail_at`-th produce."""

    def __init__(self, fail_at: int | None, stop: threading.Event, stop_after: int) -> None:
        self.fail_at, self.stop, self.stop_after, self.produced = fail_at, stop, stop_after, 0

    def produce(self, topic: str, value: bytes, partition: int, on_delivery: Any) -> None:
        self.produced += 1
        if self.produced == self.fail_at:
            # as librdkafka raises it from produce(): the code _FATAL, the fatal flag not set (seed 92)
            raise KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error"))
        on_delivery(None, FakeMessage(topic, partition))
        if self.produced >= self.stop_after:
            self.stop.set()

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0


class FakeMessage:
    def __init__(self, topic: str, partition: int) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return 0


def test_a_producer_that_turned_fatal_is_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stop = threading.Event()
    made = [FakeProducer(2, stop, 100), FakeProducer(None, stop, 3)]
    monkeypatch.setattr(workload, "_queue_producer", lambda *_: made.pop(0))
    monkeypatch.setattr(workload, "PACE_S", 0.0)
    rec = workload.Recorder()
    workload.produce_queue("unused:9092", "p1", rec, stop)
    assert not made, "a second producer was made"
    sent = [(op.writes[0].value, op.outcome) for op in rec.history.ops if op.kind == Kind.SEND]
    assert sent == [("p1-0", Outcome.OK), ("p1-2", Outcome.OK), ("p1-3", Outcome.OK), ("p1-4", Outcome.OK)]
    rec.save(tmp_path / "history.json")
    assert [(n.process, n.what, n.name) for n in rec.history.notes] == [("p1", "produce", "fatal")]
