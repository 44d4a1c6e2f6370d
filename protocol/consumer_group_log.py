"""Sans-I/O codecs for the ``__consumer_offsets`` records of consumer-protocol groups (KIP-848).

Kafka's record types, the key's version being the record type (every value at version 0,
flexible, with Kafka's tagged fields):

  3  ConsumerGroupMetadata: group -> epoch, metadata hash (tag 0, Kafka 4.1+)
  4  ConsumerGroupPartitionMetadata: group -> subscribed topics' metadata (read only: Kafka 4.1+
     keeps the metadata hash in record 3 instead, and so does Gregor)
  5  ConsumerGroupMemberMetadata: group, member -> subscription and client facts
  6  ConsumerGroupTargetAssignmentMetadata: group -> assignment epoch, timestamp (tag 0)
  7  ConsumerGroupTargetAssignmentMember: group, member -> target partitions
  8  ConsumerGroupCurrentMemberAssignment: group, member -> epochs, state, owned and revoking
     partitions (each topic with its assignment epochs, tag 0, KIP-1251)

A null value is a tombstone. Keys of other versions are not these (``decode_consumer_key``
returns None).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType

from protocol.group_log import GroupLogDecodeError, UnknownRecordVersion
from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    I8,
    I16,
    I32,
    I64,
    Reader,
    encode_array_len,
    encode_bytes,
    encode_string,
    encode_tagged_fields,
)
from protocol.types import TopicId

VALUE_VERSION = 0


class RecordType(IntEnum):
    """The key version of each record type."""

    GROUP_METADATA = 3
    PARTITION_METADATA = 4
    MEMBER_METADATA = 5
    TARGET_ASSIGNMENT_METADATA = 6
    TARGET_ASSIGNMENT_MEMBER = 7
    CURRENT_MEMBER_ASSIGNMENT = 8


PER_MEMBER = frozenset(
    {RecordType.MEMBER_METADATA, RecordType.TARGET_ASSIGNMENT_MEMBER, RecordType.CURRENT_MEMBER_ASSIGNMENT}
)
TopicPartitions = Mapping[TopicId, frozenset[int]]
NO_PARTITIONS: TopicPartitions = MappingProxyType({})


def partitions(value: Mapping[TopicId, Iterable[int]]) -> TopicPartitions:
    """An immutable assignment without empty topics."""
    return MappingProxyType({t: frozenset(p) for t, p in value.items() if p})


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    record: RecordType
    group: str
    member: str = ""  # the per-member records only


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member of the classic protocol inside a consumer group (the online upgrade): its session
    timeout and the protocols its JoinGroup named (name, subscription bytes), first one chosen."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None  # tagged field 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: TopicPartitions = field(default_factory=lambda: NO_PARTITIONS)


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions = field(default_factory=lambda: NO_PARTITIONS)
    pending_revocation: TopicPartitions = field(default_factory=lambda: NO_PARTITIONS)
    # KIP-1251: the epoch each assigned partition was given to the member at
    assignment_epochs: Mapping[tuple[TopicId, int], int] = field(default_factory=lambda: MappingProxyType({}))


ConsumerValue = (
    GroupMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentAssignmentValue
)


# ---------------------------------------------------------------- keys


def encode_consumer_key(key: ConsumerKey) -> bytes:
    out = I16.pack(key.record) + encode_string(key.group, False)
    if key.record in PER_MEMBER:
        out += encode_string(key.member, False)
    return out


def decode_consumer_key(data: bytes | memoryview) -> ConsumerKey | None:
    """The key of a consumer-group record, or None for any other key version."""
    reader = Reader(data, error=GroupLogDecodeError)
    version = reader.unpack(I16)
    if version not in RecordType._value2member_map_:
        return None
    record = RecordType(version)
    group = reader.string(False)
    member = reader.string(False) if record in PER_MEMBER else ""
    return ConsumerKey(record, group, member)


# ---------------------------------------------------------------- values: encoding


def _header() -> bytes:
    return I16.pack(VALUE_VERSION)


def _strings(items: Iterable[str]) -> bytes:
    listed = list(items)
    return encode_array_len(len(listed), True) + b"".join(encode_string(s, True) for s in listed)


def _int32s(items: Iterable[int]) -> bytes:
    listed = sorted(items)
    return encode_array_len(len(listed), True) + b"".join(I32.pack(i) for i in listed)


def _topic_partitions(value: TopicPartitions, epochs: Mapping[tuple[TopicId, int], int] | None) -> bytes:
    out = bytearray(encode_array_len(len(value), True))
    for topic_id in sorted(value, key=str):
        parts = sorted(value[topic_id])
        out += topic_id.bytes + _int32s(parts)
        if epochs:
            tag = _int32s_in_order(epochs.get((topic_id, p), -1) for p in parts)
            out += encode_tagged_fields([(0, tag)])
        else:
            out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def _int32s_in_order(items: Iterable[int]) -> bytes:
    listed = list(items)
    return encode_array_len(len(listed), True) + b"".join(I32.pack(i) for i in listed)


def encode_consumer_value(value: ConsumerValue) -> bytes:
    if isinstance(value, GroupMetadataValue):
        tags = [(0, I64.pack(value.metadata_hash))] if value.metadata_hash else []
        return _header() + I32.pack(value.epoch) + encode_tagged_fields(tags)
    if isinstance(value, MemberMetadataValue):
        return _header() + _encode_member(value)
    if isinstance(value, TargetAssignmentMetadataValue):
        tags = [(0, I64.pack(value.assignment_timestamp))] if value.assignment_timestamp else []
        return _header() + I32.pack(value.assignment_epoch) + encode_tagged_fields(tags)
    if isinstance(value, TargetAssignmentMemberValue):
        return _header() + _topic_partitions(value.partitions, None) + EMPTY_TAGGED_FIELDS
    return _header() + _encode_current(value)


def _encode_member(v: MemberMetadataValue) -> bytes:
    return (
        encode_string(v.instance_id, True)
        + encode_string(v.rack_id, True)
        + encode_string(v.client_id, True)
        + encode_string(v.client_host, True)
        + _strings(v.subscribed_topic_names)
        + encode_string(v.subscribed_topic_regex, True)
        + I32.pack(v.rebalance_timeout_ms)
        + encode_string(v.server_assignor, True)
        + encode_tagged_fields([] if v.classic is None else [(0, _encode_classic(v.classic))])
    )


def _encode_classic(c: ClassicMemberMetadata) -> bytes:
    out = bytearray(I32.pack(c.session_timeout_ms) + encode_array_len(len(c.protocols), True))
    for name, metadata in c.protocols:
        out += encode_string(name, True) + encode_bytes(metadata, True) + EMPTY_TAGGED_FIELDS
    return bytes(out + EMPTY_TAGGED_FIELDS)


def _decode_classic(raw: memoryview) -> ClassicMemberMetadata:
    reader = Reader(raw, error=GroupLogDecodeError)
    session = reader.unpack(I32)
    protocols = []
    for _ in range(reader.array_len(True)):
        name = reader.string(True)
        protocols.append((name, reader.bytes_(True)))
        reader.skip_tagged()
    reader.skip_tagged()
    return ClassicMemberMetadata(session, tuple(protocols))


def _encode_current(v: CurrentAssignmentValue) -> bytes:
    return (
        I32.pack(v.member_epoch)
        + I32.pack(v.previous_member_epoch)
        + I8.pack(v.state)
        + _topic_partitions(v.assigned, v.assignment_epochs)
        + _topic_partitions(v.pending_revocation, None)
        + EMPTY_TAGGED_FIELDS
    )


# ---------------------------------------------------------------- values: decoding


def decode_consumer_value(record: RecordType, data: bytes | memoryview) -> ConsumerValue | None:
    """The value of a ``record``; None for the partition metadata (not used here)."""
    reader = Reader(data, error=GroupLogDecodeError)
    version = reader.unpack(I16)
    if version != VALUE_VERSION:
        raise UnknownRecordVersion(f"consumer group record {record.name} value", version)
    if record is RecordType.GROUP_METADATA:
        epoch = reader.unpack(I32)
        tags = reader.skip_tagged()
        return GroupMetadataValue(epoch, _tagged_i64(tags))
    if record is RecordType.MEMBER_METADATA:
        return _decode_member(reader)
    if record is RecordType.TARGET_ASSIGNMENT_METADATA:
        epoch = reader.unpack(I32)
        return TargetAssignmentMetadataValue(epoch, _tagged_i64(reader.skip_tagged()))
    if record is RecordType.TARGET_ASSIGNMENT_MEMBER:
        assigned, _ = _read_topic_partitions(reader)
        reader.skip_tagged()
        return TargetAssignmentMemberValue(assigned)
    if record is RecordType.CURRENT_MEMBER_ASSIGNMENT:
        return _decode_current(reader)
    return None


def _tagged_i64(tags: Mapping[int, memoryview]) -> int:
    raw = tags.get(0)
    return 0 if raw is None else int(I64.unpack(raw)[0])


def _decode_member(reader: Reader) -> MemberMetadataValue:
    instance_id = reader.nullable_string(True)
    rack_id = reader.nullable_string(True)
    client_id = reader.string(True)
    client_host = reader.string(True)
    topics = tuple(reader.string(True) for _ in range(reader.array_len(True)))
    regex = reader.nullable_string(True)
    rebalance_timeout = reader.unpack(I32)
    assignor = reader.nullable_string(True)
    classic = reader.skip_tagged().get(0)
    return MemberMetadataValue(
        instance_id, rack_id, client_id, client_host, topics, regex, rebalance_timeout, assignor,
        None if classic is None else _decode_classic(classic),
    )


def _read_int32s(reader: Reader) -> list[int]:
    return [reader.unpack(I32) for _ in range(reader.array_len(True))]


def _read_topic_partitions(reader: Reader) -> tuple[TopicPartitions, dict[tuple[TopicId, int], int]]:
    found: dict[TopicId, list[int]] = {}
    epochs: dict[tuple[TopicId, int], int] = {}
    for _ in range(reader.array_len(True)):
        topic_id = TopicId(uuid.UUID(bytes=bytes(reader.take(16))))
        parts = _read_int32s(reader)
        found[topic_id] = parts
        tagged = reader.skip_tagged().get(0)
        if tagged is not None:
            listed = _read_int32s(Reader(tagged, error=GroupLogDecodeError))
            epochs.update(((topic_id, p), e) for p, e in zip(parts, listed, strict=False))
    return partitions(found), epochs


def _decode_current(reader: Reader) -> CurrentAssignmentValue:
    member_epoch = reader.unpack(I32)
    previous = reader.unpack(I32)
    state = reader.unpack(I8)
    assigned, epochs = _read_topic_partitions(reader)
    pending, _ = _read_topic_partitions(reader)
    reader.skip_tagged()
    return CurrentAssignmentValue(member_epoch, previous, state, assigned, pending, MappingProxyType(epochs))
