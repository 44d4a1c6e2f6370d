"""Log behaviour in a temporary directory: append/read, rolls, retention,
indexes, timestamps, validation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import (
    BatchHeader,
    ControlType,
    build_control_batch,
    crc_ok,
    iter_batches,
)
from storage.log import Log
from storage.log_config import LogConfig
from tests.unit.storage.batches import make_batch, replicated

NOW = 1_000_000


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(path / "topic-0", LogConfig(**cfg), 0, None, True, NOW)  # type: ignore[arg-type]


def offsets_in(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _p, h in iter_batches(records, check_crc=True)]


def read_all(log: Log, start: int = 0) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    offset = start
    while offset < log.high_watermark:
        info = log.read(offset, 10**6, log.high_watermark, True)
        assert info.error is ErrorCode.NONE and info.records
        got = offsets_in(info.records)
        out += got
        offset = got[-1][1] + 1
    return out


def test_append_and_read_round_trip(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    batch = make_batch([b"a", b"b", b"c"])
    r = log.append_as_leader(batch, leader_epoch=5, now_ms=NOW)
    assert (r.error, r.base_offset, r.last_offset, r.log_append_time) == (ErrorCode.NONE, 0, 2, -1)
    r2 = log.append_as_leader(make_batch([b"d"]), 5, NOW)
    assert (r2.base_offset, r2.last_offset) == (3, 3)
    assert log.high_watermark == 0, "a log never moves its own high watermark"
    replicated(log)
    assert (log.log_end_offset, log.high_watermark, log.latest_epoch) == (4, 4, 5)
    info = log.read(0, 10**6, log.high_watermark, False)
    h = BatchHeader.parse(info.records)
    assert (h.base_offset, h.partition_leader_epoch) == (0, 5)
    assert info.records[:12] == struct.pack(">qi", 0, len(batch) - 12)
    assert info.records[12:16] == struct.pack(">i", 5)
    assert info.records[16 : len(batch)] == batch[16:]  # stored exactly as received
    # a batch containing the fetch offset is returned whole
    assert offsets_in(log.read(1, 10**6, 4, False).records) == [(0, 2), (3, 3)]
    # max_offset is an exclusive bound
    assert offsets_in(log.read(0, 10**6, 3, False).records) == [(0, 2)]
    assert log.read(4, 100, 4, False).records == b""
    assert log.read(5, 100, 4, False).error is ErrorCode.OFFSET_OUT_OF_RANGE


def test_max_bytes_and_kip74(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append_as_leader(make_batch([b"x" * 100]), 0, NOW)
    size = log.size_in_bytes // 3
    assert offsets_in(log.read(0, size * 2, 3, False).records) == [(0, 0), (1, 1)]
    assert log.read(0, 10, 3, False).records == b""
    assert offsets_in(log.read(0, 10, 3, True).records) == [(0, 0)]


def test_roll_by_size_and_read_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, index_interval_bytes=100)
    for i in range(20):
        log.append_as_leader(make_batch([bytes([i]) * 60, b"y" * 30]), 1, NOW)
    replicated(log)
    assert len(log.segments) > 3
    assert all(s.size <= 500 for s in log.segments)
    assert read_all(log) == [(2 * i, 2 * i + 1) for i in range(20)]
    names = sorted(p.name for p in (tmp_path / "topic-0").iterdir() if p.suffix == ".log")
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    # every index entry points at the start of a batch whose last offset it names
    for seg in log.segments:
        data = seg.read_at(0, seg.size)
        starts = {p: h.last_offset for p, h in iter_batches(data)}
        for off, pos in seg.offset_index.entries():
            assert starts[pos] == off
    # a read starting mid-log finds the right batch through the index
    assert offsets_in(log.read(21, 10**6, 40, False).records)[0] == (20, 21)


def test_roll_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(make_batch([b"a"], timestamp=NOW), 0, NOW)
    log.append_as_leader(make_batch([b"b"], timestamp=NOW + 500), 0, NOW + 500)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch([b"c"], timestamp=NOW + 1500), 0, NOW + 1500)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_retention_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_ms=10_000)
    for i in range(6):
        log.append_as_leader(make_batch([b"x" * 80], timestamp=i * 1000), 0, NOW)
    replicated(log)
    nseg = len(log.segments)
    assert nseg >= 3
    deleted = log.apply_retention(now_ms=13_500)  # timestamps 0..3000 expired
    assert deleted >= 2
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(s.max_timestamp > 3500 for s in log.segments)
    assert log.read(0, 100, 6, False).error is ErrorCode.OFFSET_OUT_OF_RANGE
    # everything expired: the active segment goes too after a roll
    log.apply_retention(now_ms=10**9)
    assert log.log_start_offset == log.log_end_offset == 6
    assert len(log.segments) == 1 and log.segments[0].size == 0
    assert log.append_as_leader(make_batch([b"n"]), 0, NOW).base_offset == 6


def test_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_bytes=700)
    for _ in range(12):
        log.append_as_leader(make_batch([b"x" * 80]), 0, NOW)
    replicated(log)
    assert log.size_in_bytes == 1800
    assert log.apply_retention(NOW) == 3
    # Kafka keeps at least retention.bytes: one more segment would go below it
    assert log.size_in_bytes >= 700 > log.size_in_bytes - log.segments[0].size
    assert read_all(log, log.log_start_offset)[-1] == (11, 11)


def test_unlimited_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_ms=-1)
    for i in range(5):
        log.append_as_leader(make_batch([b"x" * 80], timestamp=i), 0, NOW)
    assert log.apply_retention(10**12) == 0


def test_delete_records(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(8):
        log.append_as_leader(make_batch([b"x" * 80]), 0, NOW)
    replicated(log)
    assert log.delete_records_before(9) is ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(5) is ErrorCode.NONE
    assert log.log_start_offset == 5
    assert all(s.next_offset > 5 for s in log.segments)
    assert log.read(4, 100, 8, False).error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert offsets_in(log.read(5, 10**6, 8, False).records)[0] == (5, 5)
    assert log.delete_records_before(3) is ErrorCode.NONE and log.log_start_offset == 5
    assert log.delete_records_before(-1) is ErrorCode.NONE and log.log_start_offset == 8


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for i in range(10):  # batch i holds timestamps 100i, 100i+10, 100i+20
        log.append_as_leader(make_batch([b"a", b"b", b"c"], timestamp=100 * i, timestamp_step=10), 2, NOW)
    hit = log.offset_for_timestamp(415)
    assert hit is not None and (hit.offset, hit.timestamp, hit.leader_epoch) == (14, 420, 2)
    hit = log.offset_for_timestamp(0)
    assert hit is not None and hit.offset == 0
    assert log.offset_for_timestamp(5000) is None
    top = log.max_timestamp_offset()
    assert top is not None and (top.offset, top.timestamp) == (29, 920)


def test_max_timestamp_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b", b"c"], timestamps=[10, 50, 20]), 0, NOW)
    log.append_as_leader(make_batch([b"d"], timestamps=[30]), 0, NOW)
    top = log.max_timestamp_offset()
    assert top is not None and (top.offset, top.timestamp) == (1, 50)
    hit = log.offset_for_timestamp(40)
    assert hit is not None and (hit.offset, hit.timestamp) == (1, 50)


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    r = log.append_as_leader(make_batch([b"a", b"b"], timestamp=5), 0, NOW)
    assert r.log_append_time == NOW
    data = log.read(0, 10**6, 2, False).records
    h = BatchHeader.parse(data)
    assert h.max_timestamp == NOW and h.attributes & 0x08 and crc_ok(data, 0, h)


def test_end_offset_for_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b"]), 1, NOW)
    log.append_as_leader(make_batch([b"c"]), 3, NOW)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(4) == (-1, -1)
    assert (tmp_path / "topic-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n3 2\n"


def _corrupt_crc(batch: bytes) -> bytes:
    b = bytearray(batch)
    b[-1] ^= 0xFF
    return bytes(b)


def _with_magic(batch: bytes, magic: int) -> bytes:
    b = bytearray(batch)
    b[16] = magic
    return bytes(b)


def _with_header(batch: bytes, **fields: int) -> bytes:
    from dataclasses import replace

    import crc32c

    h = replace(BatchHeader.parse(batch), **fields)
    b = bytearray(h.pack() + batch[61:])
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


GOOD = make_batch([b"v" * 10, b"w"])
CONTROL = build_control_batch(
    ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=1
)


@pytest.mark.parametrize(
    ("records", "error"),
    [
        (_corrupt_crc(GOOD), ErrorCode.CORRUPT_MESSAGE),
        (_with_magic(GOOD, 1), ErrorCode.INVALID_RECORD),
        (GOOD[:40], ErrorCode.CORRUPT_MESSAGE),
        (GOOD[:-3], ErrorCode.CORRUPT_MESSAGE),
        (GOOD + GOOD, ErrorCode.INVALID_RECORD),
        (GOOD + b"\x00\x01", ErrorCode.CORRUPT_MESSAGE),
        (make_batch([b"x" * 2000]), ErrorCode.MESSAGE_TOO_LARGE),
        (CONTROL, ErrorCode.INVALID_RECORD),
        (_with_header(GOOD, records_count=0, last_offset_delta=-1), ErrorCode.INVALID_RECORD),
        (_with_header(GOOD, records_count=3), ErrorCode.INVALID_RECORD),
        (_with_header(GOOD, base_offset=7), ErrorCode.INVALID_RECORD),
        (_with_header(GOOD, batch_length=20), ErrorCode.CORRUPT_MESSAGE),
        (_with_header(GOOD, attributes=0x10), ErrorCode.INVALID_RECORD),  # txn, no pid
        (b"", ErrorCode.CORRUPT_MESSAGE),
    ],
)
def test_invalid_batches_leave_log_untouched(tmp_path: Path, records: bytes, error: ErrorCode) -> None:
    log = open_log(tmp_path, max_message_bytes=1000)
    log.append_as_leader(GOOD, 0, NOW)
    before = log.segments[0].read_at(0, 10**6)
    r = log.append_as_leader(records, 0, NOW)
    assert r.error is error and r.error_message
    assert (r.base_offset, r.log_start_offset) == (-1, 0)
    assert log.log_end_offset == 2 and log.segments[0].read_at(0, 10**6) == before


def test_control_batch_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(
        make_batch([b"a"], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True), 0, NOW
    )
    assert log.append_control_batch(CONTROL, 0, NOW) == 1
    assert offsets_in(log.read(0, 10**6, 2, False).records) == [(0, 0), (1, 1)]


def test_flush_messages_moves_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=3)
    log.append_as_leader(make_batch([b"a", b"b"]), 0, NOW)
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    log.append_as_leader(make_batch([b"c"]), 0, NOW)
    assert log.recovery_point == 3


def test_flush_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_ms=1000)
    log.append_as_leader(make_batch([b"a"]), 0, NOW)
    assert not log.flush_due(NOW + 10) and log.recovery_point == 0
    assert log.flush_due(NOW + 1000) and log.recovery_point == 1


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(GOOD, 0, NOW)
    log.delete()
    assert not (tmp_path / "topic-0").exists()


def test_roll_schedules_a_flush_of_the_old_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(3):
        log.append_as_leader(make_batch([b"x" * 80]), 0, NOW)
    assert len(log.segments) == 3 and log.recovery_point == 0
    assert log.flush_due(NOW)
    assert log.recovery_point == log.segments[-1].base_offset == 2
    assert not log.flush_due(NOW)


def test_a_reopened_log_rewrites_its_leader_epochs_only_when_they_change(tmp_path: Path) -> None:
    """Opening cuts entries past the log end in memory; the file follows at the next append
    (each append assigns its epoch first), and not at all when the entry comes back as it was:
    an empty partition's (0, 0), cut at log end 0 and assigned again as it is led."""
    log = open_log(tmp_path)
    log.epoch_cache.assign(0, 0)
    log.close()
    checkpoint = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    written = checkpoint.stat().st_ino
    again = open_log(tmp_path)
    assert again.epoch_cache.entries == []  # (0, 0) starts at the log end: cut
    again.epoch_cache.assign(0, 0)
    assert checkpoint.stat().st_ino == written, "the same entries: the file was not rewritten"
    again.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=0, now_ms=NOW)
    again.epoch_cache.assign(3, 2)
    again.close()
    with (tmp_path / "topic-0" / "00000000000000000000.log").open("r+b") as segment:
        segment.truncate(0)  # the records lost
    third = open_log(tmp_path)
    assert third.epoch_cache.entries == []
    assert checkpoint.read_text().splitlines()[2:] == ["0 0", "3 2"], "still on disk: cut in memory only"
    third.append_as_leader(make_batch([b"c"]), leader_epoch=4, now_ms=NOW)
    assert checkpoint.read_text().splitlines()[2:] == ["4 0"]
    third.close()
    fourth = open_log(tmp_path)
    assert [(e.epoch, e.start_offset) for e in fourth.epoch_cache.entries] == [(4, 0)]
    fourth.close()


