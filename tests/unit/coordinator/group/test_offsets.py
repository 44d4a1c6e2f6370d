"""OffsetCommit / OffsetFetch / TxnOffsetCommit / markers / expiration / failover."""

from __future__ import annotations

from coordinator.group import GroupConfig, LeaveMember, OffsetCommitInput
from protocol.errors import ErrorCode
from tests.unit.coordinator.group.harness import GROUP, Harness

TP = ("t", 0)
PID = 7


def commit(h: Harness, offset: int, generation: int = -1, member: str = "", version: int = 9) -> ErrorCode:
    result = h.machine.offset_commit(
        GROUP, generation, member, {TP: OffsetCommitInput(offset, 3, "meta")}, h.now, api_version=version
    )
    response = h.apply(result)
    assert response is not None
    return response[TP]


def txn_commit(h: Harness, offset: int, generation: int = -1, member: str = "", pid: int = PID) -> ErrorCode:
    result = h.machine.txn_offset_commit(
        "tx", GROUP, pid, 0, {TP: OffsetCommitInput(offset)}, h.now, generation=generation, member_id=member
    )
    response = h.apply(result, producer_id=pid)
    assert response is not None
    return response[TP]


def fetched(h: Harness, require_stable: bool = False) -> tuple[int, ErrorCode]:
    [p] = h.machine.offset_fetch(GROUP, [TP], require_stable).partitions
    return p.offset, p.error


def test_simple_commit_creates_a_group_and_fetches() -> None:
    h = Harness()
    assert commit(h, 10) is ErrorCode.NONE
    [p] = h.machine.offset_fetch(GROUP, None).partitions
    assert (p.topic, p.partition, p.offset, p.leader_epoch, p.metadata) == ("t", 0, 10, 3, "meta")
    group = h.machine.group(GROUP)
    assert group is not None and group.protocol_type is None
    assert h.machine.offset_fetch("other", [TP]).partitions[0].offset == -1


def test_commit_generation_checks() -> None:
    h = Harness()
    assert commit(h, 1, generation=3, member="m", version=9) is ErrorCode.GROUP_ID_NOT_FOUND
    assert commit(h, 1, generation=3, member="m", version=8) is ErrorCode.ILLEGAL_GENERATION
    (a,), gen = h.stable_group(1)
    assert commit(h, 5, generation=gen + 1, member=a) is ErrorCode.ILLEGAL_GENERATION
    assert commit(h, 5, generation=gen, member="ghost") is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(h, 5) is ErrorCode.UNKNOWN_MEMBER_ID  # a simple commit into a live group
    assert commit(h, 5, generation=gen, member=a) is ErrorCode.NONE
    assert fetched(h) == (5, ErrorCode.NONE)


def test_commit_while_completing_rebalance() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(2)
    h.join(a)  # leader rejoins
    h.join(b)
    assert h.machine.group(GROUP).state.value == "CompletingRebalance"  # type: ignore[union-attr]
    assert commit(h, 1, generation=gen + 1, member=a) is ErrorCode.REBALANCE_IN_PROGRESS


