"""Durability of producer state: snapshots at roll and close, rebuild on open,
corrupt snapshots, deletion with segments, truncation and expiration."""

from __future__ import annotations

from pathlib import Path

from protocol.errors import ErrorCode
from protocol.record_batch import ControlType, build_control_batch
from storage.log import AppendResult, Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.snapshot import list_snapshots, read_snapshot, snapshot_path
from tests.unit.storage.batches import make_batch, replicated

NOW = 1_000_000
PID = 77
DAY = 86_400_000


def config(**cfg: object) -> LogConfig:
    return LogConfig(**cfg)  # type: ignore[arg-type]


def open_log(path: Path, clean: bool = True, now_ms: int = NOW, **cfg: object) -> Log:
    return Log.open(path / "topic-0", config(**cfg), 0, None, clean, now_ms)


def batch(seq: int, n: int = 1, epoch: int = 0, pid: int = PID, timestamp: int = NOW) -> bytes:
    values = [b"x" * 100 for _ in range(n)]
    return make_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=timestamp)


def append(log: Log, records: bytes) -> AppendResult:
    return log.append_as_leader(records, leader_epoch=0, now_ms=NOW)


def fill(log: Log, batches: int, pid: int = PID) -> list[tuple[bytes, AppendResult]]:
    sent = []
    for seq in range(batches):
        b = batch(seq, pid=pid)
        r = append(log, b)
        assert r.error is ErrorCode.NONE
        sent.append((b, r))
    replicated(log)
    return sent


def crash(log: Log) -> None:
    """Drop the log without the clean-close snapshot."""
    for seg in log.segments:
        seg.close()


def snapshots(log: Log) -> list[int]:
    return list(list_snapshots(log.directory))


