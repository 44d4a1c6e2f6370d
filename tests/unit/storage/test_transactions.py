"""Partition side of transactions: ongoing transactions, first unstable offset and
LSO, COMMIT/ABORT markers, the aborted-transaction index, and their durability."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader, ControlType, iter_batches, parse_control_batch
from protocol.types import TransactionVersion
from storage.index import AbortedTxn
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import OngoingTxn
from storage.segment import TXN_INDEX_SUFFIX
from tests.unit.storage.batches import make_batch, replicated

NOW = 1_000_000
A, B = 100, 200


def open_log(path: Path, clean: bool = True, recovery_point: int = 0, **cfg: object) -> Log:
    """Opened with the HW at its end, as a single broker's checkpoint would give it."""
    config = LogConfig(**cfg)  # type: ignore[arg-type]
    log = Log.open(path / "topic-0", config, recovery_point, None, clean, NOW)
    replicated(log)
    return log


def crash(log: Log) -> None:
    """Drop the log without the clean-close snapshot."""
    for seg in log.segments:
        seg.close()


class Producer:
    """A transactional producer writing batches with consecutive sequences."""

    def __init__(self, log: Log, pid: int, epoch: int = 0, replicate: bool = True) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0
        self.replicate = replicate  # each write counts as replicated at once (the HW follows)

    def _written(self) -> None:
        if self.replicate:
            replicated(self.log)

    def send(self, n: int = 1, transactional: bool = True) -> int:
        records = make_batch(
            [b"v"] * n,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=transactional,
            timestamp=NOW,
        )
        r = self.log.append_as_leader(records, leader_epoch=0, now_ms=NOW)
        assert r.error is ErrorCode.NONE, r
        self._written()
        self.seq += n
        return r.base_offset

    def end(self, commit: bool, coordinator_epoch: int = 0, epoch: int | None = None) -> int:
        e = self.epoch if epoch is None else epoch
        r = self.log.append_txn_marker(self.pid, e, commit, coordinator_epoch, 0, NOW + 1)
        assert r.error is ErrorCode.NONE, r
        self._written()
        return r.offset


def plain(log: Log, n: int = 1) -> int:
    base = log.append_as_leader(make_batch([b"p"] * n), leader_epoch=0, now_ms=NOW).base_offset
    replicated(log)
    return base


def index_entries(log: Log) -> list[AbortedTxn]:
    return [t for seg in log.segments for t in seg.txn_index]


# -- .txnindex format -------------------------------------------------------


def test_abort_writes_seed_walkthrough_entry_bytes(tmp_path: Path) -> None:
    """Seed 003: 'version: 0 producerId: 0 firstOffset: 0 lastOffset: 1 lastStableOffset: 2'."""
    log = open_log(tmp_path)
    p = Producer(log, 0)
    p.send()
    assert p.end(commit=False) == 1
    log.close()
    raw = (log.directory / f"{0:020d}{TXN_INDEX_SUFFIX}").read_bytes()
    expected = bytes.fromhex(
        "0000"  # version 0
        "0000000000000000"  # producerId 0
        "0000000000000000"  # firstOffset 0
        "0000000000000001"  # lastOffset 1 (the marker)
        "0000000000000002"  # lastStableOffset 2
    )
    assert len(expected) == 34 and raw == expected
    assert AbortedTxn.unpack(raw) == AbortedTxn(0, 0, 1, 2)


def test_txn_index_refuses_non_increasing_last_offset(tmp_path: Path) -> None:
    from storage.index import TransactionIndex

    ti = TransactionIndex(tmp_path / "x.txnindex", 0)
    ti.append(AbortedTxn(1, 0, 5, 6))
    for bad in (AbortedTxn(2, 3, 5, 6), AbortedTxn(2, 1, 4, 6), AbortedTxn(2, 9, 8, 9)):
        with pytest.raises(ValueError):
            ti.append(bad)
    ti.close()
    assert (tmp_path / "x.txnindex").read_bytes() == struct.pack(">hqqqq", 0, 1, 0, 5, 6)


# -- first unstable offset and LSO ------------------------------------------


