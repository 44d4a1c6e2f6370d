"""On-disk index formats: hand-built fixtures and round trips."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.index import (
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
)


def test_offset_index_reads_hand_built_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", 3, 0) + struct.pack(">ii", 10, 4200))
    idx = OffsetIndex(path, 100)
    assert idx.entries() == [(103, 0), (110, 4200)]
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(105) == (103, 0)
    assert idx.lookup(110) == (110, 4200)
    assert idx.lookup(10**9) == (110, 4200)
    idx.sanity_check(log_size=5000)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=4200)
    idx.close()


def test_offset_index_writes_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.index"
    idx = OffsetIndex(path, 50)
    idx.append(52, 100)
    idx.append(60, 9000)
    with pytest.raises(ValueError):
        idx.append(60, 9500)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("00000002000000640000000a00002328")
    again = OffsetIndex(path, 50)
    assert again.entries() == [(52, 100), (60, 9000)]
    again.truncate_to(60)
    assert again.entries() == [(52, 100)]
    again.close()
    assert path.stat().st_size == 8


def test_offset_index_rejects_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0)


def test_offset_index_sanity_detects_disorder(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiii", 5, 100, 4, 200))
    idx = OffsetIndex(path, 0)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(10**6)
    idx.close()


def test_time_index_fixture_and_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.timeindex"
    path.write_bytes(struct.pack(">qi", 1000, 2) + struct.pack(">qi", 2000, 7))
    ti = TimeIndex(path, 10)
    assert ti.entries() == [(1000, 12), (2000, 17)]
    assert ti.lookup_before(1000) is None
    assert ti.lookup_before(1001) == (1000, 12)
    assert not ti.maybe_append(1500, 20)  # not larger: Kafka skips it
    assert ti.maybe_append(2500, 20)
    ti.close()
    assert path.read_bytes()[24:] == bytes.fromhex("00000000000009c40000000a")
    again = TimeIndex(path, 10)
    again.sanity_check()
    assert again.last_entry() == (2500, 20)
    again.close()


def test_txn_index_fixture_round_trip_and_order(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    entry = struct.pack(">hqqqq", 0, 42, 5, 9, 5)
    assert len(entry) == 34
    path.write_bytes(entry)
    ti = TransactionIndex(path, 0)
    assert list(ti) == [AbortedTxn(producer_id=42, first_offset=5, last_offset=9, last_stable_offset=5)]
    ti.append(AbortedTxn(7, 8, 12, 8))
    with pytest.raises(ValueError):
        ti.append(AbortedTxn(8, 10, 12, 8))  # last offset must increase
    assert [t.producer_id for t in ti.collect_aborted(10, 20)] == [7]
    assert [t.producer_id for t in ti.collect_aborted(0, 6)] == [42]
    ti.close()
    assert path.read_bytes() == entry + struct.pack(">hqqqq", 0, 7, 8, 12, 8)
    again = TransactionIndex(path, 0)
    again.sanity_check()
    again.truncate_to(10)
    assert len(again) == 1
    again.close()
    assert path.stat().st_size == 34


def test_txn_index_rejects_unknown_version(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 1, 1, 1))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0)