def test_metadata_too_large() -> None:
    h = Harness(GroupConfig(num_partitions=1, offset_metadata_max_bytes=2))
    assert commit(h, 1) is ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_txn_offsets_pending_until_commit_marker() -> None:
    h = Harness()
    commit(h, 5)
    assert txn_commit(h, 9) is ErrorCode.NONE
    assert fetched(h) == (5, ErrorCode.NONE)
    assert fetched(h, require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    h.marker(PID, commit=True)
    assert fetched(h, require_stable=True) == (9, ErrorCode.NONE)


def test_txn_offsets_dropped_on_abort() -> None:
    h = Harness()
    commit(h, 5)
    txn_commit(h, 9)
    h.marker(PID, commit=False)
    assert fetched(h, require_stable=True) == (5, ErrorCode.NONE)


def test_later_plain_commit_wins_over_earlier_txn_commit() -> None:
    h = Harness()
    txn_commit(h, 9)
    commit(h, 12)  # written after the transactional record
    h.marker(PID, commit=True)
    assert fetched(h) == (12, ErrorCode.NONE)


def test_zombie_txn_offset_commit_is_fenced() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(2)
    assert txn_commit(h, 3, generation=gen, member=a) is ErrorCode.NONE
    h.join(a)  # a rebalance: b is a zombie until it rejoins
    h.join(b)
    assert txn_commit(h, 4, generation=gen, member=b) is ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(h, 4, generation=gen + 1, member="ghost") is ErrorCode.UNKNOWN_MEMBER_ID
    assert txn_commit(h, 4, generation=gen + 1, member=b) is ErrorCode.NONE  # allowed while completing
    assert txn_commit(h, 4) is ErrorCode.NONE  # old clients send no group metadata


def test_txn_commit_to_missing_group() -> None:
    h = Harness()
    assert txn_commit(h, 1, generation=2, member="m") is ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(h, 1) is ErrorCode.NONE


def test_failover_rebuilds_groups_offsets_and_pending_txn_offsets() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(2)
    commit(h, 5, generation=gen, member=a)
    txn_commit(h, 9, pid=PID)
    txn_commit(h, 11, pid=8)
    h.marker(8, commit=False)
    before = h.machine.describe_groups([GROUP])
    machine = h.failover()
    assert machine.describe_groups([GROUP]) == before
    group = machine.group(GROUP)
    assert group is not None and group.generation == gen and group.leader_id == a
    assert fetched(h) == (5, ErrorCode.NONE)
    assert fetched(h, require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    assert machine.next_deadline_ms() == h.now + 10_000  # loaded members must heartbeat
    assert h.heartbeat(a, gen) is ErrorCode.NONE
    h.marker(PID, commit=True)
    assert fetched(h, require_stable=True) == (9, ErrorCode.NONE)


def test_failover_of_static_replacement_and_deletion() -> None:
    h = Harness()
    _, parked = h.join(instance="i1")
    h.tick(0)
    gen = h.join_answer(parked).generation_id  # type: ignore[arg-type]
    h.sync(parked, gen, {parked: b"x"}, instance="i1")  # type: ignore[arg-type]
    h.join(instance="i1")
    machine = h.failover()
    group = machine.group(GROUP)
    assert (
        group is not None
        and group.static_members == {"i1": "i1-2"}
        and group.members["i1-2"].assignment == b"x"
    )


def test_offset_delete() -> None:
    h = Harness()
    (a,), gen = h.stable_group(1)
    commit(h, 5, generation=gen, member=a)
    result = h.machine.offset_delete(GROUP, [TP, ("other", 0)])
    assert result.response is not None
    assert dict(result.response.partitions) == {
        TP: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("other", 0): ErrorCode.NONE,
    }
    assert result.records == ()
    h.apply(h.machine.leave_group(GROUP, [LeaveMember(a)], h.now))
    deleted = h.machine.offset_delete(GROUP, [TP])
    assert deleted.response is not None and deleted.response.partitions[TP] is ErrorCode.NONE
    h.apply(deleted)
    assert fetched(h) == (-1, ErrorCode.NONE)
    assert h.machine.offset_delete("missing", [TP]).response.error is ErrorCode.GROUP_ID_NOT_FOUND  # type: ignore[union-attr]


def test_offsets_expire_and_the_empty_group_goes() -> None:
    h = Harness()
    commit(h, 5)
    txn_commit(h, 6, pid=PID)
    h.now = 1000
    assert h.machine.expire_offsets(h.now, retention_ms=1000).records == ()  # a transaction is open
    h.marker(PID, commit=True)
    result = h.machine.expire_offsets(h.now, retention_ms=1000)
    assert result.response == 1
    assert [v for _, v in result.records] == [None, None]
    h.apply(result)
    assert h.machine.group(GROUP) is None
    assert fetched(h) == (-1, ErrorCode.NONE)


def test_offsets_of_live_group_do_not_expire() -> None:
    h = Harness()
    (a,), gen = h.stable_group(1)
    commit(h, 5, generation=gen, member=a)
    assert h.machine.expire_offsets(10**9, retention_ms=1).records == ()


def test_ownership_errors() -> None:
    h = Harness()
    h.machine.begin_load(0, 2)
    assert commit(h, 1) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.machine.offset_fetch(GROUP, [TP]).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    h.machine.unload(0)
    assert commit(h, 1) is ErrorCode.NOT_COORDINATOR
