"""FindCoordinator and the classic consumer-group APIs (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups, DeleteGroups, OffsetCommit, OffsetFetch, OffsetDelete):
one group's whole life at each version Gregor advertises, and the error cases (unknown member,
stale generation, unknown group, a group that is not empty)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.cases import Cases, capped, versions
from tests.differential.runner import Side, Step, Tree, run_case
from tests.differential.steps import new_topic, produce, topic

PROTOCOL_METADATA = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"
ASSIGNMENT = b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff"


def group(side: Side) -> str:
    return topic(side, "-g")


def find_coordinator(v: int, key_type: int = 0) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {"key": group(side), "key_type": key_type, "coordinator_keys": [group(side)]}

    return Step(10, request, version=v)


def learn_member(side: Side, resp: Any) -> None:
    if resp.member_id:
        side.vars["member"] = resp.member_id
    side.vars["generation"] = resp.generation_id


def join(v: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            "group_id": group(side),
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": side.vars.get("member", ""),
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": PROTOCOL_METADATA}],
            "reason": None,
        }

    return Step(11, request, version=v, learn=learn_member)


def member(side: Side) -> dict[str, Any]:
    return {
        "group_id": group(side),
        "generation_id": side.vars.get("generation", -1),
        "member_id": side.vars.get("member", ""),
        "group_instance_id": None,
    }


def sync(v: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        return {
            **member(side),
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": side.vars.get("member", ""), "assignment": ASSIGNMENT}],
        }

    return Step(14, request, version=v)


def heartbeat(v: int, generation_delta: int = 0, member_id: str | None = None) -> Step:
    def request(side: Side) -> dict[str, Any]:
        m = member(side)
        m["generation_id"] += generation_delta
        if member_id is not None:
            m["member_id"] = member_id
        return m

    return Step(12, request, version=v)


def leave(v: int) -> Step:
    def request(side: Side) -> dict[str, Any]:
        mid = side.vars.get("member", "")
        return {
            "group_id": group(side),
            "member_id": mid,
            "members": [{"member_id": mid, "group_instance_id": None, "reason": None}],
        }

    return Step(13, request, version=v)


def commit(v: int, offset: int, generation: bool = True) -> Step:
    def request(side: Side) -> dict[str, Any]:
        m = member(side) if generation else {"generation_id": -1, "member_id": ""}
        return {
            "group_id": group(side),
            "generation_id_or_member_epoch": m["generation_id"],
            "member_id": m["member_id"],
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic(side),
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "commit_timestamp": -1,
                            "committed_metadata": "m",
                        }
                    ],
                }
            ],
        }

    return Step(8, request, version=v)


def fetch_offsets(v: int, suffix: str = "-g") -> Step:
    def request(side: Side) -> dict[str, Any]:
        topics = [{"name": topic(side), "partition_indexes": [0, 1]}]
        g = topic(side, suffix)
        return {
            "group_id": g,
            "topics": topics,
            "require_stable": True,
            "groups": [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": topics}],
        }

    return Step(9, request, version=v)


def describe(v: int) -> Step:
    return Step(15, lambda side: {"groups": [group(side)], "include_authorized_operations": False}, version=v)


def ours(side: Side, tree: Tree) -> Tree:
    return {**tree, "groups": [g for g in tree["groups"] if g["group_id"] == group(side)]}


def list_groups(v: int) -> Step:
    return Step(16, {"states_filter": [], "types_filter": []}, version=v, select=ours)


def delete_groups(v: int) -> Step:
    return Step(42, lambda side: {"groups_names": [group(side)]}, version=v)


def offset_delete() -> Step:
    return Step(
        47,
        lambda side: {
            "group_id": group(side),
            "topics": [{"name": topic(side), "partitions": [{"partition_index": 0}]}],
        },
    )


def life(v: int) -> list[Any]:
    """A group's life with JoinGroup at `v` and the other APIs at the same index, capped
    (OffsetCommit from v2: before, a commit had no generation, the case of a simple commit)."""
    rejoin = [join(v)] if v >= 4 else []  # v4+: the first join answers MEMBER_ID_REQUIRED
    return [
        *new_topic(),
        produce(compare=False),
        find_coordinator(capped(10, v)),
        join(v),
        *rejoin,
        sync(capped(14, v)),
        heartbeat(capped(12, v)),
        commit(max(2, capped(8, v)), 2),
        fetch_offsets(capped(9, v)),
        describe(capped(15, v)),
        list_groups(capped(16, v)),
        delete_groups(capped(42, v)),
        heartbeat(capped(12, v), generation_delta=1),
        heartbeat(capped(12, v), member_id="nobody"),
        leave(capped(13, v)),
        describe(capped(15, v)),
        offset_delete(),
        fetch_offsets(capped(9, v)),
        delete_groups(capped(42, v)),
        fetch_offsets(capped(9, v)),
    ]


CASES: Cases = {f"group-life-v{v}": life(v) for v in versions(11)}
for v in versions(8):
    CASES[f"offset-commit-simple-v{v}"] = [
        *new_topic(),
        produce(compare=False),
        commit(v, 1, generation=False),
        commit(v, 3, generation=False),
        fetch_offsets(capped(9, v)),
    ]
for v in versions(9):
    CASES[f"offset-fetch-unknown-group-v{v}"] = [*new_topic(), fetch_offsets(v, suffix="-none")]
for v in versions(10):
    CASES[f"find-coordinator-v{v}"] = [find_coordinator(v), find_coordinator(v, key_type=1)]


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, sides: tuple[Side, Side]) -> None:
    run_case(CASES[name], *sides)
