"""Values the consumer-protocol group operations take and return (ConsumerGroupHeartbeat,
ConsumerGroupDescribe), and the broker settings they follow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.group.assignors import UNIFORM
from coordinator.group.consumer_state import ConsumerGroupState
from protocol.consumer_group_log import NO_PARTITIONS, TopicPartitions
from protocol.errors import ErrorCode
from protocol.types import TopicId


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Kafka's ``group.consumer.*`` broker properties, with Kafka's defaults."""

    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    max_size: int = 0x7FFFFFFF  # group.consumer.max.size
    assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms (Kafka 4.3)
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors; the first is the default
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy (Kafka 4's default)

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Sequence[tuple[TopicId, Sequence[int]]] | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged since the last answer


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: TopicPartitions
    target_assignment: TopicPartitions
    classic: bool = False  # a member of the classic protocol in a consumer group


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    message: str | None = None
    state: str = ConsumerGroupState.DEAD.value
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


EMPTY_ASSIGNMENT = NO_PARTITIONS
