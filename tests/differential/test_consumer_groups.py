"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe, and
the offset commits and fetches of a consumer-protocol member, at each version Gregor advertises:
one member's life (join, steady heartbeat, commits with its epoch and a stale one, leave), a
group that is not a consumer group, and the requests Kafka refuses."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.differential.cases import Cases, versions
from tests.differential.runner import Side, Step, Tree, run_case
from tests.differential.steps import new_topic, topic

HEARTBEAT, DESCRIBE = 68, 69


def group(side: Side) -> str:
    return topic(side, "-cg")


def learner(who: str) -> Any:
    def learn(side: Side, resp: Any) -> None:
        if resp.error_code == 0:
            side.vars[f"epoch{who}"] = resp.member_epoch
            if resp.assignment is not None:
                given = resp.assignment.topic_partitions
                side.vars[f"owned{who}"] = [(t.topic_id, list(t.partitions)) for t in given]

    return learn


def member_id(side: Side, who: str = "") -> str:
    """A member names itself (KIP-1082): one id per member, case and broker."""
    return str(side.vars.setdefault(f"member{who}", str(uuid.uuid4())))


def owned(side: Side, who: str) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": ps} for t, ps in side.vars.get(f"owned{who}", [])]


def join(v: int, who: str = "", **fields: Any) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "group_id": group(side),
            "member_id": member_id(side, who),
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [topic(side)],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
            **fields,
        }

    return Step(HEARTBEAT, request, version=v, learn=learner(who))


def beat(v: int, epoch_delta: int = 0, epoch: int | None = None, who: str = "", report: bool = False,
         **fields: Any) -> Step:
    """A steady heartbeat; with `report`, the member says what it owns (its last assignment)."""
    def request(side: Side) -> dict[str, Any]:
        mine = side.vars.get(f"epoch{who}", 0)
        return {
            "group_id": group(side),
            "member_id": member_id(side, who),
            "member_epoch": mine + epoch_delta if epoch is None else epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": owned(side, who) if report else None,
            **fields,
        }

    return Step(HEARTBEAT, request, version=v, learn=learner(who))


def by_assignment(_side: Side, tree: Tree) -> Tree:
    """Members in an order both brokers share (Kafka lists them in its hash map's order)."""
    for described in tree.get("groups", []):
        described["members"] = sorted(described.get("members", []), key=lambda m: str(m["assignment"]))
    return tree


def describe(v: int, suffix: str = "-cg") -> Step:
    return Step(DESCRIBE, lambda side: {"group_ids": [topic(side, suffix)],
                                        "include_authorized_operations": False}, version=v,
                select=by_assignment)


def commit(epoch_delta: int, offset: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "group_id": group(side),
            "generation_id_or_member_epoch": side.vars.get("epoch", 0) + epoch_delta,
            "member_id": member_id(side),
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": topic(side), "partitions": [{
                "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                "commit_timestamp": -1, "committed_metadata": "",
            }]}],
        }

    return Step(8, request, version=9)


def fetch(epoch_delta: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "groups": [{
                "group_id": group(side), "member_id": member_id(side),
                "member_epoch": side.vars.get("epoch", 0) + epoch_delta,
                "topics": [{"name": topic(side), "partition_indexes": [0]}],
            }],
            "require_stable": True,
        }

    return Step(9, request, version=9)


def classic_describe() -> Step:
    """DescribeGroups and ListGroups of a consumer-protocol group."""
    return Step(15, lambda side: {"groups": [group(side)], "include_authorized_operations": False}, version=5)


def life(v: int) -> list[Any]:
    return [
        *new_topic(partitions=2),
        describe(v),  # not yet a group
        join(v),
        beat(v),
        describe(v),
        classic_describe(),
        commit(0, 1),
        commit(1, 2),  # an epoch ahead of the member's: stale
        fetch(0),
        fetch(1),
        beat(v, epoch_delta=1),  # fenced
        beat(v, epoch=-1),  # leaves
        describe(v),
        beat(v),  # no longer a member
    ]


def two_members(v: int) -> list[Any]:
    """A second member joins: the first is asked to revoke, then the second gets the partition."""
    return [
        *new_topic(partitions=2),
        join(v, "a"),
        join(v, "b"),  # nothing for b yet: both partitions are a's
        beat(v, who="a", report=True),  # a is asked to give one up
        beat(v, who="a", report=True),  # a reports it gave it up: a moves to the new epoch
        beat(v, who="b", report=True),  # b gets it
        describe(v),
        beat(v, who="a", epoch=-1),
        beat(v, who="b", report=True),
        describe(v),
    ]


def refused(v: int) -> list[Any]:
    return [
        *new_topic(),
        join(v, rebalance_timeout_ms=-1),
        join(v, server_assignor="sticky"),
        join(v, topic_partitions=None),
        join(v, subscribed_topic_names=[]),
        join(v, member_epoch=-3),
        beat(v, epoch=4),
    ]


