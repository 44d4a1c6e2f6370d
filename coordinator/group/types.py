"""Values the group coordinator takes and returns.

Every operation returns a ``Result``: ``records`` to append to the group's ``__consumer_offsets``
partition, the ``response`` to send once they are durable, and ``completions``: answers to
*parked* JoinGroup / SyncGroup requests of other members, also sent once the records are
durable. ``response is None`` means the caller's own request is parked: the broker awaits the
completion keyed by ``(group_id, awaits, kind)``. Replaying a record may release completions too
(the SyncGroup answers once the leader's assignment is durable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Generic, TypeVar

from coordinator.group.consumer_types import ConsumerConfig
from protocol.errors import ErrorCode
from protocol.types import TopicPartition

Record = tuple[bytes, bytes | None]
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
T = TypeVar("T")


class Kind(Enum):
    JOIN = "join"
    SYNC = "sync"


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to a parked JoinGroup / SyncGroup of ``member_id``."""

    group_id: str
    member_id: str
    response: JoinResponse | SyncResponse

    @property
    def kind(self) -> Kind:
        return Kind.JOIN if isinstance(self.response, JoinResponse) else Kind.SYNC


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    response: T | None
    records: tuple[Record, ...] = ()
    completions: tuple[Completion, ...] = ()
    awaits: str | None = None  # member id whose completion answers a parked request


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # JoinGroup v0 has none: the session timeout is used
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error: ErrorCode
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()  # member id, instance id, error


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848)


@dataclass(frozen=True, slots=True)
class OffsetCommitInput:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1: none
    record_offset: int  # where the record sits in __consumer_offsets


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    group_id: str
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    partitions: Mapping[TopicPartition, ErrorCode] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker properties of the same meaning, with Kafka's defaults."""

    num_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    new_member_join_timeout_ms: int = 300_000  # Kafka's classicGroupNewMemberJoinTimeoutMs
    max_group_size: int = 0x7FFFFFFF  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)  # group.consumer.*
