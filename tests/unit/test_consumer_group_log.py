"""The consumer-protocol group records (KIP-848) of __consumer_offsets: keys by record type,
values round trip with Kafka's tagged fields, and `gregor dump` shows them."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest

from broker.tools.dump import decode_offsets_record
from protocol.consumer_group_log import (
    ConsumerKey,
    ConsumerValue,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    RecordType,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
    partitions,
)
from protocol.group_log import encode_group_metadata_key, encode_offset_commit_key
from protocol.types import TopicId

T = TopicId(uuid.UUID(int=7))
VALUES: list[tuple[RecordType, ConsumerValue]] = [
    (RecordType.GROUP_METADATA, GroupMetadataValue(3, -12345)),
    (RecordType.MEMBER_METADATA, MemberMetadataValue("i", None, "c", "/h", ("a", "b"), "", 30000, "range")),
    (RecordType.TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadataValue(4, 99)),
    (RecordType.TARGET_ASSIGNMENT_MEMBER, TargetAssignmentMemberValue(partitions({T: [2, 0]}))),
    (RecordType.CURRENT_MEMBER_ASSIGNMENT, CurrentAssignmentValue(
        4, 3, 1, partitions({T: [0]}), partitions({T: [2]}), MappingProxyType({(T, 0): 3}))),
]


@pytest.mark.parametrize(("record", "value"), VALUES, ids=lambda x: getattr(x, "name", ""))
def test_values_round_trip(record: RecordType, value: ConsumerValue) -> None:
    assert decode_consumer_value(record, encode_consumer_value(value)) == value


def test_keys_carry_the_record_type_and_other_keys_are_not_these() -> None:
    key = ConsumerKey(RecordType.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    raw = encode_consumer_key(key)
    assert raw[:2] == b"\x00\x08" and decode_consumer_key(raw) == key
    group_key = ConsumerKey(RecordType.GROUP_METADATA, "g")
    assert decode_consumer_key(encode_consumer_key(group_key)) == group_key
    assert decode_consumer_key(encode_group_metadata_key("g")) is None
    assert decode_consumer_key(encode_offset_commit_key("g", "t", 0)) is None


def test_dump_shows_them() -> None:
    key = encode_consumer_key(ConsumerKey(RecordType.GROUP_METADATA, "g"))
    shown = decode_offsets_record(key, encode_consumer_value(GroupMetadataValue(2)), 0)
    assert shown == {"key": {"type": "3", "data": {"groupId": "g"}},
                     "payload": {"version": "0", "data": {"epoch": 2, "metadataHash": 0}}}
    assert decode_offsets_record(key, None, 1)["payload"] == "<DELETE>"
