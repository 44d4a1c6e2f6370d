"""Recovery after an unclean stop: torn tails, garbage, bad CRCs, lost indexes."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.record_batch import iter_batches
from storage.log import Log
from storage.log_config import LogConfig
from tests.unit.storage.batches import make_batch

NOW = 5_000
CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


def build(
    tmp_path: Path, batches: int = 20
) -> tuple[Path, list[tuple[int, int]], dict[int, list[tuple[int, int]]]]:
    d = tmp_path / "t-3"
    log = Log.open(d, CONFIG, 0, None, True, NOW)
    for i in range(batches):
        log.append_as_leader(make_batch([b"k" * (i % 7 + 20), b"v"], timestamp=100 + i), 4, NOW)
    offsets = [(2 * i, 2 * i + 1) for i in range(batches)]
    indexes = {s.base_offset: s.offset_index.entries() for s in log.segments}
    log.close()
    return d, offsets, indexes


def reopen(d: Path, clean: bool = False, recovery_point: int = 0) -> Log:
    return Log.open(d, CONFIG, recovery_point, None, clean, NOW)


def batches_of(log: Log) -> list[tuple[int, int]]:
    out = []
    for seg in log.segments:
        data = seg.read_at(0, seg.size)
        out += [(h.base_offset, h.last_offset) for _p, h in iter_batches(data, check_crc=True)]
    return out


def assert_indexes_agree(log: Log) -> None:
    for seg in log.segments:
        data = seg.read_at(0, seg.size)
        starts = {p: h for p, h in iter_batches(data)}
        for off, pos in seg.offset_index.entries():
            assert starts[pos].last_offset == off
        running, max_at = -1, {}
        for _p, h in iter_batches(data):
            running = max(running, h.max_timestamp)
            max_at[h.last_offset] = running
        for ts, off in seg.time_index.entries():
            assert max_at[off] == ts
        assert os.path.getsize(seg.offset_index.path) == 8 * len(seg.offset_index)
        assert os.path.getsize(seg.time_index.path) == 12 * len(seg.time_index)


def last_log_file(d: Path) -> Path:
    return sorted(d.glob("*.log"))[-1]


def test_clean_reopen_keeps_everything(tmp_path: Path) -> None:
    d, offsets, indexes = build(tmp_path)
    log = reopen(d, clean=True)
    assert batches_of(log) == offsets and log.log_end_offset == 40
    assert {s.base_offset: s.offset_index.entries() for s in log.segments} == indexes
    assert log.latest_epoch == 4 and log.recovery_point == 40


def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    f = last_log_file(d)
    os.truncate(f, f.stat().st_size - 10)
    log = reopen(d)
    assert batches_of(log) == offsets[:-1]
    assert log.log_end_offset == offsets[-2][1] + 1 == log.recovery_point
    assert_indexes_agree(log)
    r = log.append_as_leader(make_batch([b"new"]), 5, NOW)
    assert r.base_offset == 38
    assert batches_of(log)[-1] == (38, 38)


def test_garbage_after_last_batch(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    with open(last_log_file(d), "ab") as f:
        f.write(os.urandom(100))
    log = reopen(d)
    assert batches_of(log) == offsets
    assert_indexes_agree(log)


def test_zero_filled_tail(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    with open(last_log_file(d), "ab") as f:
        f.write(b"\x00" * 4096)
    log = reopen(d)
    assert batches_of(log) == offsets


def test_bad_crc_in_last_batch(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    f = last_log_file(d)
    data = bytearray(f.read_bytes())
    data[-3] ^= 0x40
    f.write_bytes(bytes(data))
    log = reopen(d)
    assert batches_of(log) == offsets[:-1]
    assert_indexes_agree(log)


def test_corruption_in_middle_segment_drops_later_segments(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path, batches=40)
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 4
    victim = logs[1]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF
    victim.write_bytes(bytes(data))
    log = reopen(d)
    got = batches_of(log)
    assert got == offsets[: len(got)] and len(got) < len(offsets)
    assert len(log.segments) == 2
    assert sorted(p.name for p in d.glob("*.log")) == [p.name for p in logs[:2]]
    assert_indexes_agree(log)
    assert log.append_as_leader(make_batch([b"z"]), 4, NOW).base_offset == got[-1][1] + 1


def test_lost_index_files_are_rebuilt(tmp_path: Path) -> None:
    d, offsets, indexes = build(tmp_path)
    for p in [*d.glob("*.index"), *d.glob("*.timeindex")]:
        p.unlink()
    for clean in (True, False):
        log = reopen(d, clean=clean)
        assert batches_of(log) == offsets
        assert {s.base_offset: s.offset_index.entries() for s in log.segments} == indexes
        assert_indexes_agree(log)
        log.close()


def test_index_pointing_past_log_is_rebuilt(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    f = last_log_file(d)
    os.truncate(f, 100)  # index entries now point beyond the log end
    log = reopen(d, clean=True)
    assert_indexes_agree(log)
    assert batches_of(log) == offsets[: len(batches_of(log))]


def test_torn_index_file_is_rebuilt(tmp_path: Path) -> None:
    d, offsets, indexes = build(tmp_path)
    idx = sorted(d.glob("*.index"))[0]
    with open(idx, "ab") as fh:
        fh.write(b"\x01\x02\x03")
    log = reopen(d, clean=False, recovery_point=40)
    assert batches_of(log) == offsets
    assert {s.base_offset: s.offset_index.entries() for s in log.segments} == indexes


def test_recovery_is_idempotent(tmp_path: Path) -> None:
    d, offsets, _ = build(tmp_path)
    f = last_log_file(d)
    os.truncate(f, f.stat().st_size - 1)
    first = batches_of(reopen(d))
    second = reopen(d)
    assert batches_of(second) == first == offsets[:-1]
