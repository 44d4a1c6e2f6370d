"""One snapshot of a cluster, read through kafka-python's `KafkaAdminClient` (blocking calls:
the collector runs them on a worker thread). Only the admin APIs a user already has rights
to: Metadata, ListOffsets (both isolation levels), DescribeProducers, ListTransactions,
DescribeTransactions, ListGroups, DescribeGroups, OffsetFetch, DescribeCluster and
DescribeConfigs. A section that fails (a denied group read, say) is named in the snapshot's
`problems` and the rest is still read; a failure of Metadata, the first read, fails it all."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TypeVar

from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from kafka.errors import KafkaError, TransactionalIdNotFoundError
from kafka.protocol.consumer.offsets import IsolationLevel

from broker.tools.admin_port import (
    AbortSpec,
    AdminPort,
    ConfigEntry,
    GroupInfo,
    GroupListing,
    HasOffset,
    TopicPartition,
    TransactionDescriptionView,
    TransactionListingView,
)
from broker.tools.common import call, describe_error
from broker.tools.transactions import abort_spec_by_offset, open_transactions
from coordinator.transaction.hanging import OpenTransaction
from gregor_console.model import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    Group,
    PartitionRow,
    Snapshot,
    Transaction,
    find_hanging,
    group_offsets,
    partition_rows,
)

T = TypeVar("T")
PRODUCERS_BATCH = 500  # partitions per DescribeProducers, as Kafka's tool
DESCRIBE_BATCH = 1000  # transactional ids per DescribeTransactions
MAX_TIMEOUT_KEY = "transaction.max.timeout.ms"
RETRY_S = 10.0  # a retriable error of a read asked for now (a coordinator loading) is retried

Partitions = tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int],
                   list[OpenTransaction]]


def read_snapshot(admin: AdminPort, now_ms: Callable[[], int], max_timeout_ms: int | None) -> Snapshot:
    """Everything the pages show. `max_timeout_ms` None: the brokers' own
    transaction.max.timeout.ms (DescribeConfigs), as Kafka's tool is told it."""
    problems: list[str] = []
    leaders, high, stable, found = read_partitions(admin)
    if max_timeout_ms is None:
        max_timeout_ms = _max_timeout(admin, problems)
    no_transactions: tuple[Transaction, ...] = ()
    transactions = _section(problems, "transactions", lambda: read_transactions(admin), no_transactions)
    hanging = find_hanging(found, transactions, now_ms(), max_timeout_ms)
    rows = partition_rows(leaders, high, stable, found, hanging)
    by_tp = {r.topic_partition: r for r in rows}
    no_groups: tuple[Group, ...] = ()
    groups = _section(problems, "consumer groups", lambda: read_groups(admin, by_tp), no_groups)
    return Snapshot(now_ms(), transactions, rows, groups, max_timeout_ms, tuple(problems))


def _section(problems: list[str], what: str, read: Callable[[], T], empty: T) -> T:
    try:
        return read()
    except KafkaError as exc:
        problems.append(f"{what}: {describe_error(exc)}")
        return empty


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# -- partitions -------------------------------------------------------------------------


def read_partitions(admin: AdminPort) -> Partitions:
    """Leaders (Metadata), HW and LSO (ListOffsets latest, read_uncommitted and read_committed),
    and the open transactions of the partitions whose LSO lags (DescribeProducers): an open
    transaction with a replicated first batch holds the LSO below the HW."""
    leaders = read_leaders(admin)
    stable = read_latest(admin, leaders, IsolationLevel.READ_COMMITTED)  # first: LSO <= HW read after
    high = read_latest(admin, leaders, IsolationLevel.READ_UNCOMMITTED)
    lagging = sorted(tp for tp in leaders if high.get(tp, 0) > stable.get(tp, 0))
    return leaders, high, stable, read_open_transactions(admin, lagging)


def read_leaders(admin: AdminPort) -> dict[TopicPartition, int]:
    leaders = {}
    for topic in admin.describe_topics():
        if topic["error_code"] != 0:
            continue
        for p in topic["partitions"]:
            if p["error_code"] == 0 and p["leader_id"] >= 0:
                leaders[TopicPartition(topic["name"], p["partition_index"])] = p["leader_id"]
    return leaders


def read_latest(
    admin: AdminPort, tps: Iterable[TopicPartition], isolation: int
) -> dict[TopicPartition, int]:
    specs = {tp: OffsetSpec.LATEST for tp in tps}
    if not specs:
        return {}
    found = admin.list_partition_offsets(specs, isolation_level=isolation)
    return {tp: int(o.offset) for tp, o in found.items()}


def read_open_transactions(admin: AdminPort, tps: Sequence[TopicPartition]) -> list[OpenTransaction]:
    found: list[OpenTransaction] = []
    for batch in _batches(tps, PRODUCERS_BATCH):
        found.extend(open_transactions(admin.describe_producers(list(batch))))
    return found


# -- transactions -------------------------------------------------------------------------


def read_transactions(admin: AdminPort) -> tuple[Transaction, ...]:
    """Every transactional id every broker lists, each described by its coordinator."""
    listed = {
        t.transactional_id: (broker_id, t)
        for broker_id, listings in admin.list_transactions().items() for t in listings
    }
    ids = sorted(listed)
    described: dict[str, TransactionDescriptionView] = {}
    for batch in _batches(ids, DESCRIBE_BATCH):
        described.update(_describe(admin, batch))
    return tuple(_transaction(txn_id, *listed[txn_id], described.get(txn_id)) for txn_id in ids)


def _transaction(txn_id: str, broker_id: int, listing: TransactionListingView,
                 d: TransactionDescriptionView | None) -> Transaction:
    if d is None:
        return Transaction(txn_id, broker_id, _state(listing.state), listing.producer_id, described=False)
    return _described(txn_id, d)


