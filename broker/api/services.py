"""The ports: what a handler or a coordinator edge may use of the broker, each a
`typing.Protocol` with only the methods its callers call, and `Services`, the frozen bundle a
request context carries. `broker/server.py` is the one place where the concrete classes meet
these ports (mypy checks that each fits); nothing that implements a port imports this file's
users.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.api.answers import Kept, TopicAnswers
from protocol.messages import Request, Response
from protocol.types import CoordinatorEpoch, ProducerEpoch, ProducerId, TopicPartition, TransactionVersion

if TYPE_CHECKING:
    from kafka.protocol.metadata import MetadataResponse
    from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

    from broker.api.registry import ApiHandler
    from broker.base.caller import Caller
    from broker.cluster.placement import Refused
    from broker.cluster.topic_manager import NewTopic, TopicResult
    from broker.cluster.view import BrokerInfo, PartitionInfo, Token
    from broker.config import BrokerConfig
    from broker.replication.fetch_sessions import FetchSessionCache
    from broker.replication.replica_manager import DeleteRecordsResult, Partition
    from broker.security.acl import AclBinding, AclFilter
    from broker.security.authorizer import Authorizer
    from broker.security.scram import ScramCredential, ScramMechanism
    from broker.store.image import PartitionState
    from broker.store.local_store import TopicMetadata
    from coordinator.group import (
        DescribedGroup,
        JoinRequest,
        JoinResponse,
        LeaveMember,
        LeaveResponse,
        ListedGroup,
        OffsetCommitInput,
        OffsetDeleteResult,
        OffsetFetchResult,
        SyncRequest,
        SyncResponse,
    )
    from coordinator.group.consumer_types import DescribedConsumerGroup, HeartbeatRequest, HeartbeatResponse
    from coordinator.transaction import ListResult, Outcome, TxnMetadata, TxnOperation
    from protocol.errors import ErrorCode
    from protocol.record_batch import BatchHeader
    from storage.log import AppendResult, MarkerResult
    from storage.log_config import LogConfig
    from storage.producer_state import AppendOrigin, Verification



class PartitionWriter(Protocol):
    """What a coordinator's log writes through (Kafka's PartitionWriter): the internal
    partitions this broker leads, appended to as the coordinator."""

    may_lead: Callable[[], bool]

    def led_partition(self, topic: str, index: int) -> Partition | None: ...

    def append(
        self, part: Partition, records: bytes, now_ms: int, origin: AppendOrigin = ...,
        header: BatchHeader | None = None, verification: Verification | None = None,
    ) -> AppendResult: ...


class Partitions(PartitionWriter, Protocol):
    """The partitions this broker hosts, as the Produce, Fetch, ListOffsets, DeleteRecords,
    DescribeLogDirs and WriteTxnMarkers handlers use them."""

    def partition(self, topic: str, index: int) -> Partition | None: ...

    def all_partitions(self) -> list[Partition]: ...

    @property
    def generation(self) -> int:
        """Changes when a partition is added or removed (a partition read before is the same
        object while it does not)."""
        ...

    def start_verification(
        self, part: Partition, header: BatchHeader, now_ms: int, supports_epoch_bump: bool
    ) -> Verification | None: ...

    def verification_current(self, part: Partition, guard: Verification) -> bool: ...

    def delete_records(self, part: Partition, offset: int) -> DeleteRecordsResult: ...

    def append_txn_marker(
        self, part: Partition, producer_id: ProducerId, producer_epoch: ProducerEpoch, commit: bool,
        coordinator_epoch: CoordinatorEpoch, now_ms: int, transaction_version: TransactionVersion,
    ) -> MarkerResult: ...

    def record_follower_fetch(self, part: Partition, node: int, fetch_offset: int, now_ms: int) -> None: ...

    def waiter(self, parts: Iterable[Partition], follower: bool = False) -> asyncio.Future[None]: ...

    def forget(self, future: asyncio.Future[None], parts: Iterable[Partition]) -> None: ...


class Topics(Protocol):
    """Topic metadata and the topic admin operations (on the controller in a cluster)."""

    def get(self, name: str) -> TopicMetadata | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def all(self) -> dict[str, TopicMetadata]: ...

    def log_config(self, topic: TopicMetadata) -> LogConfig: ...

    async def create_topics(self, specs: Sequence[NewTopic], validate_only: bool) -> list[TopicResult]: ...

    def create_internal(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicResult: ...

    def auto_create(self, name: str) -> TopicResult: ...

    async def delete(self, name: str) -> TopicResult: ...

    async def add_partitions_many(
        self, wanted: Sequence[TopicPartition], validate_only: bool,
        assignments: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[TopicResult]: ...

    async def set_configs(self, name: str, configs: dict[str, str]) -> tuple[ErrorCode, str | None]: ...


class Cluster(Protocol):
    """The brokers and partitions as clients are told of them, and this broker's ids."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    def brokers(self) -> list[BrokerInfo]: ...

    def brokers_on(self, listener: str) -> list[BrokerInfo]: ...

    def controller_id(self) -> int: ...

    def partition(self, topic: str, index: int) -> PartitionInfo | None: ...

    def topic_token(self, topic: str) -> Token | None:
        """Equal tokens of a topic promise equal `partition` answers for it; None promises nothing."""
        ...


