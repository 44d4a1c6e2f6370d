"""LogManager: meta.properties, checkpoints, clean-shutdown marker, discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoints import MetaProperties
from storage.log_config import LogConfig
from storage.log_manager import InconsistentMetaPropertiesError, LogManager
from tests.unit.storage.batches import make_batch, replicated

NOW = 10_000


def test_fresh_dir_gets_meta_properties(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    meta = MetaProperties.read(tmp_path)
    assert meta is not None and (meta.node_id, meta.cluster_id, meta.version) == (1, "c1", 1)
    assert len(meta.directory_id) == 22
    assert mgr.cluster_id == "c1" and mgr.topics() == {}


def test_generated_cluster_id_is_kept(tmp_path: Path) -> None:
    first = LogManager([tmp_path], node_id=2, cluster_id=None).cluster_id
    assert LogManager([tmp_path], node_id=2, cluster_id=None).cluster_id == first


def test_node_id_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    LogManager([tmp_path], node_id=1, cluster_id="c1")
    with pytest.raises(InconsistentMetaPropertiesError, match="node.id=1"):
        LogManager([tmp_path], node_id=2, cluster_id="c1")
    with pytest.raises(InconsistentMetaPropertiesError, match="cluster.id"):
        LogManager([tmp_path], node_id=1, cluster_id="other")


def test_create_append_shutdown_restart(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    cfg = LogConfig(segment_bytes=300)
    log = mgr.create_log("orders", 0, cfg)
    mgr.create_log("orders", 1, cfg)
    mgr.create_log("my-topic", 2, cfg)
    for _ in range(5):
        log.append_as_leader(make_batch([b"x" * 50]), 0, NOW)
    replicated(log)
    assert log.delete_records_before(2).name == "NONE"
    mgr.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n3\nmy-topic 2 0\norders 0 5\norders 1 0\n"
    )
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == (
        "0\n3\nmy-topic 2 0\norders 0 2\norders 1 0\n"
    )
    assert (tmp_path / "replication-offset-checkpoint").read_text() == (
        "0\n3\nmy-topic 2 0\norders 0 5\norders 1 0\n"
    )
    again = LogManager([tmp_path], node_id=1, cluster_id="c1", default_config=cfg)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert again.topics() == {"my-topic": [2], "orders": [0, 1]}
    reopened = again.get_log("orders", 0)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 5)
    assert again.read_high_watermarks()[("orders", 0)] == 5


def test_unclean_restart_recovers(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    log = mgr.create_log("t", 0, LogConfig())
    for _ in range(3):
        log.append_as_leader(make_batch([b"y" * 30]), 0, NOW)
    seg = sorted((tmp_path / "t-0").glob("*.log"))[0]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01")  # torn write
    # no shutdown(): the process "died"
    again = LogManager([tmp_path], node_id=1, cluster_id="c1")
    recovered = again.get_log("t", 0)
    assert recovered is not None and recovered.log_end_offset == 3
    assert recovered.segments[0].size == 3 * len(make_batch([b"y" * 30]))


def test_delete_log_and_multiple_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, node_id=1, cluster_id="c1")
    mgr.create_log("t", 0, LogConfig())
    mgr.create_log("t", 1, LogConfig())
    assert (dirs[0] / "t-0").is_dir() and (dirs[1] / "t-1").is_dir()
    assert mgr.delete_log("t", 0)
    assert not (dirs[0] / "t-0").exists() and mgr.get_log("t", 0) is None
    assert mgr.topics() == {"t": [1]}


def test_update_config_cleanup_and_flush(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    log = mgr.create_log("t", 0, LogConfig(segment_bytes=200))
    for i in range(4):
        log.append_as_leader(make_batch([b"x" * 80], timestamp=i), 0, NOW)
    replicated(log)
    assert mgr.cleanup(NOW) == 0
    mgr.update_config("t", LogConfig(segment_bytes=200, retention_ms=100, flush_ms=50))
    assert mgr.cleanup(NOW) >= 3
    assert log.log_start_offset == 4
    log.append_as_leader(make_batch([b"z"]), 0, NOW)
    assert mgr.flush_due(NOW + 100) == 1 and log.recovery_point == 5


def test_unclean_restart_logs_one_summary_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    for partition in range(4):
        log = mgr.create_log("__consumer_offsets", partition, LogConfig())
        batch = make_batch([b"z" * 30], producer_id=7, producer_epoch=0, base_sequence=0)
        log.append_as_leader(batch, 0, NOW)
    with open(sorted((tmp_path / "__consumer_offsets-2").glob("*.log"))[0], "ab") as f:
        f.write(b"\x00" * 11)  # a torn write; no shutdown(): the process "died"
    caplog.set_level("INFO")
    LogManager([tmp_path], node_id=1, cluster_id="c1")
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert len(infos) == 1, infos
    assert f"{tmp_path}: recovered 4 partitions after an unclean shutdown: 11 bytes truncated, " in infos[0]