def test_open_transaction_holds_lso_until_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A)
    assert log.first_unstable_offset is None and log.last_stable_offset == 0
    assert p.send(3) == 0  # offsets 0..2
    assert plain(log, 2) == 3  # offsets 3..4, not transactional
    fuo: int | None = log.first_unstable_offset
    assert (log.high_watermark, fuo, log.last_stable_offset) == (5, 0, 0)
    assert log.read(0, 10**6, log.last_stable_offset, True).records == b""
    assert log.ongoing_transactions() == [OngoingTxn(A, 0, 0, NOW + 2)]
    marker = p.end(commit=True)
    assert marker == 5
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == log.log_end_offset == 6
    assert log.ongoing_transactions() == [] and index_entries(log) == []
    batches = list(iter_batches(log.read(0, 10**6, 6, True).records))
    assert [h.base_offset for _, h in batches] == [0, 3, 5]
    _, control = batches[-1]
    assert control.is_control and control.is_transactional
    assert (control.producer_id, control.producer_epoch) == (A, 0)


def test_interleaved_transactions_lso_is_lowest_first_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    plain(log)
    a.send()  # 1
    b.send()  # 2
    a.send()  # 3: A's transaction still starts at 1
    assert log.last_stable_offset == 1
    assert [(t.producer_id, t.first_offset) for t in log.ongoing_transactions()] == [(A, 1), (B, 2)]
    b.end(commit=True)  # 4: A still open
    assert log.last_stable_offset == 1
    a.end(commit=True)  # 5
    assert log.last_stable_offset == 6 and log.first_unstable_offset is None
    b.send()  # 6: B's next transaction
    assert log.last_stable_offset == 6


def test_abort_index_entry_and_aborted_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    plain(log)  # 0
    a.send(2)  # 1..2
    b.send()  # 3
    assert a.end(commit=False) == 4
    # The LSO after A's abort is B's open transaction.
    assert index_entries(log) == [AbortedTxn(A, 1, 4, 3)]
    assert log.last_stable_offset == 3
    b.send()  # 5
    assert b.end(commit=False) == 6
    assert index_entries(log) == [AbortedTxn(A, 1, 4, 3), AbortedTxn(B, 3, 6, 7)]
    assert log.last_stable_offset == 7
    assert log.aborted_transactions(0, 1) == []  # before A's first offset
    assert log.aborted_transactions(0, 2) == [AbortedTxn(A, 1, 4, 3)]
    assert [t.producer_id for t in log.aborted_transactions(4, 7)] == [A, B]
    assert [t.producer_id for t in log.aborted_transactions(5, 7)] == [B]
    assert log.aborted_transactions(7, 8) == []  # after both markers
    info = log.read(5, 10**6, log.last_stable_offset, True, collect_aborted=True)
    assert info.aborted_transactions == [AbortedTxn(B, 3, 6, 7)]
    assert log.read(0, 10**6, 7, True).aborted_transactions is None


def test_aborted_transactions_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    a.send()  # 0
    log.roll(NOW)
    b.send()  # 1
    a.end(commit=False)  # 2, in the second segment
    log.roll(NOW)
    b.end(commit=False)  # 3, in the third segment
    assert [list(s.txn_index) for s in log.segments] == [
        [],
        [AbortedTxn(A, 0, 2, 1)],
        [AbortedTxn(B, 1, 3, 4)],
    ]
    assert [t.producer_id for t in log.aborted_transactions(0, 4)] == [A, B]
    # The search stops at the entry whose LSO reaches the upper bound.
    assert [t.producer_id for t in log.aborted_transactions(0, 1)] == [A]
    info = log.read(0, 10**6, 4, True, collect_aborted=True)  # first segment only
    assert info.aborted_transactions == [AbortedTxn(A, 0, 2, 1)]


def test_read_bounded_by_max_offset_whole_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    plain(log, 2)  # 0..1
    plain(log, 3)  # 2..4
    for max_offset in (2, 3, 4):  # the second batch straddles or reaches the bound
        info = log.read(0, 10**6, max_offset, True)
        assert [h.last_offset for _, h in iter_batches(info.records)] == [1]
    assert log.read(2, 1, 4, True).records == b""  # min_one_batch does not cross the bound
    assert len(list(iter_batches(log.read(0, 10**6, 5, True).records))) == 2


# -- markers ----------------------------------------------------------------


