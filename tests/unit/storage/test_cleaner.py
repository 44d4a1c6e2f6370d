"""The log cleaner on hand-built segments: offset map, what is cleanable, retention of
the latest record per key, tombstones and their delete horizon, transactions (aborted
data, markers, .txnindex), live producers' last batches, and the crash-safe swap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader, iter_batches
from storage.cleaner.cleaner import CleanerConfig, LogCleaner
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.records import BatchDecoder
from storage.cleaner.swap import recover_swaps
from storage.log import Log
from storage.log_config import LogConfig
from tests.integration.disks import fill as disk_fill
from tests.integration.disks import free, small_tmpfs
from tests.unit.storage.batches import DefaultRecordBatchBuilder, replicated

NOW = 1_000_000
TP = ("t", 0)


def keyed(pairs: list[tuple[bytes, bytes | None]], *, pid: int = -1, epoch: int = -1, seq: int = -1,
          txn: bool = False, compression: int = 0, ts: int = NOW) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=txn,
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                        batch_size=10**8)
    for i, (k, v) in enumerate(pairs):
        builder.append(i, timestamp=ts + i, key=k, value=v, headers=[])
    return bytes(builder.build())


def open_log(path: Path, clean: bool = True, **cfg: object) -> Log:
    """Opened with the HW at its end, as a single broker's checkpoint would give it."""
    config = LogConfig(**{"cleanup_policy": "compact", "segment_bytes": 400, **cfg})  # type: ignore[arg-type]
    lg = Log.open(path / "t-0", config, 0, None, clean, NOW)
    replicated(lg)
    return lg


def append(lg: Log, pairs: list[tuple[bytes, bytes | None]], **kw: object) -> int:
    r = lg.append_as_leader(keyed(pairs, **kw), 0, NOW)  # type: ignore[arg-type]
    assert r.error is ErrorCode.NONE, r
    replicated(lg)
    return r.base_offset


def cleaner(lg: Log, **cfg: object) -> LogCleaner:
    return LogCleaner(lambda: {TP: lg}, CleanerConfig(**cfg))  # type: ignore[arg-type]


def batches(lg: Log) -> list[tuple[BatchHeader, bytes]]:
    out = []
    for seg in lg.segments:
        data = seg.read_at(0, seg.size)
        out += [(h, data[p : p + h.size_in_bytes]) for p, h in iter_batches(data, check_crc=True)]
    return out


