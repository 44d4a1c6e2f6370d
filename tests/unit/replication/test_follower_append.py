"""A follower's log, built only from the bytes its leader serves, matches the leader:
offsets, leader epochs, producer state, open and aborted transactions."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.replication.fetcher import truncation_offset
from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader
from storage.log import Log, ReplicaDataError
from storage.log_config import LogConfig
from tests.unit.storage.batches import make_batch

NOW = 1_000_000


def open_log(path: Path) -> Log:
    log = Log.open(path, LogConfig(), 0, None, True, NOW)
    return log


def replicate(leader: Log, follower: Log, max_bytes: int = 300) -> None:
    """What a replica fetcher does: fetch from the follower's log end until caught up."""
    while follower.log_end_offset < leader.log_end_offset:
        info = leader.read(follower.log_end_offset, max_bytes, leader.log_end_offset, True)
        assert info.error is ErrorCode.NONE and info.records
        follower.append_as_follower(info.records, NOW)


def fill(leader: Log) -> None:
    leader.append_as_leader(make_batch([b"a", b"b"]), 1, NOW)
    leader.append_as_leader(make_batch([b"t1"], transactional=True, producer_id=7, producer_epoch=0,
                                       base_sequence=0), 1, NOW)
    leader.append_as_leader(make_batch([b"i"], producer_id=8, producer_epoch=0, base_sequence=0), 2, NOW)
    leader.append_txn_marker(7, 0, commit=False, coordinator_epoch=3, leader_epoch=2, now_ms=NOW)
    leader.append_as_leader(make_batch([b"t2"], transactional=True, producer_id=7, producer_epoch=0,
                                       base_sequence=1), 2, NOW)


def test_a_follower_matches_its_leader(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "l" / "t-0"), open_log(tmp_path / "f" / "t-0")
    fill(leader)
    replicate(leader, follower)
    assert follower.log_end_offset == leader.log_end_offset == 6
    assert follower.epoch_cache.entries == leader.epoch_cache.entries
    assert follower.active_producers() == leader.active_producers()
    assert follower.ongoing_transactions() == leader.ongoing_transactions()
    assert follower.aborted_transactions(0, 6) == leader.aborted_transactions(0, 6)
    assert follower.read(0, 10**6, 6, True).records == leader.read(0, 10**6, 6, True).records


def test_a_follower_reopened_after_a_crash_matches_too(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "l" / "t-0"), open_log(tmp_path / "f" / "t-0")
    fill(leader)
    replicate(leader, follower)
    reopened = Log.open(tmp_path / "f" / "t-0", LogConfig(), 0, None, False, NOW)
    assert reopened.active_producers() == leader.active_producers()
    assert reopened.aborted_transactions(0, 6) == leader.aborted_transactions(0, 6)


def test_data_below_the_log_end_out_of_order_or_with_a_bad_crc_is_refused_whole(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "l" / "t-0"), open_log(tmp_path / "f" / "t-0")
    fill(leader)
    data = leader.read(0, 10**6, 6, True).records
    first = BatchHeader.parse(data).size_in_bytes
    follower.append_as_follower(data[:first], NOW)
    with pytest.raises(ReplicaDataError, match="fetched batch at 0 is below 2"):
        follower.append_as_follower(data, NOW)
    with pytest.raises(ReplicaDataError, match="fetched batch at 0 is below 6"):
        follower.append_as_follower(data[first:] + data[:first], NOW)
    assert follower.log_end_offset == 2, "nothing written"
    follower = open_log(tmp_path / "f2" / "t-0")
    corrupt = bytearray(data)
    corrupt[first + 61] ^= 1  # the first record of the second batch, under its CRC
    with pytest.raises(ReplicaDataError, match="corrupt"):
        follower.append_as_follower(bytes(corrupt), NOW)
    assert follower.log_end_offset == 0, "nothing written"


def test_a_diverged_follower_truncates_to_where_the_logs_agree(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_leader(make_batch([b"a", b"b"]), 1, NOW)  # epoch 1: [0, 2)
    follower.append_as_leader(make_batch([b"c", b"d"]), 2, NOW)  # epoch 2: [2, 4), never replicated
    # The new leader (epoch 3) says epoch 1 ended at 2 on its log, and epoch 2 never existed there.
    assert truncation_offset(follower, 1, 2) == 2
    assert truncation_offset(follower, 2, 3) == 3, "the leader had epoch 2 up to 3"
    follower.truncate_to(truncation_offset(follower, 1, 2), NOW)
    assert follower.log_end_offset == 2 and follower.latest_epoch == 1


def test_an_epoch_started_without_records_is_dropped_by_a_truncation_at_the_log_end(tmp_path: Path) -> None:
    """A leader of epoch 2 that appended nothing before it was deposed: the new leader reports
    divergence at the log end; truncating there drops epoch 2, so the next fetch agrees."""
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_leader(make_batch([b"a", b"b"]), 1, NOW)
    follower.epoch_cache.assign(2, follower.log_end_offset)
    assert follower.latest_epoch == 2
    follower.truncate_to(truncation_offset(follower, 1, 2), NOW)
    assert follower.log_end_offset == 2 and follower.latest_epoch == 1
