"""The console's values, pure: one snapshot of a cluster's transactions, partitions and
groups; the queries that filter them and the pages that cut them; the lags.

The hanging-transaction rules are `gregor transactions find-hanging`'s (Kafka's
`kafka-transactions.sh find-hanging`): an open transaction on a partition (DescribeProducers
shows its first offset), silent for longer than the maximum transaction timeout, that no
coordinator will finish: no transactional id owns its producer id, or the owner's current
transaction does not include the partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kafka.structs import TopicPartition

from coordinator.transaction.hanging import OpenTransaction, candidate_open_transactions, hanging_transactions
from protocol.types import ProducerId

T = TypeVar("T")
NONE = -1  # Kafka's "no value" for an offset, epoch or time
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
STATES = ("Empty", *OPEN_STATES, "CompleteCommit", "CompleteAbort", "Dead")


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transactional id, from ListTransactions and DescribeTransactions."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int = NONE
    timeout_ms: int = NONE
    start_ms: int = NONE
    partitions: tuple[TopicPartition, ...] = ()
    described: bool = True

    @property
    def topic_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self.partitions)

    def age_ms(self, now_ms: int) -> int | None:
        """How long its current transaction has been running; None when it has none."""
        return max(now_ms - self.start_ms, 0) if self.start_ms >= 0 else None

    def topics(self) -> frozenset[str]:
        return frozenset(tp.topic for tp in self.partitions)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition: its high watermark, last stable offset and the open transactions
    (those with a first offset, oldest first) its leader holds."""

    topic: str
    partition: int
    leader: int
    high_watermark: int
    last_stable_offset: int
    open_transactions: tuple[OpenTransaction, ...] = ()
    hanging: tuple[OpenTransaction, ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def lso_lag(self) -> int:
        """What read_committed consumers cannot read yet: HW - LSO."""
        return max(self.high_watermark - self.last_stable_offset, 0)

    @property
    def holder(self) -> OpenTransaction | None:
        """The oldest open transaction: the one whose first offset is the LSO."""
        return self.open_transactions[0] if self.open_transactions else None


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A group's committed offset on one partition and its lags to the LSO (what a
    read_committed member can still read) and to the HW (a read_uncommitted member)."""

    topic: str
    partition: int
    committed: int
    high_watermark: int | None
    last_stable_offset: int | None

    @property
    def lag_to_lso(self) -> int | None:
        return None if self.last_stable_offset is None else max(self.last_stable_offset - self.committed, 0)

    @property
    def lag_to_hw(self) -> int | None:
        return None if self.high_watermark is None else max(self.high_watermark - self.committed, 0)


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: str
    protocol_type: str
    members: int
    offsets: tuple[GroupOffset, ...] = ()

    @property
    def lag_to_lso(self) -> int:
        return sum(o.lag_to_lso or 0 for o in self.offsets)

    @property
    def lag_to_hw(self) -> int:
        return sum(o.lag_to_hw or 0 for o in self.offsets)


@dataclass(frozen=True)
class Snapshot:
    """Everything the pages show, read at `taken_ms`; `problems` names what could not be
    read this time (shown on the pages, the rest still served)."""

    taken_ms: int
    transactions: tuple[Transaction, ...] = ()
    partitions: tuple[PartitionRow, ...] = ()
    groups: tuple[Group, ...] = ()
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    problems: tuple[str, ...] = ()
    _by_id: dict[str, Transaction] = field(default_factory=dict, repr=False)
    _by_tp: dict[TopicPartition, PartitionRow] = field(default_factory=dict, repr=False)
    _owners: dict[ProducerId, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_id.update((t.transactional_id, t) for t in self.transactions)
        self._by_tp.update((p.topic_partition, p) for p in self.partitions)
        self._owners.update(_owners(self.transactions))

    def transaction(self, transactional_id: str) -> Transaction | None:
        return self._by_id.get(transactional_id)

    def partition(self, tp: TopicPartition) -> PartitionRow | None:
        return self._by_tp.get(tp)

    def owner(self, producer_id: ProducerId) -> str | None:
        """The transactional id whose current producer id this is."""
        return self._owners.get(producer_id)

    def hanging(self) -> list[OpenTransaction]:
        return [h for p in self.partitions for h in p.hanging]


def _owners(transactions: Iterable[Transaction]) -> dict[ProducerId, str]:
    return {ProducerId(t.producer_id): t.transactional_id for t in transactions if t.producer_id >= 0}


# -- the hanging rules and the partition rows ------------------------------------------


def find_hanging(
    found: Iterable[OpenTransaction], transactions: Sequence[Transaction], now_ms: int, max_timeout_ms: int
) -> list[OpenTransaction]:
    """The open transactions no coordinator will finish (`gregor transactions find-hanging`'s
    rules). An owner whose description could not be read flags nothing: unknown is not hanging."""
    owners = _owners(transactions)
    by_id = {t.transactional_id: t for t in transactions}
    unread = {t.producer_id for t in transactions if not t.described}
    candidates = [c for c in candidate_open_transactions(found, now_ms, max_timeout_ms)
                  if c.producer_id not in unread]
    partitions_of = {txn_id: t.topic_partitions if t.state != "Dead" else None for txn_id, t in by_id.items()}
    return hanging_transactions(candidates, owners, partitions_of)


def partition_rows(
    leaders: Mapping[TopicPartition, int],
    high_watermarks: Mapping[TopicPartition, int],
    stable_offsets: Mapping[TopicPartition, int],
    found: Iterable[OpenTransaction],
    hanging: Iterable[OpenTransaction],
) -> tuple[PartitionRow, ...]:
    """One row per partition, the largest LSO lag first."""
    open_by_tp = _by_partition(found)
    hanging_by_tp = _by_partition(hanging)
    rows = [
        PartitionRow(
            tp.topic, tp.partition, leader, high_watermarks.get(tp, NONE), stable_offsets.get(tp, NONE),
            tuple(open_by_tp.get(tp, ())), tuple(hanging_by_tp.get(tp, ())),
        )
        for tp, leader in leaders.items()
    ]
    return tuple(sorted(rows, key=lambda r: (-r.lso_lag, r.topic, r.partition)))


def _by_partition(found: Iterable[OpenTransaction]) -> dict[TopicPartition, list[OpenTransaction]]:
    by_tp: dict[TopicPartition, list[OpenTransaction]] = {}
    for txn in sorted(found, key=lambda t: t.start_offset):
        by_tp.setdefault(txn.topic_partition, []).append(txn)
    return by_tp


def group_offsets(
    committed: Mapping[TopicPartition, int], partitions: Mapping[TopicPartition, PartitionRow]
) -> tuple[GroupOffset, ...]:
    """A group's committed offsets (those >= 0) with the partitions' HW and LSO."""
    found = []
    for tp, offset in sorted(committed.items()):
        if offset < 0:
            continue
        row = partitions.get(tp)
        found.append(GroupOffset(
            tp.topic, tp.partition, offset,
            row.high_watermark if row else None, row.last_stable_offset if row else None,
        ))
    return tuple(found)


# -- queries and pages ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransactionQuery:
    """The transactions page's filters: a part of the id, a state, a topic among its
    partitions, its current transaction running for at least `min_age_ms`."""

    search: str = ""
    state: str = ""
    topic: str = ""
    min_age_ms: int | None = None

    def matches(self, t: Transaction, now_ms: int) -> bool:
        if self.search and self.search not in t.transactional_id:
            return False
        if self.state and t.state != self.state:
            return False
        if self.topic and self.topic not in t.topics():
            return False
        if self.min_age_ms is not None:
            age = t.age_ms(now_ms)
            return age is not None and t.state in OPEN_STATES and age >= self.min_age_ms
        return True


def oldest_first(transactions: Iterable[Transaction]) -> list[Transaction]:
    """Those with a current transaction, longest running first, then the others by id."""
    return sorted(transactions, key=lambda t: (t.start_ms < 0, t.start_ms, t.transactional_id))


@dataclass(frozen=True, slots=True)
class PartitionQuery:
    """The partitions page's filters: a part of the topic's name, only those with an LSO lag,
    only those with a hanging transaction."""

    search: str = ""
    lagging: bool = False
    hanging: bool = False

    def matches(self, p: PartitionRow) -> bool:
        if self.search and self.search not in p.topic:
            return False
        if self.lagging and p.lso_lag == 0:
            return False
        return not self.hanging or bool(p.hanging)


@dataclass(frozen=True, slots=True)
class GroupQuery:
    search: str = ""
    lagging: bool = False

    def matches(self, g: Group) -> bool:
        if self.search and self.search not in g.group_id:
            return False
        return not self.lagging or g.lag_to_lso > 0


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """Page `number` (from 1) of `size` items out of `total` matching ones."""

    items: tuple[T, ...]
    number: int
    size: int
    total: int

    @property
    def count(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.count


def paginate(items: Iterable[T], keep: Callable[[T], bool], number: int, size: int) -> Page[T]:
    """The items `keep` accepts, page `number` of them (the last page when past it)."""
    matching = [item for item in items if keep(item)]
    pages = max((len(matching) + size - 1) // size, 1)
    number = min(max(number, 1), pages)
    start = (number - 1) * size
    return Page(tuple(matching[start:start + size]), number, size, len(matching))


# -- the sparkline ---------------------------------------------------------------------


def sparkline_points(values: Sequence[int], width: int, height: int) -> str:
    """An SVG polyline's `points` for the values, the largest at the top; flat at the bottom
    when all are 0."""
    if not values:
        return ""
    top = max(max(values), 1)
    step = width / max(len(values) - 1, 1)
    return " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 1):.1f}" for i, v in enumerate(values)
    )