def test_marker_validation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A, epoch=2)
    p.send()
    p.end(commit=True, coordinator_epoch=5)
    p.send()  # a new transaction at offset 2
    end = log.log_end_offset
    stale_epoch = log.append_txn_marker(A, 1, True, 5, 0, NOW)
    assert (stale_epoch.error, stale_epoch.offset) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
    stale_coordinator = log.append_txn_marker(A, 2, False, 4, 0, NOW)
    assert stale_coordinator.error is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end and log.last_stable_offset == 2 and index_entries(log) == []
    # A higher coordinator epoch and a bumped producer epoch are accepted (fencing abort).
    r = log.append_txn_marker(A, 3, False, 6, 0, NOW)
    assert (r.error, r.offset) == (ErrorCode.NONE, end)
    assert index_entries(log) == [AbortedTxn(A, 2, 3, 4)]
    [info] = log.active_producers()
    assert (info.producer_epoch, info.coordinator_epoch, info.current_txn_start_offset) == (3, 6, -1)
    late = make_batch([b"z"], producer_id=A, producer_epoch=2, base_sequence=2, transactional=True)
    assert log.append_as_leader(late, 0, NOW).error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_late_transaction_version_2_marker_cannot_end_the_next_transaction(tmp_path: Path) -> None:
    """KIP-1228: at transaction version 2 a transaction's markers carry the epoch the
    coordinator bumped to, which is the epoch the producer writes its next transaction at.
    A copy of the first transaction's marker arriving late is at that epoch: refused, where
    the legacy check (at or above) would commit the open transaction's records. Before the
    next transaction opens, the same marker is the coordinator's retry: written again."""
    log = open_log(tmp_path)
    tv2 = TransactionVersion(2)
    p = Producer(log, A, epoch=2)
    p.send()
    first = log.append_txn_marker(A, 3, True, 5, 0, NOW, tv2)  # the first transaction ends at epoch 3
    assert first.error is ErrorCode.NONE
    retried = log.append_txn_marker(A, 3, True, 5, 0, NOW, tv2)  # no transaction open: a retry
    assert (retried.error, retried.offset) == (ErrorCode.NONE, first.offset + 1)
    p.epoch, p.seq = 3, 0
    opened = p.send()  # the next transaction, at epoch 3
    end = log.log_end_offset
    late = log.append_txn_marker(A, 3, True, 5, 0, NOW, tv2)
    assert late.error is ErrorCode.INVALID_PRODUCER_EPOCH and late.offset == -1
    assert log.log_end_offset == end and log.last_stable_offset == opened
    [info] = log.active_producers()
    assert (info.producer_epoch, info.current_txn_start_offset) == (3, opened)
    # The open transaction's own end, at the epoch bumped once more, is written.
    r = log.append_txn_marker(A, 4, False, 5, 0, NOW, tv2)
    assert (r.error, r.offset) == (ErrorCode.NONE, end)
    assert index_entries(log) == [AbortedTxn(A, opened, end, end + 1)]


def test_a_legacy_marker_at_the_producer_epoch_is_still_written(tmp_path: Path) -> None:
    """Transaction versions 0 and 1 do not bump the epoch: their marker is at the epoch of
    the records it ends (and `kafka-transactions.sh abort` sends version 0)."""
    log = open_log(tmp_path)
    p = Producer(log, A, epoch=2)
    opened = p.send()
    r = log.append_txn_marker(A, 2, False, 5, 0, NOW, TransactionVersion(1))
    assert (r.error, r.offset) == (ErrorCode.NONE, opened + 1)
    assert log.append_txn_marker(A, 2, False, 5, 0, NOW, TransactionVersion(0)).error is ErrorCode.NONE


def test_marker_without_open_transaction_is_written_but_not_indexed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    plain(log)
    r = log.append_txn_marker(A, 0, False, 1, 7, NOW)
    assert (r.error, r.offset) == (ErrorCode.NONE, 1)
    replicated(log)
    assert index_entries(log) == [] and log.last_stable_offset == 2
    [(_, header)] = list(iter_batches(log.read(1, 10**6, 2, True).records))
    assert header.partition_leader_epoch == 7 and header.max_timestamp == NOW
    record = parse_control_batch(log.read(1, 10**6, 2, True).records)
    assert (record.control_type, record.coordinator_epoch) == (ControlType.ABORT, 1)
    again = log.append_txn_marker(A, 0, False, 1, 7, NOW)  # a retried marker
    assert again.error is ErrorCode.NONE and again.offset == 2


def test_plain_write_inside_open_transaction_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A)
    p.send()
    records = make_batch([b"x"], producer_id=A, producer_epoch=0, base_sequence=1)
    assert log.append_as_leader(records, 0, NOW).error is ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 1


def test_log_append_time_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    r = log.append_txn_marker(A, 0, True, 0, 0, NOW + 5)
    [(_, header)] = list(iter_batches(log.read(r.offset, 10**6, 10, True).records))
    assert header.max_timestamp == NOW + 5 and header.timestamp_type.name == "LOG_APPEND_TIME"


