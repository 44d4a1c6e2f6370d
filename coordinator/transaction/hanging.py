"""Kafka's find-hanging rules (KIP-664), pure: which open transactions no coordinator will
ever finish. The broker's periodic check (`broker/coordination/hanging.py`) and the
`gregor transactions find-hanging` tool gather the facts their own way and ask these.

A transaction is *hanging* when a partition leader holds an open transaction that has been
silent for longer than the maximum transaction timeout, and no coordinator will finish it:
no transactional id owns the producer id, the id is unknown to its coordinator, or the id's
current transaction does not include that partition."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from protocol.types import Offset, ProducerEpoch, ProducerId, TopicPartition


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer with an open transaction on one partition (DescribeProducers' facts)."""

    topic: str
    partition: int
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    coordinator_epoch: int
    start_offset: Offset
    last_timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def candidate_open_transactions(
    found: Iterable[OpenTransaction], now_ms: int, max_transaction_timeout_ms: int
) -> list[OpenTransaction]:
    """Open transactions silent for longer than the maximum transaction timeout (the
    coordinator would have aborted any live one by now)."""
    return [t for t in found if now_ms - t.last_timestamp > max_transaction_timeout_ms]


def hanging_transactions(
    candidates: Iterable[OpenTransaction],
    transactional_ids: Mapping[ProducerId, str],
    partitions_of: Mapping[str, Collection[TopicPartition] | None],
) -> list[OpenTransaction]:
    """The candidates no coordinator will finish. `transactional_ids` names the owner of a
    producer id; `partitions_of` gives an owner's current transaction's partitions, None
    for an id its coordinator does not know."""
    hanging = []
    for txn in candidates:
        txn_id = transactional_ids.get(txn.producer_id)
        partitions = partitions_of.get(txn_id) if txn_id is not None else None
        if partitions is None or txn.topic_partition not in partitions:
            hanging.append(txn)
    return hanging
