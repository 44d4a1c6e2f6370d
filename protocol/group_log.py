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

import struct
from dataclasses import dataclass

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = (0, 1, 2, 3, 4)
GROUP_METADATA_VALUE_VERSIONS = (0, 1, 2, 3, 4)
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


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


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else _I16.pack(-1)
    data = s.encode("utf-8")
    if flexible:
        return _uvarint(len(data) + 1) + data
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(data)) + data


def _bytes(b: bytes, flexible: bool) -> bytes:
    return (_uvarint(len(b) + 1) if flexible else _I32.pack(len(b))) + b


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group, False)
        + _string(topic, False)
        + _I32.pack(partition)
    )


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group, False)


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
    out = bytearray(_I16.pack(v))
    out += _I64.pack(value.offset)
    if v >= 3:
        out += _I32.pack(value.leader_epoch)
    out += _string(value.metadata, flexible)
    out += _I64.pack(value.commit_timestamp)
    if v == 1:
        out += _I64.pack(value.expire_timestamp)
    if flexible:
        out += b"\x00"
    return bytes(out)


def _encode_member(m: MemberMetadata, v: int) -> bytes:
    flexible = v >= 4
    out = bytearray(_string(m.member_id, flexible))
    if v >= 3:
        out += _string(m.group_instance_id, flexible)
    out += _string(m.client_id, flexible)
    out += _string(m.client_host, flexible)
    if v >= 1:
        out += _I32.pack(m.rebalance_timeout)
    out += _I32.pack(m.session_timeout)
    out += _bytes(m.subscription, flexible)
    out += _bytes(m.assignment, flexible)
    if flexible:
        out += b"\x00"
    return bytes(out)


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise ValueError(f"unsupported group metadata value version {version}")
    flexible = version >= 4
    out = bytearray(_I16.pack(version))
    out += _string(value.protocol_type, flexible)
    out += _I32.pack(value.generation)
    out += _string(value.protocol, flexible)
    out += _string(value.leader, flexible)
    if version >= 2:
        out += _I64.pack(value.current_state_timestamp)
    n = len(value.members)
    out += _uvarint(n + 1) if flexible else _I32.pack(n)
    for member in value.members:
        out += _encode_member(member, version)
    if flexible:
        out += b"\x00"
    return bytes(out)


# ---------------------------------------------------------------- decoding


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise GroupLogDecodeError(f"truncated at byte {self.pos} (need {n})")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> int:
        value: int = s.unpack(self.take(s.size))[0]
        return value

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise GroupLogDecodeError("varint too long")

    def nullable_string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.unpack(_I16)
        if n < -1:
            raise GroupLogDecodeError(f"bad string length {n}")
        if n == -1:
            return None
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroupLogDecodeError(f"bad utf-8: {exc}") from exc

    def string(self, flexible: bool) -> str:
        s = self.nullable_string(flexible)
        if s is None:
            raise GroupLogDecodeError("null string where a string is required")
        return s

    def bytes_(self, flexible: bool) -> bytes:
        n = self.uvarint() - 1 if flexible else self.unpack(_I32)
        if n < 0:
            raise GroupLogDecodeError("null bytes where bytes are required")
        return bytes(self.take(n))

    def array_len(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.unpack(_I32)
        if n < 0:
            raise GroupLogDecodeError(f"bad array length {n}")
        if n > len(self.buf) - self.pos:
            raise GroupLogDecodeError(f"array length {n} exceeds remaining bytes")
        return n

    def skip_tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_key(data: bytes | memoryview) -> GroupLogKey:
    reader = _Reader(data)
    version = reader.unpack(_I16)
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        group = reader.string(False)
        topic = reader.string(False)
        return OffsetCommitKey(group, topic, reader.unpack(_I32))
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string(False))
    raise UnknownRecordVersion("__consumer_offsets key", version)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    reader = _Reader(data)
    v = reader.unpack(_I16)
    if v not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise UnknownRecordVersion("offset commit value", v)
    flexible = v >= 4
    offset = reader.unpack(_I64)
    leader_epoch = reader.unpack(_I32) if v >= 3 else -1
    metadata = reader.string(flexible)
    commit_timestamp = reader.unpack(_I64)
    expire_timestamp = reader.unpack(_I64) if v == 1 else -1
    if flexible:
        reader.skip_tagged()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _decode_member(reader: _Reader, v: int) -> MemberMetadata:
    flexible = v >= 4
    member_id = reader.string(flexible)
    instance_id = reader.nullable_string(flexible) if v >= 3 else None
    client_id = reader.string(flexible)
    client_host = reader.string(flexible)
    rebalance_timeout = reader.unpack(_I32) if v >= 1 else -1
    session_timeout = reader.unpack(_I32)
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
    reader = _Reader(data)
    v = reader.unpack(_I16)
    if v not in GROUP_METADATA_VALUE_VERSIONS:
        raise UnknownRecordVersion("group metadata value", v)
    flexible = v >= 4
    protocol_type = reader.string(flexible)
    generation = reader.unpack(_I32)
    protocol = reader.nullable_string(flexible)
    leader = reader.nullable_string(flexible)
    timestamp = reader.unpack(_I64) if v >= 2 else -1
    members = tuple(_decode_member(reader, v) for _ in range(reader.array_len(flexible)))
    if flexible:
        reader.skip_tagged()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


def parse_consumer_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: i16 version, then [string] topics,
    never flexible), or None when the bytes are not one."""
    try:
        reader = _Reader(metadata)
        reader.unpack(_I16)
        return frozenset(reader.string(False) for _ in range(reader.array_len(False)))
    except GroupLogDecodeError:
        return None