def test_unreplicated_transaction_holds_fuo_until_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A, replicate=False)
    p.send()  # 0
    log.update_high_watermark(1)
    p.end(commit=True)  # 1: decided, but the marker is above the high watermark
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    log.update_high_watermark(2)
    assert log.first_unstable_offset is None and log.last_stable_offset == 2


# -- deletion and truncation -------------------------------------------------


def test_log_start_may_pass_first_unstable_offset(tmp_path: Path) -> None:
    """Kafka bounds DeleteRecords by the high watermark only; the FUO is clamped."""
    log = open_log(tmp_path)
    p = Producer(log, A)
    p.send()  # 0
    plain(log, 3)  # 1..3
    assert log.delete_records_before(2) is ErrorCode.NONE
    assert log.first_unstable_offset == 2 and log.last_stable_offset == 2
    p.end(commit=False)  # 4
    assert index_entries(log) == [AbortedTxn(A, 0, 4, 5)]
    assert log.last_stable_offset == 5


def test_segment_deletion_removes_txnindex(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A)
    p.send()
    p.end(commit=False)
    path = log.segments[0].path_for(TXN_INDEX_SUFFIX)
    assert path.stat().st_size == 34
    log.roll(NOW)
    plain(log)
    assert log.delete_records_before(3) is ErrorCode.NONE
    assert not path.exists() and log.aborted_transactions(0, 10) == []


def test_truncation_below_marker_reopens_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, A)
    p.send()  # 0
    p.end(commit=False)  # 1
    plain(log)  # 2
    log.truncate_to(1)
    assert index_entries(log) == []
    assert log.first_unstable_offset == 0 and [t.first_offset for t in log.ongoing_transactions()] == [0]
    assert log.append_txn_marker(A, 0, False, 0, 0, NOW).offset == 1
    assert index_entries(log) == [AbortedTxn(A, 0, 1, 2)]


# -- restart ----------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_open_transaction_survives_restart(tmp_path: Path, clean: bool) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    plain(log)  # 0
    a = Producer(log, A)
    a.send()  # 1
    for _ in range(4):
        plain(log)  # 2..5, rolling segments
    assert len(log.segments) > 1
    if clean:
        log.close()
    else:
        log.flush()
        crash(log)
    reopened = open_log(tmp_path, clean=clean, segment_bytes=300)
    assert reopened.first_unstable_offset == 1 and reopened.last_stable_offset == 1
    assert [(t.producer_id, t.first_offset) for t in reopened.ongoing_transactions()] == [(A, 1)]
    r = reopened.append_txn_marker(A, 0, False, 0, 0, NOW)
    replicated(reopened)
    assert r.error is ErrorCode.NONE and reopened.last_stable_offset == reopened.log_end_offset
    assert index_entries(reopened) == [AbortedTxn(A, 1, r.offset, r.offset + 1)]


def test_marker_in_replayed_tail_completes_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a = Producer(log, A)
    a.send()  # 0
    log.close()  # the snapshot at 1 holds the open transaction
    log = open_log(tmp_path)
    a = Producer(log, A)
    a.seq = 1
    a.end(commit=True)  # 1, only in the log tail
    log.flush()
    crash(log)
    reopened = open_log(tmp_path, clean=False, recovery_point=2)
    assert reopened.first_unstable_offset is None and reopened.last_stable_offset == 2


def test_abort_index_survives_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    a.send()
    b.send()
    a.end(commit=False)
    log.close()
    reopened = open_log(tmp_path)
    assert index_entries(reopened) == [AbortedTxn(A, 0, 2, 1)]
    assert reopened.last_stable_offset == 1


