"""Producer-state snapshot files, ``<offset>.snapshot`` (Kafka's ProducerSnapshot v1).

Layout, big-endian: version i16 (=1) · crc u32 (CRC-32C of every byte after the
crc field) · entry count i32 · entries of producerId i64, epoch i16,
lastSequence i32, lastOffset i64, offsetDelta i32, timestamp i64,
coordinatorEpoch i32, currentTxnFirstOffset i64 (-1 when none).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from protocol.types import Offset, ProducerEpoch, ProducerId
from storage.checkpoints import fsync_dir
from storage.segment import segment_file_name

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_END = 6  # the CRC covers everything from here on


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (bad version, CRC or length)."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: ProducerId
    epoch: ProducerEpoch
    last_sequence: int
    last_offset: Offset
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: Offset


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    items = list(entries)
    body = bytearray(_HEADER.pack(SNAPSHOT_VERSION, 0, len(items)))
    for e in items:
        body += _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    struct.pack_into(">I", body, 2, crc32c.crc32c(memoryview(body)[_CRC_END:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    """Parse a snapshot; raises CorruptSnapshotError on anything Kafka would reject
    (and on trailing bytes, which a writer never produces)."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_END:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {crc}, computed {computed}")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot length {len(data)} does not fit {count} entries")
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(data[_HEADER.size :])]


def snapshot_path(directory: Path, offset: Offset) -> Path:
    return directory / segment_file_name(offset, SNAPSHOT_SUFFIX)


def list_snapshots(directory: Path) -> dict[Offset, Path]:
    """Offset → path of every ``<20 digits>.snapshot`` file, in offset order."""
    found: dict[Offset, Path] = {}
    for path in directory.glob("*" + SNAPSHOT_SUFFIX):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit() and path.is_file():
            found[Offset(int(stem))] = path
    return dict(sorted(found.items()))


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    return decode_snapshot(path.read_bytes())


def write_snapshot(path: Path, entries: Iterable[SnapshotEntry]) -> None:
    """Write to ``<name>.tmp``, fsync, rename over ``path``, fsync the directory."""
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
