"""The admin client as the tools (`gregor topics|groups|acls|configs|transactions`) and the
console use it: exactly the `KafkaAdminClient` calls they make, and the shapes of what they
read from the answers. kafka-python's admin client has no types (mypy reads it as Any); this
port is the one place where its answers get them. The shapes are kafka-python 3.0's (dicts
from `to_dict()` of the responses, NamedTuples for the transaction tooling), and the tools'
integration tests check them against the real client and a real broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypedDict, TypeVar

from kafka.protocol.admin.topics import CreatePartitionsResponse

T = TypeVar("T")

if TYPE_CHECKING:
    # kafka.structs' namedtuples, which mypy cannot see (kafka-python is untyped there): the
    # same names and fields, so the tools construct, compare and sort them typed.
    class TopicPartition(NamedTuple):
        topic: str
        partition: int

    class OffsetAndMetadata(NamedTuple):
        offset: int
        metadata: str = ""
        leader_epoch: int = -1
else:
    from kafka.structs import OffsetAndMetadata, TopicPartition


# -- Metadata (describe_topics) ---------------------------------------------------------


class PartitionInfo(TypedDict):
    partition_index: int
    error_code: int
    leader_id: int
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]


class TopicInfo(TypedDict):
    name: str
    topic_id: object  # a uuid.UUID, printed only
    error_code: int
    is_internal: bool
    partitions: list[PartitionInfo]


class TopicResult(TypedDict):
    """One topic of create_topics' / delete_topics' answer."""

    name: str
    error_code: int
    error_message: str | None


class TopicResults(TypedDict):
    topics: list[TopicResult]


# -- configs ------------------------------------------------------------------------------


class ConfigEntry(TypedDict):
    value: str | None
    is_sensitive: bool


# {resource type ("topic", "broker"): {resource name: {config key: entry}}}
DescribedConfigs = dict[str, dict[str, dict[str, ConfigEntry]]]


class Named(Protocol):
    @property
    def name(self) -> str: ...


class ScramCredentialInfo(TypedDict):
    mechanism: Named  # a kafka.admin.ScramMechanism (IntEnum): its name is shown
    iterations: int


class ScramDescription(TypedDict):
    error: str | None
    credential_infos: list[ScramCredentialInfo]


class BrokerInfo(TypedDict):
    broker_id: int


class ClusterInfo(TypedDict):
    brokers: list[BrokerInfo]


# -- groups -------------------------------------------------------------------------------


class GroupListing(TypedDict):
    group_id: str
    group_state: str
    protocol_type: str


class AssignedPartitions(TypedDict):
    topic: str
    partitions: list[int]


class MemberAssignment(TypedDict):
    assigned_partitions: list[AssignedPartitions]


class MemberInfo(TypedDict):
    member_id: str
    client_host: str
    client_id: str
    member_assignment: MemberAssignment | None


class GroupInfo(TypedDict, total=False):
    """describe_groups' answer for one group (and a ConsumerGroupDescribe answer in its shape);
    `error` only when the broker refused the group."""

    group_id: str
    group_state: str
    protocol_data: str
    members: list[MemberInfo]
    error: str | None


class HasOffset(Protocol):
    """kafka.structs' OffsetAndMetadata / OffsetAndTimestamp, of which the tools read the offset."""

    @property
    def offset(self) -> int: ...


# -- ACLs ---------------------------------------------------------------------------------


class AclPatternView(Protocol):
    resource_type: int
    resource_name: str
    pattern_type: int


class AclView(Protocol):
    """A kafka.admin.ACL of describe_acls' answer (its enums read as ints)."""

    principal: str
    host: str
    operation: int
    permission_type: int
    resource_pattern: AclPatternView


class AclCreateResult(TypedDict):
    succeeded: list[object]
    failed: list[type[Exception]]  # the error class of each refused ACL


# -- transactions (KIP-664) ---------------------------------------------------------------