def test_unclean_recovery_rebuilds_deleted_txnindex(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    a, b = Producer(log, A), Producer(log, B)
    a.send()  # 0
    b.send()  # 1
    for _ in range(3):
        plain(log)  # rolls: the markers land in later segments than the data
    a.end(commit=False)
    plain(log)
    b.end(commit=False)
    a.send()
    a.end(commit=True)
    expected = index_entries(log)
    assert [(t.producer_id, t.first_offset, t.last_stable_offset) for t in expected] == [(A, 0, 1), (B, 1, 8)]
    assert len({t.last_offset for t in expected}) == 2 and len(log.segments) > 2
    log.flush()
    crash(log)
    for seg in log.segments:
        seg.path_for(TXN_INDEX_SUFFIX).unlink(missing_ok=True)  # created only by a first abort
    reopened = open_log(tmp_path, clean=False, recovery_point=0, segment_bytes=300)
    assert index_entries(reopened) == expected
    assert reopened.last_stable_offset == reopened.log_end_offset


@pytest.mark.parametrize("clean", [True, False])
def test_a_torn_txnindex_is_rebuilt_from_the_log(tmp_path: Path, clean: bool) -> None:
    """A `.txnindex` whose last entry was cut short (a write on a full disk stops at a page:
    seed 87's n3 then crashed at every start, "size 36864 is not a multiple of 34") is
    rebuilt from the segment's markers, as Kafka's log loader rebuilds a corrupt index."""
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    a.send()
    b.send()
    a.end(commit=False)
    b.end(commit=False)
    expected = index_entries(log)
    assert len(expected) == 2
    log.flush()
    if clean:
        log.close()
    else:
        crash(log)
    [txnindex] = (tmp_path / "topic-0").glob("*" + TXN_INDEX_SUFFIX)
    with open(txnindex, "ab") as f:
        f.write(b"\x00" * 8)  # part of a third entry
    reopened = open_log(tmp_path, clean=clean)
    assert index_entries(reopened) == expected
    assert txnindex.stat().st_size == 2 * 34


def test_recovery_from_later_segment_uses_snapshot_for_open_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    a = Producer(log, A)
    a.send()  # 0
    for _ in range(4):
        plain(log)
    seg = log.active_segment
    a.end(commit=False)  # marker in the last segment
    expected = index_entries(log)
    log.flush()
    crash(log)
    seg.path_for(TXN_INDEX_SUFFIX).unlink()
    # Only the last segment is recovered; A's first offset comes from the roll snapshot.
    reopened = open_log(tmp_path, clean=False, recovery_point=seg.base_offset, segment_bytes=300)
    assert index_entries(reopened) == expected == [AbortedTxn(A, 0, seg.next_offset - 1, seg.next_offset)]


# -- ProducerStateManager invariants ----------------------------------------


def test_manager_refuses_inconsistent_transaction_updates(tmp_path: Path) -> None:
    from storage.producer_state import CompletedTxn, ProducerStateEntry, ProducerStateManager

    ps = ProducerStateManager(tmp_path)
    ps.update(ProducerStateEntry(A, 0, current_txn_first_offset=5))
    with pytest.raises(ValueError):  # a transaction must start after the open ones
        ps.update(ProducerStateEntry(B, 0, current_txn_first_offset=5))
    with pytest.raises(ValueError):  # ending a transaction needs its CompletedTxn
        ps.update(ProducerStateEntry(A, 0))
    with pytest.raises(ValueError):  # the CompletedTxn must be that transaction
        ps.update(ProducerStateEntry(A, 0), CompletedTxn(A, 4, 9, True))
    ps.update(ProducerStateEntry(B, 0, current_txn_first_offset=7))
    assert ps.first_unstable_offset() == 5
    assert ps.last_stable_offset_after(CompletedTxn(A, 5, 9, True)) == 7
    ps.update(ProducerStateEntry(A, 0), CompletedTxn(A, 5, 9, True))
    assert ps.first_undecided_offset() == 7 and ps.first_unstable_offset() == 5  # unreplicated
    ps.on_high_watermark_updated(10)
    assert ps.first_unstable_offset() == 7
    assert ps.last_stable_offset_after(CompletedTxn(B, 7, 11, False)) == 12


# -- transaction verification (KIP-890): the guard and the lowest sequence ----------------


def txn_batch(pid: int, seq: int, epoch: int = 0) -> bytes:
    return make_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                      transactional=True, timestamp=NOW)


def verified_log(tmp_path: Path) -> Log:
    log = open_log(tmp_path)
    log.verify_transactions = True
    return log


def header_of(batch: bytes) -> BatchHeader:
    return BatchHeader.parse(batch)


def test_a_transaction_opens_only_with_the_guard_of_its_check(tmp_path: Path) -> None:
    log = verified_log(tmp_path)
    first = txn_batch(A, 0)
    # no check started: refused
    assert log.append_as_leader(first, 0, NOW).error == ErrorCode.INVALID_TXN_STATE
    guard = log.start_verification(header_of(first), NOW)
    assert guard is not None
    assert log.append_as_leader(first, 0, NOW, verification=guard).error == ErrorCode.NONE
    # the transaction is open: later batches need no check (and get no guard)
    second = txn_batch(A, 1)
    assert log.start_verification(header_of(second), NOW) is None
    assert log.append_as_leader(second, 0, NOW).error == ErrorCode.NONE


