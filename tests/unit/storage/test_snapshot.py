"""The ``<offset>.snapshot`` file format (Kafka's ProducerSnapshot v1) against
hand-built bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from storage.snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

ENTRIES = [
    SnapshotEntry(1000, 3, 41, 99, 4, 1_700_000_000_000, -1, -1),
    SnapshotEntry(2**40, 0, 2**31 - 1, 5, 0, 12, 7, 3),
]


def hand_built(entries: list[SnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries))
    for e in entries:
        body += struct.pack(">q", e.producer_id)
        body += struct.pack(">h", e.epoch)
        body += struct.pack(">i", e.last_sequence)
        body += struct.pack(">q", e.last_offset)
        body += struct.pack(">i", e.offset_delta)
        body += struct.pack(">q", e.timestamp)
        body += struct.pack(">i", e.coordinator_epoch)
        body += struct.pack(">q", e.current_txn_first_offset)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_encode_matches_hand_built_bytes() -> None:
    assert encode_snapshot(ENTRIES) == hand_built(ENTRIES)
    assert len(hand_built(ENTRIES)) == 2 + 4 + 4 + 2 * 46


def test_decode_hand_built_bytes() -> None:
    assert decode_snapshot(hand_built(ENTRIES)) == ENTRIES


def test_empty_snapshot() -> None:
    data = encode_snapshot([])
    assert data == struct.pack(">hIi", 1, crc32c.crc32c(b"\x00\x00\x00\x00"), 0)
    assert decode_snapshot(data) == []


def test_bad_crc_rejected() -> None:
    data = bytearray(hand_built(ENTRIES))
    data[20] ^= 0x01
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(bytes(data))


def test_bad_version_rejected() -> None:
    data = bytearray(hand_built(ENTRIES))
    struct.pack_into(">h", data, 0, 2)
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode_snapshot(bytes(data))


@pytest.mark.parametrize("keep", [0, 3, 6, 9, 30])
def test_truncated_rejected(keep: int) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(hand_built(ENTRIES)[:keep])


def test_count_that_does_not_fit_rejected() -> None:
    body = struct.pack(">i", 3) + hand_built(ENTRIES)[10:]
    data = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError, match="length"):
        decode_snapshot(data)


def test_write_read_list(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 42)
    assert path.name == "00000000000000000042.snapshot"
    write_snapshot(path, ENTRIES)
    assert path.read_bytes() == hand_built(ENTRIES)
    assert read_snapshot(path) == ENTRIES
    write_snapshot(snapshot_path(tmp_path, 7), [])
    (tmp_path / "junk.snapshot").write_bytes(b"")
    assert list(list_snapshots(tmp_path)) == [7, 42]
    assert not list(tmp_path.glob("*.tmp"))
