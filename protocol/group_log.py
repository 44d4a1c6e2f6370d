"""Sans-I/O codecs for ``__consumer_offsets`` records (Kafka's OffsetCommit/GroupMetadata key/value).

Every key and value starts with its version (i16). Key versions:
  0, 1: OffsetCommitKey — group string, topic string, partition i32 (Kafka writes 1);
  2:    GroupMetadataKey — group string.
Other key versions (consumer/share group records of the new protocol) are not ours:
``decode_key`` raises ``UnknownRecordVersion`` and the loader skips them, as Kafka skips
what it does not know.

OffsetCommitValue v0-4: offset i64, leaderEpoch i32 (v3+), metadata string, commitTimestamp i64,
expireTimestamp i64 (v1 only); v4 is flexible (compact strings, a tag buffer). Kafka writes v3,
or v1 when an expire timestamp was requested (OffsetCommit v2-v4 retention_time_ms).

GroupMetadataValue v0-4: protocolType string, generation i32, protocol nullable string, leader
nullable string, currentStateTimestamp i64 (v2+), members [memberId, groupInstanceId nullable
(v3+), clientId, clientHost, rebalanceTimeout i32 (v1+), sessionTimeout i32, subscription bytes,
assignment bytes]; v4 is flexible. Kafka writes v3.

A null value is a tombstone: the offset or the group was deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    I16,
    I32,
    I64,
    Reader,
    encode_array_len,
    encode_bytes,
    encode_string,
)

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = (0, 1, 2, 3, 4)
GROUP_METADATA_VALUE_VERSIONS = (0, 1, 2, 3, 4)
GROUP_METADATA_VALUE_VERSION = 3


class GroupLogDecodeError(ValueError):
    """The bytes are not a valid ``__consumer_offsets`` key or value."""


class UnknownRecordVersion(GroupLogDecodeError):
    """A version this code does not know; the loader skips such records."""

    def __init__(self, what: str, version: int) -> None:
        super().__init__(f"unknown {what} version {version}")
        self.version = version


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


GroupLogKey = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


# ---------------------------------------------------------------- encoding


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        I16.pack(OFFSET_COMMIT_KEY_VERSION)
        + encode_string(group, False)
        + encode_string(topic, False)
        + I32.pack(partition)
    )


def encode_group_metadata_key(group: str) -> bytes:
    return I16.pack(GROUP_METADATA_KEY_VERSION) + encode_string(group, False)


def encode_key(key: GroupLogKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return encode_offset_commit_key(key.group, key.topic, key.partition)
    return encode_group_metadata_key(key.group)


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes today: 1 when an expire timestamp is set, else 3."""
    return 1 if value.expire_timestamp != -1 else 3


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    v = offset_commit_value_version(value) if version is None else version
    if v not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise ValueError(f"unsupported offset commit value version {v}")
    flexible = v >= 4
    out = bytearray(I16.pack(v))
    out += I64.pack(value.offset)
    if v >= 3:
        out += I32.pack(value.leader_epoch)
    out += encode_string(value.metadata, flexible)
    out += I64.pack(value.commit_timestamp)
    if v == 1:
        out += I64.pack(value.expire_timestamp)
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def _encode_member(m: MemberMetadata, v: int) -> bytes:
    flexible = v >= 4
    out = bytearray(encode_string(m.member_id, flexible))
    if v >= 3:
        out += encode_string(m.group_instance_id, flexible)
    out += encode_string(m.client_id, flexible)
    out += encode_string(m.client_host, flexible)
    if v >= 1:
        out += I32.pack(m.rebalance_timeout)
    out += I32.pack(m.session_timeout)
    out += encode_bytes(m.subscription, flexible)
    out += encode_bytes(m.assignment, flexible)
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise ValueError(f"unsupported group metadata value version {version}")
    flexible = version >= 4
    out = bytearray(I16.pack(version))
    out += encode_string(value.protocol_type, flexible)
    out += I32.pack(value.generation)
    out += encode_string(value.protocol, flexible)
    out += encode_string(value.leader, flexible)
    if version >= 2:
        out += I64.pack(value.current_state_timestamp)
    n = len(value.members)
    out += encode_array_len(n, flexible)
    for member in value.members:
        out += _encode_member(member, version)
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    return bytes(out)


# ---------------------------------------------------------------- decoding


def decode_key(data: bytes | memoryview) -> GroupLogKey:
    reader = Reader(data, error=GroupLogDecodeError)
    version = reader.unpack(I16)
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        group = reader.string(False)
        topic = reader.string(False)
        return OffsetCommitKey(group, topic, reader.unpack(I32))
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string(False))
    raise UnknownRecordVersion("__consumer_offsets key", version)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    reader = Reader(data, error=GroupLogDecodeError)
    v = reader.unpack(I16)
    if v not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise UnknownRecordVersion("offset commit value", v)
    flexible = v >= 4
    offset = reader.unpack(I64)
    leader_epoch = reader.unpack(I32) if v >= 3 else -1
    metadata = reader.string(flexible)
    commit_timestamp = reader.unpack(I64)
    expire_timestamp = reader.unpack(I64) if v == 1 else -1
    if flexible:
        reader.skip_tagged()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _decode_member(reader: Reader, v: int) -> MemberMetadata:
    flexible = v >= 4
    member_id = reader.string(flexible)
    instance_id = reader.nullable_string(flexible) if v >= 3 else None
    client_id = reader.string(flexible)
    client_host = reader.string(flexible)
    rebalance_timeout = reader.unpack(I32) if v >= 1 else -1
    session_timeout = reader.unpack(I32)
    subscription = reader.bytes_(flexible)
    assignment = reader.bytes_(flexible)
    if flexible:
        reader.skip_tagged()
    return MemberMetadata(
        member_id,
        instance_id,
        client_id,
        client_host,
        rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
    )


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    reader = Reader(data, error=GroupLogDecodeError)
    v = reader.unpack(I16)
    if v not in GROUP_METADATA_VALUE_VERSIONS:
        raise UnknownRecordVersion("group metadata value", v)
    flexible = v >= 4
    protocol_type = reader.string(flexible)
    generation = reader.unpack(I32)
    protocol = reader.nullable_string(flexible)
    leader = reader.nullable_string(flexible)
    timestamp = reader.unpack(I64) if v >= 2 else -1
    members = tuple(_decode_member(reader, v) for _ in range(reader.array_len(flexible)))
    if flexible:
        reader.skip_tagged()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


def parse_consumer_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: i16 version, then [string] topics,
    never flexible), or None when the bytes are not one."""
    try:
        reader = Reader(metadata, error=GroupLogDecodeError)
        reader.unpack(I16)
        return frozenset(reader.string(False) for _ in range(reader.array_len(False)))
    except GroupLogDecodeError:
        return None
