"""The transaction coordinator state machine, driven with a fake clock and an in-memory log."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from coordinator.hashing import coordinator_partition, java_abs, java_string_hash
from coordinator.producer_ids import ProducerIdsUnavailable
from coordinator.transaction import (
    MAX_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    Outcome,
    TransactionStateMachine,
    TxnMetadata,
    TxnState,
    check_transition,
)
from protocol.api_keys import ApiKey, fenced_error_for_version
from protocol.errors import ErrorCode
from protocol.transaction_log import decode_key, decode_value
from protocol.types import TV2

E = ErrorCode
S = TxnState
TID = "txn-a"
TP0 = ("orders", 0)
TP1 = ("orders", 1)
MAX_TIMEOUT = 900_000


class Harness:
    """A coordinator plus the log it appends to; ``run`` plays the broker: append, replay, answer."""

    def __init__(self, tv_level: int = TV2, first_id: int = 1000) -> None:
        self.now = 1_000_000
        self.ids = itertools.count(first_id)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.m = self.machine(tv_level)

    def machine(self, tv_level: int = TV2) -> TransactionStateMachine:
        m = TransactionStateMachine(
            num_partitions=1,
            max_timeout_ms=MAX_TIMEOUT,
            new_producer_id=lambda: next(self.ids),
            transaction_version_level=tv_level,
        )
        m.begin_load(0, coordinator_epoch=3)
        m.finish_load(0)
        return m

    def run(self, outcome: Outcome) -> Outcome:
        if outcome.record is not None:
            self.log.append(outcome.record)
            self.m.replay(*outcome.record)
        return outcome

    def init(self, tid: str = TID, timeout: int = 60_000, pid: int = -1, epoch: int = -1) -> Outcome:
        return self.run(self.m.init_producer_id(tid, timeout, pid, epoch, self.now))

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tid: str = TID, tv: int = 0) -> Outcome:
        return self.run(self.m.add_partitions(tid, pid, epoch, tps, self.now, client_transaction_version=tv))

    def end(self, pid: int, epoch: int, commit: bool, tid: str = TID, tv: int = 0) -> Outcome:
        return self.run(self.m.end_txn(tid, pid, epoch, commit, self.now, tv))

    def complete(self, tid: str = TID) -> Outcome:
        return self.run(self.m.complete_markers(tid, self.now))

    def state(self, tid: str = TID) -> TxnMetadata:
        md = self.m.get(tid)
        assert md is not None
        return md

    def statuses(self) -> list[S]:
        return [S(decode_value(v).status) for _, v in self.log if v is not None]

    def reload(self) -> TransactionStateMachine:
        fresh = TransactionStateMachine(
            num_partitions=1, max_timeout_ms=MAX_TIMEOUT, new_producer_id=lambda: next(self.ids)
        )
        fresh.begin_load(0, coordinator_epoch=4)
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh


@pytest.fixture
def h() -> Harness:
    return Harness()


# ------------------------------------------------------------------ transition table


ALL_PAIRS = [(a, b) for a in S for b in S]


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS, ids=lambda s: s.display_name)
def test_every_transition_against_the_table(current: S, target: S) -> None:
    md = TxnMetadata(TID, 5, -1, -1, 1, -1, 1000, current, frozenset(), -1, 0, 0)
    if current in VALID_PREVIOUS_STATES[target]:
        check_transition(current, target)
        assert md.transit(target).state is target
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(current, target)
        with pytest.raises(IllegalStateTransition):
            md.transit(target)


def test_table_is_kafkas() -> None:
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_ABORT] == {S.PREPARE_ABORT}
    assert VALID_PREVIOUS_STATES[S.PREPARE_EPOCH_FENCE] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert [s.display_name for s in S] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]


# ------------------------------------------------------------------ the flows


def test_commit_flow_records_match_seed_001(h: Harness) -> None:
    init = h.init()
    assert (init.error, init.producer_id, init.producer_epoch) == (E.NONE, 1000, 0)
    assert h.add(1000, 0, TP0).error is E.NONE
    offsets = h.run(h.m.add_offsets(TID, 1000, 0, ("__consumer_offsets", 12), h.now))
    assert offsets.error is E.NONE
    end = h.end(1000, 0, commit=True)
    assert end.error is E.NONE and (end.producer_id, end.producer_epoch) == (-1, -1)
    assert end.markers is not None
    assert end.markers.commit and end.markers.coordinator_epoch == 3
    assert end.markers.partitions == {TP0, ("__consumer_offsets", 12)}
    assert (end.markers.producer_id, end.markers.producer_epoch) == (1000, 0)
    assert h.state().state is S.PREPARE_COMMIT
    assert h.complete().error is E.NONE
    assert h.statuses() == [S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    done = h.state()
    assert done.partitions == frozenset() and done.producer_epoch == 0
    assert all(decode_key(k) == TID for k, _ in h.log)
    empty_value = decode_value(h.log[0][1] or b"")
    assert empty_value.partitions is None and empty_value.start_ms == -1
    assert decode_value(h.log[-1][1] or b"").partitions == ()


def test_abort_flow_and_next_transaction(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0)
    end = h.end(1000, 0, commit=False)
    assert end.markers is not None and not end.markers.commit
    h.complete()
    assert h.state().state is S.COMPLETE_ABORT
    h.now += 5
    assert h.add(1000, 0, TP1).error is E.NONE
    md = h.state()
    assert md.state is S.ONGOING and md.partitions == {TP1} and md.txn_start_ms == h.now


def test_add_partitions_already_present_writes_nothing(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0, TP1)
    before = len(h.log)
    out = h.add(1000, 0, TP1)
    assert out.error is E.NONE and out.record is None and len(h.log) == before
    assert out.partition_errors == {TP1: E.NONE}


def test_add_partitions_errors(h: Harness) -> None:
    assert h.add(1000, 0, TP0).partition_errors == {TP0: E.INVALID_PRODUCER_ID_MAPPING}
    h.init()
    assert h.add(999, 0, TP0).error is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1000, 1, TP0).error is E.PRODUCER_FENCED
    assert h.add(1000, 0, TP0, tid="").error is E.INVALID_REQUEST
    h.add(1000, 0, TP0)
    h.end(1000, 0, commit=True)
    assert h.add(1000, 0, TP1).partition_errors == {TP1: E.CONCURRENT_TRANSACTIONS}


def test_verify_only_answers_membership_without_a_record(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0)
    out = h.m.add_partitions(TID, 1000, 0, [TP0, TP1], h.now, verify_only=True)
    assert out.record is None
    assert out.partition_errors == {TP0: E.NONE, TP1: E.TRANSACTION_ABORTABLE}
    assert h.m.add_partitions(TID, 1000, 1, [TP0], h.now, verify_only=True).error is E.PRODUCER_FENCED
    assert (
        h.m.add_partitions("x", 1000, 0, [TP0], h.now, verify_only=True).error
        is E.INVALID_PRODUCER_ID_MAPPING
    )


# ------------------------------------------------------------------ InitProducerId


def test_init_bumps_epoch_and_keeps_id(h: Harness) -> None:
    h.init()
    again = h.init()
    assert (again.producer_id, again.producer_epoch) == (1000, 1)
    assert h.state().last_producer_epoch == -1


def test_init_timeout_validation(h: Harness) -> None:
    assert h.init(timeout=MAX_TIMEOUT + 1).error is E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=0).error is E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=MAX_TIMEOUT).error is E.NONE
    assert h.init(tid="").error is E.INVALID_REQUEST
    assert h.init(pid=5).error is E.INVALID_REQUEST


def test_second_producer_fences_open_transaction(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0)
    fence = h.init()
    assert fence.error is E.CONCURRENT_TRANSACTIONS
    assert fence.markers is not None and not fence.markers.commit
    assert fence.markers.partitions == {TP0}
    # one bump, also at TV2, as Kafka 4.3 answers (the differential suite); PrepareEpochFence
    # is never written
    assert fence.markers.producer_epoch == 1
    assert h.statuses()[-1] is S.PREPARE_ABORT
    # the old producer is fenced everywhere
    assert h.add(1000, 0, TP1).error is E.PRODUCER_FENCED
    assert h.end(1000, 0, commit=True).error is E.PRODUCER_FENCED
    # the new one retries while markers are outstanding
    assert h.init().error is E.CONCURRENT_TRANSACTIONS
    h.complete()
    assert h.state().state is S.COMPLETE_ABORT
    ok = h.init()
    assert (ok.error, ok.producer_id, ok.producer_epoch) == (E.NONE, 1000, 2)


def test_fence_at_tv0_bumps_once() -> None:
    h = Harness(tv_level=0)
    h.init()
    h.add(1000, 0, TP0)
    fence = h.init()
    assert fence.markers is not None and fence.markers.producer_epoch == 1
    assert decode_value(h.log[-1][1] or b"").client_transaction_version == 0
    assert h.log[-1][1] is not None and h.log[-1][1][:2] == b"\x00\x00"  # value version 0


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [(22, 3, E.INVALID_PRODUCER_EPOCH), (22, 4, E.PRODUCER_FENCED), (24, 1, E.INVALID_PRODUCER_EPOCH),
     (24, 2, E.PRODUCER_FENCED), (25, 1, E.INVALID_PRODUCER_EPOCH), (26, 1, E.INVALID_PRODUCER_EPOCH),
     (26, 2, E.PRODUCER_FENCED)],
)  # fmt: skip
def test_fenced_error_per_request_version(api_key: int, version: int, expected: E) -> None:
    assert fenced_error_for_version(E.PRODUCER_FENCED, ApiKey(api_key), version) is expected
    assert fenced_error_for_version(E.NONE, ApiKey(api_key), version) is E.NONE


def test_failed_fence_write_does_not_bump_twice(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0)
    first = h.m.init_producer_id(TID, 60_000, -1, -1, h.now)
    assert h.m.is_pending(TID)
    assert h.m.init_producer_id(TID, 60_000, -1, -1, h.now).error is E.CONCURRENT_TRANSACTIONS
    h.m.write_failed(TID)
    assert h.state().state is S.ONGOING
    second = h.init()
    assert first.markers is not None and second.markers is not None
    assert second.markers.producer_epoch == first.markers.producer_epoch


def test_kip_360_recovery_with_current_id_and_epoch(h: Harness) -> None:
    h.init()
    h.init()  # epoch 1
    rec = h.init(pid=1000, epoch=1)
    assert (rec.error, rec.producer_id, rec.producer_epoch) == (E.NONE, 1000, 2)
    assert h.state().last_producer_epoch == 1
    retry = h.init(pid=1000, epoch=1)  # retry of the call that succeeded: same epoch back
    assert (retry.error, retry.producer_epoch) == (E.NONE, 2)
    assert h.init(pid=1000, epoch=0).error is E.PRODUCER_FENCED
    assert h.init(pid=4242, epoch=2).error is E.PRODUCER_FENCED


def test_kip_360_unknown_id_gets_a_new_producer(h: Harness) -> None:
    out = h.init(pid=77, epoch=5)
    assert (out.error, out.producer_id, out.producer_epoch) == (E.NONE, 1000, 0)


def test_epoch_exhaustion_rotates_producer_id() -> None:
    h = Harness(tv_level=0)
    h.init()
    md = h.state()
    h.m.apply(TID, replace(md, producer_epoch=MAX_EPOCH - 1).to_log_value())
    out = h.init()
    assert (out.producer_id, out.producer_epoch) == (1001, 0)
    assert h.state().previous_producer_id == 1000
    # a retry naming the old id with the exhausted epoch is not fenced
    h.m.apply(TID, replace(h.state(), producer_epoch=MAX_EPOCH - 1).to_log_value())
    assert h.init(pid=1001, epoch=MAX_EPOCH - 1).producer_id == 1002
    assert h.init(pid=1001, epoch=MAX_EPOCH - 1).error is E.NONE


# ------------------------------------------------------------------ EndTxn, TV1 and TV2


@pytest.mark.parametrize(
    ("state", "commit", "expected"),
    [(S.EMPTY, True, E.INVALID_TXN_STATE), (S.EMPTY, False, E.INVALID_TXN_STATE),
     (S.COMPLETE_COMMIT, True, E.NONE), (S.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE),
     (S.COMPLETE_ABORT, False, E.NONE), (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
     (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
     (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_ABORT, True, E.INVALID_TXN_STATE)],
)  # fmt: skip
def test_end_txn_v1_outside_ongoing(h: Harness, state: S, commit: bool, expected: E) -> None:
    h.m.apply(
        TID, TxnMetadata(TID, 1000, -1, -1, 4, -1, 60_000, state, frozenset({TP0}), 1, 1, 0).to_log_value()
    )
    out = h.end(1000, 4, commit)
    assert out.error is expected and out.record is None


def test_end_txn_v1_errors(h: Harness) -> None:
    assert h.end(1000, 0, True).error is E.INVALID_PRODUCER_ID_MAPPING
    h.init()
    h.add(1000, 0, TP0)
    assert h.end(1001, 0, True).error is E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(1000, 1, True).error is E.PRODUCER_FENCED
    assert h.end(1000, 0, True, tid="").error is E.INVALID_REQUEST


def test_tv2_bumps_epoch_on_every_end_and_answers_retries(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0, tv=TV2)
    end = h.end(1000, 0, commit=True, tv=TV2)
    assert (end.error, end.producer_id, end.producer_epoch) == (E.NONE, 1000, 1)
    assert end.markers is not None and end.markers.producer_epoch == 1
    assert h.end(1000, 0, commit=True, tv=TV2).error is E.CONCURRENT_TRANSACTIONS  # retry while prepared
    assert h.end(1000, 0, commit=False, tv=TV2).error is E.INVALID_TXN_STATE
    # the next transaction's EndTxn, at the bumped epoch, waits for this one (KAFKA-18464)
    assert h.end(1000, 1, commit=False, tv=TV2).error is E.CONCURRENT_TRANSACTIONS
    assert h.end(1000, 1, commit=True, tv=TV2).error is E.CONCURRENT_TRANSACTIONS
    assert h.m.is_settling(TID)
    assert h.end(1000, 2, commit=True, tv=TV2).error is E.PRODUCER_FENCED
    h.complete()
    retry = h.end(1000, 0, commit=True, tv=TV2)
    assert (retry.error, retry.producer_epoch, retry.record) == (E.NONE, 1, None)
    # a delayed request of the old epoch cannot join the next transaction
    assert h.add(1000, 0, TP1, tv=TV2).error is E.PRODUCER_FENCED
    assert h.end(1000, 1, commit=True, tv=TV2).error is E.INVALID_TXN_STATE
    abort = h.end(1000, 1, commit=False, tv=TV2)  # an abort with nothing open still bumps
    assert (abort.error, abort.producer_epoch) == (E.NONE, 2)
    assert abort.markers is not None and abort.markers.partitions == frozenset()


@pytest.mark.parametrize(
    ("state", "retry", "commit", "expected"),
    [(S.EMPTY, True, False, E.PRODUCER_FENCED), (S.EMPTY, False, False, "bump"),
     (S.EMPTY, True, True, E.PRODUCER_FENCED), (S.EMPTY, False, True, E.INVALID_TXN_STATE),
     (S.COMPLETE_ABORT, True, False, E.NONE), (S.COMPLETE_ABORT, False, False, "bump"),
     (S.COMPLETE_ABORT, True, True, E.PRODUCER_FENCED),  # KAFKA-20785: the coordinator aborted
     (S.COMPLETE_ABORT, False, True, E.INVALID_TXN_STATE),
     (S.COMPLETE_COMMIT, True, False, E.INVALID_TXN_STATE), (S.COMPLETE_COMMIT, False, False, "bump"),
     (S.COMPLETE_COMMIT, True, True, E.NONE), (S.COMPLETE_COMMIT, False, True, E.INVALID_TXN_STATE)],
)  # fmt: skip
def test_tv2_table_from_kafka(h: Harness, state: S, retry: bool, commit: bool, expected: E | str) -> None:
    h.m.apply(
        TID, TxnMetadata(TID, 1000, -1, -1, 4, -1, 60_000, state, frozenset(), 1, 1, TV2).to_log_value()
    )
    out = h.end(1000, 3 if retry else 4, commit, tv=TV2)
    if expected == "bump":
        assert (out.error, out.producer_epoch) == (E.NONE, 5) and h.state().state is S.PREPARE_ABORT
    else:
        assert out.error is expected and out.record is None


def test_tv2_epoch_overflow_moves_to_next_producer_id(h: Harness) -> None:
    h.init()
    h.m.apply(TID, replace(h.state(), producer_epoch=MAX_EPOCH - 1).to_log_value())
    h.add(1000, MAX_EPOCH - 1, TP0, tv=TV2)
    end = h.end(1000, MAX_EPOCH - 1, commit=True, tv=TV2)
    assert (end.producer_id, end.producer_epoch) == (1001, 0)
    assert end.markers is not None and end.markers.producer_epoch == MAX_EPOCH
    assert h.state().next_producer_id == 1001
    h.complete()
    md = h.state()
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id) == (1001, 0, 1000)
    retry = h.end(1000, MAX_EPOCH - 1, commit=True, tv=TV2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, 1001, 0)


def test_no_producer_id_to_be_had_is_load_in_progress_and_changes_nothing(h: Harness) -> None:
    """Kafka's answer while its producer-id block is not there yet; the client retries."""
    h.init()
    h.m.apply(TID, replace(h.state(), producer_epoch=MAX_EPOCH - 1).to_log_value())
    h.add(1000, MAX_EPOCH - 1, TP0, tv=TV2)
    before, logged = h.state(), len(h.log)

    def unavailable() -> int:
        raise ProducerIdsUnavailable("etcd out of reach")

    h.m._allocate = unavailable
    assert h.end(1000, MAX_EPOCH - 1, commit=True, tv=TV2).error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.init(tid="txn-new").error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert (h.state(), len(h.log), h.m.get("txn-new")) == (before, logged, None)
    assert not h.m.is_pending(TID) and not h.m.is_pending("txn-new")
    h.m._allocate = lambda: 2000
    assert h.end(1000, MAX_EPOCH - 1, commit=True, tv=TV2).producer_id == 2000