def test_snapshot_at_roll_and_close(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    fill(log, 10)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert snapshots(log) == bases[1:]  # one per rolled-to segment, none at 0
    log.close()
    assert snapshots(log) == [*bases[1:], log.log_end_offset]
    entries = read_snapshot(snapshot_path(log.directory, log.log_end_offset))
    assert [(e.producer_id, e.last_sequence, e.last_offset) for e in entries] == [(PID, 9, 9)]


def test_clean_reopen_needs_no_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    log.close()
    reopened = open_log(tmp_path, segment_bytes=600)
    load = reopened.producer_state_load
    assert load is not None
    assert load.snapshot_offset == reopened.log_end_offset == 10
    assert load.replay_from == load.replay_to == 10
    b, original = sent[-1]
    r = append(reopened, b)
    assert (r.error, r.base_offset) == (ErrorCode.NONE, original.base_offset)
    assert reopened.log_end_offset == 10
    # only the last batch is in a snapshot (as in Kafka): an older retry is out of order
    assert append(reopened, sent[-2][0]).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(reopened, batch(10)).error is ErrorCode.NONE


def test_unclean_reopen_replays_tail_after_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    last_roll = log.active_segment.base_offset
    assert last_roll < log.log_end_offset
    log.flush()
    crash(log)
    reopened = open_log(tmp_path, clean=False, segment_bytes=600)
    load = reopened.producer_state_load
    assert load is not None
    assert (load.snapshot_offset, load.replay_from, load.replay_to) == (last_roll, last_roll, 10)
    for b, original in sent[-2:]:  # both in the replayed tail
        assert append(reopened, b).base_offset == original.base_offset
    assert reopened.log_end_offset == 10
    assert snapshot_path(reopened.directory, 10).exists()  # written after the rebuild


def test_missing_snapshots_rebuild_from_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    log.close()
    for path in log.directory.glob("*.snapshot"):
        path.unlink()
    reopened = open_log(tmp_path, clean=False, segment_bytes=600)
    load = reopened.producer_state_load
    assert load is not None and (load.snapshot_offset, load.replay_from) == (None, 0)
    for b, original in sent[-5:]:
        assert append(reopened, b).base_offset == original.base_offset
    assert reopened.log_end_offset == 10


def test_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    log.close()
    newest = snapshot_path(log.directory, 10)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    reopened = open_log(tmp_path, segment_bytes=600)
    load = reopened.producer_state_load
    assert load is not None and load.snapshot_offset == reopened.active_segment.base_offset
    assert append(reopened, sent[-1][0]).base_offset == sent[-1][1].base_offset
    assert read_snapshot(newest)[0].last_sequence == 9  # rewritten after the rebuild


def test_all_snapshots_corrupt_rebuilds_from_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    log.close()
    for path in log.directory.glob("*.snapshot"):
        path.write_bytes(path.read_bytes()[:5])
    reopened = open_log(tmp_path, segment_bytes=600)
    load = reopened.producer_state_load
    assert load is not None and load.snapshot_offset is None
    assert append(reopened, sent[-3][0]).base_offset == sent[-3][1].base_offset
    assert snapshots(reopened) == [10]


def test_snapshot_above_log_end_is_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.close()
    stray = snapshot_path(log.directory, 50)
    stray.write_bytes(snapshot_path(log.directory, 3).read_bytes())
    reopened = open_log(tmp_path)
    assert not stray.exists()
    load = reopened.producer_state_load
    assert load is not None and load.snapshot_offset == 3


def test_stray_snapshots_without_segments_are_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    fill(log, 10)
    log.close()
    base = log.active_segment.base_offset
    stray = snapshot_path(log.directory, base - 1)
    stray.write_bytes(snapshot_path(log.directory, base).read_bytes())
    open_log(tmp_path, segment_bytes=600)
    assert not stray.exists()
    assert snapshot_path(log.directory, 10).exists()


def test_truncation_reloads_state(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    sent = fill(log, 10)
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert all(o <= 4 for o in snapshots(log))
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and entry.last_seq == 3
    assert append(log, sent[3][0]).base_offset == 3  # still a duplicate
    r = append(log, sent[4][0])  # truncated away: appended again
    assert (r.error, r.base_offset) == (ErrorCode.NONE, 4)


def test_retention_deletes_snapshots_with_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600, retention_bytes=700)
    sent = fill(log, 10)
    before = snapshots(log)
    assert log.apply_retention(NOW) > 0
    first = log.segments[0].base_offset
    assert snapshots(log) == [o for o in before if o >= first]
    # state for the producer is kept in memory (Kafka does not drop it with the data)
    assert append(log, sent[-1][0]).base_offset == sent[-1][1].base_offset


def test_delete_records_deletes_snapshots_with_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    fill(log, 10)
    target = log.segments[-1].base_offset
    assert log.delete_records_before(target) is ErrorCode.NONE
    assert log.segments[0].base_offset == target
    assert snapshots(log) == [target]
    log.close()
    reopened = Log.open(log.directory, config(segment_bytes=600), 0, target, True, NOW)
    assert reopened.log_start_offset == target
    assert append(reopened, batch(9)).base_offset == 9


def test_expiration(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=DAY)
    append(log, batch(0, pid=1, timestamp=NOW))
    append(log, batch(0, pid=2, timestamp=NOW + 1000))
    append(log, make_batch([b"t"], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True))
    assert log.remove_expired_producers(NOW + DAY - 1) == 0
    assert log.remove_expired_producers(NOW + DAY) == 1
    assert [p.producer_id for p in log.active_producers()] == [2, 3]
    assert log.remove_expired_producers(NOW + 100 * DAY) == 1  # never one in a transaction
    assert [p.producer_id for p in log.active_producers()] == [3]
    log.close()
    entries = read_snapshot(snapshot_path(log.directory, log.log_end_offset))
    assert [e.producer_id for e in entries] == [3]
    # a producer forgotten by expiration may start over at any sequence
    reopened = open_log(tmp_path, producer_id_expiration_ms=DAY)
    assert append(reopened, batch(42, pid=1)).error is ErrorCode.NONE


def test_expired_producers_are_not_loaded(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=DAY)
    append(log, batch(0, pid=1, timestamp=NOW))
    log.close()
    later = open_log(tmp_path, now_ms=NOW + 2 * DAY, producer_id_expiration_ms=DAY)
    assert later.active_producers() == []


def test_expiration_config_from_broker_properties() -> None:
    assert LogConfig().producer_id_expiration_ms == DAY
    cfg = LogConfig.from_properties({"producer.id.expiration.ms": 60000}, {})
    assert cfg.producer_id_expiration_ms == 60000


def test_log_manager_cleanup_expires_and_shutdown_snapshots(tmp_path: Path) -> None:
    cfg = config(producer_id_expiration_ms=DAY)
    manager = LogManager([tmp_path], 1, "cluster", default_config=cfg)
    log = manager.create_log("t", 0, cfg)
    append(log, batch(0, pid=1))
    append(log, batch(0, pid=2, timestamp=NOW + DAY))
    manager.cleanup(NOW + DAY)
    assert [p.producer_id for p in log.active_producers()] == [2]
    manager.shutdown()
    assert [e.producer_id for e in read_snapshot(snapshot_path(log.directory, 2))] == [2]
    again = LogManager([tmp_path], 1, "cluster", default_config=cfg)
    reloaded = again.get_log("t", 0)
    assert reloaded is not None and reloaded.producer_state_load is not None
    assert reloaded.producer_state_load.snapshot_offset == 2
    assert append(reloaded, batch(0, pid=2, timestamp=NOW + DAY)).base_offset == 1


def txn_batch(seq: int, pid: int = PID, timestamp: int = NOW) -> bytes:
    return make_batch(
        [b"t"], producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True, timestamp=timestamp
    )


def test_open_transaction_survives_snapshot_and_is_not_expired(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, pid=1)
    append(log, txn_batch(0))
    log.close()
    entries = read_snapshot(snapshot_path(log.directory, 3))
    assert {e.producer_id: e.current_txn_first_offset for e in entries} == {1: -1, PID: 2}
    reopened = open_log(tmp_path, now_ms=NOW + 10 * DAY)
    assert [(p.producer_id, p.current_txn_start_offset) for p in reopened.active_producers()] == [(PID, 2)]


def test_markers_are_replayed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(0))
    log.close()  # snapshot at 1 holds the open transaction
    log = open_log(tmp_path)
    marker = build_control_batch(
        ControlType.ABORT, producer_id=PID, producer_epoch=0, coordinator_epoch=5, timestamp=NOW
    )
    log.append_control_batch(marker, 0, NOW)
    append(log, txn_batch(1))
    log.flush()
    crash(log)
    reopened = open_log(tmp_path, clean=False)
    load = reopened.producer_state_load
    assert load is not None and (load.snapshot_offset, load.replay_from, load.replay_to) == (1, 1, 3)
    [info] = reopened.active_producers()
    assert (info.coordinator_epoch, info.current_txn_start_offset, info.last_sequence) == (5, 2, 1)
