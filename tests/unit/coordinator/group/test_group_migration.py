"""The online upgrade and downgrade between the classic and the consumer protocol (KIP-848), as
Kafka's GroupMetadataManager: a consumer heartbeat converts a classic group, its classic members
are driven through JoinGroup / SyncGroup / Heartbeat, and the last consumer member leaving
turns the group back into a classic one."""

from __future__ import annotations

from dataclasses import replace

from coordinator.group import GroupState, Kind, OffsetCommitInput
from coordinator.group.consumer_state import ConsumerGroupState, MemberId
from coordinator.group.consumer_types import HeartbeatRequest
from coordinator.group.types import JoinResponse, SyncRequest
from protocol.consumer_protocol import decode_assignment, encode_assignment
from protocol.errors import ErrorCode
from tests.unit.coordinator.group.harness import GROUP, Harness
from tests.unit.coordinator.group.test_consumer_groups import Consumers, T

E = ErrorCode


def classic_join(h: Consumers, member_id: str = "") -> tuple[JoinResponse | None, str | None]:
    return Harness.join(h, member_id)


def new_classic_member(h: Consumers) -> str:
    first, _ = classic_join(h)
    assert first is not None and first.error is E.MEMBER_ID_REQUIRED
    classic_join(h, first.member_id)
    return first.member_id


def classic_group(h: Consumers) -> tuple[list[str], int]:
    """Two classic members of generation 1, three partitions of "t" each."""
    ids = [new_classic_member(h) for _ in range(2)]
    while (GROUP, ids[0], Kind.JOIN) not in h.answers:  # the initial rebalance delay, extended per member
        h.tick(h.now + h.machine.config.initial_rebalance_delay_ms)
    answers = {m: h.join_answer(m) for m in ids}
    generation = answers[ids[0]].generation_id
    leader = answers[ids[0]].leader
    follower = next(m for m in ids if m != leader)
    assert h.sync(follower, generation) is None
    assignments = {
        ids[0]: encode_assignment({"t": [0, 1, 2]}, 0),
        ids[1]: encode_assignment({"t": [3, 4, 5]}, 0),
    }
    h.sync(leader, generation, assignments)
    for m in ids:
        h.sync_answer(m)
    return ids, generation


def rejoin(h: Consumers, member_id: str) -> JoinResponse:
    first, _ = classic_join(h, member_id)
    assert first is not None, "a classic member of a consumer group is answered at once"
    return first


def test_a_consumer_heartbeat_converts_a_live_classic_group() -> None:
    h = Consumers()
    (a, b), generation = classic_group(h)
    joined = h.join("n")
    assert joined.member_epoch == generation + 1
    group = h.machine.consumer.groups[GROUP]
    assert GROUP not in h.machine.groups
    assert group.members[MemberId(a)].uses_classic and not group.members[MemberId("n")].uses_classic
    assert group.members[MemberId(a)].assigned == {T: frozenset({0, 1, 2})}
    # the classic members are told to rejoin; the one giving partitions up keeps the rest
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    answer = rejoin(h, a)
    assert (answer.error, answer.leader, answer.protocol_name) == (E.NONE, "", "range")
    synced = h.sync(a, answer.generation_id)
    assert synced is not None and synced.error is E.NONE
    assert sum(len(ps) for _, ps in decode_assignment(synced.assignment).partitions) == 2


def test_the_converted_group_reloads_exactly() -> None:
    h = Consumers()
    classic_group(h)
    h.join("n")
    before = h.machine.consumer.describe(GROUP)
    h.failover()
    assert h.machine.consumer.describe(GROUP) == before
    assert all(m.uses_classic for i, m in h.machine.consumer.groups[GROUP].members.items() if i != "n")


def test_a_classic_member_of_a_consumer_group_commits_at_its_member_epoch() -> None:
    h = Consumers()
    (a, _), generation = classic_group(h)
    h.join("n")
    answer = rejoin(h, a)
    commit = h.machine.offset_commit(GROUP, answer.generation_id, a, {("t", 0): OffsetCommitInput(1)}, h.now)
    assert commit.response == {("t", 0): E.NONE}
    stale = h.machine.offset_commit(GROUP, generation - 1, a, {("t", 0): OffsetCommitInput(1)}, h.now)
    assert stale.response == {("t", 0): E.ILLEGAL_GENERATION}
    fetched = h.machine.offset_fetch(GROUP, [("t", 0)], member=(a, generation - 1))
    assert fetched.error is E.ILLEGAL_GENERATION  # Kafka's validateMemberEpoch for a classic member
    assert h.machine.offset_fetch(GROUP, [("t", 0)], member=(a, answer.generation_id)).error is E.NONE