# ------------------------------------------------------------------ concurrency while a write is pending


def test_pending_write_gives_concurrent_transactions(h: Harness) -> None:
    h.init()
    pending = h.m.add_partitions(TID, 1000, 0, [TP0], h.now)
    assert pending.record is not None
    assert h.m.add_partitions(TID, 1000, 0, [TP1], h.now).error is E.CONCURRENT_TRANSACTIONS
    assert h.m.end_txn(TID, 1000, 0, True, h.now).error is E.CONCURRENT_TRANSACTIONS
    assert h.m.init_producer_id(TID, 1000, -1, -1, h.now).error is E.CONCURRENT_TRANSACTIONS
    h.run(pending)
    assert h.state().partitions == {TP0}
    assert not h.m.is_pending(TID)


def test_failed_write_leaves_state_unchanged(h: Harness) -> None:
    h.init()
    out = h.m.add_partitions(TID, 1000, 0, [TP0], h.now)
    h.m.write_failed(TID)
    assert h.state().state is S.EMPTY
    assert out.record is not None
    assert h.add(1000, 0, TP0).error is E.NONE


# ------------------------------------------------------------------ timeouts and expiration


def test_timed_out_transaction_is_fenced_and_aborted(h: Harness) -> None:
    h.init(timeout=10_000)
    h.add(1000, 0, TP0)
    start = h.now
    assert h.m.next_deadline_ms() == start + 10_001
    h.now = start + 10_000
    assert h.m.abort_timed_out(h.now) == []
    h.now += 1
    [out] = h.m.abort_timed_out(h.now)
    assert out.markers is not None and not out.markers.commit and out.markers.producer_epoch == 1
    assert h.m.abort_timed_out(h.now) == []  # pending: not twice
    h.run(out)
    assert h.m.next_deadline_ms() is None
    assert h.add(1000, 0, TP1).error is E.PRODUCER_FENCED
    h.complete()
    assert h.state().state is S.COMPLETE_ABORT


