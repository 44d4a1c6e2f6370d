"""The server-side assignors of consumer-protocol groups: ``uniform`` (the default) and ``range``.

An assignor takes each member's subscribed topics, the topics as the metadata knows them and the
previous target assignment, and returns the new target assignment. Facts from Kafka's assignors:

- ``uniform`` spreads every subscribed partition so that members subscribed to the same topics
  hold counts that differ by at most one, and keeps each partition where it was whenever that
  balance allows (sticky), so a member joining takes partitions from the others without any
  other partition moving.
- ``range`` gives each member, topic by topic, a contiguous range of partitions (members in
  member id order, the first ``partitions % members`` one partition more), so that members
  subscribed to co-partitioned topics get the same partition numbers of each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from coordinator.group.consumer_state import MemberId, Owned
from protocol.consumer_group_log import TopicPartitions, partitions
from protocol.types import TopicId

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the metadata knows it."""

    topic_id: TopicId
    partitions: int


TopicsImage = Mapping[str, TopicInfo]
Subscriptions = Mapping[MemberId, frozenset[str]]
Targets = Mapping[MemberId, TopicPartitions]
Assignor = Callable[[Subscriptions, TopicsImage, Targets], dict[MemberId, TopicPartitions]]


def _eligible(subscriptions: Subscriptions, image: TopicsImage) -> dict[Owned, list[MemberId]]:
    """Every existing partition of a subscribed topic, with the members that may hold it."""
    found: dict[Owned, list[MemberId]] = {}
    for member_id in sorted(subscriptions):
        for name in sorted(subscriptions[member_id]):
            topic = image.get(name)
            if topic is None:
                continue
            for index in range(topic.partitions):
                found.setdefault((topic.topic_id, index), []).append(member_id)
    return found


def _as_targets(held: Mapping[MemberId, Iterable[Owned]], members: Iterable[MemberId]) -> dict[
    MemberId, TopicPartitions
]:
    result: dict[MemberId, TopicPartitions] = {}
    for member_id in members:
        by_topic: dict[TopicId, list[int]] = {}
        for topic_id, index in held.get(member_id, ()):
            by_topic.setdefault(topic_id, []).append(index)
        result[member_id] = partitions(by_topic)
    return result


def uniform(subscriptions: Subscriptions, image: TopicsImage, previous: Targets) -> dict[
    MemberId, TopicPartitions
]:
    eligible = _eligible(subscriptions, image)
    owner = _sticky_owners(eligible, previous)
    counts = {m: 0 for m in subscriptions}
    for member_id in owner.values():
        counts[member_id] += 1
    for partition in sorted(p for p in eligible if p not in owner):
        chosen = min(eligible[partition], key=lambda m: (counts[m], m))
        owner[partition] = chosen
        counts[chosen] += 1
    _balance(eligible, owner, counts)
    held: dict[MemberId, list[Owned]] = {}
    for partition, member_id in owner.items():
        held.setdefault(member_id, []).append(partition)
    return _as_targets(held, subscriptions)


def _sticky_owners(eligible: Mapping[Owned, list[MemberId]], previous: Targets) -> dict[Owned, MemberId]:
    """Each partition's previous holder, while that member still exists and is subscribed."""
    owner: dict[Owned, MemberId] = {}
    for member_id in sorted(previous):
        for topic_id, indexes in previous[member_id].items():
            for index in indexes:
                candidates = eligible.get((topic_id, index), ())
                if member_id in candidates:
                    owner[(topic_id, index)] = member_id
    return owner


def _balance(eligible: Mapping[Owned, list[MemberId]], owner: dict[Owned, MemberId], counts: dict[
    MemberId, int
]) -> None:
    """Move partitions from the fullest members to eligible emptier ones until no move narrows a
    gap of more than one (each move lowers the sum of squared counts, so this ends). A member
    keeps its lowest partitions and gives up its highest, as Kafka's uniform assignor does."""
    moved = True
    while moved:
        moved = False
        for partition in sorted(owner, key=lambda p: (-counts[owner[p]], str(p[0]), -p[1])):
            current = owner[partition]
            target = min(eligible[partition], key=lambda m: (counts[m], m))
            if counts[current] - counts[target] > 1:
                owner[partition] = target
                counts[current] -= 1
                counts[target] += 1
                moved = True


def range_(subscriptions: Subscriptions, image: TopicsImage, previous: Targets) -> dict[
    MemberId, TopicPartitions
]:
    held: dict[MemberId, list[Owned]] = {}
    topics = sorted({t for names in subscriptions.values() for t in names})
    for name in topics:
        topic = image.get(name)
        if topic is None:
            continue
        members = sorted(m for m, names in subscriptions.items() if name in names)
        share, extra = divmod(topic.partitions, len(members))
        start = 0
        for i, member_id in enumerate(members):
            count = share + (1 if i < extra else 0)
            held.setdefault(member_id, []).extend((topic.topic_id, p) for p in range(start, start + count))
            start += count
    return _as_targets(held, subscriptions)


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}