def test_the_last_consumer_member_leaving_turns_the_group_classic_again() -> None:
    h = Consumers()
    (a, b), _ = classic_group(h)
    joined = h.join("n")
    h.beat("n", -1)
    assert GROUP not in h.machine.consumer.groups
    group = h.machine.groups[GROUP]
    assert group.state is GroupState.PREPARING_REBALANCE and set(group.members) == {a, b}
    assert group.generation >= joined.member_epoch
    assert h.heartbeat(a, group.generation) is E.REBALANCE_IN_PROGRESS
    h.failover()
    reloaded = h.machine.groups[GROUP]
    assert (reloaded.generation, set(reloaded.members)) == (group.generation, {a, b})
    assert GROUP not in h.machine.consumer.groups


def test_a_classic_join_to_a_consumer_group_needs_a_member_id_first() -> None:
    h = Consumers()
    h.join("a")
    first, _ = classic_join(h)
    assert first is not None and first.error is E.MEMBER_ID_REQUIRED
    answer = rejoin(h, first.member_id)
    assert answer.error is E.NONE and answer.generation_id > 0
    assert h.machine.consumer.groups[GROUP].state() is not ConsumerGroupState.EMPTY
    assert h.heartbeat(first.member_id, answer.generation_id + 5) is E.ILLEGAL_GENERATION
    left = h.apply(h.machine.leave_group(GROUP, [], h.now))
    assert left is not None and left.error is E.NONE


def with_policy(policy: str) -> Consumers:
    h = Consumers()
    h.config = replace(h.config, consumer=replace(h.config.consumer, migration_policy=policy))
    h.machine = h._new_machine()
    h.machine.begin_load(0, 1)
    h.machine.finish_load(0, h.now)
    return h


def test_the_migration_policy_can_forbid_the_upgrade_or_the_downgrade() -> None:
    h = with_policy("downgrade")
    classic_group(h)
    refused = h.beat("n", 0)
    assert refused.error is E.GROUP_ID_NOT_FOUND
    assert GROUP in h.machine.groups
    h = with_policy("upgrade")
    (a, b), _ = classic_group(h)
    h.join("n")
    h.beat("n", -1)
    assert set(h.machine.consumer.groups[GROUP].members) == {a, b}
    assert GROUP not in h.machine.groups


def test_a_static_classic_member_restarted_without_its_id_takes_its_place_again() -> None:
    h = Consumers()
    h.join("n")
    first, _ = Harness.join(h, instance="i1")
    assert first is not None and first.error is E.NONE
    again, _ = Harness.join(h, instance="i1")
    assert again is not None and (again.error, again.member_id) == (E.NONE, first.member_id)
    assert len(h.machine.consumer.groups[GROUP].members) == 2


def test_a_classic_member_told_to_rejoin_that_does_not_within_its_rebalance_timeout_is_fenced() -> None:
    """Kafka's join timeout: heartbeats alone do not keep it (they keep only its session)."""
    h = Consumers()
    (a, b), generation = classic_group(h)
    h.join("n")
    answer = rejoin(h, b)
    h.sync(b, answer.generation_id)
    for now in (10_000, 18_000, 26_000, 34_000, 39_000):  # told to rejoin first at 10 s
        h.now = now
        assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
        h.heartbeat(b, answer.generation_id)
        h.beat("n", h.machine.consumer.groups[GROUP].members[MemberId("n")].member_epoch)
    assert a in h.machine.consumer.groups[GROUP].members
    h.tick(40_000)  # its rebalance timeout (30 s) lapsed
    assert set(h.machine.consumer.groups[GROUP].members) == {b, "n"}


def cooperative(owned: list[int]) -> tuple[tuple[str, bytes], ...]:
    """A ConsumerProtocolSubscription v1 of "t" naming the partitions the member owns."""
    topic = b"\x00\x01t"
    parts = len(owned).to_bytes(4, "big") + b"".join(p.to_bytes(4, "big") for p in owned)
    metadata = b"\x00\x01\x00\x00\x00\x01" + topic + b"\xff\xff\xff\xff\x00\x00\x00\x01" + topic + parts
    return (("range", metadata),)


