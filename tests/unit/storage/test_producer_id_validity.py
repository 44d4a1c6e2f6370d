"""Producer ids below -1, impossible snapshots and refused updates: an append is
refused before its first byte, and opening a log never fails on what it stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader, ControlType, build_control_batch
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import ProducerStateEntry
from storage.snapshot import SnapshotEntry, snapshot_path, write_snapshot
from tests.unit.storage.batches import make_batch

NOW = 1_000_000
INT64_MIN = -(2**63)


def open_log(path: Path, clean: bool = True) -> Log:
    return Log.open(path / "topic-0", LogConfig(), 0, None, clean, NOW)


@pytest.mark.parametrize("pid", [-2, -1000, INT64_MIN])
def test_batch_with_producer_id_below_minus_one_has_no_producer(tmp_path: Path, pid: int) -> None:
    log = open_log(tmp_path)
    plain = make_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert log.append_as_leader(plain, 0, NOW).error is ErrorCode.NONE
    assert log.active_producers() == []
    txn = make_batch([b"t"], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    assert log.append_as_leader(txn, 0, NOW).error is ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 1


@pytest.mark.parametrize(("pid", "epoch"), [(-1, 0), (-2, 0), (INT64_MIN, 0), (3, -1)])
def test_marker_without_producer_is_refused_unwritten(tmp_path: Path, pid: int, epoch: int) -> None:
    log = open_log(tmp_path)
    size = log.size_in_bytes
    result = log.append_txn_marker(pid, epoch, True, 0, 0, NOW)
    assert result.error is ErrorCode.INVALID_REQUEST
    assert (log.log_end_offset, log.size_in_bytes) == (0, size)


def test_update_refused_before_the_first_byte(tmp_path: Path) -> None:
    """A producer-state update the map refuses raises before the segment is written."""
    log = open_log(tmp_path)
    bad = ProducerStateEntry(-5)
    control = build_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=NOW
    )
    with pytest.raises(ValueError, match="invalid producer id"):
        log._append(bytearray(control), BatchHeader.parse(control), NOW, bad)
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)


def test_stored_batches_without_producer_id_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a"], producer_id=-2, producer_epoch=0, base_sequence=0), 0, NOW)
    marker = build_control_batch(
        ControlType.ABORT, producer_id=-2, producer_epoch=0, coordinator_epoch=0, timestamp=NOW, base_offset=1
    )
    log.active_segment.append(BatchHeader.parse(marker), marker)  # as an older version stored it
    for seg in log.segments:
        seg.close()
    reopened = open_log(tmp_path, clean=False)
    assert reopened.log_end_offset == 2
    assert reopened.active_producers() == []


@pytest.mark.parametrize(
    "entries",
    [
        [SnapshotEntry(-2, 0, 0, 0, 0, NOW, -1, -1)],
        [SnapshotEntry(1, 0, 0, 0, 0, NOW, -1, 0), SnapshotEntry(1, 0, 0, 0, 0, NOW, -1, -1)],
        [SnapshotEntry(1, 0, 0, 0, 0, NOW, -1, 0), SnapshotEntry(2, 0, 0, 0, 0, NOW, -1, 0)],
    ],
    ids=["negative-pid", "pid-twice", "two-txns-same-start"],
)
def test_impossible_snapshot_is_deleted_and_rebuilt(tmp_path: Path, entries: list[SnapshotEntry]) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0), 0, NOW)
    log.close()
    path = snapshot_path(tmp_path / "topic-0", 1)
    write_snapshot(path, entries)  # CRC-valid, content impossible
    reopened = open_log(tmp_path)
    assert [p.producer_id for p in reopened.active_producers()] == [7]


def test_failure_after_the_write_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error between the segment write and the producer-state update (an I/O error
    in the transaction index, say) takes the batch back out: log, LEO and state agree."""
    log = open_log(tmp_path)
    assert log.append_as_leader(make_batch([b"a"], producer_id=3, producer_epoch=0, base_sequence=0), 0, NOW)
    size, end = log.size_in_bytes, log.log_end_offset

    def broken(*_args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(log.producer_state, "update", broken)
    with pytest.raises(OSError):
        log.append_as_leader(make_batch([b"b"], producer_id=3, producer_epoch=0, base_sequence=1), 0, NOW)
    assert (log.size_in_bytes, log.log_end_offset) == (size, end)
    monkeypatch.undo()
    again = log.append_as_leader(make_batch([b"b"], producer_id=3, producer_epoch=0, base_sequence=1), 0, NOW)
    assert (again.error, again.base_offset) == (ErrorCode.NONE, end)
