"""Checkpoint files, meta.properties and the leader epoch cache."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from storage.checkpoints import (
    CorruptCheckpointError,
    EpochEntry,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    random_kafka_uuid,
)
from storage.leader_epoch import LeaderEpochCache


def test_offset_checkpoint_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 42, ("a-b", 0): 7})
    assert path.read_text() == "0\n2\na-b 0 7\norders 1 42\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_offset_checkpoint_reads_kafka_file(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n3\n__consumer_offsets 12 0\nt 0 100\nt 1 5\n")
    assert OffsetCheckpointFile(path).read() == {
        ("__consumer_offsets", 12): 0,
        ("t", 0): 100,
        ("t", 1): 5,
    }
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", ""])
def test_offset_checkpoint_rejects_malformed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint_text(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0), EpochEntry(3, 120)]


def test_meta_properties_reads_kafka_file(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Mar 05 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
    )
    meta = MetaProperties.read(tmp_path)
    assert meta == MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qk", "J8aAPcfLQt2bqs1JT_rMgQ")


def test_meta_properties_written_text(tmp_path: Path) -> None:
    MetaProperties(3, "clusterX", "dirY").write(tmp_path)
    text = (tmp_path / "meta.properties").read_text()
    assert text == "#\ncluster.id=clusterX\ndirectory.id=dirY\nnode.id=3\nversion=1\n"
    assert MetaProperties.read(tmp_path) == MetaProperties(3, "clusterX", "dirY")


def test_kafka_uuid_format() -> None:
    u = random_kafka_uuid()
    assert len(u) == 22 and "=" not in u
    assert len(base64.urlsafe_b64decode(u + "==")) == 16


def test_epoch_cache_end_offset_semantics(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for_epoch(0, 0) == (-1, -1)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch: first start offset wins
    cache.assign(3, 10)
    cache.assign(6, 25)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(6, 25)]
    leo = 40
    assert cache.end_offset_for_epoch(-1, leo) == (-1, -1)
    assert cache.end_offset_for_epoch(6, leo) == (6, 40)  # latest: log end offset
    assert cache.end_offset_for_epoch(1, leo) == (1, 10)
    assert cache.end_offset_for_epoch(2, leo) == (1, 10)  # unknown: the floor epoch
    assert cache.end_offset_for_epoch(0, leo) == (0, 0)  # below the first epoch
    assert cache.end_offset_for_epoch(7, leo) == (-1, -1)  # above the latest
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n6 25\n"
    assert LeaderEpochCache(tmp_path).entries == cache.entries


def test_epoch_cache_truncation(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(0, 0), (1, 10), (2, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(1, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(1, 15)]
    cache.assign(4, 12)  # conflicting start offset: older entries removed
    assert cache.entries == [EpochEntry(4, 12)]
    assert cache.epoch_for_offset(100) == 4 and cache.epoch_for_offset(3) == -1