def records(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    decoder = BatchDecoder()
    return [(r.offset, r.key, r.value) for h, b in batches(lg) if not h.is_control and h.records_count
            for r in decoder.records(b, h)]


def latest(lg: Log) -> dict[bytes | None, bytes | None]:
    return {k: v for _o, k, v in records(lg)}


def fill(lg: Log, rounds: int, keys: int = 4) -> None:
    for r in range(rounds):
        for k in range(keys):
            append(lg, [(b"k%d" % k, b"v%d-%d" % (k, r))])


def dirty(lg: Log, rounds: int, keys: int = 4) -> None:
    """More data in closed segments (the active one is never cleaned)."""
    fill(lg, rounds, keys)
    lg.roll(NOW)


def test_offset_map_keeps_latest_offset_per_key() -> None:
    decoder = BatchDecoder()
    batch = keyed([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    m = OffsetMap(10)
    recs = decoder.records(batch, BatchHeader.parse(batch))
    m.put_records(recs)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c"), m.latest_offset, len(m)) == (2, 1, -1, 2, 2)
    assert [m.retains(r) for r in recs] == [False, True, True]
    assert OffsetMap.for_buffer(1280, 1.0).capacity == 10


def test_keeps_latest_record_per_key_and_offsets(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg, 10)
    before = latest(lg)
    size = lg.size_in_bytes
    assert len(lg.segments) > 3
    active_base = lg.active_segment.base_offset
    result = cleaner(lg).clean_once(NOW)
    assert result is not None
    assert latest(lg) == before
    cleaned = [o for o, _k, _v in records(lg) if o < active_base]
    assert len(cleaned) <= 4 and lg.size_in_bytes < size
    assert cleaner(lg).clean_once(NOW) is None  # nothing dirty left: a second cleaner reads the checkpoint
    lg.close()
    reopened = open_log(tmp_path)
    assert latest(reopened) == before
    assert reopened.read(0, 10**6, reopened.log_end_offset, True).error is ErrorCode.NONE


def test_a_follower_behind_the_cleaner_fetches_across_its_gap(tmp_path: Path) -> None:
    """Seed 109: the leader's cleaner removed the batches at a lagging follower's log end;
    the follower must take the next batch the leader serves, past the gap."""
    leader, follower = open_log(tmp_path / "l"), open_log(tmp_path / "f")
    fill(leader, 10)
    follower.append_as_follower(leader.read(0, 10**6, 4, True).records[: _first_batches(leader, 4)], NOW)
    assert follower.log_end_offset == 4
    assert cleaner(leader).clean_once(NOW) is not None
    served = leader.read(4, 10**6, leader.log_end_offset, True)
    assert BatchHeader.parse(served.records).base_offset > 4, "the cleaner left a gap at the follower's end"
    while follower.log_end_offset < leader.log_end_offset:
        info = leader.read(follower.log_end_offset, 300, leader.log_end_offset, True)
        follower.append_as_follower(info.records, NOW)
    assert latest(follower) == latest(leader)
    assert records(follower)[4:] == [r for r in records(leader) if r[0] >= 4]


def _first_batches(lg: Log, offsets: int) -> int:
    """The size of the batches holding the log's first ``offsets`` offsets."""
    return sum(h.size_in_bytes for h, _b in batches(lg) if h.base_offset < offsets)


def test_compressed_batches_are_rebuilt_with_their_codec(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=300)
    for r in range(6):
        append(lg, [(b"a", b"x%d" % r * 20), (b"b", b"y%d" % r)], compression=1 + r % 4)
    before = latest(lg)
    assert cleaner(lg).clean_once(NOW) is not None
    assert latest(lg) == before
    codecs = {h.compression for h, _b in batches(lg) if h.records_count}
    assert codecs - {0}


def test_dirty_ratio_and_min_compaction_lag(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg, 12, keys=8)
    assert cleaner(lg).clean_once(NOW) is not None
    dirty(lg, 2, keys=1)
    lg.config = LogConfig(cleanup_policy="compact", segment_bytes=400, min_cleanable_dirty_ratio=0.99)
    assert cleaner(lg).clean_once(NOW) is None  # a little dirty data after much clean data
    lg.config = LogConfig(cleanup_policy="compact", segment_bytes=400, min_compaction_lag_ms=10_000)
    assert cleaner(lg).clean_once(NOW + 5_000) is None  # every segment is younger than the lag
    lg.config = LogConfig(cleanup_policy="compact", segment_bytes=400, max_compaction_lag_ms=1,
                          min_cleanable_dirty_ratio=0.99)
    assert cleaner(lg).clean_once(NOW + 5_000) is not None  # max.compaction.lag.ms forces it


def test_delete_policy_is_not_cleaned(tmp_path: Path) -> None:
    lg = open_log(tmp_path, cleanup_policy="delete")
    fill(lg, 6)
    assert cleaner(lg).clean_once(NOW) is None


def test_tombstone_kept_until_delete_horizon_then_removed(tmp_path: Path) -> None:
    lg = open_log(tmp_path, delete_retention_ms=1_000)
    fill(lg, 3)
    append(lg, [(b"k1", None)])
    fill(lg, 3, keys=1)
    c = cleaner(lg)
    assert c.clean_once(NOW) is not None
    assert latest(lg)[b"k1"] is None
    tomb = [h for h, b in batches(lg) if h.has_delete_horizon]
    assert tomb and tomb[0].base_timestamp == NOW + 1_000
    dirty(lg, 6, keys=1)  # more dirty data so the log is picked again
    assert c.clean_once(NOW + 500) is not None
    assert b"k1" in latest(lg)  # horizon not passed yet
    dirty(lg, 12, keys=1)
    assert c.clean_once(NOW + 1_000) is not None
    assert b"k1" not in latest(lg)
    assert latest(lg)[b"k2"] == b"v2-2"


class Txn:
    def __init__(self, lg: Log, pid: int) -> None:
        self.lg, self.pid, self.seq = lg, pid, 0

    def send(self, pairs: list[tuple[bytes, bytes | None]]) -> int:
        off = append(self.lg, pairs, pid=self.pid, epoch=0, seq=self.seq, txn=True)
        self.seq += len(pairs)
        return off

    def end(self, commit: bool) -> int:
        r = self.lg.append_txn_marker(self.pid, 0, commit, 0, 0, NOW)
        assert r.error is ErrorCode.NONE
        replicated(self.lg)
        return r.offset


def test_aborted_data_removed_markers_after_horizon_and_txnindex_pruned(tmp_path: Path) -> None:
    lg = open_log(tmp_path, delete_retention_ms=100)
    good, bad = Txn(lg, 7), Txn(lg, 8)
    good.send([(b"k0", b"committed")])
    bad.send([(b"a", b"aborted"), (b"b", b"aborted")])
    good.end(True)
    bad.end(False)
    fill(lg, 8)
    lg.remove_expired_producers(NOW + 10**12)  # neither producer is live any more
    assert lg.aborted_transactions(0, lg.log_end_offset)
    c = cleaner(lg)
    assert c.clean_once(NOW) is not None
    vals = {v for _o, _k, v in records(lg)}
    assert b"aborted" not in vals
    markers = [h for h, _b in batches(lg) if h.is_control]
    assert len(markers) == 2  # kept: the pass saw data of both transactions
    for i in range(3):
        dirty(lg, 4)
        c.clean_once(NOW + 1_000 * (i + 1))
    assert not [h for h, _b in batches(lg) if h.is_control and h.base_offset < lg.active_segment.base_offset]
    assert lg.aborted_transactions(0, lg.active_segment.base_offset) == []
    lg.close()
    assert b"aborted" not in {v for _o, _k, v in records(open_log(tmp_path))}


def test_last_batch_of_live_producer_kept_and_retry_deduplicated(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    first = keyed([(b"k0", b"idempotent")], pid=5, epoch=0, seq=0)
    assert lg.append_as_leader(first, 0, NOW).error is ErrorCode.NONE
    fill(lg, 8)  # overwrites key a
    assert cleaner(lg).clean_once(NOW) is not None
    kept = [h for h, _b in batches(lg) if h.producer_id == 5]
    assert len(kept) == 1 and kept[0].records_count == 0 and kept[0].base_sequence == 0
    retry = lg.append_as_leader(first, 0, NOW)
    assert (retry.error, retry.base_offset) == (ErrorCode.NONE, 0)
    lg.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()  # producer state from the cleaned log alone
    reopened = open_log(tmp_path, clean=False)
    retry = reopened.append_as_leader(first, 0, NOW)
    assert (retry.error, retry.base_offset) == (ErrorCode.NONE, 0)


def test_open_transaction_holds_cleaning_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lg = open_log(tmp_path)
    fill(lg, 3)
    hanging = Txn(lg, 9)
    start = hanging.send([(b"h", b"open")])
    fill(lg, 6)
    assert cleaner(lg).clean_once(NOW) is not None
    assert "held back at offset" in caplog.text and "producer 9" in caplog.text
    after = [o for o, _k, _v in records(lg) if o > start]
    assert len(after) >= 6 * 4  # nothing at or after the open transaction was cleaned
    assert lg.last_stable_offset == start


class Crash(Exception):
    pass


def test_a_full_disk_holds_cleaning_back_until_space_returns(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Seed 109: five internal partitions whose cleaner met a full disk stayed uncleaned
    until their broker restarted; now the log is tried again each backoff."""
    with small_tmpfs(tmp_path / "disk", 1) as disk:
        lg = open_log(disk)
        fill(lg, 10)
        before = latest(lg)
        c = cleaner(lg, backoff_ms=1000)
        filler = disk_fill(disk)
        try:
            with caplog.at_level("INFO", "storage.cleaner.cleaner"):
                assert c.clean_once(NOW) is None
                assert c.clean_once(NOW + 999) is None  # held back: not tried, not logged again
            said = [r.message.split(": ")[1] for r in caplog.records]
            assert said == ["cannot clean (trying again every 1000 ms)"]
            assert not [p.name for p in (disk / "t-0").iterdir() if ".cleaned" in p.name or ".swap" in p.name]
        finally:
            free(filler)
        caplog.clear()
        with caplog.at_level("INFO", "storage.cleaner.cleaner"):
            assert c.clean_once(NOW + 1000) is not None
        assert "t-0: cleaned again after an I/O error" in caplog.text
        assert latest(lg) == before
        lg.close()


def test_a_pass_that_meets_a_full_disk_anywhere_leaves_no_file_behind(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The disk full from the start of a pass, then with one page more free each time, so
    that the space runs out at every step (a .cleaned segment, its indexes, a .swapend):
    each pass that fails has removed every file it wrote and left the log as it was, and
    the first with room enough cleans."""
    with small_tmpfs(tmp_path / "disk", 1) as disk:
        lg = open_log(disk, segment_bytes=250)
        fill(lg, 12)
        lg.roll(NOW)
        before = records(lg)
        failed, cleaned = 0, None
        with caplog.at_level("INFO", "storage.cleaner.cleaner"):
            for pages in range(64):
                filler = disk_fill(disk)
                os.truncate(filler, max(0, filler.stat().st_size - pages * 4096))
                try:
                    cleaned = cleaner(lg).clean_once(NOW)
                finally:
                    free(filler)
                if cleaned is not None:
                    break
                failed += 1
                left = [p.name for p in (disk / "t-0").iterdir()
                        if p.suffix in (".cleaned", ".swapend", ".tmp")]
                assert not left, f"{pages} pages free: {left}"
                assert records(lg) == before
        assert cleaned is not None and failed > 3, failed
        assert "behind" not in caplog.text and latest(lg) == {k: v for _o, k, v in before}
        lg.close()


@pytest.mark.parametrize("point", ["cleaner.before_swap", "cleaner.after_swap_rename",
                                   "cleaner.after_delete_old", "cleaner.after_swap"])
def test_crash_during_swap_recovers(tmp_path: Path, point: str) -> None:
    lg = open_log(tmp_path, segment_bytes=250)
    fill(lg, 8)
    append(lg, [(b"k0", None)])
    fill(lg, 1, keys=2)
    expected = latest(lg)
    all_before = records(lg)

    def crash_at(name: str) -> None:
        if name == point:
            raise Crash(name)

    c = LogCleaner(lambda: {TP: lg}, CleanerConfig(), crash_point=crash_at)
    with pytest.raises(Crash):
        c.clean_once(NOW)
    for seg in lg.segments:
        seg.close()
    recover_swaps(tmp_path / "t-0")
    reopened = open_log(tmp_path, clean=False)
    assert latest(reopened) == expected
    got = records(reopened)
    if point == "cleaner.before_swap":
        assert got == all_before  # nothing was swapped in
    offsets = [o for o, _k, _v in got]
    assert offsets == sorted(set(offsets))
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.suffix in (".swap", ".cleaned", ".swapend")]
    assert cleaner(reopened).clean_once(NOW) is not None or point == "cleaner.after_swap"


def test_pass_dropped_when_the_log_changed_meanwhile(tmp_path: Path) -> None:
    """A truncation while the cleaner thread worked: its files are removed, the log stays."""
    lg = open_log(tmp_path, segment_bytes=250)
    fill(lg, 8)
    lg.roll(NOW)
    c = cleaner(lg)
    picked = c.select(NOW)
    assert picked is not None
    result = c.clean_job(picked[1])
    lg.truncate_to(5, NOW)
    expected = records(lg)
    assert not c.install(TP, result)
    assert records(lg) == expected
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.suffix in (".swap", ".cleaned", ".swapend")]


def test_producer_committing_after_an_earlier_pass_saw_its_abort(tmp_path: Path) -> None:
    """The offset map of a later pass ignores aborted transactions that ended before
    its dirty part (their markers are not read): the same producer's later committed
    records still supersede older ones."""
    lg = open_log(tmp_path, min_cleanable_dirty_ratio=0.01)
    fill(lg, 2)
    p = Txn(lg, 7)
    p.send([(b"k0", b"aborted")])
    p.end(False)
    lg.roll(NOW)
    c = cleaner(lg)
    assert c.clean_once(NOW) is not None
    p.send([(b"k1", b"new")])
    p.end(True)
    lg.roll(NOW)
    assert c.clean_once(NOW) is not None
    assert [v for _o, k, v in records(lg) if k == b"k1"] == [b"new"]
    assert b"aborted" not in {v for _o, _k, v in records(lg)}
