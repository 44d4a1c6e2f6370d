"""The consume-transform-produce process's rewind, with a stand-in consumer: it seeks every
partition to its committed offset, polls between failed attempts, and gives up (so that the
process takes a new consumer) when the group's offsets cannot be read for long."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.chaos import transactions, workload


class Recorder:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str, str]] = []

    def add(self, op: Any) -> None:
        raise AssertionError(op)

    def note(self, process: str, what: str, name: str, detail: str) -> None:
        self.notes.append((process, what, name))

    @contextmanager
    def calling(self, process: str, what: str) -> Iterator[None]:
        yield


@dataclass
class Part:  # a TopicPartition as committed() answers it (its error is read-only there)
    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class Consumer:
    """Fails `failures` times (an exception, or a partition's error), then answers offset 41."""

    def __init__(self, failures: list[KafkaError | None]) -> None:
        self.failures, self.polls = failures, 0
        self.sought: list[tuple[int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("txn", 0), TopicPartition("txn", 1)]

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[Part]:
        error = self.failures.pop(0) if self.failures else None
        if error is not None and error.code() == KafkaError._TIMED_OUT:
            raise KafkaException(error)
        found = [Part(tp.topic, tp.partition, 41) for tp in parts]
        if error is not None:
            found[1] = Part("txn", 1, -1001, error)
        return found

    def seek(self, tp: TopicPartition) -> None:
        self.sought.append((tp.partition, tp.offset))

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.polls += 1
        return []


def test_a_rewind_seeks_each_partition_after_failed_attempts() -> None:
    c, rec = Consumer([KafkaError(KafkaError._TIMED_OUT), KafkaError(KafkaError.NOT_COORDINATOR)]), Recorder()
    assert transactions._rewind(c, "x1", rec, threading.Event())  # type: ignore[arg-type]
    assert c.sought == [(0, 41), (1, 41)] and c.polls == 2  # no seek on the partition's error
    assert ("x1", "rewind", "NOT_COORDINATOR") in rec.notes and ("x1", "rewind", "_TIMED_OUT") in rec.notes


def test_a_rewind_gives_up_when_the_offsets_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "REWIND_GIVE_UP_S", 0.0)
    c = Consumer([KafkaError(KafkaError._TIMED_OUT)] * 3)
    assert not transactions._rewind(c, "x1", Recorder(), threading.Event())  # type: ignore[arg-type]
    assert c.sought == []


def test_the_java_clients_lines_are_operations_and_the_calls_they_are_in(tmp_path: Path) -> None:
    """A Java call still running after BLOCKED_S is noted `blocked`, as a confluent-kafka one is."""
    rec = workload.Recorder()
    transactions.java_line(rec, f"CALL jx commitTransaction {workload.now() - 7}\n")
    transactions.java_line(rec, f"CALL j1 send {workload.now()}\n")
    rec.note_blocked()
    transactions.java_line(rec, "CALL jx\n")
    rec.note_blocked()
    transactions.java_line(rec, 'OP {"process":"jx","kind":"txn","invoke_s":1.5,"complete_s":2.5,'
                                '"outcome":"ok","writes":[{"key":["ctp",1],"offset":7,"value":"jx-0-0"}],'
                                '"reads":[],"committed_reader":true,"commit_s":2.0}\n')
    rec.save(tmp_path / "history.json")
    notes = [(n.process, n.what, n.name) for n in rec.history.notes]
    assert notes == [("jx", "blocked", "commitTransaction")]
    assert [(op.process, op.writes[0].offset) for op in rec.history.ops] == [("jx", 7)]


def test_a_bounded_call_returns_raises_or_is_given_up() -> None:
    """send_offsets_to_transaction runs this way: librdkafka can block in it far past its
    time-out (librdkafka#5456), and the transformer must go on without it."""
    def fenced() -> None:
        raise KafkaException(KafkaError(KafkaError._FENCED))

    transactions.bounded(lambda: None, 5.0)
    with pytest.raises(KafkaException):
        transactions.bounded(fenced, 5.0)
    release = threading.Event()
    with pytest.raises(transactions.Abandoned, match="still running after 0 s"):
        transactions.bounded(release.wait, 0.05)
    release.set()