def test_expiration_writes_a_tombstone(h: Harness) -> None:
    h.init()
    h.init(tid="busy")
    h.add(1001, 0, TP0, tid="busy")
    h.now += 1000
    assert h.m.expire_idle(h.now, expiration_ms=1001) == []
    assert h.m.next_expiration_ms(1000) == h.now
    [out] = h.m.expire_idle(h.now, expiration_ms=1000)
    assert out.record is not None and out.record[1] is None and decode_key(out.record[0]) == TID
    assert h.m.describe(TID)[0] is E.TRANSACTIONAL_ID_NOT_FOUND  # being expired
    assert h.m.init_producer_id(TID, 1000, -1, -1, h.now).error is E.CONCURRENT_TRANSACTIONS
    h.run(out)
    assert h.m.get(TID) is None
    assert h.reload().get(TID) is None
    fresh = h.init()
    assert (fresh.producer_id, fresh.producer_epoch) == (1002, 0)


# ------------------------------------------------------------------ failover


def test_reload_gives_the_same_state_and_finds_prepared(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0, TP1)
    h.end(1000, 0, commit=True)
    h.init(tid="b")
    h.add(1001, 0, ("other", 3), tid="b")
    fresh = h.reload()
    assert fresh.end_txn(TID, 1000, 0, True, h.now).error is E.COORDINATOR_LOAD_IN_PROGRESS
    [markers] = fresh.finish_load(0)
    assert markers.transactional_id == TID and markers.commit and markers.coordinator_epoch == 4
    assert markers.partitions == {TP0, TP1}
    for tid in (TID, "b"):
        live = h.state(tid)
        assert fresh.get(tid) == replace(live, last_producer_epoch=-1)
    assert fresh.init_producer_id(TID, 1000, -1, -1, h.now).error is E.CONCURRENT_TRANSACTIONS
    h.m = fresh
    assert h.complete().error is E.NONE
    assert h.state().state is S.COMPLETE_COMMIT