def test_a_cooperative_classic_member_revokes_then_rejoins_for_the_new_epoch() -> None:
    """Its JoinGroup names what it owns: asked to give one up, it stays at its epoch and its
    SyncGroup gives it the rest; once its next JoinGroup no longer names it, it moves on."""
    h = Consumers()
    (a, b), generation = classic_group(h)
    h.join("n")
    first, _ = Harness.join(h, a, protocols=cooperative([0, 1, 2]))
    assert first is not None and (first.error, first.generation_id) == (E.NONE, generation)
    synced = h.sync(a, generation)
    assert synced is not None and synced.error is E.NONE
    kept = [p for _, ps in decode_assignment(synced.assignment).partitions for p in ps]
    assert len(kept) == 2
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    again, _ = Harness.join(h, a, protocols=cooperative(kept))
    assert again is not None and again.generation_id > generation


def test_a_classic_member_must_offer_a_protocol_every_classic_member_supports() -> None:
    h = Consumers()
    (a, _), _ = classic_group(h)
    h.join("n")
    refused, _ = Harness.join(h, a, protocols=(("roundrobin", cooperative([])[0][1]),))
    assert refused is not None and refused.error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_classic_record_in_flight_at_the_upgrade_does_not_bring_the_classic_group_back() -> None:
    """The leader's SyncGroup record is appended, a consumer heartbeat converts the group before
    it is durable: its replay must not make the classic group again beside the consumer group."""
    h = Consumers()
    ids = [new_classic_member(h) for _ in range(2)]
    while (GROUP, ids[0], Kind.JOIN) not in h.answers:
        h.tick(h.now + h.machine.config.initial_rebalance_delay_ms)
    answers = {m: h.join_answer(m) for m in ids}
    leader, generation = answers[ids[0]].leader, answers[ids[0]].generation_id
    assignments = {m: encode_assignment({"t": [i]}, 0) for i, m in enumerate(ids)}
    in_flight = h.machine.sync_group(SyncRequest(GROUP, generation, leader, assignments), h.now)
    assert in_flight.records, "the leader's assignment is written"
    converted = h.machine.consumer_group_heartbeat(
        HeartbeatRequest(GROUP, "n", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",),
                         owned=[]),
        h.image,
        h.now,
    )
    assert converted.response is not None and converted.response.error is E.NONE
    h.apply(in_flight)
    assert GROUP not in h.machine.groups and GROUP in h.machine.consumer.groups
    h.apply(converted)
    assert GROUP not in h.machine.groups and GROUP in h.machine.consumer.groups
    h.failover()
    assert GROUP not in h.machine.groups and GROUP in h.machine.consumer.groups


def test_a_group_whose_assignor_keeps_user_data_is_not_upgraded() -> None:
    """Kafka 4.3 refuses it: the consumer group would lose a client-side assignor's user data."""
    h = Consumers()
    ids = [new_classic_member(h) for _ in range(2)]
    while (GROUP, ids[0], Kind.JOIN) not in h.answers:
        h.tick(h.now + h.machine.config.initial_rebalance_delay_ms)
    answers = {m: h.join_answer(m) for m in ids}
    leader, generation = answers[ids[0]].leader, answers[ids[0]].generation_id
    with_data = encode_assignment({"t": [0]}, 0)[:-4] + b"\x00\x00\x00\x02ud"
    h.apply(h.machine.sync_group(SyncRequest(GROUP, generation, leader, {m: with_data for m in ids}), h.now))
    refused = h.beat("n", 0)
    assert refused.error is E.GROUP_ID_NOT_FOUND and "custom assignor" in (refused.message or "")
    assert GROUP in h.machine.groups and GROUP not in h.machine.consumer.groups


def settle(h: Consumers, member_id: str) -> int:
    """A classic member rejoins and syncs until its heartbeat is answered NONE; its generation."""
    for _ in range(4):
        answer = rejoin(h, member_id)
        synced = h.sync(member_id, answer.generation_id)
        assert synced is not None and synced.error is E.NONE
        if h.heartbeat(member_id, answer.generation_id) is E.NONE:
            return answer.generation_id
    raise AssertionError(f"{member_id} did not settle")


def test_consumer_members_fenced_together_leave_a_classic_group() -> None:
    """Kafka's validateOnlineDowngradeWithFencedMembers: the members whose sessions lapse at once."""
    h = Consumers()
    (a, b), _ = classic_group(h)
    h.join("n1")
    h.join("n2")
    generations = {m: settle(h, m) for m in (a, b)}
    generations = {m: settle(h, m) for m in (a, b)}  # the second settles after the first moved
    for now in range(h.now + 5_000, h.now + 60_000, 5_000):
        h.tick(now)
        for m, generation in generations.items():
            assert h.heartbeat(m, generation) in (E.NONE, E.REBALANCE_IN_PROGRESS)
        if GROUP in h.machine.groups:
            break
    group = h.machine.groups[GROUP]
    assert set(group.members) == {a, b} and GROUP not in h.machine.consumer.groups
