"""The records of one operation on one consumer-protocol group: ``Writer`` makes them and applies
each to the group as it is made (keeping the group as it was, to restore on a refusal or a
failed write), ``Refusal`` is an expected refusal inside an operation, answered as a value;
the subscribed topics of a member and the group's metadata hash, which asks for a new target
when a subscribed topic changes."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.group.assignors import TopicsImage
from coordinator.group.consumer_state import ConsumerGroup, ConsumerMember, MemberId
from coordinator.group.types import Record
from protocol.consumer_group_log import (
    ConsumerKey,
    ConsumerValue,
    GroupMetadataValue,
    RecordType,
    encode_consumer_key,
    encode_consumer_value,
)
from protocol.errors import ErrorCode

MemberKey = tuple[str, MemberId]


class Refusal(Exception):
    """An expected refusal inside an operation; the operation answers it as a value."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class PendingWrite:
    records: list[Record]  # not yet replayed as durable, in order
    snapshot: ConsumerGroup | None  # the group before the operation (None: it did not exist)


class Writer:
    """Makes one operation's records of one group and applies each as it is made; keeps the group
    as it was before the first one (``snapshot``), to restore if the operation is refused or its
    write fails. ``existed`` False: the group was made for this operation (no snapshot)."""

    def __init__(self, group: ConsumerGroup, existed: bool = True) -> None:
        self.group = group
        self.existed = existed
        self.snapshot: ConsumerGroup | None = None
        self.records: list[Record] = []

    def write(self, record: RecordType, value: ConsumerValue | None, member: str = "") -> None:
        if not self.records and self.existed:
            self.snapshot = self.group.copy()
        key = ConsumerKey(record, self.group.group_id, member)
        encoded = None if value is None else encode_consumer_value(value)
        self.records.append((encode_consumer_key(key), encoded))
        self.group.apply(key, value)

    def remove_member(self, member_id: MemberId) -> None:
        self.write(RecordType.CURRENT_MEMBER_ASSIGNMENT, None, member_id)
        self.write(RecordType.TARGET_ASSIGNMENT_MEMBER, None, member_id)
        self.write(RecordType.MEMBER_METADATA, None, member_id)

    def bump_epoch(self, metadata_hash: int | None = None) -> None:
        hashed = self.group.metadata_hash if metadata_hash is None else metadata_hash
        self.write(RecordType.GROUP_METADATA, GroupMetadataValue(self.group.group_epoch + 1, hashed))


def random_member_id() -> str:
    return str(uuid.uuid4())


def subscribed_topics(member: ConsumerMember, image: TopicsImage) -> frozenset[str]:
    """The member's topic names, and the topics its regular expression matches whole."""
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        try:
            pattern = re.compile(member.subscribed_topic_regex)
        except re.error:
            pattern = None
        if pattern is not None:
            names.update(t for t in image if not t.startswith("__") and pattern.fullmatch(t))
    return frozenset(names)


def metadata_hash(topics: Iterable[str], image: TopicsImage) -> int:
    """A stable 64-bit hash of the subscribed topics as the metadata knows them: a change (a
    topic created, deleted or given partitions) asks for a new target assignment."""
    if not topics:
        return 0
    digest = hashlib.sha256()
    for name in sorted(topics):
        topic = image.get(name)
        if topic is not None:
            digest.update(f"{name}/{topic.topic_id}/{topic.partitions};".encode())
    return int.from_bytes(digest.digest()[:8], "big", signed=True)