def staged_load(log: list[tuple[bytes, bytes | None]]) -> TransactionStateMachine:
    """A load as the broker runs it: each record staged, the last of each id replayed."""
    fresh = TransactionStateMachine(num_partitions=1, max_timeout_ms=MAX_TIMEOUT, new_producer_id=lambda: 1)
    fresh.begin_load(0, coordinator_epoch=4)
    for key, value in log:
        fresh.stage(0, key, value)
    assert fresh.replay_staged(0) == []
    return fresh


def test_a_staged_load_ends_where_replaying_every_record_does(h: Harness) -> None:
    h.init(tid="gone")
    h.now += 1000
    [tombstone] = h.m.expire_idle(h.now, expiration_ms=1000)
    h.run(tombstone)
    for epoch in range(3):  # three transactions of one id: a dozen records of its state
        pid = h.init().producer_id
        h.add(pid, epoch, TP0, TP1)
        h.end(pid, epoch, commit=epoch != 1)
        h.complete()
    other = h.init(tid="b").producer_id
    h.add(other, 0, ("other", 3), tid="b")  # left ongoing
    key, value = h.log[-1]
    assert value is not None
    h.log.append((key, b"\x00\x09" + value[2:]))  # a value version from the future: skipped
    full, staged = h.reload(), staged_load(h.log)
    for tid in (TID, "b", "gone"):
        assert staged.get(tid) == full.get(tid)
    assert staged.get(TID) is not None and staged.get("b") is not None and staged.get("gone") is None
    assert staged.finish_load(0) == full.finish_load(0)