def test_an_epoch_kept_in_memory_is_written_before_the_first_append(tmp_path: Path) -> None:
    """A sole replica's epoch at its log end (`persist=False`) costs no write until an append."""
    log = open_log(tmp_path)
    checkpoint = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    log.epoch_cache.assign(0, 0, persist=False)
    assert log.latest_epoch == 0 and not checkpoint.exists()
    log.append_as_leader(make_batch([b"a"]), leader_epoch=0, now_ms=NOW)
    assert checkpoint.read_text().splitlines()[2:] == ["0 0"]
    log.close()


def test_a_new_segment_has_no_index_files_until_its_first_batch(tmp_path: Path) -> None:
    """As Kafka's LazyIndex: a partition that never gets a record holds only its `.log`; the
    first batch creates both index files, so a segment with data always has them."""
    log = open_log(tmp_path)
    directory = tmp_path / "topic-0"
    assert sorted(p.suffix for p in directory.glob("00000000000000000000.*")) == [".log"]
    log.close()
    again = open_log(tmp_path)  # reopened empty: no recovery, still no index files
    assert not any(s.needs_recovery for s in again._segments)
    again.append_as_leader(make_batch([b"a"]), leader_epoch=0, now_ms=NOW)
    made = sorted(p.suffix for p in directory.glob("00000000000000000000.*"))
    assert made == [".index", ".log", ".timeindex"]
    again.close()
    third = open_log(tmp_path)
    assert not any(s.needs_recovery for s in third._segments) and third.log_end_offset == 1
    third.close()