def coordinator_names_the_member() -> list[Any]:
    """Version 0: a member joining without an id is given one by the coordinator (KIP-848 before
    KIP-1082); version 1 refuses it (the refusals case)."""
    return [*new_topic(), join(0, member_id=""), describe(0)]


def classic_subscription(side: Side) -> bytes:
    """A ConsumerProtocolSubscription v0 of the case's topic."""
    name = topic(side).encode()
    return b"\x00\x00\x00\x00\x00\x01" + len(name).to_bytes(2, "big") + name + b"\xff\xff\xff\xff"


def classic_member(side: Side) -> dict[str, Any]:
    return {"group_id": group(side), "generation_id": side.vars.get("generation", -1),
            "member_id": side.vars.get("classic", ""), "group_instance_id": None}


def learn_classic(side: Side, resp: Any) -> None:
    if resp.member_id:
        side.vars["classic"] = resp.member_id
    side.vars["generation"] = resp.generation_id


def classic_join(protocol_type: str = "consumer") -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "group_id": group(side), "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": side.vars.get("classic", ""), "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": classic_subscription(side)}],
            "reason": None,
        }

    return Step(11, request, version=9, learn=learn_classic)


def classic_sync(partitions: list[int] | None = None) -> Step:
    """The leader's SyncGroup gives it ``partitions``; a follower's (None) gives nothing."""
    def request(side: Side) -> dict[str, Any]:
        given = []
        if partitions is not None:
            name = topic(side).encode()
            assignment = (b"\x00\x00\x00\x00\x00\x01" + len(name).to_bytes(2, "big") + name
                          + len(partitions).to_bytes(4, "big")
                          + b"".join(p.to_bytes(4, "big") for p in partitions) + b"\xff\xff\xff\xff")
            given = [{"member_id": side.vars["classic"], "assignment": assignment}]
        return {**classic_member(side), "protocol_type": "consumer", "protocol_name": "range",
                "assignments": given}

    return Step(14, request, version=5)


def classic_heartbeat() -> Step:
    return Step(12, classic_member, version=4)


def classic_leave() -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {"group_id": group(side), "members": [
            {"member_id": side.vars.get("classic", ""), "group_instance_id": None, "reason": None}]}

    return Step(13, request, version=5)


def listed(_side: Side, tree: Tree) -> Tree:
    return {**tree, "groups": [g for g in tree["groups"] if g["group_id"] == group(_side)]}


def list_groups(types: tuple[str, ...] = ()) -> Step:
    return Step(16, {"states_filter": [], "types_filter": list(types)}, version=5, select=listed)


def upgrade_and_downgrade(v: int) -> list[Any]:
    """The online upgrade: a classic member holds both partitions; a consumer-protocol member's
    first heartbeat converts the group; the classic member is told to rejoin, gives one
    partition up, the new member gets it; when the new member leaves, the group is classic
    again (the downgrade) and its member is told to rejoin."""
    return [
        *new_topic(partitions=2),
        classic_join(),  # MEMBER_ID_REQUIRED
        classic_join(),
        classic_sync([0, 1]),
        classic_heartbeat(),
        list_groups(),
        join(v),  # converts the group
        describe(v),
        list_groups(),
        list_groups(("Classic",)),
        list_groups(("consumer",)),
        classic_describe(),
        classic_heartbeat(),  # REBALANCE_IN_PROGRESS: rejoin
        classic_join(),  # at the new epoch, as a follower
        classic_sync(),  # one partition
        classic_heartbeat(),
        beat(v, report=True),  # the released partition
        describe(v),
        beat(v, epoch=-1),  # the last consumer-protocol member leaves: classic again
        list_groups(),
        classic_heartbeat(),  # REBALANCE_IN_PROGRESS
        classic_join(),
        classic_sync([0, 1]),
        classic_heartbeat(),
        list_groups(),
        classic_leave(),
        list_groups(),
    ]


def no_upgrade_of_other_groups(v: int) -> list[Any]:
    """A live classic group whose protocol type is not "consumer" is not upgraded."""
    return [
        *new_topic(partitions=2),
        classic_join("connect"),
        classic_join("connect"),
        join(v),
        list_groups(),
    ]


CASES: Cases = {"consumer-group-heartbeat-v0-member-id-by-coordinator": coordinator_names_the_member()}
for version in versions(HEARTBEAT):
    CASES[f"consumer-group-life-v{version}"] = life(version)
    CASES[f"consumer-group-heartbeat-refused-v{version}"] = refused(version)
    CASES[f"consumer-group-two-members-v{version}"] = two_members(version)
    CASES[f"consumer-group-upgrade-and-downgrade-v{version}"] = upgrade_and_downgrade(version)
    CASES[f"consumer-group-no-upgrade-of-other-groups-v{version}"] = no_upgrade_of_other_groups(version)
for version in versions(DESCRIBE):
    CASES[f"consumer-group-describe-unknown-v{version}"] = [describe(version, "-none")]


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