def test_a_record_too_short_for_its_version_is_refused_when_staged() -> None:
    m = TransactionStateMachine(num_partitions=1, max_timeout_ms=MAX_TIMEOUT, new_producer_id=lambda: 1)
    m.begin_load(0, coordinator_epoch=1)
    with pytest.raises(ValueError):
        m.stage(0, b"\x00", None)


def test_unowned_partition_is_not_coordinator() -> None:
    m = TransactionStateMachine(num_partitions=2, max_timeout_ms=MAX_TIMEOUT, new_producer_id=lambda: 1)
    assert m.init_producer_id(TID, 1000, -1, -1, 0).error is E.NOT_COORDINATOR
    m.begin_load(m.partition_for(TID), 0)
    assert m.init_producer_id(TID, 1000, -1, -1, 0).error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert m.list_transactions(0).error is E.COORDINATOR_LOAD_IN_PROGRESS
    m.finish_load(m.partition_for(TID))
    assert m.init_producer_id(TID, 1000, -1, -1, 0).error is E.NONE


# ------------------------------------------------------------------ admin queries


def test_list_and_describe(h: Harness) -> None:
    h.init()
    h.add(1000, 0, TP0)
    h.init(tid="idle")
    h.now += 5000
    assert [md.transactional_id for md in h.m.list_transactions(h.now).transactions] == ["idle", TID]
    ongoing = h.m.list_transactions(h.now, state_filters=["Ongoing", "Bogus"])
    assert [md.transactional_id for md in ongoing.transactions] == [TID]
    assert ongoing.unknown_state_filters == ("Bogus",)
    assert [
        md.transactional_id for md in h.m.list_transactions(h.now, producer_id_filters=[1001]).transactions
    ] == ["idle"]
    longer = h.m.list_transactions(h.now, state_filters=["Ongoing"], duration_filter_ms=5000)
    assert longer.transactions == ()
    assert (
        len(h.m.list_transactions(h.now, state_filters=["Ongoing"], duration_filter_ms=4999).transactions)
        == 1
    )
    err, md = h.m.describe(TID)
    assert err is E.NONE and md is not None and md.state.display_name == "Ongoing"
    assert h.m.describe("nope")[0] is E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.m.describe("")[0] is E.INVALID_REQUEST