class Controller(Protocol):
    """The cluster's controller as a handler reaches it (none on a single broker): carried
    out here while this broker is the active controller, else forwarded."""

    @property
    def active(self) -> bool: ...

    async def forward(self, request: Request, version: int, original: Caller | None = None) -> Response: ...

    async def elect(
        self, election_type: int, wanted: list[TopicPartition] | None
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def reassign(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> dict[TopicPartition, Refused | None]: ...

    def reassignments(
        self, wanted: list[tuple[str, list[int]]] | None
    ) -> dict[str, dict[int, PartitionState]]: ...


class Transactions(Protocol):
    """The transaction coordinator's edge, as the transactional APIs and Produce use it."""

    def coordinator_partition(self, key: str) -> TopicPartition: ...

    def ensure_topic(self) -> ErrorCode: ...

    async def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: ProducerId, epoch: ProducerEpoch
    ) -> tuple[ErrorCode, int, int]: ...

    async def add_partitions(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, partitions: Iterable[TopicPartition],
        verify_only: bool = False, transaction_version: int = 0, wait_ms: int | None = None,
    ) -> Outcome: ...

    async def add_offsets(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, group_id: str
    ) -> ErrorCode: ...

    async def end_txn(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, commit: bool, transaction_version: int
    ) -> tuple[ErrorCode, int, int]: ...

    async def check_writes(
        self, tid: str, producer_id: ProducerId, epoch: ProducerEpoch, tps: list[TopicPartition],
        operation: TxnOperation,
        wait_ms: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]: ...

    def describe(self, tid: str) -> tuple[ErrorCode, TxnMetadata | None]: ...

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> ListResult: ...


class Groups(Protocol):
    """The group coordinator's edge, as the group and offset APIs use it."""

    def coordinator_partition(self, key: str) -> TopicPartition: ...

    def partition_for(self, group_id: str) -> int: ...

    def ensure_topic(self) -> ErrorCode: ...

    async def join_group(self, request: JoinRequest) -> JoinResponse: ...

    async def sync_group(self, request: SyncRequest) -> SyncResponse: ...

    async def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode: ...

    async def leave_group(self, group_id: str, members: Sequence[LeaveMember]) -> LeaveResponse: ...

    def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]: ...

    def list_groups(self, states: Iterable[str]) -> tuple[ErrorCode, list[ListedGroup]]: ...

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]: ...

    async def offset_commit(
        self, group_id: str, generation: int, member_id: str,
        offsets: Mapping[TopicPartition, OffsetCommitInput], *,
        instance_id: str | None = None, api_version: int = 9, retention_ms: int = -1,
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def txn_offset_commit(
        self, transactional_id: str, group_id: str, producer: tuple[int, int],
        offsets: Mapping[TopicPartition, OffsetCommitInput], *,
        generation: int = -1, member_id: str = "", instance_id: str | None = None,  # "": no member
    ) -> dict[TopicPartition, ErrorCode]: ...

    def offset_fetch(
        self, group_id: str, partitions: Sequence[TopicPartition] | None, require_stable: bool,
        member: tuple[str | None, int] = (None, -1),
    ) -> OffsetFetchResult: ...

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse: ...

    def consumer_group_describe(self, group_ids: Sequence[str]) -> list[DescribedConsumerGroup]: ...

    async def offset_delete(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> OffsetDeleteResult: ...


class TransactionCompletions(Protocol):
    """What a written marker tells the group coordinator: the transaction's offsets in that
    `__consumer_offsets` partition become committed (or go)."""

    def complete_transaction(self, partition: int, producer_id: ProducerId, commit: bool) -> None: ...


class Markers(Protocol):
    """Writing COMMIT/ABORT markers where this broker leads (WriteTxnMarkers)."""

    async def write(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse: ...


class Configs(Protocol):
    """The broker's configuration: static keys, the live view with dynamic ones, and the
    dynamic broker configs (KIP-226) at a scope ("" the cluster default, else a node id)."""

    @property
    def config(self) -> BrokerConfig: ...

    def current(self, scope: str) -> dict[str, str]: ...

    def check(self, scope: str, configs: dict[str, str]) -> str | None: ...

    def replace(self, scope: str, configs: dict[str, str]) -> None: ...


class Acls(Protocol):
    """The ACLs in the metadata store (CreateAcls, DescribeAcls, DeleteAcls); written on the
    controller in a cluster."""

    def describe(self, wanted: AclFilter) -> list[AclBinding]: ...

    async def create(self, acls: Sequence[AclBinding]) -> None: ...

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]: ...


class ScramCredentials(Protocol):
    """The SCRAM credentials in the metadata store (KIP-554)."""

    def lookup(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None: ...

    def users(self) -> dict[str, list[tuple[ScramMechanism, int]]]: ...

    async def alter(
        self, upserts: dict[tuple[ScramMechanism, str], ScramCredential],
        deletes: Iterable[tuple[ScramMechanism, str]],
    ) -> None: ...


class ProducerIds(Protocol):
    def generate(self) -> int: ...


if TYPE_CHECKING:
    MetadataTopic = MetadataResponse.MetadataResponseTopic


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a handler is handed besides its request."""

    partitions: Partitions
    topics: Topics
    cluster: Cluster
    controller: Controller | None  # None on a single broker
    transactions: Transactions
    groups: Groups
    markers: Markers
    configs: Configs
    producer_ids: ProducerIds
    authorizer: Authorizer
    api_versions: Mapping[int, ApiHandler]  # the handler table: dispatch and ApiVersions
    clock: Callable[[], int]
    fetch_sessions: FetchSessionCache  # followers' incremental fetches (KIP-227)
    acls: Acls | None = None  # the ACL store; None when no authorizer is configured
    scram: ScramCredentials | None = None
    # Metadata's answer for each topic and its encodings, kept while the topic does not change
    metadata_topics: TopicAnswers[Kept[MetadataTopic]] = field(default_factory=TopicAnswers)
