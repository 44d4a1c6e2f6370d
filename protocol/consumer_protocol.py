"""The consumer's embedded protocol (protocol type "consumer") carried in JoinGroup / SyncGroup:
Kafka's ConsumerProtocolSubscription (versions 0-3) and ConsumerProtocolAssignment (0-3).

A consumer group (KIP-848) that still has members of the classic protocol reads their
subscription (topics, owned partitions, rack) from JoinGroup and answers their SyncGroup with
its own assignment in this format. Every version is non-flexible; later versions only append
fields, so an assignment's layout is the same in every version but its version number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from protocol.group_log import GroupLogDecodeError
from protocol.primitives import I16, I32, Reader, encode_array_len, encode_string

MAX_VERSION = 3
ByTopic = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: ByTopic = ()  # v1+
    rack_id: str | None = None  # v3+


def decode_subscription(data: bytes) -> Subscription:
    """Raises GroupLogDecodeError when the bytes are not a ConsumerProtocolSubscription."""
    reader = Reader(data, error=GroupLogDecodeError)
    version = reader.unpack(I16)
    if version < 0:
        raise GroupLogDecodeError(f"subscription version {version}")
    topics = tuple(reader.string(False) for _ in range(reader.array_len(False)))
    _skip_nullable_bytes(reader)
    owned: ByTopic = ()
    rack = None
    if version >= 1:
        owned = _read_by_topic(reader)
    if version >= 2:
        reader.unpack(I32)  # generation id
    if version >= 3:
        rack = reader.nullable_string(False)
    return Subscription(version, topics, owned, rack)


def subscription_version(data: bytes) -> int:
    """The version a subscription's bytes start with (0 when there are none)."""
    return max(0, Reader(data, error=GroupLogDecodeError).unpack(I16)) if len(data) >= 2 else 0


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: ByTopic = ()
    user_data: bytes | None = None  # a client-side assignor's own data


def decode_assignment(data: bytes) -> Assignment:
    """A ConsumerProtocolAssignment; an empty one (b"", a member that never synced) assigns none."""
    if not data:
        return Assignment()
    reader = Reader(data, error=GroupLogDecodeError)
    reader.unpack(I16)
    partitions = _read_by_topic(reader)
    n = reader.unpack(I32)
    return Assignment(partitions, None if n < 0 else bytes(reader.take(n)))


def encode_assignment(assigned: Mapping[str, Iterable[int]], version: int) -> bytes:
    """Kafka writes the assignment at the version of the member's subscription (at most 3)."""
    out = bytearray(I16.pack(min(max(version, 0), MAX_VERSION)))
    out += encode_array_len(len(assigned), False)
    for topic in sorted(assigned):
        partitions = sorted(assigned[topic])
        out += encode_string(topic, False) + encode_array_len(len(partitions), False)
        out += b"".join(I32.pack(p) for p in partitions)
    out += I32.pack(-1)  # no user data
    return bytes(out)


def _read_by_topic(reader: Reader) -> ByTopic:
    result = []
    for _ in range(reader.array_len(False)):
        topic = reader.string(False)
        result.append((topic, tuple(reader.unpack(I32) for _ in range(reader.array_len(False)))))
    return tuple(result)


def _skip_nullable_bytes(reader: Reader) -> None:
    n = reader.unpack(I32)
    if n > 0:
        reader.take(n)
