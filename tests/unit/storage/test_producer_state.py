"""Idempotent-producer validation and duplicate detection on the leader append path."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader, ControlType, build_control_batch, iter_batches
from storage.log import AppendResult, Log
from storage.log_config import LogConfig
from storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateInfo,
    decrement_sequence,
    in_sequence,
)
from tests.unit.storage.batches import make_batch

NOW = 1_000_000
PID = 4000


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(path / "topic-0", LogConfig(**cfg), 0, None, True, NOW)  # type: ignore[arg-type]


def batch(seq: int, n: int = 1, epoch: int = 0, pid: int = PID, **kw: object) -> bytes:
    values = [f"v{seq}-{i}".encode() for i in range(n)]
    return make_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)  # type: ignore[arg-type]


def append(log: Log, records: bytes) -> AppendResult:
    return log.append_as_leader(records, leader_epoch=0, now_ms=NOW)


def batch_count(log: Log) -> int:
    info = log.read(0, 10**8, log.log_end_offset, True)
    return len(list(iter_batches(info.records)))


def test_sequence_arithmetic() -> None:
    assert in_sequence(4, 5) and in_sequence(INT32_MAX, 0) and in_sequence(-1, 0)
    assert not in_sequence(4, 6) and not in_sequence(4, 4) and not in_sequence(INT32_MAX, 1)
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert BatchMetadata(1, 50, 3, 0).first_seq == INT32_MAX - 1
    assert BatchMetadata(1, 50, 3, 0).first_offset == 47


def test_same_batch_twice_is_one_copy(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch([b"plain"]))
    b = batch(0, n=3)
    first = append(log, b)
    again = append(log, b)
    assert (first.error, first.base_offset, first.last_offset) == (ErrorCode.NONE, 1, 3)
    assert (again.error, again.base_offset, again.last_offset) == (ErrorCode.NONE, 1, 3)
    assert log.log_end_offset == 4 and batch_count(log) == 2


def test_retry_of_any_of_last_five_is_duplicate(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sent = []
    seq = 0
    for n in (1, 2, 3, 1, 2, 1):
        b = batch(seq, n=n)
        sent.append((b, append(log, b)))
        seq += n
    end = log.log_end_offset
    for b, original in sent[1:]:
        r = append(log, b)
        assert (r.error, r.base_offset, r.last_offset) == (
            ErrorCode.NONE,
            original.base_offset,
            original.last_offset,
        )
    # the sixth-newest batch fell out of the cache: Kafka sees an out-of-order sequence
    r = append(log, sent[0][0])
    assert r.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and r.base_offset == -1
    assert log.log_end_offset == end


def test_out_of_order_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert append(log, batch(0, n=2)).error is ErrorCode.NONE
    r = append(log, batch(3))
    assert r.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and r.error_message
    # a partial overlap is no duplicate either
    assert append(log, batch(1)).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(2)).error is ErrorCode.NONE
    assert log.log_end_offset == 3


def test_unknown_producer_accepts_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert append(log, batch(17, epoch=3)).error is ErrorCode.NONE
    assert append(log, batch(18, epoch=3)).error is ErrorCode.NONE
    assert append(log, batch(20, epoch=3)).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_stale_epoch_is_invalid_producer_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    old = batch(0, epoch=0)
    assert append(log, old).error is ErrorCode.NONE
    assert append(log, batch(0, epoch=1)).error is ErrorCode.NONE
    assert append(log, batch(1, epoch=0)).error is ErrorCode.INVALID_PRODUCER_EPOCH
    # a retry from the fenced epoch is not a duplicate any more
    assert append(log, old).error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2


def test_epoch_bump_resets_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(3):
        assert append(log, batch(seq)).error is ErrorCode.NONE
    assert append(log, batch(3, epoch=1)).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(0, epoch=1)).error is ErrorCode.NONE
    assert append(log, batch(1, epoch=1)).error is ErrorCode.NONE
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 2


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert append(log, batch(INT32_MAX - 1, n=2)).error is ErrorCode.NONE  # last seq = MAX
    wrapped = batch(0, n=3)
    r = append(log, wrapped)
    assert r.error is ErrorCode.NONE
    straddling = batch(3, n=1)
    assert append(log, straddling).error is ErrorCode.NONE
    assert append(log, wrapped).base_offset == r.base_offset  # duplicate after the wrap
    assert append(log, batch(INT32_MAX)).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(4)).error is ErrorCode.NONE


def test_batch_straddling_the_wrap_is_detected_as_duplicate(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    b = batch(INT32_MAX - 1, n=4)  # sequences MAX-1, MAX, 0, 1
    r = append(log, b)
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 1 and entry.batches[0].first_seq == INT32_MAX - 1
    assert append(log, b).base_offset == r.base_offset
    assert append(log, batch(2)).error is ErrorCode.NONE


def test_duplicate_returns_original_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    b = batch(0)
    first = log.append_as_leader(b, 0, now_ms=5_000)
    again = log.append_as_leader(b, 0, now_ms=9_000)
    assert first.log_append_time == again.log_append_time == 5_000
    assert again.base_offset == first.base_offset


def test_a_duplicate_is_answered_with_the_timestamp_kept_for_its_batch(tmp_path: Path) -> None:
    """As a running Kafka 4.3 answers it (the differential suite), also on a CreateTime topic."""
    log = open_log(tmp_path)
    b = batch(0)
    first = append(log, b)
    assert first.log_append_time == -1
    assert append(log, b).log_append_time == BatchHeader.parse(b).max_timestamp


def test_rejected_batch_leaves_state_untouched(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(0))
    before = log.producer_state.last_entry(PID)
    append(log, batch(5))
    append(log, batch(0, epoch=-1))
    assert log.producer_state.last_entry(PID) == before


def test_failed_write_does_not_commit_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    append(log, batch(0))
    before = log.producer_state.last_entry(PID)

    def fail(*_a: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(log.active_segment, "append", fail)
    with pytest.raises(OSError):
        append(log, batch(1))
    monkeypatch.undo()
    assert log.producer_state.last_entry(PID) == before
    assert append(log, batch(1)).error is ErrorCode.NONE


def test_producers_are_independent(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert append(log, batch(0, pid=1)).error is ErrorCode.NONE
    assert append(log, batch(0, pid=2)).error is ErrorCode.NONE
    assert append(log, batch(1, pid=1)).error is ErrorCode.NONE
    assert append(log, batch(0, pid=2)).base_offset == 1
    assert [p.producer_id for p in log.active_producers()] == [1, 2]


def test_non_idempotent_batches_bypass_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    b = make_batch([b"x"])
    assert append(log, b).base_offset == 0
    assert append(log, b).base_offset == 1
    assert log.active_producers() == []


def test_transactional_batches_and_markers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch([b"pad"]))
    assert append(log, batch(0, transactional=True, timestamp=7_000)).error is ErrorCode.NONE
    assert append(log, batch(1, transactional=True, timestamp=8_000)).error is ErrorCode.NONE
    info = log.active_producers()
    assert info == [ProducerStateInfo(PID, 0, 1, 8_000, -1, 1)]
    r = append(log, batch(2))  # a plain write while the transaction is open
    assert r.error is ErrorCode.INVALID_TXN_STATE
    marker = build_control_batch(
        ControlType.COMMIT, producer_id=PID, producer_epoch=0, coordinator_epoch=3, timestamp=9_000
    )
    log.append_control_batch(marker, 0, NOW)
    assert log.active_producers() == [ProducerStateInfo(PID, 0, 1, 9_000, 3, -1)]
    assert append(log, batch(2)).error is ErrorCode.NONE


def test_entry_keeps_five_batches() -> None:
    with pytest.raises(ValueError):
        ProducerStateEntry(1, 0, tuple(BatchMetadata(i, i, 0, 0) for i in range(6)))