def _describe(admin: AdminPort, ids: Sequence[str]) -> dict[str, TransactionDescriptionView]:
    """Descriptions of `ids`; when one id fails the batch (an id expired meanwhile), each
    alone, leaving out those that fail."""
    try:
        return dict(admin.describe_transactions(list(ids)))
    except KafkaError:
        if len(ids) == 1:
            return {}
    found: dict[str, TransactionDescriptionView] = {}
    for txn_id in ids:
        found.update(_describe(admin, [txn_id]))
    return found


def _described(txn_id: str, d: TransactionDescriptionView) -> Transaction:
    return Transaction(
        txn_id, d.coordinator_id, _state(d.state), d.producer_id, d.producer_epoch,
        d.transaction_timeout_ms, d.transaction_start_time_ms, tuple(sorted(d.topic_partitions)),
    )


def _state(state: object) -> str:
    return str(getattr(state, "value", state))


def describe_one(admin: AdminPort, txn_id: str) -> Transaction | None:
    """One transactional id, described now (a coordinator loading, or the transaction log
    still being made, is waited for a while); None when its coordinator does not know it."""
    d = call("DescribeTransactions", partial(_description, admin, txn_id), RETRY_S)
    return None if d is None else _described(txn_id, d)


def _description(admin: AdminPort, txn_id: str) -> TransactionDescriptionView | None:
    try:
        return admin.describe_transactions([txn_id]).get(txn_id)
    except TransactionalIdNotFoundError:
        return None


def open_offsets(admin: AdminPort, txn: Transaction) -> dict[tuple[str, int], int]:
    """The first offset of `txn`'s producer's open transaction on each of its partitions
    that has one (DescribeProducers on their leaders)."""
    if not txn.partitions:
        return {}
    found = open_transactions(admin.describe_producers(list(txn.partitions)))
    return {o.topic_partition: o.start_offset for o in found if o.producer_id == txn.producer_id}


def _max_timeout(admin: AdminPort, problems: list[str]) -> int:
    """The brokers' transaction.max.timeout.ms; Kafka's default, named among the problems,
    when it cannot be read (kafka-python answers a denied DescribeConfigs with no entries)."""
    found = _section(problems, "DescribeConfigs", lambda: read_max_timeout(admin), None)
    if found is None:
        problems.append(f"DescribeConfigs: no {MAX_TIMEOUT_KEY} in the brokers' answer (is DescribeConfigs "
                        f"on the cluster allowed?); taken as {DEFAULT_MAX_TRANSACTION_TIMEOUT_MS} ms")
        return DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    return found


def max_timeout_of(configs: Mapping[str, ConfigEntry]) -> int | None:
    entry = configs.get(MAX_TIMEOUT_KEY)
    try:
        return int(str(entry.get("value") if entry else None))
    except (TypeError, ValueError):
        return None


def read_max_timeout(admin: AdminPort) -> int | None:
    """transaction.max.timeout.ms of one broker (DescribeConfigs); None when not answered."""
    brokers = admin.describe_cluster()["brokers"]
    if not brokers:
        return None
    name = str(brokers[0]["broker_id"])
    resource = ConfigResource(ConfigResourceType.BROKER, name, {MAX_TIMEOUT_KEY: None})
    found = admin.describe_configs([resource], config_filter="all")
    return max_timeout_of(found.get("broker", {}).get(name, {}))


# -- groups -----------------------------------------------------------------------------


def read_groups(admin: AdminPort, partitions: Mapping[TopicPartition, PartitionRow]) -> tuple[Group, ...]:
    """Every group (ListGroups, DescribeGroups) with its committed offsets (OffsetFetch) and
    their lags to the LSO and the HW."""
    listed = {g["group_id"]: g for g in admin.list_groups()}
    if not listed:
        return ()
    ids = sorted(listed)
    none: dict[str, GroupInfo] = {}
    described = _section([], "DescribeGroups", lambda: dict(admin.describe_groups(ids)), none)
    committed = admin.list_group_offsets({g: None for g in ids})
    return tuple(
        _group(listed[g], described.get(g), _offsets(committed.get(g, {})), partitions) for g in ids
    )


def _offsets(found: Mapping[TopicPartition, HasOffset]) -> dict[TopicPartition, int]:
    return {TopicPartition(tp.topic, tp.partition): int(o.offset) for tp, o in found.items()}


def _group(
    listed: GroupListing, described: GroupInfo | None,
    committed: Mapping[TopicPartition, int], partitions: Mapping[TopicPartition, PartitionRow],
) -> Group:
    if described is not None and described.get("error"):
        described = None  # a KIP-848 consumer group is "not a classic group" to DescribeGroups
    state = (described or {}).get("group_state") or listed.get("group_state") or "Unknown"
    members = len(described.get("members") or []) if described is not None else -1
    return Group(listed["group_id"], str(state), str(listed.get("protocol_type") or ""), members,
                 group_offsets(committed, partitions))


# -- the abort action ---------------------------------------------------------------------


def find_open(admin: AdminPort, tp: TopicPartition, start_offset: int) -> OpenTransaction | None:
    """The open transaction whose first offset on `tp` is `start_offset`, read now."""
    for txn in open_transactions(admin.describe_producers([tp])):
        if txn.start_offset == start_offset:
            return txn
    return None


def abort(admin: AdminPort, tp: TopicPartition, start_offset: int) -> AbortSpec:
    """Abort the open transaction starting at `start_offset` on `tp` (WriteTxnMarkers to its
    leader), as `gregor transactions abort --start-offset` does; raises ToolError when
    there is none."""
    spec = abort_spec_by_offset(admin, tp, start_offset)
    admin.abort_transaction(spec)
    return spec