class ProducerStateView(Protocol):
    """kafka.admin's ProducerState (one ActiveProducer of DescribeProducers)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def last_sequence(self) -> int: ...
    @property
    def last_timestamp(self) -> int: ...
    @property
    def coordinator_epoch(self) -> int: ...
    @property
    def current_transaction_start_offset(self) -> int: ...


class PartitionProducers(Protocol):
    @property
    def active_producers(self) -> Sequence[ProducerStateView]: ...


class TransactionListingView(Protocol):
    @property
    def transactional_id(self) -> str: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def state(self) -> object: ...  # a TransactionState (a str Enum); its value is shown


class TransactionDescriptionView(Protocol):
    @property
    def coordinator_id(self) -> int: ...
    @property
    def state(self) -> object: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def transaction_timeout_ms(self) -> int: ...
    @property
    def transaction_start_time_ms(self) -> int: ...
    @property
    def topic_partitions(self) -> set[TopicPartition]: ...


class AbortSpec(Protocol):
    """kafka.admin.AbortTransactionSpec, as the tools build it and read it back."""

    @property
    def topic_partition(self) -> TopicPartition: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def coordinator_epoch(self) -> int: ...


# -- the client ---------------------------------------------------------------------------


class ConnectionManager(Protocol):
    """The admin client's connection manager, for the one request it has no method for
    (ConsumerGroupDescribe, KIP-848)."""

    def run(self, fn: Callable[[], Awaitable[T]]) -> T: ...
    async def send(self, request: object, node_id: int) -> object: ...  # the decoded response


class AdminPort(Protocol):
    """The KafkaAdminClient calls the tools make. Arguments that are kafka-python's own request
    objects (ConfigResource, ACL, ACLFilter, scram alterations, AbortTransactionSpec) are built
    by the tools with kafka.admin's classes and passed through: typed `object` here."""

    _manager: ConnectionManager

    async def _find_coordinator_id(self, group_id: str) -> int: ...
    def close(self) -> None: ...

    def list_topics(self) -> list[str]: ...
    def describe_topics(self, topics: Sequence[str] | None = None) -> list[TopicInfo]: ...
    def create_topics(self, new_topics: Mapping[str, Mapping[str, object]],
                      raise_errors: bool = True) -> TopicResults: ...
    def delete_topics(self, topics: Sequence[str], raise_errors: bool = True) -> TopicResults: ...
    def create_partitions(self, topic_partitions: Mapping[str, int],
                          raise_errors: bool = True) -> CreatePartitionsResponse: ...

    def describe_configs(self, config_resources: Sequence[object],
                         config_filter: str = "modified") -> DescribedConfigs: ...
    # {resource type: {resource name: "OK" or kafka-python's error text}}
    def alter_configs(self, config_resources: Sequence[object], raise_on_unknown: bool = True,
                      incremental: bool | None = None) -> dict[str, dict[str, str]]: ...
    def describe_cluster(self) -> ClusterInfo: ...
    def alter_user_scram_credentials(self, alterations: Sequence[object]) -> dict[str, str | None]: ...
    def describe_user_scram_credentials(
        self, users: Sequence[str] | None = None) -> dict[str, ScramDescription]: ...

    def list_groups(self) -> list[GroupListing]: ...
    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupInfo]: ...
    def list_group_offsets(
        self, group_specs: Mapping[str, None]) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]: ...
    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
                            ) -> dict[TopicPartition, type[Exception]]: ...
    # [(group id, error class)] (a dict {group id: error name} from older kafka-python)
    def delete_groups(
        self, group_ids: Sequence[str]) -> Sequence[tuple[str, object]] | Mapping[str, object]: ...
    # specs: an OffsetSpec (EARLIEST, LATEST) or a timestamp in ms, per partition
    def list_partition_offsets(self, topic_partition_specs: Mapping[TopicPartition, int],
                               isolation_level: int = 0) -> dict[TopicPartition, HasOffset]: ...

    def describe_acls(self, acl_filter: object) -> tuple[list[AclView], object]: ...
    def create_acls(self, acls: Sequence[object]) -> AclCreateResult: ...
    # [(filter, the ACLs it matched, error class)]
    def delete_acls(
        self, acl_filters: Sequence[object]) -> list[tuple[object, list[AclView], type[Exception]]]: ...

    def list_transactions(
        self, producer_id_filters: Sequence[int] | None = None,
    ) -> dict[int, list[TransactionListingView]]: ...
    def describe_transactions(
        self, transactional_ids: Sequence[str]) -> dict[str, TransactionDescriptionView]: ...
    def describe_producers(self, partitions: Sequence[TopicPartition],
                           broker_id: int | None = None) -> dict[TopicPartition, PartitionProducers]: ...
    def abort_transaction(self, spec: AbortSpec) -> None: ...
