"""The bounded file-handle cache: segment files opened on demand, LRU-evicted."""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.handles import HANDLES, CachedFile, FileClosedError, HandleCache
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.segment import TXN_INDEX_SUFFIX
from tests.unit.storage.batches import make_batch, replicated

NOW = 10_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_global_cache() -> Iterator[HandleCache]:
    before = HANDLES.capacity
    HANDLES.resize(8)
    try:
        yield HANDLES
    finally:
        HANDLES.resize(before)


def test_cache_bounds_open_files_and_reopens_on_use(tmp_path: Path) -> None:
    cache = HandleCache(4)
    files = [CachedFile(tmp_path / f"f{i}", cache) for i in range(20)]
    assert cache.open_count == 4
    for i, f in enumerate(files):
        f.pwrite_all(f"file {i}".encode(), 0)
        assert cache.open_count <= 4
    for i, f in enumerate(files):
        assert f.pread(100, 0) == f"file {i}".encode()
        assert f.size() == len(f"file {i}")
    assert cache.open_count == 4
    assert sum(f.is_open for f in files) == 4


def test_least_recently_used_is_evicted_first(tmp_path: Path) -> None:
    cache = HandleCache(3)
    a, b, c = (CachedFile(tmp_path / n, cache) for n in "abc")
    a.fd()  # a is now the most recently used; b the least
    CachedFile(tmp_path / "d", cache)
    assert (a.is_open, b.is_open, c.is_open) == (True, False, True)


def test_closed_file_refuses_io_and_is_never_recreated(tmp_path: Path) -> None:
    cache = HandleCache(2)
    f = CachedFile(tmp_path / "seg.log", cache)
    f.pwrite_all(b"data", 0)
    f.delete()
    with pytest.raises(FileClosedError) as raised:
        f.pread(4, 0)
    assert raised.value.errno == errno.EBADF
    assert not (tmp_path / "seg.log").exists()
    assert cache.open_count == 0


def test_evicted_file_removed_underneath_is_not_recreated(tmp_path: Path) -> None:
    cache = HandleCache(1)
    f = CachedFile(tmp_path / "a", cache)
    CachedFile(tmp_path / "b", cache)  # evicts a
    (tmp_path / "a").unlink()
    with pytest.raises(FileNotFoundError):
        f.pread(1, 0)
    assert not (tmp_path / "a").exists()


def test_flush_of_clean_file_does_not_reopen_it(tmp_path: Path) -> None:
    cache = HandleCache(1)
    f = CachedFile(tmp_path / "a", cache)
    f.pwrite_all(b"x", 0)
    f.fsync()
    CachedFile(tmp_path / "b", cache)  # evicts a
    opens = cache.opens
    f.fsync()
    assert cache.opens == opens and not f.is_open
    f.pwrite_all(b"y", 1)
    f.fsync()
    assert cache.opens == opens + 1 and not f.dirty


def test_out_of_descriptors_evicts_and_retries(tmp_path: Path) -> None:
    cache = HandleCache(10_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files: list[CachedFile] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 8, hard))
    try:
        for i in range(40):
            files.append(CachedFile(tmp_path / f"f{i}", cache))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert cache.open_count < 20  # EMFILE made it close half its files and retry
    for i, f in enumerate(files):
        f.pwrite_all(bytes([i]), 0)
    assert [f.pread(1, 0)[0] for f in files] == list(range(40))
    for f in files:
        f.close()


def test_many_partitions_use_a_bounded_number_of_descriptors(
    tmp_path: Path, small_global_cache: HandleCache
) -> None:
    baseline = open_fds()
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    cfg = LogConfig(segment_bytes=400)
    logs = [mgr.create_log("t", i, cfg) for i in range(30)]
    for round_ in range(4):
        for i, lg in enumerate(logs):
            lg.append_as_leader(make_batch([f"{i}:{round_}".encode() * 20]), 0, NOW)
            replicated(lg)
    assert open_fds() <= baseline + small_global_cache.capacity
    for i, lg in enumerate(logs):
        assert lg.log_end_offset == 4 and len(lg.segments) > 1
        first = lg.read(0, 10**6, lg.high_watermark, True)
        last = lg.read(3, 10**6, lg.high_watermark, True)
        assert f"{i}:0".encode() * 20 in first.records and f"{i}:3".encode() * 20 in last.records
    mgr.shutdown()
    again = LogManager([tmp_path], node_id=1, cluster_id="c1", default_config=cfg)
    assert open_fds() <= baseline + small_global_cache.capacity
    assert all(again.get_log("t", i).log_end_offset == 4 for i in range(30))  # type: ignore[union-attr]
    again.shutdown()


def test_read_of_deleted_log_raises_os_error_not_garbage(
    tmp_path: Path, small_global_cache: HandleCache
) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    lg = mgr.create_log("t", 0, LogConfig())
    lg.append_as_leader(make_batch([b"v"]), 0, NOW)
    mgr.delete_log("t", 0)
    with pytest.raises(FileClosedError):
        lg.read(0, 1000, 1, True)


def test_txnindex_file_is_created_by_the_first_abort_only(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    lg = mgr.create_log("t", 0, LogConfig())
    lg.append_as_leader(make_batch([b"v"]), 0, NOW)
    seg = lg.active_segment
    assert not seg.path_for(TXN_INDEX_SUFFIX).exists()
    pid, epoch = 7, 0
    batch = make_batch([b"t"], transactional=True, producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert lg.append_as_leader(batch, 0, NOW).error == 0
    assert lg.append_txn_marker(pid, epoch, False, 0, 0, NOW).error == 0
    assert seg.path_for(TXN_INDEX_SUFFIX).stat().st_size == 34
    mgr.shutdown()


def test_create_logs_reports_each_log_made_before_a_failure(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path], node_id=1, cluster_id="c1")
    (tmp_path / "t-2").write_text("not a directory")
    created: list[int] = []
    with pytest.raises(OSError):
        mgr.create_logs("t", range(4), LogConfig(), created)
    assert created == [0, 1] and mgr.topics() == {"t": [0, 1]}
    assert mgr.delete_logs("t", [0, 1, 3]) == 2
    assert mgr.topics() == {} and not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"
