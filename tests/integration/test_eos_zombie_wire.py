"""KIP-447 zombie fencing of TxnOffsetCommit, byte level (seed 003, issue 5).

A consume-transform-produce processor commits its input offsets with
TxnOffsetCommit v3+, which carries the consumer's group metadata (generation,
member id, group instance id). After a rebalance hands its partitions to
another member, a zombie still holding the old generation must be rejected the
way Kafka's group coordinator rejects it (ClassicGroup.validateOffsetCommit):

- a known member with a stale generation -> ILLEGAL_GENERATION (22);
- a member id the group does not know (never joined, or removed) -> UNKNOWN_MEMBER_ID (25);
- a static member whose instance id now belongs to another member id -> FENCED_INSTANCE_ID (82);

and nothing of a rejected request may be committed, while the accepted ones
become visible exactly when the COMMIT marker lands (pending before:
OffsetFetch require_stable -> UNSTABLE_OFFSET_COMMIT (88)).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from protocol.messages import REQUESTS
from tests.integration.harness import BrokerFactory, unique_topic, wait_until
from tests.integration.test_eos_processor import OVERRIDES  # the same broker settings
from tests.integration.wire import WireClient

pytestmark = pytest.mark.integration


NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 0, 22, 25
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 79, 82, 88
COORDINATOR_ERRORS = {14, 15, 16}  # load in progress, not available, not coordinator

JOIN_V, SYNC_V, LEAVE_V, TXN_COMMIT_V, OFFSET_FETCH_V = 5, 3, 3, 3, 7


def consumer_subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, [topics], user data (null)."""
    raw = topic.encode()
    return struct.pack(">hih", 0, 1, len(raw)) + raw + struct.pack(">i", -1)


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    raw = topic.encode()
    body = struct.pack(">hih", 0, 1, len(raw)) + raw + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return body + struct.pack(">i", -1)


class Member:
    """One group member over its own connection (JoinGroup parks, so one socket each)."""

    def __init__(self, port: int, group: str, topic: str, instance_id: str | None = None) -> None:
        self.c = WireClient(port, timeout=15)
        self.group, self.topic, self.instance_id = group, topic, instance_id
        self.member_id = ""
        self.generation = -1
        self._pending: int | None = None

    def close(self) -> None:
        self.c.close()

    def _join_msg(self) -> Any:
        cls = REQUESTS[11]
        return cls(
            version=JOIN_V, group_id=self.group, session_timeout_ms=30000, rebalance_timeout_ms=10000,
            member_id=self.member_id, group_instance_id=self.instance_id, protocol_type="consumer",
            protocols=[
                cls.JoinGroupRequestProtocol(name="range", metadata=consumer_subscription(self.topic))
            ],
        )

    def get_member_id(self) -> None:
        """The MEMBER_ID_REQUIRED round trip of a new dynamic member (JoinGroup v4+)."""
        if not self.member_id and self.instance_id is None:
            resp = self.c.call(self._join_msg(), JOIN_V)
            assert resp.error_code == MEMBER_ID_REQUIRED, f"first JoinGroup: error {resp.error_code}"
            self.member_id = resp.member_id

    def send_join(self) -> None:
        """JoinGroup (after the member-id round trip); the answer is read by finish_join."""
        self.get_member_id()
        msg = self._join_msg()
        self._pending = self.c.send_request(11, JOIN_V, bytes(msg.encode(version=JOIN_V)))

    def finish_join(self) -> Any:
        assert self._pending is not None
        resp = self.c.recv_response(11, JOIN_V, self._pending)
        self._pending = None
        assert resp.error_code == NONE, f"JoinGroup {self.member_id}: error {resp.error_code}"
        self.member_id, self.generation = resp.member_id, resp.generation_id
        return resp

    def send_sync(self, assignments: dict[str, list[int]] | None = None) -> int:
        cls = REQUESTS[14]
        msg = cls(
            version=SYNC_V, group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance_id,
            assignments=[
                cls.SyncGroupRequestAssignment(member_id=m, assignment=consumer_assignment(self.topic, ps))
                for m, ps in (assignments or {}).items()
            ],
        )
        return self.c.send_request(14, SYNC_V, bytes(msg.encode(version=SYNC_V)))

    def finish_sync(self, cid: int) -> None:
        resp = self.c.recv_response(14, SYNC_V, cid)
        assert resp.error_code == NONE, f"SyncGroup {self.member_id}: error {resp.error_code}"

    def leave(self) -> None:
        cls = REQUESTS[13]
        msg = cls(version=LEAVE_V, group_id=self.group,
                  members=[cls.MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id)])
        resp = self.c.call(msg, LEAVE_V)
        assert resp.error_code == NONE, f"LeaveGroup: error {resp.error_code}"