# ------------------------------------------------------------------ hashing


def test_java_string_hash_and_partition() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert coordinator_partition("kafka-txn-0", 50) == 30  # seed 001
    assert coordinator_partition("my-group", 50) == 12  # seed 001: __consumer_offsets-12
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_abs(-(2**31)) == 0
    assert coordinator_partition("polygenelubricants", 7) == 0
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair


def test_a_partition_unloaded_or_reloaded_touches_only_its_own_ids() -> None:
    """The machine keeps its ids by partition: the timer, the completions and the listing of
    the other partitions see theirs as before."""
    m = TransactionStateMachine(num_partitions=4, max_timeout_ms=MAX_TIMEOUT,
                                new_producer_id=itertools.count(7).__next__)

    def play(outcome: Outcome) -> Outcome:
        assert outcome.record is not None, outcome
        m.replay(*outcome.record)
        return outcome

    for p in range(4):
        m.begin_load(p, 1)
        m.finish_load(p)
    ids = [f"txn-{n}" for n in range(40)]
    for n, tid in enumerate(ids):  # Ongoing, the odd ones in PrepareCommit
        init = play(m.init_producer_id(tid, 1_000, -1, -1, 0))
        play(m.add_partitions(tid, init.producer_id, init.producer_epoch, (TP0,), 0))
        if n % 2:
            play(m.end_txn(tid, init.producer_id, init.producer_epoch, True, 0, 0))
    gone = m.partition_for(ids[0])
    m.unload(gone)
    kept = sorted(tid for tid in ids if m.partition_for(tid) != gone)
    ongoing, prepared = [t for t in kept if int(t[4:]) % 2 == 0], [t for t in kept if int(t[4:]) % 2]
    assert [md.transactional_id for md in m.list_transactions(0).transactions] == kept
    assert [o.transactional_id for o in m.abort_timed_out(10_000)] == ongoing
    assert [i.transactional_id for i in m.pending_completions()] == prepared
    m.begin_load(gone, 2)  # loading: none of its ids, and the others' answers unchanged
    assert m.pending_completions(gone) == [] and m.get(ids[0]) is None
    assert [i.transactional_id for i in m.pending_completions()] == prepared