def test_a_bumped_epoch_batch_is_checked_while_the_older_transaction_is_open(tmp_path: Path) -> None:
    """Transaction version 2: EndTxn bumps the epoch, and the next transaction's first batch
    (new epoch) may arrive before the marker that ends the previous one. It must be checked
    with the coordinator, never slip into the transaction still open at the older epoch."""
    log = verified_log(tmp_path)
    first = txn_batch(A, 0, epoch=1)
    guard = log.start_verification(header_of(first), NOW)
    assert log.append_as_leader(first, 0, NOW, verification=guard).error == ErrorCode.NONE
    bumped = txn_batch(A, 0, epoch=2)
    # unchecked, it is refused; it gets a guard of its own
    assert log.append_as_leader(bumped, 0, NOW).error == ErrorCode.INVALID_TXN_STATE
    assert log.start_verification(header_of(bumped), NOW) is not None
    assert log.start_verification(header_of(txn_batch(A, 1, epoch=1)), NOW) is None


def test_a_marker_between_check_and_append_voids_the_guard(tmp_path: Path) -> None:
    """The check was answered before the coordinator aborted; the abort's marker landed
    first: the late batch must not open a transaction nobody will ever end."""
    log = verified_log(tmp_path)
    batch = txn_batch(A, 0)
    guard = log.start_verification(header_of(batch), NOW)
    assert log.append_txn_marker(A, 0, False, 0, 0, NOW).error == ErrorCode.NONE
    result = log.append_as_leader(batch, 0, NOW, verification=guard)
    assert result.error == ErrorCode.INVALID_TXN_STATE
    assert log.ongoing_transactions() == []


def test_a_later_sequence_waits_for_a_lower_one_still_being_checked(tmp_path: Path) -> None:
    """Sequence 0's check failed with a retriable error and is retried; sequence 5's check
    passed: 5 must not be appended first (a new producer's first sequence is otherwise free,
    and 0 could then never be appended)."""
    log = verified_log(tmp_path)
    low, high = txn_batch(A, 0, epoch=1), txn_batch(A, 5, epoch=1)
    log.start_verification(header_of(low), NOW)  # its check failed: no append
    guard = log.start_verification(header_of(high), NOW)
    result = log.append_as_leader(high, 0, NOW, verification=guard)
    assert result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    guard = log.start_verification(header_of(low), NOW)
    assert log.append_as_leader(low, 0, NOW, verification=guard).error == ErrorCode.NONE
    # a newer epoch starts over from its own sequence
    newer = txn_batch(B, 3, epoch=1)
    log.start_verification(header_of(newer), NOW)
    guard = log.start_verification(header_of(txn_batch(B, 0, epoch=2)), NOW)
    assert log.append_as_leader(txn_batch(B, 0, epoch=2), 0, NOW, verification=guard).error == ErrorCode.NONE


def test_checks_whose_batch_never_came_expire_with_idle_producers(tmp_path: Path) -> None:
    log = verified_log(tmp_path)
    log.start_verification(header_of(txn_batch(A, 4)), NOW)
    log.producer_state.remove_expired_producers(NOW + 1000, 1000)
    guard = log.start_verification(header_of(txn_batch(A, 9)), NOW + 1000)
    assert log.append_as_leader(txn_batch(A, 9), 0, NOW, verification=guard).error == ErrorCode.NONE


def test_the_first_sequence_rule_is_the_one_of_the_request_that_began_the_check(tmp_path: Path) -> None:
    """Transaction version 2 (Produce v12+): a producer with no state here starts at sequence
    0. The rule is set when the check begins (Kafka's computeIfAbsent of the verification
    entry): a check an older request began keeps it off for a later v12 batch, and one a v12
    batch began keeps it on."""
    log = verified_log(tmp_path)
    log.start_verification(header_of(txn_batch(A, 0, epoch=0)), NOW)  # Produce v6: refused
    later = txn_batch(A, 1, epoch=1)
    guard = log.start_verification(header_of(later), NOW, supports_epoch_bump=True)
    assert guard is not None and not guard.supports_epoch_bump
    assert log.append_as_leader(later, 0, NOW, verification=guard).error == ErrorCode.NONE
    guard = log.start_verification(header_of(txn_batch(B, 1)), NOW, supports_epoch_bump=True)
    assert guard is not None
    result = log.append_as_leader(txn_batch(B, 1), 0, NOW, verification=guard)
    assert result.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