def rebalance(members: list[Member], assignment: dict[int, list[int]]) -> None:
    """All `members` (re)join together, the leader assigns `assignment` (member index -> partitions).

    Newcomers join first: their JoinGroup parks in PreparingRebalance until the known
    members rejoin (a known leader rejoining a Stable group alone would complete a
    rebalance by itself, leaving the newcomer to wait for the next one)."""
    for m in members:
        m.get_member_id()
    for m in sorted(members, key=lambda m: m.generation >= 0):
        m.send_join()
    leaders = []
    for m in members:
        resp = m.finish_join()
        if resp.leader == m.member_id:
            leaders.append(m)
    assert len(leaders) == 1, "exactly one member is told it leads"
    gens = {m.generation for m in members}
    assert len(gens) == 1, f"members disagree on the generation: {gens}"
    plan = {members[i].member_id: ps for i, ps in assignment.items()}
    cids = {id(m): m.send_sync(plan if m is leaders[0] else None) for m in members}
    for m in members:
        m.finish_sync(cids[id(m)])


class Txn:
    """One transactional producer over the wire: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, EndTxn."""

    def __init__(self, c: WireClient, tid: str, coordinator: int = 1) -> None:
        """`c` is connected to the transaction coordinator, broker `coordinator`."""
        self.c, self.tid = c, tid
        cls = REQUESTS[10]
        resp = wait_until(
            lambda: (r := c.call(cls(version=3, key=tid, key_type=1), 3)).error_code == 0 and r,
            timeout=15, msg="transaction coordinator",
        )
        assert resp.node_id == coordinator
        init = REQUESTS[22](version=3, transactional_id=tid, transaction_timeout_ms=60000,
                            producer_id=-1, producer_epoch=-1)
        resp = wait_until(
            lambda: (r := c.call(init, 3)).error_code == 0 and r, timeout=15, msg="InitProducerId"
        )
        self.pid, self.epoch = resp.producer_id, resp.producer_epoch

    def add_offsets(self, group: str) -> None:
        msg = REQUESTS[25](version=3, transactional_id=self.tid, producer_id=self.pid,
                           producer_epoch=self.epoch, group_id=group)
        resp = self.c.call(msg, 3)
        assert resp.error_code == NONE, f"AddOffsetsToTxn: error {resp.error_code}"

    def commit_offsets(
        self, group: str, topic: str, offsets: dict[int, int], generation: int, member_id: str,
        instance_id: str | None = None, via: WireClient | None = None,
    ) -> dict[int, int]:
        """TxnOffsetCommit v3 (to the group coordinator: `via`, if not this connection's
        broker); {partition: error code}."""
        cls = REQUESTS[28]
        tcls = cls.TxnOffsetCommitRequestTopic
        msg = cls(
            version=TXN_COMMIT_V, transactional_id=self.tid, group_id=group, producer_id=self.pid,
            producer_epoch=self.epoch, generation_id=generation, member_id=member_id,
            group_instance_id=instance_id,
            topics=[tcls(name=topic, partitions=[
                tcls.TxnOffsetCommitRequestPartition(
                    partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                for p, o in offsets.items()
            ])],
        )
        resp = (via or self.c).call(msg, TXN_COMMIT_V)
        return {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}

    def end(self, commit: bool) -> None:
        msg = REQUESTS[26](version=3, transactional_id=self.tid, producer_id=self.pid,
                           producer_epoch=self.epoch, committed=commit)
        resp = self.c.call(msg, 3)
        assert resp.error_code == NONE, f"EndTxn: error {resp.error_code}"


def offset_fetch(c: WireClient, group: str, topic: str, partitions: list[int],
                 require_stable: bool) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch v7: (top-level error, {partition: (committed offset, error)})."""
    cls = REQUESTS[9]
    msg = cls(version=OFFSET_FETCH_V, group_id=group, require_stable=require_stable,
              topics=[cls.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)])
    resp = c.call(msg, OFFSET_FETCH_V)
    return resp.error_code, {
        p.partition_index: (p.committed_offset, p.error_code) for t in resp.topics for p in t.partitions
    }


def test_txn_offset_commit_fences_zombie_generation(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group = unique_topic("purchases"), unique_topic("shop")
    parts = [0, 1, 2, 3]
    with WireClient(broker.port) as admin:
        resp = admin.call(REQUESTS[19](
            version=4, timeout_ms=5000, validate_only=False,
            topics=[REQUESTS[19].CreatableTopic(name=topic, num_partitions=len(parts), replication_factor=1,
                                               assignments=[], configs=[])]), 4)
        assert resp.topics[0].error_code == 0
        find = REQUESTS[10](version=3, key=group, key_type=0)
        wait_until(lambda: admin.call(find, 3).error_code == 0, timeout=15, msg="group coordinator")

    a = Member(broker.port, group, topic)
    b = Member(broker.port, group, topic)
    s1 = Member(broker.port, group + "-static", topic, instance_id="shop-1")
    tx_conn = WireClient(broker.port)
    try:
        # generation 1: A alone owns every partition; its transaction commits offsets fine.
        rebalance([a], {0: parts})
        gen1, a_id = a.generation, a.member_id
        assert gen1 >= 1
        txa = Txn(tx_conn, unique_topic("shop-proc-a"))
        txa.add_offsets(group)
        assert txa.commit_offsets(group, topic, {0: 10}, gen1, a_id) == {0: NONE}

        # Pending until the marker: a stable fetch is told to retry, a plain one sees nothing yet.
        err, got = offset_fetch(tx_conn, group, topic, [0], require_stable=True)
        assert UNSTABLE_OFFSET_COMMIT in (err, got[0][1]), (err, got)
        assert offset_fetch(tx_conn, group, topic, [0], require_stable=False)[1][0][0] == -1

        # B joins: A rejoins too, generation 2, partitions 2-3 move to B.
        rebalance([a, b], {0: [0, 1], 1: [2, 3]})
        gen2 = a.generation
        assert gen2 > gen1 and b.generation == gen2

        # The zombie: A's producer still holds generation 1 for partitions it lost.
        assert txa.commit_offsets(group, topic, {2: 99, 3: 99}, gen1, a_id) == {
            2: ILLEGAL_GENERATION, 3: ILLEGAL_GENERATION}
        # A member id the group never saw.
        assert txa.commit_offsets(group, topic, {2: 98}, gen2, "zombie-" + a_id) == {2: UNKNOWN_MEMBER_ID}
        # The current generation of a current member is accepted (inside the same transaction).
        assert txa.commit_offsets(group, topic, {1: 20}, gen2, a_id) == {1: NONE}

        # B leaves, A rejoins alone (generation 3): B's generation-2 metadata is now a removed member.
        b_id = b.member_id
        b.leave()
        rebalance([a], {0: parts})
        assert a.generation > gen2
        assert txa.commit_offsets(group, topic, {3: 97}, gen2, b_id) == {3: UNKNOWN_MEMBER_ID}

        # Static membership: a second instance with the same group.instance.id takes over
        # (a new member id); the old member id with that instance id is fenced.
        rebalance([s1], {0: parts})
        old_static_id, static_gen = s1.member_id, s1.generation
        s1b = Member(broker.port, group + "-static", topic, instance_id="shop-1")
        try:
            s1b.send_join()
            s1b.finish_join()
            assert s1b.member_id != old_static_id
            txa.add_offsets(group + "-static")
            res = txa.commit_offsets(group + "-static", topic, {0: 5}, static_gen, old_static_id,
                                     instance_id="shop-1")
            assert res == {0: FENCED_INSTANCE_ID}, res
        finally:
            s1b.close()

        txa.end(commit=True)

        # Only the accepted offsets are visible (after the marker), nothing of the zombie's.
        def stable() -> dict[int, tuple[int, int]] | None:
            err, got = offset_fetch(tx_conn, group, topic, parts, require_stable=True)
            if err == UNSTABLE_OFFSET_COMMIT or any(e == UNSTABLE_OFFSET_COMMIT for _o, e in got.values()):
                return None
            assert err == 0, err
            return got

        got = wait_until(stable, timeout=10, msg="stable offsets after the COMMIT marker")
        assert got == {0: (10, 0), 1: (20, 0), 2: (-1, 0), 3: (-1, 0)}, got
        err, got = offset_fetch(tx_conn, group + "-static", topic, [0], require_stable=True)
        assert err == 0 and got == {0: (-1, 0)}, (err, got)
    finally:
        for m in (a, b, s1):
            m.close()
        tx_conn.close()
